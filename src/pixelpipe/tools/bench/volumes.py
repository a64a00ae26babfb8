"""The volume benchmark of `pixelpipe bench --pipeline volume` and
benchmarks/volumes_vs_monai.py: pixelpipe's Compose3D against MONAI's dictionary transforms and
TorchIO, ms per batch.

The batch: `batch` int16 volumes of (size, 1.2 size, size) voxels (160 -> 160x192x160) with a
uint8 label map each, already on the device (reading is not timed). The pipeline: random
affine (rotation up to 15 degrees about each axis, scale 0.9..1.1), flip per axis with
probability 0.5, random crop of crop^3, windowing -1000..1000 -> 0..1 (clipped), per-sample
normalisation, float16 out (the label map follows with nearest).

- pixelpipe: one Compose3D call on the ragged batch (on CUDA: the fused Triton kernel, two
  launches because of the normalisation's statistics);
- MONAI (if installed): RandAffined(device=...), RandFlipd x 3, RandSpatialCropd,
  ScaleIntensityRanged, NormalizeIntensityd, on tensors already on the device, one sample at
  a time (how its dictionary transforms run);
- TorchIO (if installed, CPU only): RandomAffine, RandomFlip, a random Crop, RescaleIntensity,
  ZNormalization on a Subject per sample.

Each round times every library once, the order reversed every other round; the table gives
each one's median, best and worst round, and the median's time over pixelpipe's.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable

import numpy as np
import torch

from ... import compose3d as _c3
from ...data.volumes import VolumeBatch
from ...ops import volume_crop as _crop
from ...ops import volume_geometry as _geo
from ...ops import volume_intensity as _int


def make_data(n: int, size: int, seed: int = 0) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """int16 CT-like volumes (smooth structure plus noise) and uint8 label maps (a sphere)."""
    g = torch.Generator().manual_seed(seed)
    d, h, w = size, int(size * 1.2), size
    vols, labs = [], []
    z, y, x = torch.meshgrid(*(torch.linspace(-1, 1, s) for s in (d, h, w)), indexing="ij")
    for i in range(n):
        body = 800 * torch.exp(-(x**2 + y**2 + z**2) * (2 + i % 3)) - 900
        vols.append((body + 40 * torch.randn(d, h, w, generator=g)).clamp(-1024, 3000).to(torch.int16))
        labs.append(((x - 0.1) ** 2 + y**2 + (z + 0.1) ** 2 < 0.15).to(torch.uint8))
    return vols, labs


def pixelpipe_run(vols: list[torch.Tensor], labs: list[torch.Tensor], crop: int, device: str) -> Callable[[int], None]:
    t = _c3.Compose3D([_geo.RandomAffine3D(degrees=15, scale=(0.9, 1.1)), _geo.RandomFlip3D(0.5),
                       _crop.RandomCrop3D(crop), _int.ScaleIntensityRange(-1000, 1000, 0.0, 1.0),
                       _int.NormalizeIntensity()], dtype=torch.float16)
    batch = VolumeBatch.from_list(vols, labs, device=device)

    def run(r: int) -> None:
        out = t(batch, seed=0, epoch=r)
        assert out["image"].shape[2:] == (crop,) * 3
    return run


def monai_run(vols: list[torch.Tensor], labs: list[torch.Tensor], crop: int, device: str) -> Callable[[int], None] | None:
    try:
        from monai import transforms as mt
    except ImportError:
        print("MONAI is not installed: skipped (pip install monai)")
        return None
    keys = ["image", "label"]
    t = mt.Compose([
        mt.RandAffined(keys, prob=1.0, rotate_range=(np.deg2rad(15),) * 3, scale_range=(0.1,) * 3,
                       mode=("bilinear", "nearest"), padding_mode="zeros", device=torch.device(device)),
        mt.RandFlipd(keys, prob=0.5, spatial_axis=0), mt.RandFlipd(keys, prob=0.5, spatial_axis=1),
        mt.RandFlipd(keys, prob=0.5, spatial_axis=2),
        mt.RandSpatialCropd(keys, roi_size=(crop,) * 3, random_size=False),
        mt.ScaleIntensityRanged("image", a_min=-1000, a_max=1000, b_min=0.0, b_max=1.0, clip=True),
        mt.NormalizeIntensityd("image"),
        mt.CastToTyped(keys, dtype=(torch.float16, torch.int64)),
    ])
    t.set_random_state(0)
    data = [{"image": v[None].to(device), "label": lab[None].to(device)} for v, lab in zip(vols, labs)]

    def run(r: int) -> None:
        outs = [t(d) for d in data]
        torch.stack([o["image"].as_tensor() if hasattr(o["image"], "as_tensor") else o["image"] for o in outs])
    return run


def torchio_run(vols: list[torch.Tensor], labs: list[torch.Tensor], crop: int, device: str) -> Callable[[int], None] | None:
    if device != "cpu":
        print("TorchIO runs on the CPU: skipped on", device)
        return None
    try:
        import torchio as tio
    except ImportError:
        print("TorchIO is not installed: skipped (pip install torchio)")
        return None
    rng = np.random.default_rng(0)
    common = tio.Compose([tio.RandomAffine(scales=0.1, degrees=15), tio.RandomFlip(axes=(0, 1, 2), flip_probability=0.5)])
    finish = tio.Compose([tio.RescaleIntensity(out_min_max=(0, 1), in_min_max=(-1000, 1000)), tio.ZNormalization()])
    subjects = [tio.Subject(image=tio.ScalarImage(tensor=v[None]), label=tio.LabelMap(tensor=lab[None]))
                for v, lab in zip(vols, labs)]

    def run(r: int) -> None:
        outs = []
        for s in subjects:
            s = common(s)
            shape = np.array(s.spatial_shape)
            lo = rng.integers(0, shape - crop + 1)
            s = tio.Crop((lo[0], shape[0] - crop - lo[0], lo[1], shape[1] - crop - lo[1], lo[2],
                          shape[2] - crop - lo[2]))(s)
            outs.append(finish(s)["image"].data.to(torch.float16))
        torch.stack(outs)
    return run


PEERS = ("monai", "torchio")


def run_volume_bench(device: str = "auto", batch: int = 8, rounds: int = 5, size: int = 160, crop: int = 96,
                     peers: list[str] | None = None, as_json: bool = False) -> dict[str, list[float]]:
    """Time the volume pipeline (module docstring) with pixelpipe and the peers (default: both,
    each skipped with a note when not installed); print the table (or JSON) and return each
    library's ms per round."""
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if crop > size:
        raise ValueError(f"crop {crop} is larger than the volumes' size {size}")
    peers = list(PEERS) if peers is None else peers
    for p in peers:
        if p not in PEERS:
            raise ValueError(f"unknown volume peer {p!r}: choose from {', '.join(PEERS)}")
    vols, labs = make_data(batch, size)
    runs = {"pixelpipe": pixelpipe_run(vols, labs, crop, device),
            "MONAI": monai_run(vols, labs, crop, device) if "monai" in peers else None,
            "TorchIO": torchio_run(vols, labs, crop, device) if "torchio" in peers else None}
    runs = {k: v for k, v in runs.items() if v is not None}
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    for run in runs.values():  # warm-up: compilation, caches, first allocations
        run(-1)
    sync()
    times: dict[str, list[float]] = {k: [] for k in runs}
    names = list(runs)
    for r in range(rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            sync()
            t0 = time.perf_counter()
            runs[name](r)
            sync()
            times[name].append((time.perf_counter() - t0) * 1e3)
    if as_json:
        print(json.dumps({"device": device, "batch": batch, "size": size, "crop": crop, "ms": times}))
        return times
    dev = torch.cuda.get_device_name() if device.startswith("cuda") else f"CPU, {torch.get_num_threads()} threads"
    print(f"\nbatch of {batch} int16 volumes {size}x{int(size * 1.2)}x{size} + labels -> "
          f"crop {crop}^3 float16, {rounds} rounds, {dev}")
    print(f"{'library':<10} {'median ms':>10} {'best':>9} {'worst':>9} {'volumes/s':>10} {'pixelpipe x':>12}")
    base = statistics.median(times["pixelpipe"])
    for name, ts in times.items():
        med = statistics.median(ts)
        print(f"{name:<10} {med:>10.1f} {min(ts):>9.1f} {max(ts):>9.1f} {batch / med * 1e3:>10.1f} "
              f"{med / base:>12.1f}")
    return times
