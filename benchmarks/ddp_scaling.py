"""Scale-out on the GPUs of one host: pixelpipe (and DALI) feeding DDP training under torchrun,
for 1, 2, ... G processes, with the checks the counter-based design promises.

One command runs the whole thing: this script (the driver) lists the data's files `--repeat`
times into one file list, then for every world size in `--gpus`, every loader in `--loaders`
and every model in `--models` ("none": the loader alone) starts
`torchrun --standalone --nproc_per_node=G benchmarks/ddp_scaling.py --worker ...`, reads the
JSON line rank 0 prints, and prints one table: images/s over all ranks, per rank, and the
scaling efficiency (rate at G / (G x rate at 1)).

Each worker (one per rank; cuda:LOCAL_RANK with NCCL, or the CPU with gloo):
- builds its loader with no shard argument: pixelpipe's Pipeline takes its shard from
  torch.distributed; DALI's fn.readers.file gets shard_id / num_shards;
- runs --warmup steps, then --steps timed steps (a DDP step of the model, or only the next
  batch), and reports the slowest rank's rate and every rank's step count;
- for pixelpipe, then iterates one whole epoch and checks, from the run's own output, that the
  valid samples of all ranks are the dataset exactly once, that every rank made the same number
  of batches, and records a 4x4 thumbnail of every sample's augmented image (keyed by sample
  index; the driver compares them across world sizes: the same sample, the same augmentation,
  whichever rank and world size saw it), and each epoch's peak GPU memory per rank.

Usage:
    python benchmarks/ddp_scaling.py --data DIR                          # 1, 2 and all GPUs
    python benchmarks/ddp_scaling.py --data DIR --gpus 1,2,4,8 --loaders pixelpipe,dali \\
        --models none,resnet50,resnet18
    python benchmarks/ddp_scaling.py --device cpu --gpus 1,2 --models none,small   # gloo, no GPU

Without --data it writes --synthetic JPEGs to a temporary folder. DALI rows need nvidia.dali;
resnet models need torchvision ("small" is a two-layer CNN that needs neither).

Each process imports pixelpipe before CUDA starts, as a training script that uses it does: it
asks CUDA for 32 hardware queues (pixelpipe.engine.cuda_queues), so DALI's rows run with them
too; set CUDA_DEVICE_MAX_CONNECTIONS in the environment to run otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

import pixelpipe  # noqa: F401  (before CUDA starts, as in a training script: see the docstring)

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
THUMB = 4  # side of each sample's thumbnail (the augmentation check)


# ----------------------------------------------------------------------------- the driver
def file_list(data: str | None, repeat: int, synthetic: int, tmp: str) -> tuple[str, int]:
    """A file list ("path label" lines) of the folder's JPEGs repeated `repeat` times, or of
    `synthetic` generated JPEGs; and its length."""
    if data is None:
        from pixelpipe.tools.datasets import synthetic as make

        folder = Path(tmp) / "images"
        folder.mkdir()
        for i, (jpeg, label) in enumerate(make(synthetic, seed=0)):
            (folder / f"{i:05d}.jpg").write_bytes(jpeg)
        data = str(folder)
    files = sorted(str(p.resolve()) for p in Path(data).rglob("*") if p.suffix.lower() in (".jpg", ".jpeg"))
    if not files:
        raise SystemExit(f"no JPEGs under {data}")
    listed = Path(tmp) / "list.txt"
    with open(listed, "w") as f:
        for _ in range(repeat):
            f.writelines(f"{p} {k % 10}\n" for k, p in enumerate(files))
    return str(listed), len(files) * repeat


def run_one(args: argparse.Namespace, world: int, loader: str, model: str, listed: str, out: str) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={world}",
           __file__, "--worker", "--list", listed, "--loader", loader, "--model", model, "--device", args.device,
           "--batch", str(args.batch), "--warmup", str(args.warmup), "--steps", str(args.steps),
           "--epochs", str(args.epochs), "--out", out]
    if args.threads is not None:
        cmd += ["--threads", str(args.threads)]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=args.timeout)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        text = done.stderr or done.stdout
        at = text.rfind("Traceback (most recent call last)")  # a worker's own error, not torchrun's summary
        tail = text[at:].strip().splitlines()[-14:] if at >= 0 else text.strip().splitlines()[-12:]
        return {"world": world, "loader": loader, "model": model, "error": "\n".join(tail)}
    return json.loads(lines[-1])


def compare_thumbs(paths: list[str]) -> tuple[int, float]:
    """Samples present in several runs' thumbnails, and the largest difference between two
    runs' thumbnails of one sample (normalised units)."""
    runs = [torch.load(p) for p in paths if os.path.exists(p)]
    if len(runs) < 2:
        return 0, 0.0
    common = set(runs[0]["index"].tolist())
    for r in runs[1:]:
        common &= set(r["index"].tolist())
    worst = 0.0
    ref = {int(i): t for i, t in zip(runs[0]["index"], runs[0]["thumb"])}
    for r in runs[1:]:
        for i, t in zip(r["index"].tolist(), r["thumb"]):
            if i in common:
                worst = max(worst, float((t - ref[i]).abs().max()))
    return len(common), worst


