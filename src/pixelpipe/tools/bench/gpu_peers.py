"""`pixelpipe bench --device cuda`: pixelpipe beside DALI, torchvision and kornia on one GPU.

Every contender gets the same encoded images in memory, the same batch size and the same
pipeline (pipelines.py), runs one warm-up pass, then is timed over `passes` passes by
`time_runs` (which draws the progress bar). The GPU is drained (torch.cuda.synchronize())
after the warm-up and once more at the end of the timed passes, inside the clock: no warm-up
work leaks into the timed passes, a clock stops only once the GPU has finished, and the passes
follow each other as a training loop's epochs do (a drain after every pass would cost the fast
contenders the overlap of one pass's last launch with the next pass's host work: with 500
images a pass is two batches).

Two modes:
  full          encoded bytes in, a normalised float16 NCHW batch on the GPU out.
  augment-only  the first `batch` images are decoded once (Pillow, RGB, outside any clock) and
                kept on the GPU; each pass feeds that batch again and again until it has
                produced as many images as a full pass (len(blobs)).

With --cache, two more rows time pixelpipe's later epochs: every image decoded once (untimed)
into pixelpipe.loader.cache.DeviceCache on the device, then augmented from there each pass, by
Compose calls back to back ("gpu cache"), and by a Pipeline with cache="gpu" whose warm-up
pass is its first epoch ("cache, Pipeline": the next batch planned while this one's kernels run).

Peers are imported only when asked for (peer_dali.py, peer_torchvision.py, peer_kornia.py). A
peer that is not installed, or that fails, becomes a row with rate 0 and the reason in its note;
the bench itself never stops for one.
"""

from __future__ import annotations

import gc
import importlib.metadata
import importlib.util
import os
import sys
import traceback
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any

import torch

from ...data.batch import ImageBatch
from ...engine.cuda_queues import VARIABLE
from .batches import augment_spans, decode_head, drainer, head, spans
from .coco_boxes import BoxedData
from .engine_use import open_meter
from .images import write_file_list
from .machine import cpu_model
from .pipelines import pipeline_ops
from .timing import Result, in_rounds, report, time_runs

RunPass = Callable[[int], Iterator[int]]
Factory = Callable[[], RunPass]

# What --peers accepts; "all" is every one. Peers run in this order, pixelpipe first: the
# torchvision DataLoader forks its workers before DALI starts its own threads.
GPU_PEERS = ("torchvision", "kornia", "dali")
# What to install when an import fails (STYLE.md, idea 11): module -> pip package.
INSTALL = {"nvidia": "nvidia-dali-cuda130", "torchvision": "torchvision", "kornia": "kornia", "torchcodec": "torchcodec"}
# Versions shown in the header: short name -> how its distribution's name starts.
PACKAGES = {"torch": "torch", "triton": "triton", "dali": "nvidia-dali-cuda",
            "torchvision": "torchvision", "kornia": "kornia", "nvimgcodec": "nvidia-nvimgcodec"}
NOTE_CHARS = 160  # longest reason kept in a failed row's note (the traceback goes to stderr)


def peer_names(peers: Sequence[str], choices: Sequence[str], what: str, more: str = "or all") -> list[str]:
    """The peers asked for among `choices`, in their order. "all" means every one; an unknown
    name exits, naming the `what` peers there are."""
    names = {p.strip().lower() for p in peers if p.strip()}
    if "all" in names:
        names = set(choices)
    unknown = sorted(names - set(choices))
    if unknown:
        raise SystemExit(f"pixelpipe bench: unknown {what} peer(s) {', '.join(unknown)}; "
                         f"choose from {', '.join(choices)} {more}")
    return [p for p in choices if p in names]


def parse_peers(peers: Sequence[str]) -> list[str]:
    """The GPU peers asked for, in run order. "all" means every one; unknown names exit."""
    return peer_names(peers, GPU_PEERS, "GPU")


