"""Image classification with DistributedDataParallel, fed by a pixelpipe Pipeline.

The same script runs, unchanged:

    python examples/train.py                                      # one process: the GPU if any
    torchrun --nproc_per_node=2 examples/train.py --device cpu    # two CPU processes (gloo)
    torchrun --nproc_per_node=8 examples/train.py --data /data/imagenet/train   # 8 GPUs (NCCL)

Every process builds its own pipeline on its own device (cuda:LOCAL_RANK, or the CPU); the
pipeline takes its shard of every epoch from torch.distributed, so each sample is seen once per
epoch across all processes and every process gets the same number of batches (the last ones
are padded with repeated samples marked invalid, which the loss weighs 0).

--data: a class-per-folder tree, a file list (.txt/.csv) or tar shards (a .tar path or a
pattern); by default a synthetic dataset written once to a temporary folder. --baseline runs the
same loop on a torch DataLoader decoding with Pillow (torchvision transforms when torchvision
works, plain Pillow ones otherwise) for an images/s comparison. --checkpoint saves the model,
the optimizer and every rank's pipeline position after each epoch (and at --max-steps);
--resume continues from one, with the same remaining batches an uninterrupted run would get.
Every --log-every steps, and when --max-steps stops the run, a line gives the loss and images/s.
Multi-node runs: see docs/training.md.
"""

from __future__ import annotations

import argparse
import io
import math
import os
import random
import re
import sys
import tempfile
import time
from typing import Any, NoReturn

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

import pixelpipe as pp
from pixelpipe.data.threads import default_threads
from pixelpipe.readers import ReaderError, open_reader
from pixelpipe.tools.bench.pipelines import IMAGENET_MEAN, IMAGENET_STD, SHEAR_DEGREES, pipeline_ops

PROG = os.path.basename(__file__)
DATA_KINDS = ("a folder of images (one subfolder per class), a file list (.txt, .csv, .lst) "
              "or tar shards (a .tar path or a pattern such as 'shard-*.tar')")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    workers = min(4, default_threads())
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n")[0])
    p.add_argument("--data", help="folder, file list or tar shards (default: synthetic images)")
    p.add_argument("--synthetic", type=int, default=512, help="images in the default synthetic dataset")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=64, help="per process")
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--pipeline", choices=("rn50", "rich"), default="rn50")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    p.add_argument("--model", choices=("auto", "resnet18", "small"), default="auto",
                   help="auto: torchvision's ResNet-18 where torchvision works, else a small CNN")
    p.add_argument("--num-classes", type=int, help="default: from the dataset's labels")
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, help="decoding threads per process (default: cores / processes, "
                                                f"{default_threads()} here)")
    p.add_argument("--workers", type=int, default=workers,
                   help="DataLoader workers per process (--baseline; default: at most 4 and at most "
                        f"cores / processes, {workers} here)")
    p.add_argument("--amp", action="store_true", help="bfloat16 autocast (and bfloat16 batches)")
    p.add_argument("--channels-last", action="store_true", help="NHWC batches, channels_last model")
    p.add_argument("--compile", action="store_true", help="torch.compile the model")
    p.add_argument("--baseline", action="store_true", help="torch DataLoader + Pillow instead of pixelpipe")
    p.add_argument("--checkpoint", help="save here after every epoch (and at --max-steps)")
    p.add_argument("--resume", help="continue from this checkpoint")
    p.add_argument("--max-steps", type=int, help="stop (and checkpoint) after this many steps in all")
    p.add_argument("--log-every", type=int, default=50, metavar="N",
                   help="print the loss and images/s every N steps (0: only at the end of each epoch)")
    return p.parse_args(argv)


def usage_error(message: str) -> NoReturn:
    """Exit as argparse does for a bad argument: one line on stderr, exit status 2 (printed by
    the first process of each machine only)."""
    if int(os.environ.get("LOCAL_RANK", "0")) == 0:
        print(f"{PROG}: error: {message}", file=sys.stderr, flush=True)
    raise SystemExit(2)


