#!/usr/bin/env bash
# Run on an offline GPU host, from the repository root, after carrying .gpu-host/ (see
# ../shared/gpu-host/prepare.sh). Usage:
#   bash benchmarks/gpu_host.sh install      # wheels (and the staged parts, benchmarks/gpu_stage.sh) -> /tmp/site; C helpers
#   bash benchmarks/gpu_host.sh tests        # GPU test files, then the whole suite
#   bash benchmarks/gpu_host.sh bench ARGS   # pixelpipe bench ARGS with the installed peers
#   bash benchmarks/gpu_host.sh gil DIR      # what the process's GIL costs a ResNet-18 loop beside a Pipeline over DIR
set -uo pipefail
SITE=/tmp/site
export PYTHONPATH="$SITE:$PWD/src" PYTHONUNBUFFERED=1
if [ -d "$SITE/nvidia" ]; then
  export LD_LIBRARY_PATH="$(ls -d "$SITE"/nvidia/*/lib 2>/dev/null | tr '\n' :)${LD_LIBRARY_PATH:-}"
fi
# torchcodec finds FFmpeg through PyAV's wheel: its av.libs, and links by soname (libavcodec.so.63, ...)
export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}:/tmp/ffl:$SITE/av.libs"
case "${1:-}" in
  install)
    whl=(.gpu-host/wheels/*.whl)
    if ls /tmp/dali-parts/part* >/dev/null 2>&1; then
      (cd /tmp/dali-parts && cat part* | tar x) && whl+=(/tmp/dali-parts/wheels/*.whl)
    fi
    if ls /tmp/stage/p* >/dev/null 2>&1; then  # benchmarks/gpu_stage.sh's parts
      (cd /tmp/stage && cat p* | tar x) && whl+=(/tmp/stage/wheels/*.whl /tmp/stage/vwheels/*.whl)
    fi
    # one pip call: a second --target call would skip the shared nvidia/ folder
    python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target "$SITE" "${whl[@]}"
    mkdir -p /tmp/ffl
    for f in "$SITE"/av.libs/lib*.so.*; do
      [ -e "$f" ] || continue
      b=$(basename "$f"); v=${b#*.so.}; ln -sf "$f" "/tmp/ffl/${b%%-*}.so.${v%%.*}"
    done
    # pixelpipe's C helpers built in place, beside src/pixelpipe/native/*.c (no download)
    python3 setup.py -q build_ext --inplace 2>&1 | grep -E "error|failed" || true
    python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())"
    python3 -c "from pixelpipe import native; print('C helpers built:', native.library() is not None)"
    ;;
  tests)
    python3 -m pytest -q -rs tests/test_gpu_kernels.py tests/test_decode_gpu.py tests/test_decode_gpu_views.py 2>&1 | tail -40
    python3 -m pytest -q -x -p no:cacheprovider tests 2>&1 | tail -15
    ;;
  bench)
    shift
    python3 -m pixelpipe.tools.cli bench --quiet "$@"
    ;;
  gil)
    # docs/benchmarks.md, "The process's GIL is the bound": each thread kind's CPU a step beside
    # the loop; a Pipeline's tax on the loop apart from its batches (default and fewer forced
    # GIL switches); the planning thread giving the GIL up every 16 samples or not, alternating
    data=${2:?a folder of JPEGs}
    python3 benchmarks/train_host_time.py --data "$data" --loaders synthetic,pixelpipe,dali --steps 30
    for si in 0.005 0.02; do
      python3 benchmarks/training_tax.py --kind pipeline --data "$data" --loads 0,0.5,1 --rounds 2 --switch-interval $si | tail -6
    done
    for r in 1 2; do for g in none 16; do
      extra=(); [ "$g" = none ] || extra=(--gil-breaks "$g")
      echo "gil-breaks $g, round $r"
      python3 benchmarks/train_throughput.py --data "$data" --models resnet18 --loaders pixelpipe --steps 100 \
        --alone-steps 10 --step-times "${extra[@]}" | grep -E "train |per step"
    done; done
    ;;
  *) sed -n '2,7p' "$0"; exit 2 ;;
esac