def driver(args: argparse.Namespace) -> int:
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: no CUDA device here (use --device cpu for gloo)")
    have = torch.cuda.device_count() if args.device == "cuda" else os.cpu_count() or 1
    worlds = sorted({min(int(g), have) if g != "all" else have for g in args.gpus.split(",")})
    with tempfile.TemporaryDirectory(prefix="ddp-scaling-") as tmp:
        listed, total = file_list(args.data, args.repeat, args.synthetic, tmp)
        device = torch.cuda.get_device_name() if args.device == "cuda" else f"CPU ({have} cores)"
        print(f"{total} samples per epoch, batch {args.batch} per rank, {args.steps} timed steps after "
              f"{args.warmup}; {device}; world sizes {worlds}", flush=True)
        rows, thumbs = [], []
        for loader in args.loaders.split(","):
            for model in args.models.split(","):
                for world in worlds:
                    out = os.path.join(tmp, f"{loader}-{model}-{world}.pt")
                    t0 = time.perf_counter()
                    row = run_one(args, world, loader, model, listed, out)
                    row["seconds"] = round(time.perf_counter() - t0, 1)
                    rows.append(row)
                    if loader == "pixelpipe" and os.path.exists(out):
                        thumbs.append(out)
                    print(json.dumps(row), flush=True)
        print_table(rows)
        common, worst = compare_thumbs(thumbs)
        if common:
            print(f"\nsame augmentation across world sizes and ranks: {common} samples in every pixelpipe run, "
                  f"largest thumbnail difference {worst:.4f} (normalised units; one grey level is "
                  f"{1 / 255 / min(STD):.4f})")
    return 0 if all("error" not in r and r.get("checks_ok", True) for r in rows) else 1


def print_table(rows: list[dict[str, Any]]) -> None:
    print(f"\n{'loader':<10} {'model':<9} {'GPUs':>4} {'images/s':>10} {'per rank':>9} {'scaling':>8} "
          f"{'steps/rank':>10} {'exactly once':>12} {'peak MiB/rank by epoch':<24}")
    base: dict[tuple[str, str], float] = {}
    for r in rows:
        key = (r["loader"], r["model"])
        if "error" in r:
            print(f"{r['loader']:<10} {r['model']:<9} {r['world']:>4} failed: {r['error'].splitlines()[-1][:80]}")
            continue
        if r["world"] == 1:
            base[key] = r["rate"]
        scale = r["rate"] / (r["world"] * base[key]) if key in base else float("nan")
        once = {None: "-", True: "yes", False: "NO"}[r.get("exactly_once")]
        mem = "/".join(f"{m:.0f}" for m in r.get("peak_mib", [])) or "-"
        print(f"{r['loader']:<10} {r['model']:<9} {r['world']:>4} {r['rate']:>10,.0f} {r['rate'] / r['world']:>9,.0f} "
              f"{scale:>8.2f} {'=' if len(set(r['steps'])) == 1 else 'UNEQUAL':>10} {once:>12} {mem:<24}")


