"""Volume augmentation: pixelpipe's Compose3D against MONAI's dictionary transforms and TorchIO,
ms per batch, printed as a table (the same as `pixelpipe bench --pipeline volume`; what is
timed: pixelpipe/tools/bench/volumes.py).

    python benchmarks/volumes_vs_monai.py [--device cpu|cuda] [--rounds 5] [--batch 8]
                                          [--size 160] [--crop 96] [--threads N] [--peers monai,torchio]

For a smoke test on a small CPU: --size 48 --crop 32 --rounds 2.
"""

from __future__ import annotations

import argparse

import torch

from pixelpipe.tools.bench.volumes import run_volume_bench


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", choices=["cpu", "cuda"])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--size", type=int, default=160, help="volumes of size x 1.2 size x size voxels")
    ap.add_argument("--crop", type=int, default=96)
    ap.add_argument("--threads", type=int, default=None, help="torch's CPU threads (default: torch's)")
    ap.add_argument("--peers", default="monai,torchio", help="comma-separated: monai, torchio, or none")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    peers = [p for p in args.peers.split(",") if p and p != "none"]
    run_volume_bench(args.device, args.batch, args.rounds, args.size, args.crop, peers)


if __name__ == "__main__":
    main()
