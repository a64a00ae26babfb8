"""NVIDIA DALI's video reader for the video bench (`pixelpipe bench --pipeline video`) and
benchmarks/video_clips.py (nvidia.dali, 2.x).

fn.readers.video decodes the files on the GPU's video decoders (NVDEC) into sequences of `clip`
frames `stride` apart, shuffled; fn.random_resized_crop takes one window per sequence (the
same for all its frames), fn.crop_mirror_normalize mirrors each sequence with a coin flip,
normalises and writes float16 CFHW: NCTHW batches. Read through DALIGenericIterator, so the
timed output is a torch tensor, as a training loop gets it.

DALI's reader takes every sequence that fits in a video, one every `clip` frames (step=-1),
where pixelpipe's ClipSampler takes one clip per video per epoch: rates are per clip, and one
pass is one of the reader's epochs (`epoch_size` sequences); the reader fills an epoch's last
batch with sequences of the next one, which are not counted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch

from .batches import spans
from .peer_dali import _device_id

RunPass = Callable[[int], Iterator[int]]


def build_video_pipeline(files: Sequence[str], clip: int, stride: int, crop: int, batch: int, threads: int,
                         device_id: int, mean: Sequence[float], std: Sequence[float]) -> Any:
    """The DALI pipeline (module docstring), built; its reader is named "reader". Outputs: the
    clips (float16 CFHW) and the labels (each file's position in `files`)."""
    from nvidia.dali import fn, pipeline_def, types

    files = [str(f) for f in files]

    @pipeline_def(batch_size=batch, num_threads=threads, device_id=device_id)
    def video_pipe() -> Any:
        frames, labels = fn.readers.video(device="gpu", filenames=files, labels=list(range(len(files))),
                                          sequence_length=clip, stride=stride, step=-1,
                                          random_shuffle=True, name="reader")
        frames = fn.random_resized_crop(frames, size=(crop, crop))
        frames = fn.crop_mirror_normalize(frames, dtype=types.FLOAT16, output_layout="CFHW",
                                          mean=[m * 255 for m in mean], std=[s * 255 for s in std],
                                          mirror=fn.random.coin_flip())
        return frames, labels

    pipe = video_pipe()
    pipe.build()
    return pipe


def dali_video(files: Sequence[str], clip: int, stride: int, crop: int, batch: int, threads: int,
               device: torch.device, mean: Sequence[float], std: Sequence[float]) -> RunPass:
    """One pass = one epoch of DALI's reader over `files`; yields the clips of each batch.
    The run pass's `sequences` is the reader's epoch size."""
    from nvidia.dali.plugin.pytorch import DALIGenericIterator

    if not files:
        raise ValueError("DALI's video reader needs video files (not tar shards or bytes)")
    pipe = build_video_pipeline(files, clip, stride, crop, batch, threads, _device_id(device), mean, std)
    size = int(pipe.epoch_size("reader"))
    it = DALIGenericIterator([pipe], ["video", "label"])
    plan = spans(size, batch)

    def run(epoch: int) -> Iterator[int]:
        for _, k in plan:
            out = next(it)[0]["video"]
            yield min(out.shape[0], k)

    run.sequences = size  # type: ignore[attr-defined]
    return run