# ----------------------------------------------------------------------------- a worker (one rank)
def small_model(classes: int) -> torch.nn.Module:
    nn = torch.nn
    return nn.Sequential(nn.Conv2d(3, 16, 3, stride=2), nn.ReLU(), nn.Conv2d(16, 32, 3, stride=2), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, classes))


def make_model(name: str, device: torch.device) -> torch.nn.Module | None:
    if name == "none":
        return None
    if name == "small":
        model = small_model(10)
    else:
        import torchvision

        model = getattr(torchvision.models, name)(num_classes=10)
    model = model.to(device)
    if device.type == "cuda":
        model = model.to(memory_format=torch.channels_last)
    from torch.nn.parallel import DistributedDataParallel

    return DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)


def pixelpipe_batches(args: argparse.Namespace, device: torch.device) -> tuple[Any, Any]:
    import pixelpipe as pp
    from pixelpipe.tools.bench.pipelines import pipeline_ops

    dtype = torch.float16 if device.type == "cuda" else torch.float32
    pipe = pp.Pipeline(args.list, pp.Compose(pipeline_ops("rn50"), dtype=dtype), batch_size=args.batch,
                       device=str(device), seed=0, num_threads=args.threads)
    return pipe, pipe.close


def dali_batches(args: argparse.Namespace, device: torch.device, rank: int, world: int) -> tuple[Any, Any]:
    from nvidia.dali import fn, pipeline_def, types
    from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy

    @pipeline_def(batch_size=args.batch, num_threads=args.threads or 8, device_id=device.index)
    def pipe():  # type: ignore[no-untyped-def]
        jpegs, labels = fn.readers.file(file_list=args.list, random_shuffle=True, shard_id=rank, num_shards=world,
                                        pad_last_batch=True, name="files")
        images = fn.decoders.image_random_crop(jpegs, device="mixed", output_type=types.RGB,
                                               random_area=(0.08, 1.0), random_aspect_ratio=(3 / 4, 4 / 3))
        images = fn.resize(images, resize_x=224, resize_y=224)
        images = fn.crop_mirror_normalize(images, dtype=types.FLOAT16, output_layout="CHW",
                                          mean=[255 * m for m in MEAN], std=[255 * s for s in STD],
                                          mirror=fn.random.coin_flip(probability=0.5))
        return images, labels.gpu()

    p = pipe()
    p.build()
    it = DALIGenericIterator([p], ["image", "label"], reader_name="files", auto_reset=True,
                             last_batch_policy=LastBatchPolicy.DROP)

    class Epochs:
        def __iter__(self):
            return ({"image": b[0]["image"], "label": b[0]["label"].view(-1).long()} for b in it)

    return Epochs(), lambda: None


def endless(loader: Any):
    while True:
        yield from loader


def worker(args: argparse.Namespace) -> int:
    import torch.distributed as dist

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", 0))
    if args.device == "cuda":
        torch.cuda.set_device(local)
        device = torch.device("cuda", local)
        dist.init_process_group("nccl", device_id=device)
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    loader, close = (pixelpipe_batches(args, device) if args.loader == "pixelpipe"
                     else dali_batches(args, device, rank, world))
    model = make_model(args.model, device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9) if model is not None else None
    batches = endless(loader)

    def step() -> None:
        b = next(batches)
        if model is None:
            return
        x = b["image"]
        if device.type == "cuda":
            x = x.contiguous(memory_format=torch.channels_last)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            loss = torch.nn.functional.cross_entropy(model(x).float(), b["label"].to(device) % 10)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    for _ in range(args.warmup):
        step()
    sync()
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(args.steps):
        step()
    sync()
    mine = torch.tensor([time.perf_counter() - t0, float(args.steps)], dtype=torch.float64, device=device)
    gathered = [torch.zeros_like(mine) for _ in range(world)]
    dist.all_gather(gathered, mine)  # NCCL gathers device tensors only
    slowest = max(float(g[0]) for g in gathered)
    result: dict[str, Any] = {"world": world, "loader": args.loader, "model": args.model, "device": args.device,
                              "rate": world * args.steps * args.batch / slowest,
                              "steps": [int(g[1]) for g in gathered]}
    if args.loader == "pixelpipe":
        result.update(check_epochs(args, loader, device, rank, world))
    close()
    if rank == 0:
        print(json.dumps(result), flush=True)
    dist.destroy_process_group()
    return 0


