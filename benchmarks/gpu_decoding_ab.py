"""A Pipeline over files with several GpuDecoding settings, in alternating rounds.

    python benchmarks/gpu_decoding_ab.py [--data DIR] [--repeat 60] [--seconds 6] [--rounds 3] \
        [--settings hw_fraction=0.75 hw_fraction=0.6 hw_fraction=0.9] [--preset imagenet_train]

The JPEGs of DIR listed `--repeat` times in a file list, read by a Pipeline (batch 256, float16,
default threads) made once per run with `GpuDecoding(**setting)`, a setting being
comma-separated key=value pairs (numbers, true, false, none or off; `threads=N` sets the Pipeline's
num_threads instead, e.g. `--settings threads=8 threads=16`; `executor=pixelpipe|nvimgcodec` sets
PIXELPIPE_NVIMGCODEC_EXECUTOR for that Pipeline's decoders, decode/nvimgcodec_executor.py); a run times `--seconds` after
10 batches. Each round runs every setting once, the order reversed every other round, so that
a drift of the machine falls on all of them. Prints each run, then per setting the median
images/s and the range. With hardware names: whether the JPEG engines bound the rate (if they
did, a smaller name, fewer images on them, would be faster). Needs CUDA and nvImageCodec.
"""

from __future__ import annotations

import itertools
import os
import time
from typing import Any

import torch
from _common import arguments, file_list

import pixelpipe as pp

BATCH = 256


def setting(text: str) -> dict[str, Any]:
    """GpuDecoding keyword arguments from "key=value,key=value" (numbers, true, false, none, off), and
    `threads`, the Pipeline's num_threads (default: all cores), and `executor` (pixelpipe or
    nvimgcodec: the decoders' executor)."""
    out: dict[str, Any] = {}
    for pair in filter(None, text.split(",")):
        key, _, value = pair.partition("=")
        key, low = key.strip(), value.strip().lower()
        if key == "executor":
            if low not in ("pixelpipe", "nvimgcodec"):
                raise SystemExit(f"executor= takes pixelpipe or nvimgcodec, got {value!r}")
            out[key] = low
            continue
        out[key] = (None if low == "none" else True if low == "true" else False if low == "false"
                    else int(low) if low.lstrip("-").isdigit() else low if low == "off" else float(low))
    decoding(out)  # checked before the runs
    return out


def decoding(settings: dict[str, Any]) -> pp.GpuDecoding:
    """The GpuDecoding of a setting (every key but `threads` and `executor`)."""
    return pp.GpuDecoding(**{k: v for k, v in settings.items() if k not in ("threads", "executor")})


def run(listed: str, preset: str, settings: dict[str, Any], seconds: float, seed: int) -> float:
    """Images/s of one Pipeline over the list, timed for `seconds` after 10 batches."""
    transforms = getattr(pp.presets, preset)(dtype=torch.float16)
    os.environ["PIXELPIPE_NVIMGCODEC_EXECUTOR"] = settings.get("executor", "nvimgcodec")  # read by its decoders
    pipe = pp.Pipeline(listed, transforms, batch_size=BATCH, device="cuda", seed=seed, drop_last=True,
                       num_threads=settings.get("threads"), gpu=decoding(settings))
    try:
        batches = (b for _ in itertools.count() for b in pipe)  # epoch after epoch
        for _ in itertools.islice(batches, 10):  # warm-up
            pass
        torch.cuda.synchronize()
        n, t0 = 0, time.perf_counter()
        for _ in batches:
            n += 1
            if time.perf_counter() - t0 > seconds:
                break
        torch.cuda.synchronize()
        return n * BATCH / (time.perf_counter() - t0)
    finally:
        pipe.close()


def main() -> None:
    ap = arguments(__doc__)
    ap.add_argument("--repeat", type=int, default=60, help="list the folder's JPEGs this many times")
    ap.add_argument("--seconds", type=float, default=6.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--settings", nargs="+", default=["hw_fraction=0.75", "hw_fraction=0.6", "hw_fraction=0.9"],
                    help="GpuDecoding settings, each key=value[,key=value]")
    ap.add_argument("--preset", default="imagenet_train")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("needs a CUDA device")
    names = list(args.settings)
    parsed = {s: setting(s) for s in names}
    listed, total = file_list(args.data, args.repeat)
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; {total // args.repeat} JPEGs listed "
          f"{args.repeat} times, preset {args.preset}, batch {BATCH}, {args.seconds:g} s a run")
    rates: dict[str, list[float]] = {s: [] for s in names}
    try:
        for r in range(args.rounds):
            for name in names if r % 2 == 0 else names[::-1]:
                rates[name].append(run(listed, args.preset, parsed[name], args.seconds, r))
                print(f"round {r}, {name}: {rates[name][-1]:,.0f} images/s", flush=True)
    finally:
        os.unlink(listed)
    print("\n| GpuDecoding | images/s: median (range) |\n| --- | ---: |")
    for name in names:
        v = sorted(rates[name])
        print(f"| {name} | {v[len(v) // 2]:,.0f} ({v[0]:,.0f}-{v[-1]:,.0f}) |")


if __name__ == "__main__":
    main()