# ----------------------------------------------------------------------------- processes
def setup(device: str) -> tuple[int, int, torch.device]:
    """(rank, world size, device) from torchrun's environment; a process group when world > 1."""
    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    dev = torch.device("cuda", local) if device == "cuda" else torch.device("cpu")
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    if world > 1:
        dist.init_process_group("nccl" if dev.type == "cuda" else "gloo")
    return rank, world, dev


def barrier(world: int) -> None:
    if world > 1:
        dist.barrier()


def log(rank: int, *args: Any) -> None:
    if rank == 0:
        print(*args, flush=True)


# ----------------------------------------------------------------------------- data
def synthetic_folder(n: int, seed: int, world: int) -> str:
    """A class-per-folder dataset of n synthetic JPEGs, written once per machine (by local rank
    0; the others wait) and reused by later runs."""
    root = os.path.join(tempfile.gettempdir(), f"pixelpipe-synthetic-{n}-{seed}")
    if int(os.environ.get("LOCAL_RANK", "0")) == 0 and not os.path.isdir(root):
        from pixelpipe.tools.datasets import NUM_CLASSES, synthetic

        tmp = tempfile.mkdtemp(prefix=os.path.basename(root) + ".", dir=os.path.dirname(root))
        for label in range(NUM_CLASSES):  # every class folder, so labels match even if one is empty
            os.makedirs(os.path.join(tmp, f"class{label:02d}"))
        for i, (data, label) in enumerate(synthetic(n, seed)):
            with open(os.path.join(tmp, f"class{label:02d}", f"{i:06d}.jpg"), "wb") as f:
                f.write(data)
        try:
            os.rename(tmp, root)
        except OSError:  # another run got there first
            pass
    barrier(world)
    return root


def open_data(data: str) -> Any:
    """The reader of --data, or a usage error naming the path and what was expected: a path
    that does not exist, holds no images, or has no labels to train on."""
    if not any(c in data for c in "*?[{") and not os.path.exists(data):
        usage_error(f"--data {data}: no such file or folder; expected {DATA_KINDS}")
    try:
        reader = open_reader(data)
    except (ReaderError, OSError) as e:
        reason = re.sub(r"^\w+: ", "", str(e)).split("; expected")[0]  # without the reader's name and hints
        usage_error(f"--data {data}: {reason}; expected {DATA_KINDS}")
    if getattr(reader, "indexable", False) and reader.labels is None:
        usage_error(f"--data {data}: its images have no labels (a folder without class subfolders); "
                    "training needs one subfolder per class, DIR/<class>/<image>")
    return reader


def num_classes(reader: Any, given: int | None) -> int:
    if given:
        return given
    if getattr(reader, "classes", None):
        return len(reader.classes)
    labels = reader.labels if getattr(reader, "indexable", False) else None
    if labels is not None and labels.numel():
        return int(labels.max()) + 1
    raise SystemExit("cannot tell the number of classes of this dataset: pass --num-classes")


def pixelpipe_batches(args: argparse.Namespace, reader: Any, device: torch.device, world: int) -> pp.Pipeline:
    dtype = torch.bfloat16 if args.amp else torch.float32
    layout = "NHWC" if args.channels_last else "NCHW"
    compose = pp.Compose(pipeline_ops(args.pipeline, args.image_size), dtype=dtype, layout=layout)
    # num_threads None: the Pipeline's default, the cores shared between torchrun's processes
    return pp.Pipeline(reader, compose, batch_size=args.batch_size, device=str(device), seed=args.seed,
                       num_threads=args.threads)


