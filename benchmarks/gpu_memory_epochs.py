"""GPU memory of a Pipeline over epochs: does it grow, and does close() give it back?

    python benchmarks/gpu_memory_epochs.py [--data DIR] [--pipelines rn50,rich] [--epochs 5] [--repeat 1] [--cache] [--dali]
        [--sleep SECONDS] [--ahead-fraction off|none|F] [--hw-fraction F]

Issue 4 asks for the peak after epoch 1 and after epoch 5 within 1%. A Pipeline's memory has
two owners: torch's caching allocator (the kernels' outputs and buffers) and nvImageCodec's
decoders, which allocate through pixelpipe's own pool (decode/nvimgcodec_alloc.py), outside
torch. So each epoch's row shows torch's peak allocated and reserved bytes and the device's
used memory (cudaMemGetInfo: every allocation of the process, nvImageCodec's included, and
of any other process on the GPU), all since the pipeline started; then the same after
close() and torch.cuda.empty_cache(). The last columns are nvImageCodec's pool (its decoders'
buffers): what it holds now, and the most its allocations used at once since the process began.
After each pipeline, the calls nvImageCodec has made to pixelpipe's allocators so far, by kind
(device frees on the legacy default stream apart: see decode/nvimgcodec_alloc.py).
--dali runs DALI's pipeline of the same name (pixelpipe.tools.bench's peer, 8 threads) over the same
epochs in the same process afterwards: only the device's used memory applies to it (DALI
allocates through its own pools, outside torch), from before its pipeline is built.
Batch 256, 8 threads, float16 NCHW, as `pixelpipe bench`. --repeat k lists the files k times (as samples of their own, with their own random
crops): the peak is the largest batch's buffers so far, a running maximum over random region
sizes, so an epoch of two batches has not met its largest one yet. --sleep S: the consumer
waits S seconds after each batch (a training step), so that the Pipeline runs ahead of it (and
a decoder that follows its consumer, GpuDecoding(ahead_fraction=...), decodes on its second
decoder). Needs CUDA (and nvImageCodec for the GPU decoder).
"""

from __future__ import annotations

import gc
import time

import torch
from _common import add_gpu_decoding, arguments, gpu_decoding, read_jpegs

MIB = 2**20


def used() -> int:
    free, total = torch.cuda.mem_get_info()
    return total - free


def settle() -> None:
    """Free what the last pipeline left: its Python objects, its queued work, torch's cached blocks."""
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()


def pool() -> str:
    from pixelpipe.decode.nvimgcodec_alloc import pool_usage

    usage = pool_usage(torch.cuda.current_device())
    return f"{'-':>17s}{'-':>11s}" if usage is None else f"{usage[0] / MIB:17.1f}{usage[1] / MIB:11.1f}"


def allocator_calls() -> str:
    """The process's calls of each kind to nvImageCodec's allocators (decode.nvimgcodec_alloc.counts)."""
    from pixelpipe.decode.nvimgcodec_alloc import counts

    made = counts()
    return "none made" if made is None else ", ".join(f"{k} {v}" for k, v in made.items())


def main() -> None:
    ap = arguments(__doc__)
    ap.add_argument("--pipelines", default="rn50,rich")
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--cache", action="store_true", help='Pipeline(cache="gpu")')
    ap.add_argument("--repeat", type=int, default=1, help="list the files this many times")
    ap.add_argument("--dali", action="store_true", help="DALI's pipelines too (device memory only)")
    ap.add_argument("--sleep", type=float, default=0.0, help="seconds the consumer waits after each batch")
    add_gpu_decoding(ap)
    args = ap.parse_args()
    if args.epochs < 1:
        raise SystemExit("--epochs must be >= 1")
    import pixelpipe as pp
    from pixelpipe.readers import Memory
    from pixelpipe.tools.bench.pipelines import pipeline_ops

    blobs = read_jpegs(args.data) * args.repeat
    print(f"{len(blobs)} JPEGs, batch 256, {torch.cuda.get_device_name()}; MiB")
    print(f"{'pipeline':10s}{'epoch':>7s}{'torch peak':>12s}{'reserved':>10s}{'device used':>13s}"
          f"{'nvimgcodec pool':>17s}{'pool peak':>11s}")
    for name in args.pipelines.split(","):
        settle()
        torch.cuda.reset_peak_memory_stats()
        before = used()
        pipe = pp.Pipeline(Memory(list(blobs)), pp.Compose(pipeline_ops(name), dtype=torch.float16), 256,
                           device="cuda", num_threads=8, prefetch=2, cache="gpu" if args.cache else None,
                           gpu=gpu_decoding(args))
        peaks = []
        for epoch in range(1, args.epochs + 1):
            for batch in pipe:
                del batch  # the last batch is not kept past the epoch
                time.sleep(args.sleep)
            torch.cuda.synchronize()
            peaks.append(torch.cuda.max_memory_allocated())
            print(f"{name:10s}{epoch:7d}{peaks[-1] / MIB:12.1f}{torch.cuda.memory_reserved() / MIB:10.1f}"
                  f"{(used() - before) / MIB:13.1f}{pool()}")
        pipe.close()
        del pipe
        settle()
        print(f"{name:10s}{'closed':>7s}{torch.cuda.memory_allocated() / MIB:12.1f}"
              f"{torch.cuda.memory_reserved() / MIB:10.1f}{(used() - before) / MIB:13.1f}{pool()}")
        print(f"  torch peak, epoch {args.epochs} / epoch 1: {peaks[-1] / peaks[0]:.4f}")
        print(f"  nvImageCodec's calls to pixelpipe's allocators so far: {allocator_calls()}")
    if args.dali:
        for name in args.pipelines.split(","):
            dali_epochs(blobs, name, args.epochs)


def dali_epochs(blobs: list[bytes], name: str, epochs: int) -> None:
    """DALI's `name` pipeline over `epochs` epochs of `blobs`: the device's used memory."""
    from pixelpipe.tools.bench.peer_dali import dali_full

    settle()
    before = used()
    run = dali_full(blobs, name, 256, 8, torch.device("cuda"))
    sizes = []
    for epoch in range(1, epochs + 1):
        for _ in run(epoch):
            pass
        torch.cuda.synchronize()
        sizes.append(used() - before)
        print(f"{'dali ' + name:10s}{epoch:7d}{'-':>12s}{'-':>10s}{sizes[-1] / MIB:13.1f}")
    print(f"  DALI device used, epoch {epochs} / epoch 1: {sizes[-1] / sizes[0]:.4f}")


if __name__ == "__main__":
    main()
