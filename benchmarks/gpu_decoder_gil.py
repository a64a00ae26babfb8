"""GPU decoding beside a Python thread: nvImageCodec through its C API (ctypes, pixelpipe's
default) against its Python binding, each alone and while another thread runs pure Python.

    python benchmarks/gpu_decoder_gil.py [--data DIR] [--batch 256] [--rounds 3]

Prints ms per batch of regions (rn50's random crops) for both and each situation. The binding's
decode takes the GIL back about twice per image, so a busy Python thread stretches it by the
interpreter's switch interval each time; the C API path gives it up for the decode and the
wait only. (Every torch call also gives the GIL up and waits to get it back: beside a busy
thread, code that runs many small torch ops slows down the same way.)
"""

from __future__ import annotations

import threading
import time

import torch
from _common import arguments, read_jpegs


def main() -> None:
    ap = arguments(__doc__)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    from pixelpipe import Compose
    from pixelpipe.decode.gpu import GpuDecoder
    from pixelpipe.engine.sources import EncodedSource
    from pixelpipe.tools.bench.pipelines import pipeline_ops

    blobs = read_jpegs(args.data, args.batch)
    src = EncodedSource(blobs)
    stage = Compose(pipeline_ops("rn50")).stages[0]

    def regions(epoch: int) -> list[tuple[int, int, int, int]]:
        plan = stage.sample(0, epoch, torch.arange(len(blobs)), src.sizes())
        return [tuple(r) for r in plan.regions().tolist()]

    def busy(stop: threading.Event) -> None:
        x = 0
        while not stop.is_set():
            x += 1

    print(f"{len(blobs)} JPEGs from {args.data}, batch {len(blobs)}, {torch.cuda.get_device_name()}")
    print(f"{'api':<8}{'alone (ms)':>12}{'beside busy Python (ms)':>26}")
    for api in ("c", "python"):
        dec = GpuDecoder(torch.device("cuda"), num_cpu_threads=8, roi_decode=True, api=api)
        stream = torch.cuda.current_stream()

        def once(epoch: int, dec: GpuDecoder = dec, stream: torch.cuda.Stream = stream) -> float:
            boxes = regions(epoch)  # planned outside the clock: torch ops give the GIL away too
            t0 = time.perf_counter()
            views, _, _ = dec.decode_views(blobs, boxes, headers=src.jpeg_headers)
            torch.cuda.synchronize()
            views.retire(stream)
            return (time.perf_counter() - t0) * 1e3

        once(0)
        alone = min(once(1 + r) for r in range(args.rounds))
        stop = threading.Event()
        th = threading.Thread(target=busy, args=(stop,))
        th.start()
        beside = min(once(100 + r) for r in range(max(1, args.rounds // 2)))
        stop.set()
        th.join()
        print(f"{api:<8}{alone:>12.1f}{beside:>26.1f}")
        dec.close()


if __name__ == "__main__":
    main()
