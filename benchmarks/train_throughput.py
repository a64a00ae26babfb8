"""Training throughput with each data loader: what users of a loader actually get.

A torchvision ResNet (channels_last, bf16 autocast, SGD with momentum, batch 256) trains on one
GPU for --steps steps after --warmup steps, fed by:

- synthetic: one batch already on the GPU, reused (the upper bound: no loader at all);
- pixelpipe: `pp.Pipeline(file_list, pp.presets.imagenet_train(dtype=torch.float16), ...)` as
  the README shows it (files read from disk, default threads unless --threads);
- dali: fn.readers.file over the same list + fn.decoders.image_random_crop ("mixed") +
  fn.resize + fn.crop_mirror_normalize (float16), --dali-threads threads;
- torchvision: a DataLoader over the same files, PIL decode + v2 RandomResizedCrop, flip,
  ToDtype, Normalize, --workers workers, pinned memory, copied to the GPU in the loop.

For each it prints training images/s, its share of the synthetic bound, the share of the timed
steps' wall time the loop spent waiting for its next batch (host time in next(), which is also
where the GPU-side wait of a loader that is behind shows up once the CUDA queue drains), and
the loader alone (images/s with no model, same loader settings).

pixelpipe is imported first, as a training script that uses it imports it: it asks CUDA for 32
hardware queues (CUDA_DEVICE_MAX_CONNECTIONS, pixelpipe.engine.cuda_queues) before CUDA starts,
for the whole process, so every loader's rows run with them; set the variable in the
environment (8 is CUDA's default) to run them otherwise. The first line prints the value.

--sched sets how the process's threads wait for the GPU (cudaSetDeviceFlags on the device once
CUDA has started: spin, yield or blocking; CUDA's default, auto, spins where the process has
fewer contexts than the machine has cores). nvImageCodec's decoder threads and the Pipeline's
wait on events; spinning, they call into the driver the training thread launches through.

Usage (one GPU):
    python benchmarks/train_throughput.py --data DIR [--models resnet50,resnet18]
        [--loaders synthetic,pixelpipe,dali,torchvision] [--repeat 16] [--steps 300]
DIR: a folder of JPEGs (flat or class folders); its files are listed `--repeat` times into one
file list, so that an epoch is long enough not to restart every few batches.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import itertools
import os
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from _common import add_gpu_decoding, file_list, gpu_decoding

import pixelpipe  # noqa: F401  (before CUDA starts, as in a training script: see the docstring)

BATCH = 256
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def endless(make_epoch: Callable[[], Iterator[torch.Tensor]]) -> Iterator[torch.Tensor]:
    while True:
        yield from make_epoch()


# ----------------------------------------------------------------------------- loaders
Loader = tuple[Iterator[torch.Tensor], Callable[[], None]]  # batches, and how to stop the loader


def synthetic_loader(args: argparse.Namespace, listed: str) -> Loader:
    x = torch.randn(BATCH, 3, 224, 224, device="cuda").to(torch.float16)
    return endless(lambda: iter([x])), lambda: None


def pixelpipe_loader(args: argparse.Namespace, listed: str) -> Loader:
    import pixelpipe as pp

    pipe = pp.Pipeline(listed, pp.presets.imagenet_train(dtype=torch.float16), batch_size=BATCH, device="cuda",
                       seed=0, drop_last=True, num_threads=args.threads, gpu=gpu_decoding(args),
                       prefetch=args.prefetch)

    def stop() -> None:
        if pipe.engine.gpu.follows_consumer:
            first, second = pipe.engine.lanes.counts
            print(f"pixelpipe: {second} of {first + second} batches planned ahead of the loop, on the second "
                  f"decoder (share {pipe.engine.gpu.ahead_fraction})", flush=True)
        pipe.close()

    return endless(lambda: (b["image"] for b in pipe)), stop


def dali_loader(args: argparse.Namespace, listed: str) -> Loader:
    from nvidia.dali import fn, pipeline_def, types
    from nvidia.dali.plugin.pytorch import DALIGenericIterator

    @pipeline_def(batch_size=BATCH, num_threads=args.dali_threads, device_id=torch.cuda.current_device())
    def pipe():  # type: ignore[no-untyped-def]
        jpegs, _ = fn.readers.file(file_list=listed, random_shuffle=True, name="files")
        images = fn.decoders.image_random_crop(jpegs, device="mixed", output_type=types.RGB,
                                               random_area=(0.08, 1.0), random_aspect_ratio=(3 / 4, 4 / 3))
        images = fn.resize(images, resize_x=224, resize_y=224)
        return fn.crop_mirror_normalize(images, dtype=types.FLOAT16, output_layout="CHW",
                                        mean=[255 * m for m in MEAN], std=[255 * s for s in STD],
                                        mirror=fn.random.coin_flip(probability=0.5))

    p = pipe()
    p.build()
    it = DALIGenericIterator([p], ["images"], reader_name="files", auto_reset=True)
    refs = [p, it]
    return endless(lambda: (b[0]["images"] for b in refs[1])), refs.clear


def torchvision_loader(args: argparse.Namespace, listed: str) -> Loader:
    from PIL import Image
    from torchvision.transforms import v2

    paths = [line.split()[0] for line in open(listed)]
    t = v2.Compose([v2.PILToTensor(), v2.RandomResizedCrop(224, antialias=True), v2.RandomHorizontalFlip(),
                    v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)])

    class Files(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return len(paths)

        def __getitem__(self, i: int) -> torch.Tensor:
            return t(Image.open(paths[i]).convert("RGB"))

    loader = torch.utils.data.DataLoader(Files(), batch_size=BATCH, shuffle=True, num_workers=args.workers,
                                         pin_memory=True, drop_last=True, persistent_workers=True, prefetch_factor=4)
    batches = endless(lambda: (x.to("cuda", non_blocking=True).to(torch.float16) for x in loader))
    return batches, lambda: loader._iterator._shutdown_workers() if loader._iterator is not None else None


LOADERS = {"synthetic": synthetic_loader, "pixelpipe": pixelpipe_loader, "dali": dali_loader,
           "torchvision": torchvision_loader}


# ----------------------------------------------------------------------------- timing
def isolate_main() -> str:
    """Pin this thread (the training loop's) to the first CPU it may use and every other thread
    of the process to the CPUs that share no physical core with it: whether the loader's threads
    slow the loop by sharing its core (SMT siblings, caches) rather than by the GIL."""
    import threading

    cpus = sorted(os.sched_getaffinity(0))
    main_cpu = cpus[0]
    siblings = {main_cpu}
    try:
        with open(f"/sys/devices/system/cpu/cpu{main_cpu}/topology/thread_siblings_list") as f:
            for part in f.read().strip().split(","):
                a, _, b = part.partition("-")
                siblings.update(range(int(a), int(b or a) + 1))
    except OSError:
        pass
    others = set(cpus) - siblings
    me = threading.get_native_id()
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), {main_cpu} if int(tid) == me else others)
        except OSError:
            pass
    return f"loop on CPU {main_cpu}, {len(others)} CPUs for the other threads (siblings {sorted(siblings)} kept free)"


def training_step(model_name: str, cuda_graph: bool = False) -> Callable[[torch.Tensor], None]:
    """One SGD step of a torchvision model (channels_last, bf16 autocast) on a batch of BATCH.
    cuda_graph: the whole step (forward, backward, optimiser) captured once in a CUDA graph on
    the first batch and replayed after copying each batch into its input, as PyTorch's CUDA
    graphs notes capture a whole network: the host issues one launch a step instead of hundreds."""
    import torchvision

    model = getattr(torchvision.models, model_name)(num_classes=1000).cuda().to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    target = torch.randint(0, 1000, (BATCH,), device="cuda")
    loss_fn = torch.nn.CrossEntropyLoss()

    def step(x: torch.Tensor) -> None:
        with torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=not cuda_graph):
            loss = loss_fn(model(x.contiguous(memory_format=torch.channels_last)), target)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    if not cuda_graph:
        return step
    held: dict[str, Any] = {}

    def replayed(x: torch.Tensor) -> None:
        if not held:  # capture on the first batch: warm-up steps on a side stream, then the graph
            static = x.clone()
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(3):
                    step(static)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            opt.zero_grad(set_to_none=True)
            with torch.cuda.graph(graph):
                with torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=False):
                    loss = loss_fn(model(static.contiguous(memory_format=torch.channels_last)), target)
                loss.backward()
                opt.step()
            held.update(graph=graph, input=static)
        held["input"].copy_(x)
        held["graph"].replay()

    return replayed


def train(model_name: str, batches: Iterator[torch.Tensor], warmup: int, steps: int,
          pin_main: bool = False, step_times: bool = False, cuda_graph: bool = False,
          train_stream: bool = False) -> tuple[float, float]:
    """(training images/s, share of wall time waiting in next()) over `steps` timed steps.
    train_stream: the loop (next() included, so the loader's batch is handed to it) on a
    stream of its own instead of the legacy default stream."""
    if train_stream:
        with torch.cuda.stream(torch.cuda.Stream()):
            return train(model_name, batches, warmup, steps, pin_main, step_times, cuda_graph)
    t = timed_steps(training_step(model_name, cuda_graph), batches, warmup, steps, pin_main)
    if step_times:  # the GPU's time from a step's first launch to its last kernel's end
        host, gpu = t.issue_ms, t.gpu_ms
        print(f"    per step, median (p90): host issuing {host[len(host) // 2]:.2f} ({host[9 * len(host) // 10]:.2f}) ms, "
              f"GPU {gpu[len(gpu) // 2]:.2f} ({gpu[9 * len(gpu) // 10]:.2f}) ms, wall {t.wall_ms:.2f} ms",
              flush=True)
    return t.rate, t.waited


@dataclass
class Timed:
    """A run of training steps: images/s, the share of wall time waiting in next(), each step's
    host time issuing it, GPU time and the training thread's CPU time meanwhile (ms, sorted),
    and the wall time per step (ms)."""

    rate: float
    waited: float
    issue_ms: list[float]
    gpu_ms: list[float]
    wall_ms: float
    cpu_ms: list[float]


def timed_steps(step: Callable[[torch.Tensor], None], batches: Iterator[torch.Tensor], warmup: int, steps: int,
                pin_main: bool = False) -> Timed:
    """`step` on `warmup` batches, then `steps` timed ones (next() timed apart, CUDA events
    around each step)."""
    for _ in range(warmup):
        step(next(batches))
    torch.cuda.synchronize()
    if pin_main:  # after the warm-up: the loader's threads (and their pools) exist by now
        print(f"    {isolate_main()}", flush=True)
    waited = 0.0
    issue: list[float] = []  # host seconds to issue each step (its launches), next() excluded
    cpu: list[float] = []  # the calling thread's CPU seconds meanwhile
    marks = [torch.cuda.Event(enable_timing=True) for _ in range(2 * steps)]
    t0 = time.perf_counter()
    for k in range(steps):
        w = time.perf_counter()
        x = next(batches)
        waited += time.perf_counter() - w
        marks[2 * k].record()
        h, c = time.perf_counter(), time.thread_time()
        step(x)
        issue.append(time.perf_counter() - h)
        cpu.append(time.thread_time() - c)
        marks[2 * k + 1].record()
    torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    return Timed(steps * BATCH / wall, waited / wall, sorted(1e3 * v for v in issue),
                 sorted(a.elapsed_time(b) for a, b in zip(marks[::2], marks[1::2])), 1e3 * wall / steps,
                 sorted(1e3 * v for v in cpu))


def train_beside(model: str, batches: Iterator[torch.Tensor], args: argparse.Namespace) -> tuple[float, float]:
    """train() on the synthetic batch while another thread draws `batches` and drops them."""
    import threading

    done = threading.Event()

    def drain() -> None:
        while not done.is_set():
            next(batches)

    drainer = threading.Thread(target=drain, name="background-loader", daemon=True)
    drainer.start()
    try:
        return train(model, synthetic_loader(args, "")[0], args.warmup, args.steps, args.pin_main, args.step_times,
                     args.cuda_graph, args.train_stream)
    finally:
        done.set()
        drainer.join()


def loader_alone(batches: Iterator[torch.Tensor], warmup: int, steps: int) -> float:
    for _ in range(warmup):
        next(batches)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        next(batches)
    torch.cuda.synchronize()
    return steps * BATCH / (time.perf_counter() - t0)


def gil_breaks(every: int) -> None:
    """An experiment: give the GIL up (time.sleep(0)) every `every` calls of the per-sample
    Python of a Pipeline's planning thread (the GPU decoder's plan_job and slot_row, the
    reading's Item), through wrappers, so that its stretches between releases last about
    `every` samples instead of a batch's loop. training_tax.py --kind python kept the loop's
    pace with 100 us stretches of another thread where 1 ms stretches of as much Python cost it
    a quarter: whether a Pipeline's stretches do the same."""
    from pixelpipe.decode import gpu
    from pixelpipe.loader import reading

    calls = itertools.count()

    def pause() -> None:
        if next(calls) % every == every - 1:
            time.sleep(0)

    def paused(f: Callable[..., Any]) -> Callable[..., Any]:
        def call(*a: Any, **k: Any) -> Any:
            pause()
            return f(*a, **k)
        return call

    gpu.plan_job, gpu.slot_row = paused(gpu.plan_job), paused(gpu.slot_row)

    class Item(reading.Item):
        def __init__(self, *a: Any, **k: Any) -> None:
            pause()
            super().__init__(*a, **k)

    reading.Item = Item


SCHED = {"auto": 0, "spin": 1, "yield": 2, "blocking": 4}  # cudaDeviceSchedule*


def set_sched(name: str) -> None:
    """cudaSetDeviceFlags(cudaDeviceSchedule<name>) on the current device, after CUDA started
    (recent runtimes overwrite an initialised device's flags); exits if the runtime refuses."""
    from pixelpipe.decode import cudart

    rt = cudart.runtime()
    if rt is None:
        raise SystemExit("--sched: no CUDA runtime found")
    status = rt.cudaSetDeviceFlags(ctypes.c_uint(SCHED[name]))
    if status != 0:
        raise SystemExit(f"--sched {name}: cudaSetDeviceFlags returned {status}")
    flags = ctypes.c_uint(0)
    rt.cudaGetDeviceFlags(ctypes.byref(flags))
    print(f"    device flags now {flags.value:#x} (--sched {name})", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True)
    ap.add_argument("--models", default="resnet50,resnet18")
    ap.add_argument("--loaders", default="synthetic,pixelpipe,dali,torchvision")
    ap.add_argument("--repeat", type=int, default=16, help="times the folder's files are listed")
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--alone-steps", type=int, default=100, help="steps of the loader alone")
    ap.add_argument("--threads", type=int, default=None, help="pixelpipe's threads (default: its own)")
    ap.add_argument("--prefetch", type=int, default=2, help="pixelpipe's prefetch (batches made ahead)")
    ap.add_argument("--dali-threads", type=int, default=8)
    ap.add_argument("--workers", type=int, default=16, help="torchvision DataLoader workers")
    add_gpu_decoding(ap)
    ap.add_argument("--step-times", action="store_true",
                    help="print each run's median host time issuing a step and GPU time of a step (CUDA events)")
    ap.add_argument("--pin-main", action="store_true",
                    help="after the warm-up, the training loop's thread alone on one physical core (isolate_main)")
    ap.add_argument("--background", action="store_true",
                    help="train on the synthetic batch while each loader runs on another thread, its batches "
                         "dropped: how much a running loader slows the step, apart from waiting for its data")
    ap.add_argument("--cuda-graph", action="store_true",
                    help="capture the training step in a CUDA graph (one launch a step): how much of the "
                         "loss beside a loader is the host issuing the step's launches")
    ap.add_argument("--train-stream", action="store_true",
                    help="run the training loop on a stream of its own (not the legacy default stream, which "
                         "waits for and holds up every blocking stream of the process)")
    ap.add_argument("--switch-interval", type=float, default=None,
                    help="sys.setswitchinterval for this process, seconds (Python's default: 0.005)")
    ap.add_argument("--sched", choices=sorted(SCHED), default=None,
                    help="how the process's threads wait for the GPU (cudaSetDeviceFlags; CUDA's default: auto)")
    ap.add_argument("--gil-breaks", type=int, default=None,
                    help="an experiment: the Pipeline's planning thread gives the GIL up every N samples (gil_breaks)")
    ap.add_argument("--gc", choices=("on", "freeze", "off"), default="on",
                    help="Python's garbage collector: on (default), freeze (gc.freeze() once each loader exists: "
                         "later collections skip its objects), off (gc.disable() for the run)")
    args = ap.parse_args()
    if args.gil_breaks is not None:
        gil_breaks(args.gil_breaks)
    if args.gc == "off":
        gc.disable()
    if args.switch_interval is not None:
        sys.setswitchinterval(args.switch_interval)
    if args.sched is not None:
        set_sched(args.sched)
    torch.backends.cudnn.benchmark = True
    listed, n = file_list(args.data, args.repeat)
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, {os.cpu_count()} CPUs; {n} samples "
          f"({args.repeat}x {args.data}), batch {BATCH}, {args.steps} steps after {args.warmup}, "
          f"CUDA_DEVICE_MAX_CONNECTIONS={os.environ.get('CUDA_DEVICE_MAX_CONNECTIONS', 'unset (8)')}", flush=True)
    rows = []
    for model in args.models.split(","):
        bound = None
        for name in args.loaders.split(","):
            try:
                batches, stop = LOADERS[name](args, listed)
                if args.gc == "freeze":
                    gc.freeze()
                if args.background and name != "synthetic":
                    rate, wait = train_beside(model, batches, args)
                else:
                    rate, wait = train(model, batches, args.warmup, args.steps, args.pin_main, args.step_times,
                                       args.cuda_graph, args.train_stream)
                stop()
                alone = float("nan")
                if name != "synthetic":
                    batches, stop = LOADERS[name](args, listed)
                    alone = loader_alone(batches, 10, args.alone_steps)
                    stop()
                del batches
                gc.collect()
                torch.cuda.empty_cache()
            except Exception as e:  # a missing peer is a row, not the end of the run
                print(f"{model} {name}: failed: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
                continue
            bound = rate if name == "synthetic" else bound
            share = rate / bound if bound else float("nan")
            rows.append((model, name, rate, share, wait, alone))
            print(f"{model:9s} {name:12s} train {rate:9,.0f} img/s  {share:5.2f} of synthetic  "
                  f"waiting {100 * wait:5.1f}%  loader alone {alone:9,.0f} img/s", flush=True)
    print("\n| model | loader | training images/s | of synthetic | time waiting for data | loader alone, images/s |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    for model, name, rate, share, wait, alone in rows:
        alone_s = "" if alone != alone else f"{alone:,.0f}"
        print(f"| {model} | {name} | {rate:,.0f} | {share:.2f} | {100 * wait:.1f}% | {alone_s} |")


if __name__ == "__main__":
    main()