class Baseline:
    """The same epochs from a torch DataLoader: Pillow decoding in worker processes, a
    DistributedSampler for the shard. Batches are dicts like the pipeline's."""

    def __init__(self, args: argparse.Namespace, reader: Any, device: torch.device, rank: int, world: int) -> None:
        from torch.utils.data import DataLoader, DistributedSampler

        if not getattr(reader, "indexable", False):
            raise SystemExit("--baseline reads folders and file lists (random access), not tar shards")
        self.dataset = PillowDataset(reader, pillow_transform(args.pipeline, args.image_size))
        self.sampler = DistributedSampler(self.dataset, num_replicas=world, rank=rank, shuffle=True, seed=args.seed)
        self.loader = DataLoader(self.dataset, batch_size=args.batch_size, sampler=self.sampler,
                                 num_workers=args.workers, pin_memory=device.type == "cuda",
                                 persistent_workers=args.workers > 0)
        self.device, self.epoch = device, -1
        self.channels_last = args.channels_last

    def __len__(self) -> int:
        return len(self.loader)

    def close(self) -> None:
        pass

    def __iter__(self):
        self.epoch += 1
        self.sampler.set_epoch(self.epoch)
        for x, y in self.loader:
            x = x.to(self.device, non_blocking=True)
            if self.channels_last:
                x = x.permute(0, 2, 3, 1).contiguous()
            yield {"image": x, "label": y.to(self.device, non_blocking=True),
                   "valid": torch.ones(len(y), dtype=torch.bool, device=self.device)}


class PillowDataset(torch.utils.data.Dataset):
    def __init__(self, reader: Any, transform: Any) -> None:
        self.reader, self.transform = reader, transform
        self.labels = reader.labels

    def __len__(self) -> int:
        return len(self.reader)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        from PIL import Image, ImageOps

        sample = self.reader.read(i)
        img = ImageOps.exif_transpose(Image.open(io.BytesIO(sample.data))).convert("RGB")
        label = int(self.labels[i]) if self.labels is not None else int(sample.label)
        return self.transform(img), label


def pillow_transform(name: str, size: int) -> Any:
    """torchvision's transforms for the pipeline `name` where torchvision works, else the same
    steps written with Pillow."""
    try:
        import torchvision.transforms as T
    except (ImportError, RuntimeError, OSError):  # absent, or a build that does not match this torch
        return PillowSteps(name, size)
    steps = [T.RandomResizedCrop(size, antialias=True), T.RandomHorizontalFlip()]
    if name == "rich":
        steps += [T.RandomAffine(degrees=7, shear=(-SHEAR_DEGREES, SHEAR_DEGREES)),
                  T.ColorJitter(0.2, 0.2, 0.2, 0.05)]
    return T.Compose(steps + [T.ToTensor(), T.Normalize(IMAGENET_MEAN, IMAGENET_STD)])


class PillowSteps:
    """RandomResizedCrop (torchvision's algorithm), flip, and for "rich" a random rotation and
    shear and a colour jitter, with Pillow; then a normalised float CHW tensor."""

    def __init__(self, name: str, size: int) -> None:
        self.rich, self.size = name == "rich", size

    def __call__(self, img: Any) -> torch.Tensor:
        from PIL import Image, ImageEnhance

        rnd = random.random
        W, H = img.size
        for _ in range(10):
            area = W * H * random.uniform(0.08, 1.0)
            ratio = math.exp(random.uniform(math.log(3 / 4), math.log(4 / 3)))
            w, h = round(math.sqrt(area * ratio)), round(math.sqrt(area / ratio))
            if 0 < w <= W and 0 < h <= H:
                left, top = random.randint(0, W - w), random.randint(0, H - h)
                break
        else:
            w, h = (W, round(W / (3 / 4))) if W / H < 3 / 4 else ((round(H * 4 / 3), H) if W / H > 4 / 3 else (W, H))
            w, h = min(w, W), min(h, H)
            left, top = (W - w) // 2, (H - h) // 2
        img = img.resize((self.size, self.size), Image.Resampling.BILINEAR, box=(left, top, left + w, top + h))
        if rnd() < 0.5:
            img = img.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        if self.rich:
            a = math.radians(random.uniform(-7, 7))
            sh = math.tan(math.radians(random.uniform(-SHEAR_DEGREES, SHEAR_DEGREES)))
            m = torch.tensor([[math.cos(a), -math.sin(a)], [math.sin(a), math.cos(a)]]) @ torch.tensor([[1, sh], [0, 1.0]])
            inv = torch.linalg.inv(m)
            c = self.size / 2
            off = torch.tensor([c, c]) - inv @ torch.tensor([c, c])
            img = img.transform(img.size, Image.Transform.AFFINE, (*inv[0].tolist(), float(off[0]),
                                                                   *inv[1].tolist(), float(off[1])),
                                Image.Resampling.BILINEAR)
            for enhance in random.sample([ImageEnhance.Brightness, ImageEnhance.Contrast, ImageEnhance.Color], 3):
                img = enhance(img).enhance(random.uniform(0.8, 1.2))
            hsv = torch.from_numpy(np.array(img.convert("HSV")))
            hsv[..., 0] = (hsv[..., 0].to(torch.int16) + round(random.uniform(-0.05, 0.05) * 255)).remainder(256).to(torch.uint8)
            img = Image.fromarray(hsv.numpy(), "HSV").convert("RGB")
        x = torch.from_numpy(np.array(img)).permute(2, 0, 1).float() / 255
        mean, std = torch.tensor(IMAGENET_MEAN).view(3, 1, 1), torch.tensor(IMAGENET_STD).view(3, 1, 1)
        return (x - mean) / std