def check_epochs(args: argparse.Namespace, pipe: Any, device: torch.device, rank: int, world: int) -> dict[str, Any]:
    """Whole epochs from a fresh start: exactly-once coverage across ranks, equal batch counts,
    per-epoch peak memory, and (epoch 0) every sample's thumbnail, gathered on rank 0."""
    import torch.distributed as dist
    import torch.nn.functional as F

    import pixelpipe as pp

    pipe.close()
    fresh = pp.Pipeline(args.list, pp.Compose(pipe.transforms.ops, dtype=pipe.transforms.dtype),
                        batch_size=args.batch, device=str(device), seed=0, num_threads=args.threads)
    ok, peaks, counts = True, [], []
    index_0: list[torch.Tensor] = []
    thumb_0: list[torch.Tensor] = []
    total = sum(1 for _ in open(args.list))
    for epoch in range(args.epochs):
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        seen, batches = [], 0
        for b in fresh:
            batches += 1
            valid = b["valid"].bool()
            seen.append(b["index"][valid].cpu())
            if epoch == 0:
                index_0.append(b["index"][valid].cpu())
                thumb_0.append(F.adaptive_avg_pool2d(b["image"][valid].float(), THUMB).cpu())
        mine = torch.cat(seen)
        sizes = [torch.zeros(1, dtype=torch.int64, device=device) for _ in range(world)]
        dist.all_gather(sizes, torch.tensor([len(mine)], device=device))  # NCCL: device tensors
        padded = torch.full((max(int(s) for s in sizes),), -1, dtype=torch.int64, device=device)
        padded[: len(mine)] = mine.to(device)
        everyone = [torch.zeros_like(padded) for _ in range(world)]
        dist.all_gather(everyone, padded)
        union = torch.cat([e[e >= 0] for e in everyone]).cpu()
        ok &= len(union) == total and torch.equal(union.sort().values, torch.arange(total))
        batch_counts = [torch.zeros(1, dtype=torch.int64, device=device) for _ in range(world)]
        dist.all_gather(batch_counts, torch.tensor([batches], device=device))
        ok &= len({int(c) for c in batch_counts}) == 1
        counts.append(batches)
        peak = torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else 0.0
        peaks.append(peak)
    fresh.close()
    # the thumbnails of every rank, saved by rank 0 for the driver's comparison across runs
    idx, th = torch.cat(index_0), torch.cat(thumb_0)
    gathered: list[Any] = [None] * world
    dist.all_gather_object(gathered, (idx, th))
    if rank == 0:
        torch.save({"index": torch.cat([g[0] for g in gathered]), "thumb": torch.cat([g[1] for g in gathered])},
                   args.out)
    out: dict[str, Any] = {"exactly_once": bool(ok), "batches_per_epoch": counts, "checks_ok": bool(ok)}
    if device.type == "cuda":
        out["peak_mib"] = peaks
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", help="a folder of JPEGs (default: --synthetic generated ones)")
    ap.add_argument("--synthetic", type=int, default=512)
    ap.add_argument("--repeat", type=int, default=16, help="times the folder's files are listed")
    ap.add_argument("--gpus", default="1,2,all", help="world sizes, comma-separated ('all': every GPU)")
    ap.add_argument("--loaders", default="pixelpipe,dali")
    ap.add_argument("--models", default="none,resnet50,resnet18", help="none (the loader alone), small, "
                    "or a torchvision model name")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--batch", type=int, default=256, help="per rank")
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--epochs", type=int, default=2, help="whole epochs checked after the timed steps")
    ap.add_argument("--threads", type=int, help="loader threads per rank (default: the loader's own)")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per torchrun")
    # a worker's own arguments (torchrun starts this script again with --worker)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--list", help=argparse.SUPPRESS)
    ap.add_argument("--loader", help=argparse.SUPPRESS)
    ap.add_argument("--model", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    return worker(args) if args.worker else driver(args)


if __name__ == "__main__":
    sys.exit(main())
