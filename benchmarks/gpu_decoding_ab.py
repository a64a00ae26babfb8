"""A Pipeline over files with several GpuDecoding settings, in alternating rounds.

    python benchmarks/gpu_decoding_ab.py [--data DIR] [--repeat 60] [--seconds 6] [--rounds 3] \
        [--settings hw_fraction=0.75 hw_fraction=0.6 hw_fraction=0.9] [--preset imagenet_train]

The JPEGs of DIR listed `--repeat` times in a file list, read by a Pipeline (batch 256, float16,
default threads) made once per run with `GpuDecoding(**setting)`, a setting being
comma-separated key=value pairs (numbers, true, false or none); a run times `--seconds` after
10 batches. Each round runs every setting once, the order reversed every other round, so that
a drift of the machine falls on all of them. Prints each run, then per setting the median
images/s and the range. With hardware names: whether the JPEG engines bound the rate (if they
did, a smaller name, fewer images on them, would be faster). Needs CUDA and nvImageCodec.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from _common import arguments

import pixelpipe as pp

BATCH = 256


def setting(text: str) -> dict[str, Any]:
    """GpuDecoding keyword arguments from "key=value,key=value" (numbers, true, false, none)."""
    out: dict[str, Any] = {}
    for pair in filter(None, text.split(",")):
        key, _, value = pair.partition("=")
        low = value.strip().lower()
        out[key.strip()] = (None if low == "none" else True if low == "true" else False if low == "false"
                            else int(low) if low.lstrip("-").isdigit() else float(low))
    pp.GpuDecoding(**out)  # checked before the runs
    return out


def run(listed: str, preset: str, settings: dict[str, Any], seconds: float, seed: int) -> float:
    """Images/s of one Pipeline over the list, timed for `seconds` after 10 batches."""
    transforms = getattr(pp.presets, preset)(dtype=torch.float16)
    pipe = pp.Pipeline(listed, transforms, batch_size=BATCH, device="cuda", seed=seed, drop_last=True,
                       gpu=pp.GpuDecoding(**settings))
    try:
        n, n0, t0 = 0, 0, None
        while True:
            for _ in pipe:
                n += 1
                if n == 10:
                    torch.cuda.synchronize()
                    t0, n0 = time.perf_counter(), n
                if t0 is not None and time.perf_counter() - t0 > seconds:
                    break
            else:
                continue
            break
        torch.cuda.synchronize()
        assert t0 is not None
        return (n - n0) * BATCH / (time.perf_counter() - t0)
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
    files = sorted(p for p in Path(args.data).iterdir() if p.suffix.lower() in (".jpeg", ".jpg"))
    if not files:
        raise SystemExit(f"no JPEGs in {args.data}: pass --data")
    fd, listed = tempfile.mkstemp(suffix=".txt")
    with os.fdopen(fd, "w") as f:
        for _ in range(args.repeat):
            f.writelines(f"{p.resolve()} 0\n" for p in files)
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; {len(files)} JPEGs listed {args.repeat} "
          f"times, preset {args.preset}, batch {BATCH}, {args.seconds:g} s a run")
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