# ----------------------------------------------------------------------------- model
class SmallCNN(nn.Module):
    """Four strided 3x3 convolutions with batch norm, global pooling, a linear classifier."""

    def __init__(self, classes: int, width: int = 32) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        c = 3
        for k in range(4):
            out = width * 2 ** min(k, 2)
            layers += [nn.Conv2d(c, out, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(out), nn.ReLU(inplace=True)]
            c = out
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(c, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).mean((2, 3)))


def make_model(kind: str, classes: int) -> tuple[nn.Module, str]:
    if kind in ("auto", "resnet18"):
        try:
            import torchvision

            return torchvision.models.resnet18(num_classes=classes), "resnet18"
        except (ImportError, RuntimeError, OSError) as e:  # absent, or a build not matching this torch
            if kind == "resnet18":
                raise SystemExit(f"--model resnet18 needs a working torchvision: {e}") from None
    return SmallCNN(classes), "small CNN"


# ----------------------------------------------------------------------------- training
def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    reader = open_data(args.data) if args.data else None  # a bad --data fails before any process group
    rank, world, device = setup(args.device)
    torch.manual_seed(args.seed)
    if reader is None:
        reader = open_reader(synthetic_folder(args.synthetic, args.seed, world))
    classes = num_classes(reader, args.num_classes)
    batches: Any = (Baseline(args, reader, device, rank, world) if args.baseline
                    else pixelpipe_batches(args, reader, device, world))

    model, model_name = make_model(args.model, classes)
    model.to(device)
    if args.channels_last:
        model.to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=5e-5)
    step, next_epoch, sums = 0, 0, torch.zeros(3, dtype=torch.float64, device=device)
    if args.resume:
        state = torch.load(args.resume, map_location="cpu", weights_only=False)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        step, next_epoch = state["step"], state["epoch"] + (1 if state["epoch_done"] else 0)
        if args.baseline:  # whole epochs only: an interrupted epoch starts again
            batches.epoch = next_epoch - 1
        else:
            batches.load_state_dict(state["pipelines"][rank])
            if not state["epoch_done"]:
                sums = state["sums"][rank].to(device)  # the interrupted epoch's running totals
        log(rank, f"resumed from {args.resume}: epoch {next_epoch + 1}, step {step}")
    ddp: nn.Module = nn.parallel.DistributedDataParallel(model) if world > 1 else model
    net = torch.compile(ddp) if args.compile else ddp

    source = "baseline (DataLoader + Pillow)" if args.baseline else f"pixelpipe {args.pipeline}"
    log(rank, f"{world} process(es) on {device.type}, {model_name}, {classes} classes, {source}, "
              f"{len(batches)} batches of {args.batch_size} per process and epoch")
    for epoch in range(next_epoch, args.epochs):
        ddp.train()
        start, stopped, seen = time.perf_counter(), False, torch.zeros((), device=device)
        window, window_start = torch.zeros(2, dtype=torch.float64, device=device), start  # loss sum, images
        for batch in batches:
            x, y, valid = batch["image"], batch["label"], batch["valid"]
            if args.channels_last:
                x = x.permute(0, 3, 1, 2)  # an NCHW view with channels_last strides: no copy
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.amp):
                logits = net(x)
            per_sample = F.cross_entropy(logits.float(), y, reduction="none")
            w = valid.to(per_sample.dtype)
            loss = (per_sample * w).sum() / w.sum().clamp_min(1)  # padding rows weigh 0
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            with torch.no_grad():
                correct = (logits.argmax(1) == y).to(w.dtype) * w
                sums += torch.stack([(per_sample.detach() * w).sum(), correct.sum(), w.sum()]).to(sums.dtype)
                seen += w.sum()
                window += torch.stack([(per_sample.detach() * w).sum(), w.sum()]).to(window.dtype)
            step += 1
            if args.log_every > 0 and step % args.log_every == 0:
                if world > 1:  # every process runs the same steps, so all of them get here
                    dist.all_reduce(window)
                win_loss, win_images = window.tolist()
                now = time.perf_counter()
                log(rank, f"step {step}  epoch {epoch + 1}/{args.epochs}  loss {win_loss / max(win_images, 1):.6f}  "
                          f"images/s {win_images / (now - window_start):.1f}")
                window.zero_()
                window_start = now
            if args.max_steps and step >= args.max_steps:
                stopped = True
                break
        done = not stopped or _at_epoch_end(batches)  # stopping on the last batch ends the epoch too
        elapsed = time.perf_counter() - start
        totals = torch.cat([sums, seen.view(1).to(sums.dtype)])
        if world > 1:
            dist.all_reduce(totals)
        loss_sum, correct, count, run_seen = totals.tolist()
        if done:
            log(rank, f"epoch {epoch + 1}/{args.epochs}  loss {loss_sum / max(count, 1):.6f}  "
                      f"accuracy {correct / max(count, 1):.6f}  images/s {run_seen / elapsed:.1f}")
        if args.checkpoint:
            save(args.checkpoint, rank, world, model, opt, batches, step, epoch, done, sums, args.baseline)
        if stopped:
            log(rank, f"stopped at step {step}" + ("" if done else f", in epoch {epoch + 1}")
                + f"  loss {loss_sum / max(count, 1):.6f}  images/s {run_seen / elapsed:.1f}")
            break
        sums.zero_()
    batches.close()  # stop the prefetching threads before the interpreter exits
    if world > 1:
        # every rank reaches the teardown before any closes its connections: a rank that tore
        # down while another was still in gloo's last collective aborted now and then (SIGABRT,
        # "terminate called without an active exception") on a busy 2-core machine
        dist.barrier()
        dist.destroy_process_group()


def _at_epoch_end(batches: Any) -> bool:
    state = batches.state_dict() if hasattr(batches, "state_dict") else None
    return state is not None and state["batches"] >= len(batches)


def save(path: str, rank: int, world: int, model: nn.Module, opt: torch.optim.Optimizer, batches: Any,
         step: int, epoch: int, done: bool, sums: torch.Tensor, baseline: bool) -> None:
    """One file: the model and optimizer (rank 0's, identical on every rank under DDP) and every
    rank's pipeline position and running totals."""
    mine = {"pipeline": None if baseline else batches.state_dict(), "sums": sums.cpu()}
    every = [mine]
    if world > 1:
        every = [None] * world
        dist.all_gather_object(every, mine)
    if rank == 0:
        state = {"model": model.state_dict(), "optimizer": opt.state_dict(), "step": step, "epoch": epoch,
                 "epoch_done": done, "pipelines": [s["pipeline"] for s in every], "sums": [s["sums"] for s in every]}
        tmp = path + ".tmp"
        torch.save(state, tmp)
        os.replace(tmp, path)
    barrier(world)


if __name__ == "__main__":
    sys.exit(main())
