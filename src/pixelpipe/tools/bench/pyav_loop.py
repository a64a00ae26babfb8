"""The CPU baseline of the video bench: a plain PyAV + Pillow loop doing the video pipeline's
work, what a training script without a video loader does.

Per video, on a thread pool (one file per thread, as pixelpipe decodes; every video of the
epoch handed to the pool at once, as pixelpipe's prefetching keeps its threads busy): open it with PyAV,
draw a clip start anywhere the whole clip fits, seek to the key frame before it and decode
forward, keeping every `stride`-th frame from the start (the last frame repeated where the
video is shorter than a clip); each kept frame as a Pillow image, cropped and resized in one
call with one window per clip (torchvision's RandomResizedCrop window, bilinear, antialiased),
mirrored with the clip's coin flip, normalised with numpy into float16; the frames stacked
CTHW, the clips stacked NCTHW.

Frame numbers come from the frames' timestamps and the stream's average rate (a constant rate
is assumed, as such loops do); pixelpipe's ClipSampler indexes the frames from the packets.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch
from PIL import Image

from .batches import clip_indices, spans
from .pillow_loop import _crop_window


def decode_clip(path: str, clip: int, stride: int, rng: random.Random) -> list[Image.Image]:
    """`clip` frames `stride` apart from a random start of the video at `path`, as RGB images."""
    from ...decode.video import import_av

    av = import_av()
    with av.open(path) as container:
        stream = container.streams.video[0]
        stream.codec_context.thread_count = 1
        fps, base = float(stream.average_rate or 30), float(stream.time_base)
        first = stream.start_time or 0
        frames = stream.frames or max(1, int(float(stream.duration or 0) * base * fps))
        wanted = clip_indices(frames, clip, stride, rng)
        start = wanted[0]
        container.seek(first + int(start / fps / base), stream=stream, backward=True)
        got: dict[int, Image.Image] = {}
        for frame in container.decode(stream):
            i = round((frame.pts - first) * base * fps)
            if i in wanted:
                got[i] = frame.to_image()
            if i >= wanted[-1]:
                break
    if not got:
        raise ValueError(f"{path}: no frame from {start} on could be decoded")
    last = got[max(got)]
    return [got.get(i, last) for i in wanted]  # a short video repeats its last frame


def augment_clip(frames: Sequence[Image.Image], crop: int, mean: np.ndarray, std: np.ndarray,
                 rng: random.Random) -> np.ndarray:
    """One crop window and one flip for every frame of the clip; float16 [3, T, crop, crop]."""
    width, height = frames[0].size
    box = _crop_window(rng, width, height)
    mirror = rng.random() < 0.5
    out = []
    for im in frames:
        im = im.resize((crop, crop), Image.BILINEAR, box=box)
        if mirror:
            im = im.transpose(Image.FLIP_LEFT_RIGHT)
        out.append(np.asarray(im, dtype=np.float32))
    clip = (np.stack(out) / 255.0 - mean) / std  # [T, crop, crop, 3]
    return clip.transpose(3, 0, 1, 2).astype(np.float16)


def pyav_batches(paths: Sequence[str], batch: int, threads: int, clip: int, stride: int, crop: int,
                 mean: Sequence[float], std: Sequence[float], epoch: int = 0) -> Iterator[torch.Tensor]:
    """One epoch: a clip of every video (in a shuffled order), float16 NCTHW batches."""
    m, s = np.array(mean, dtype=np.float32), np.array(std, dtype=np.float32)
    order = list(range(len(paths)))
    random.Random(epoch).shuffle(order)

    def one(i: int) -> np.ndarray:
        rng = random.Random(epoch * len(paths) + i)
        return augment_clip(decode_clip(paths[i], clip, stride, rng), crop, m, s, rng)

    with ThreadPoolExecutor(threads, thread_name_prefix="pyav-loop") as pool:
        clips = pool.map(one, order)  # every video submitted at once: no thread waits for a batch's end
        for _, k in spans(len(order), batch):
            yield torch.from_numpy(np.stack([next(clips) for _ in range(k)]))
