#!/usr/bin/env bash
# Here (not on the GPU host): pack what the GPU host needs beyond .gpu-host/wheels into parts that
# each fit one device call (64 MiB with the working tree): DALI 2.4 and its needs (from
# ../shared/gpu-host/prepare.sh dali), PyNvVideoCodec, PyAV, torchcodec and pycocotools wheels,
# as one tar split into 58 MiB parts .gpu-stage/pNN (ignored by git through .git/info/exclude).
# Carry each part alone in back-to-back calls (the machine stays warm 30 s) with
#   mkdir -p /tmp/stage && cp .gpu-stage/pNN /tmp/stage/
# then `bash benchmarks/gpu_host.sh install` unpacks /tmp/stage and installs everything in one pip call.
set -euo pipefail
top=$(git rev-parse --show-toplevel)
cd "$top"
grep -qx '/.gpu-stage/' .git/info/exclude 2>/dev/null || echo '/.gpu-stage/' >> .git/info/exclude
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
[ -d .gpu-host/dali ] || bash ../shared/gpu-host/prepare.sh dali
cat .gpu-host/dali/part* | tar x -C "$tmp"   # wheels/
mkdir -p "$tmp/vwheels"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 -d "$tmp/vwheels" pynvvideocodec==2.2.4 av==19.0.2 torchcodec==0.17.0 pycocotools
rm -rf .gpu-stage && mkdir -p .gpu-stage
(cd "$tmp" && tar cf - wheels vwheels) | split -b 58M -d - .gpu-stage/p
ls -la .gpu-stage
