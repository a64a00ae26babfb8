"""torchcodec + torchvision v2 on the GPU for the video bench (`pixelpipe bench --pipeline video
--peers torchcodec`): what a training script does with PyTorch's own video decoder and
transforms, no video loader.

Per video, on a thread pool (a decoder per file, as torchcodec's examples do; every video of the
epoch handed to the pool at once, as pixelpipe's prefetching keeps its threads busy):
`torchcodec.decoders.VideoDecoder(path, device="cuda")` (decoding on NVDEC, torchcodec's default
CUDA backend; `seek_mode="approximate"`, so opening a file does not scan it), a clip start drawn
anywhere the whole clip fits, `get_frames_at` the clip's frames ([T, 3, H, W] uint8 on the
device); then torchvision v2 on the clip tensor (one call per clip, so its frames share one
RandomResizedCrop window and one flip: v2 treats the leading dimension as a batch of one
draw), float32 normalised, float16 CTHW; the clips stacked NCTHW.

torchcodec loads FFmpeg's shared libraries itself (libavcodec.so.N on the library path): where
the system has none, PyAV's wheel carries a matching set (see docs/benchmarks.md, Video).
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor

import torch

from .batches import clip_indices, spans

RunPass = Callable[[int], Iterator[int]]


def torchcodec_video(files: Sequence[str] | None, clip: int, stride: int, crop: int, batch: int, threads: int,
                     device: torch.device, mean: Sequence[float], std: Sequence[float]) -> RunPass:
    """One pass = one epoch, a clip per video in a shuffled order; yields the clips of each
    batch (float16 NCTHW on `device`)."""
    from torchcodec.decoders import VideoDecoder
    from torchvision.transforms import v2

    if not files:
        raise ValueError("the torchcodec loop reads video files (not tar shards)")
    if device.type != "cuda":
        raise ValueError("the torchcodec peer decodes on CUDA (--device cuda)")
    paths = [str(f) for f in files]
    ops = v2.Compose([v2.RandomResizedCrop(crop, antialias=True), v2.RandomHorizontalFlip(),
                      v2.ToDtype(torch.float32, scale=True), v2.Normalize(list(mean), list(std))])

    def one(epoch: int, i: int) -> torch.Tensor:
        torch.cuda.set_device(device)
        rng = random.Random(epoch * len(paths) + i)
        with opening:  # made one at a time: made on several threads at once, some failed to find the video stream
            decoder = VideoDecoder(paths[i], device=str(device), seek_mode="approximate")
        frames = decoder.get_frames_at(clip_indices(decoder.metadata.num_frames or 1, clip, stride, rng)).data
        return ops(frames).permute(1, 0, 2, 3).to(torch.float16)  # [T,3,h,w] -> [3,T,h,w]

    pool = ThreadPoolExecutor(threads, thread_name_prefix="torchcodec-loop")
    opening = threading.Lock()

    def run(epoch: int) -> Iterator[int]:
        order = list(range(len(paths)))
        random.Random(epoch).shuffle(order)
        clips = pool.map(lambda i: one(epoch, i), order)
        for _, k in spans(len(order), batch):
            out = torch.stack([next(clips) for _ in range(k)])
            yield out.shape[0]

    run.close = lambda: pool.shutdown(wait=True)  # type: ignore[attr-defined]
    return run
