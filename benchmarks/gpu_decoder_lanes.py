"""Decoder lanes side by side: nvImageCodec decoders (C API) and libjpeg-turbo threads, each
decoding its own batches continuously on its own thread, alone and in pairs or threes.

    python benchmarks/gpu_decoder_lanes.py [--data DIR] [--batch 256] [--seconds 3] [LABEL ...]

Each lane opens its batches (code streams, images) on its own thread right before decoding
them, so a lone decoder leaves the JPEG engines idle while it opens the next batch; a Pipeline
opens them on its planning thread instead. rn50's random-crop regions; EXIF-rotated and CMYK
files left out. Prints, per setting, every lane's images/s over the same `--seconds` window
(after a warm-up) and their total: whether lanes side by side add throughput beyond one
decoder. LABEL arguments run only the settings whose label contains one of them. Needs CUDA,
nvImageCodec 0.9 and, for the turbo lanes, the turbojpeg wheel.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch
from _common import arguments, rn50_regions

HW = [("HW_GPU_ONLY", None)]
ALL = [("HW_GPU_ONLY", None), ("GPU_ONLY", None), ("HYBRID_CPU_GPU", None)]  # pixelpipe's, hw None
HYBRID = [("HYBRID_CPU_GPU", None)]
SETTINGS: dict[str, list[tuple[str, Any, int]]] = {  # label -> lanes: (kind, backends, threads)
    "one decoder, pixelpipe's backends": [("gpu", ALL, 8)],
    "one decoder, hardware only": [("gpu", HW, 2)],
    "one decoder, hybrid only": [("gpu", HYBRID, 8)],
    "turbo, 8 threads": [("cpu", None, 8)],
    "hardware + turbo 6": [("gpu", HW, 2), ("cpu", None, 6)],
    "hardware + hybrid": [("gpu", HW, 2), ("gpu", HYBRID, 8)],
    "hardware x2": [("gpu", HW, 2), ("gpu", HW, 2)],
    "pixelpipe's backends x2": [("gpu", ALL, 4), ("gpu", ALL, 4)],
    "hardware x3": [("gpu", HW, 2), ("gpu", HW, 2), ("gpu", HW, 2)],
    "hardware x2 + turbo 6": [("gpu", HW, 2), ("gpu", HW, 2), ("cpu", None, 6)],
    "hardware x2 + hybrid": [("gpu", HW, 2), ("gpu", HW, 2), ("gpu", HYBRID, 6)],
}


def main() -> None:
    ap = arguments(__doc__)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("only", nargs="*", help="run only the settings whose label contains one of these")
    args = ap.parse_args()
    from pixelpipe.decode import nvimgcodec_c, turbo

    api = nvimgcodec_c.load()
    if api is None or not torch.cuda.is_available():
        raise SystemExit("needs CUDA and nvImageCodec 0.9 (pip install 'pixelpipe[gpu]')")
    blobs, regions = rn50_regions(args.data, 12)
    n, batch = len(blobs), args.batch

    def work(epoch: int) -> Any:
        box = regions[epoch % 12]
        for k in range(0, n - batch + 1, batch):
            part = box[k:k + batch]
            yield blobs[k:k + batch], part, [(y1 - y0, x1 - x0) for y0, x0, y1, x1 in part]

    def gpu_lane(backends: Any, threads: int, lane: str, state: dict[str, Any]) -> None:
        dec = nvimgcodec_c.CDecoder(api, torch.cuda.current_device(), threads, backends, ":fancy_upsampling=0")
        stream = torch.cuda.Stream()
        for b, r, z in work(0):  # warm-up
            dec.decode(b, r, z, stream)
            stream.synchronize()
        state["ready"].wait()
        epoch = 1
        while not state["stop"].is_set():
            for b, r, z in work(epoch):
                out, _ = dec.decode(b, r, z, stream, dec.open(b, r, z, stream))
                stream.synchronize()
                state["count"][lane] += len(b)
                state["fails"][lane] += sum(isinstance(s, str) for s in out)
                if state["stop"].is_set():
                    break
            epoch += 1
        dec.close()

    def cpu_lane(_: Any, threads: int, lane: str, state: dict[str, Any]) -> None:
        def one(i: int, epoch: int) -> bool:
            return turbo.decode_jpeg_region(blobs[i], regions[epoch % 12][i], 1) is not None

        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(one, range(n), [0] * n))  # warm-up
            state["ready"].wait()
            epoch = 1
            while not state["stop"].is_set():
                for k in range(0, n - batch + 1, batch):
                    ok = list(pool.map(one, range(k, k + batch), [epoch] * batch))
                    state["count"][lane] += len(ok)
                    state["fails"][lane] += ok.count(False)
                    if state["stop"].is_set():
                        break
                epoch += 1

    print(f"{n} JPEGs, batch {batch}, {torch.cuda.get_device_name()}, turbo available: {turbo.available()}")
    for label, lanes in SETTINGS.items():
        if args.only and not any(o in label for o in args.only):
            continue
        names = [f"{j}:{kind}" for j, (kind, _, _) in enumerate(lanes)]
        state: dict[str, Any] = {"stop": threading.Event(), "ready": threading.Event(),
                                 "count": dict.fromkeys(names, 0), "fails": dict.fromkeys(names, 0)}
        threads = [threading.Thread(target=gpu_lane if kind == "gpu" else cpu_lane, args=(be, thr, name, state))
                   for name, (kind, be, thr) in zip(names, lanes)]
        for th in threads:
            th.start()
        time.sleep(4.0)  # the warm-ups
        c0, t0 = dict(state["count"]), time.perf_counter()
        state["ready"].set()
        time.sleep(args.seconds)
        c1, t1 = dict(state["count"]), time.perf_counter()
        state["stop"].set()
        for th in threads:
            th.join()
        rates = {k: (c1[k] - c0[k]) / (t1 - t0) for k in names}
        print(f"{label:36s} total {sum(rates.values()):8,.0f} images/s  "
              + "  ".join(f"{k}={v:,.0f}" for k, v in rates.items()) + f"  failed: {state['fails']}", flush=True)


if __name__ == "__main__":
    main()