# ----------------------------------------------------------------------------- header
def package_versions() -> dict[str, str]:
    """Installed versions of the packages a GPU run depends on; absent ones are left out."""
    found: dict[str, str] = {}
    for dist in importlib.metadata.distributions():
        name = (dist.metadata["Name"] or "").lower().replace("_", "-")
        for short, prefix in PACKAGES.items():
            exact = short in ("torch", "triton", "torchvision", "kornia")
            if (name == prefix if exact else name.startswith(prefix)) and short not in found:
                found[short] = dist.version
    found["torch"] = torch.__version__  # the one imported, whatever pip thinks
    return {k: found[k] for k in PACKAGES if k in found}


def bench_header(pipeline: str, device: str, batch: int, threads: int, passes: int, what: str,
                 augment_only: bool, versions: dict[str, str] | None = None,
                 gpu: str | None = None) -> str:
    """Two lines: the run's settings, then date, GPU (with CUDA's hardware queues), CPU count
    and model, and package versions."""
    versions = package_versions() if versions is None else versions
    dev = torch.device(device)
    if gpu is None:
        gpu = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "no GPU (CPU run)"
    if dev.type == "cuda":  # every contender of the process runs with them
        gpu += f", {VARIABLE}={os.environ.get(VARIABLE, 'unset (8)')}"
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    mode = "augment-only" if augment_only else "full"
    date = datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    return (f"pixelpipe bench: pipeline={pipeline} mode={mode} device={device} batch={batch} "
            f"threads={threads} passes={passes} data={what}\n"
            f"{date} | {gpu} | {cpus} CPUs ({cpu_model()}) | "
            + ", ".join(f"{k} {v}" for k, v in versions.items()))


SHORT_EPOCH = 8  # epochs of fewer batches than this get a note under the header


def short_epoch_note(total: int, batch: int) -> str:
    """A header line when a pass (an epoch) is only a few batches long: a Pipeline pads its
    epoch's last batch with decoded repeats of the epoch's first samples (counted out of the
    rate), and a loader's pipeline refills at each epoch's start, so such a set weighs those
    on the rate more than training on a full dataset does. Empty otherwise."""
    if total <= 0 or batch <= 0 or total >= SHORT_EPOCH * batch:
        return ""
    batches = -(-total // batch)
    padded = batches * batch - total
    return (f"\nnote: an epoch of {total} samples is {batches} batch(es) of {batch}; pixelpipe decodes "
            f"{padded} padding sample(s) per epoch ({padded / total:.0%} more work than counted) and each "
            f"epoch starts its pipeline again: for throughput, use at least {SHORT_EPOCH * batch} samples")


def run_contender(name: str, make: Factory, passes: int, total: int, quiet: bool, note: str,
                  device: torch.device, seconds: float = 0.0, nvdec: bool = False) -> Result:
    """Build a contender (untimed) and time it; a failure becomes a row with rate 0. nvdec:
    measure the video decoders instead of the JPEG engines (engine_use.open_meter). A run
    pass with a `notes` attribute adds what it returns (after the timing) to the row's note."""
    run = None
    try:
        run = make()
        result = time_runs(name, run, passes, total, quiet, note, seconds, drainer(device), open_meter(device, nvdec))
        notes = getattr(run, "notes", None)
        if notes is not None:
            result.note += "".join(f"; {n}" for n in notes())
        stats = getattr(run, "stats", None)  # a Pipeline's: the CPU decoder sets the pace when many
        if stats is not None and stats.cpu_fallback:
            result.note += f"; {stats.cpu_fallback / stats.total:.0%} decoded on the CPU (not JPEGs nvImageCodec takes)"
        decoder = getattr(run, "decoder", lambda: None)()  # the settings its GPU decoder ran with
        if decoder is not None:
            result.note += (f"; nvImageCodec {decoder.api} API, hw_fraction {decoder.hw_fraction}, "
                            f"regions {'on' if decoder.roi_decode else 'off'}, {decoder.lanes} lane(s)")
        return result
    except ImportError as e:
        return Result(name, 0, 0.0, _short(f"not installed ({e}{_install_hint(e)})"))
    except Exception as e:
        print(f"pixelpipe bench: {name} failed:", file=sys.stderr)
        traceback.print_exc(file=sys.stderr)
        return Result(name, 0, 0.0, _short(f"failed: {type(e).__name__}: {e}"))
    finally:
        close = getattr(run, "close", None)
        if close is not None:  # a pipeline working ahead would take the next contender's time
            close()
        # the last references to the contender and its parts (a DALI pipeline stops its threads when freed)
        run = close = notes = stats = decoder = None
        gc.collect()  # drop the contender's pipelines, workers and buffers before the next one
        if device.type == "cuda":
            torch.cuda.empty_cache()


def _install_hint(e: ImportError) -> str:
    top = (e.name or "").split(".")[0]
    return f"; pip install {INSTALL[top]}" if top in INSTALL else ""


def _short(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= NOTE_CHARS else line[: NOTE_CHARS - 3] + "..."


# ----------------------------------------------------------------------------- pixelpipe
def pixelpipe_files(file_list: str, total: int, pipeline: str, batch: int, threads: int,
                    device: torch.device) -> RunPass:
    """The user's path: a Pipeline over a file list, its files read from disk (page cache
    warm after the warm-up pass), one pass = one epoch, shuffled, the last batch padded."""
    return _over_pipeline(file_list, total, pipeline, batch, threads, device, None)


def pixelpipe_full(blobs: Sequence[bytes], pipeline: str, batch: int, threads: int,
                   device: torch.device, cache: bool = False) -> RunPass:
    """The user's path: a Pipeline over the in-memory files (one pass = one epoch, shuffled,
    the last batch padded), prefetching and decoding the next batch while the kernels run.
    With `cache`, the Pipeline's cache is on (cache="gpu" on CUDA, "device" elsewhere): the
    warm-up pass is its first epoch, which decodes every image whole into the cache, and the
    timed passes are later epochs, planning the next batch while this one's kernels run."""
    from ...readers import Memory

    where = ("gpu" if device.type == "cuda" else "device") if cache else None
    return _over_pipeline(Memory(list(blobs)), len(blobs), pipeline, batch, threads, device, where)


def _over_pipeline(source: Any, total: int, pipeline: str, batch: int, threads: int, device: torch.device,
                   cache: str | None) -> RunPass:
    """One pass = one epoch of a Pipeline over `source` (`total` samples)."""
    from ...compose import Compose
    from ...loader.pipeline import Pipeline

    t = Compose(pipeline_ops(pipeline), dtype=torch.float16)
    pipe = Pipeline(source, t, batch, device=str(device), num_threads=threads, prefetch=2, cache=cache)

    def run(epoch: int) -> Iterator[int]:
        # the valid samples of each batch, counted on the host: every batch is full but the
        # last, padded one (no sample fails here); b["valid"].sum() would wait for the GPU
        # once per batch, which no peer's loop does
        left = total
        for _ in pipe:
            k = min(batch, left)
            left -= k
            yield k

    run.close = pipe.close  # type: ignore[attr-defined]
    run.stats = pipe.stats  # type: ignore[attr-defined]
    run.decoder = lambda: pipe.engine.gpu_decoder(device) if device.type == "cuda" else None  # type: ignore[attr-defined]
    return run


def pixelpipe_augment(images: ImageBatch, total: int, pipeline: str, threads: int,
                      device: torch.device) -> RunPass:
    from ...compose import Compose
    from ...engine import Engine

    t = Compose(pipeline_ops(pipeline), dtype=torch.float16)
    engine = Engine(device, num_threads=threads)
    plan = augment_spans(total, images)
    heads = {k: head(images, k) for _, k in plan}

    def run(epoch: int) -> Iterator[int]:
        for start, k in plan:  # distinct indices, so a repeated image gets new draws
            out = t(heads[k], seed=0, epoch=epoch, indices=torch.arange(start, start + k), engine=engine)
            yield out.shape[0]

    run.close = engine.close  # type: ignore[attr-defined]
    return run


def pixelpipe_cached(blobs: Sequence[bytes], pipeline: str, batch: int, threads: int,
                     device: torch.device) -> RunPass:
    """Later epochs from pixelpipe.loader.cache.DeviceCache: every image decoded whole once (untimed,
    as a Pipeline's first epoch does), stored on the device, then augmented from there."""
    from ...compose import Compose
    from ...decode import decode_region
    from ...engine import Engine
    from ...loader.cache import DeviceCache

    t = Compose(pipeline_ops(pipeline), dtype=torch.float16)
    engine = Engine(device, num_threads=threads)
    with ThreadPoolExecutor(threads) as pool:
        decoded = list(pool.map(lambda b: torch.from_numpy(decode_region(b, rgb=False)[0]), blobs))
    cache = DeviceCache(device, budget=max(1, sum(img.numel() for img in decoded)))
    for i, img in enumerate(decoded):
        cache.put(i, img)
    del decoded

    def run(epoch: int) -> Iterator[int]:
        for start, k in spans(len(blobs), batch):
            idx = torch.arange(start, start + k)
            out = t(cache.batch(idx.numpy()), seed=0, epoch=epoch, indices=idx, engine=engine)
            yield out.shape[0]

    run.close = engine.close  # type: ignore[attr-defined]
    return run


# ----------------------------------------------------------------------------- the contenders
Row = tuple[str, Factory, str]  # (row name, factory, note)


def contenders(blobs: Sequence[bytes], pipeline: str, device: torch.device, batch: int,
               threads: int, peers: Sequence[str], augment_only: bool,
               images: ImageBatch | None = None, cache: bool = False,
               files: Sequence[str] | None = None) -> list[Row]:
    """pixelpipe, its cached epochs (with `cache`, when pixelpipe.loader.cache exists) and each
    asked-for peer, in run order. Augment-only needs `images`, the decoded batch on the device
    (decode_head). With `files` (the paths of `blobs`), pixelpipe's and DALI's first rows read
    those files from disk, the way users run them; the in-memory rows follow."""
    from . import peer_dali, peer_kornia, peer_torchvision

    total = len(blobs)
    if augment_only:
        if images is None:
            raise ValueError("augment-only contenders need the decoded batch (decode_head)")
        rows: list[Row] = [
            ("pixelpipe", lambda: pixelpipe_augment(images, total, pipeline, threads, device),
             "Compose on the decoded batch")]
        table: dict[str, list[Row]] = {
            "torchvision": [("torchvision", lambda: peer_torchvision.gpu_augment(
                images, total, pipeline, device), "v2 per image on the GPU")],
            "kornia": [("kornia", lambda: peer_kornia.kornia_augment(
                images, total, pipeline, device), "pre-resized to 256x256 outside the clock")],
            "dali": [("dali", lambda: peer_dali.dali_augment(
                images, total, pipeline, threads, device), "external_source of GPU images")],
        }
    else:
        rows = [("pixelpipe", lambda: pixelpipe_full(blobs, pipeline, batch, threads, device),
                 f"Pipeline(device={device}), {threads} threads")]
        workers = os.cpu_count() or threads  # the CPU loader as users run it: one worker per core
        table = {
            "torchvision": [
                ("torchvision", lambda: peer_torchvision.gpu_full(blobs, pipeline, batch, device),
                 "nvJPEG batch decode, v2 per image"),
                ("torchvision cpu dataloader", lambda: peer_torchvision.cpu_loader(
                    blobs, pipeline, batch, workers, device),
                 f"PIL + v2, {workers} workers (one per core), pinned copy")],
            "kornia": [("kornia", lambda: peer_kornia.kornia_full(blobs, pipeline, batch, device),
                        "nvJPEG decode, resize to 256x256, kornia batch")],
            "dali": [("dali", lambda: peer_dali.dali_full(blobs, pipeline, batch, threads, device),
                      f"mixed decoder, {threads} threads")],
        }
    if files and not augment_only:
        listed = write_file_list(files)
        rows.insert(0, ("pixelpipe (files)", lambda: pixelpipe_files(listed, total, pipeline, batch, threads, device),
                        f"Pipeline over a file list, {threads} threads, files read from disk (page cache warm)"))
        rows[1] = ("pixelpipe (memory)",) + rows[1][1:]
        table["dali"].insert(0, ("dali (files)", lambda: peer_dali.dali_files(listed, total, pipeline, batch, threads,
                                                                             device),
                                 f"fn.readers.file over the same list, mixed decoder, {threads} threads"))
        table["dali"][1] = ("dali (memory)",) + table["dali"][1][1:]
    if cache:
        rows.append(("pixelpipe (gpu cache)", lambda: pixelpipe_cached(
            blobs, pipeline, batch, threads, device), "epochs 2+: DeviceCache, whole images"))
        rows.append(("pixelpipe (cache, Pipeline)", lambda: pixelpipe_full(
            blobs, pipeline, batch, threads, device, cache=True), "epochs 2+: Pipeline(cache=...), overlapped"))
    for peer in parse_peers(peers):
        rows += table[peer]
    return rows


def run_gpu_bench(blobs: Sequence[bytes], what: str, pipeline: str, device: str, batch: int,
                  threads: int, peers: Sequence[str], passes: int, as_json: bool, quiet: bool,
                  augment_only: bool = False, cache: bool = False, rounds: int = 1,
                  seconds: float = 0.0, files: Sequence[str] | None = None,
                  boxed: BoxedData | None = None) -> list[Result]:
    """Time pixelpipe and the asked-for peers on `device`; print a table (or JSON).

    Args:
        blobs: encoded images, in memory. what: how to describe them in the header.
        pipeline: "rn50", "rich" or "val" (pipelines.py). device: "cuda" or "cuda:N" (a CPU
            device works too, for tests). batch: images per batch. threads: CPU threads for
            every contender (decoding threads, DALI threads, DataLoader workers).
        peers: names from GPU_PEERS, or "all". passes: timed passes after one warm-up.
        augment_only: time the transforms on an already decoded batch on the GPU.
        cache: also time pixelpipe's later epochs from its device cache (pixelpipe.loader.cache).
        rounds: every contender built and timed once per round, the order reversed every
            other round; each one's median round is reported (runner.in_rounds).
        seconds: passes go on until a contender ran this long (timing.time_runs).
        files: the paths `blobs` were read from: pixelpipe and DALI also read them from disk.
        boxed: the samples' boxes and labels (coco_boxes.py; `blobs` are its images): the
            contenders of boxed_rows.py (the ssd pipeline, or pixelpipe's rows carrying them).
    """
    names = parse_peers(peers)  # exit on a bad name before any work
    dev = torch.device(device)
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    total = len(blobs)
    images = decode_head(blobs, batch, dev) if augment_only else None
    header = bench_header(pipeline, str(dev), batch, threads, passes, what, augment_only)
    if not augment_only:
        header += short_epoch_note(total, batch)
    if rounds > 1 or seconds:
        header += f"\nrounds={rounds}, at least {seconds:g} s per contender and round"
    if images is not None:
        header += (f"\naugment-only: the first {len(images)} images decoded once (RGB), "
                   f"repeated to {total} per pass")
    if boxed is not None:
        from .boxed_rows import boxed_contenders

        def over(source: Any, k: int) -> RunPass:
            return _over_pipeline(source, k, pipeline, batch, threads, dev, None)

        rows = boxed_contenders(boxed, pipeline, dev, batch, threads, names, over)
    else:
        rows = contenders(blobs, pipeline, dev, batch, threads, names, augment_only, images, cache, files)
    jobs = [lambda row=row: run_contender(row[0], row[1], passes, total, quiet, row[2], dev, seconds) for row in rows]
    results, per_round = in_rounds(jobs, rounds)
    report(results, per_round, header, as_json, {"versions": package_versions()})
    return results
