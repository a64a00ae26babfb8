"""Video decoding on NVIDIA's hardware decoder (NVDEC) through PyNvVideoCodec, frames straight
into device memory, with a fallback to the CPU decoder (PyAV) per file whose reason is counted.

PyNvVideoCodec's `SimpleDecoder(path, gpu_id=, cuda_stream=, use_device_memory=True,
output_color_type=OutputColorType.RGB)` opens a seekable file, `len(decoder)` is its frame
count and `get_batch_frames_by_index(indices)` decodes the frames asked for (seeking to the key
frame before them itself) into device surfaces that `torch.from_dlpack` views as [H, W, 3]
uint8 (an RGB output; RGBP would be [3, H, W]); `reconfigure_decoder(path)` points an existing
decoder at the next file, cheaper than building a decoder per file. One decoder per thread: a
loader decodes several videos at once on its threads, which keeps several NVDEC sessions busy.

The clips are chosen from the CPU probe (PyAV demuxes without decoding), so clip sampling is
the same whichever decoder runs. A file falls back to the CPU when: PyNvVideoCodec or CUDA is
missing, the source is bytes (SimpleDecoder reads files only), the decoder refuses the file
(an unsupported codec, profile or size: the exception's text), or it counts other frames than
the probe. `VideoDecodeStats` counts files per decoder and fallbacks per reason.

This module follows PyNvVideoCodec 2.x's documented API; tests/test_video_gpu.py runs it on a
machine with an NVIDIA GPU (passed with PyNvVideoCodec 2.2.4 on an H100: NVDEC frames match the
CPU decoder's, and of the test videos one Matroska/WebM file is refused by NVDEC and decoded
on the CPU, counted). Everything here imports lazily.
"""

from __future__ import annotations

import os
import threading
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from .video import Source, VideoInfo, decode_sampled

__all__ = ["NvdecVideoDecoder", "VideoDecodeStats", "nvdec_missing"]


class VideoDecodeStats:
    """Files decoded per decoder ("nvdec", "cpu") and CPU fallbacks per reason; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.decoded: Counter[str] = Counter()
        self.fallbacks: Counter[str] = Counter()

    def add(self, decoder: str, fallback: str | None = None) -> None:
        with self._lock:
            self.decoded[decoder] += 1
            if fallback is not None:
                self.fallbacks[fallback] += 1

    def state(self) -> dict[str, dict[str, int]]:
        with self._lock:
            return {"decoded": dict(self.decoded), "fallbacks": dict(self.fallbacks)}

    def __repr__(self) -> str:
        s = self.state()
        return f"VideoDecodeStats(decoded={s['decoded']}, fallbacks={s['fallbacks']})"


def nvdec_missing(device: torch.device) -> str | None:
    """Why NVDEC decoding cannot run on `device` (None: it can)."""
    if device.type != "cuda":
        return "the device is not CUDA"
    if not torch.cuda.is_available():
        return "CUDA is not available"
    try:
        import PyNvVideoCodec  # noqa: F401
    except ImportError as e:
        return f"PyNvVideoCodec is not installed (pip install PyNvVideoCodec): {e}"
    return None


def _reason(e: BaseException) -> str:
    """A fallback reason short enough to count: the exception's type and first line."""
    text = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{type(e).__name__}: {text[:120]}" if text else type(e).__name__


class NvdecVideoDecoder:
    """Decode clips on NVDEC into CUDA tensors, falling back to PyAV per file.

    Args:
        device: the CUDA device the frames land on.
        stats: where decoded files and fallbacks are counted (a new VideoDecodeStats when None).

    `decode(source, pick)` returns (probe, clips): each clip uint8 [T, H, W, 3] on `device`
    (NVDEC) or on the CPU (the fallback: the caller moves it).
    """

    def __init__(self, device: torch.device | str, stats: VideoDecodeStats | None = None) -> None:
        self.device = torch.device(device)
        self.stats = stats if stats is not None else VideoDecodeStats()
        self.missing = nvdec_missing(self.device)
        self._local = threading.local()

    def _decoder(self, path: str) -> Any:
        """This thread's SimpleDecoder, pointed at `path`."""
        import PyNvVideoCodec as nvc

        dec = getattr(self._local, "decoder", None)
        if dec is not None:
            dec.reconfigure_decoder(path)
            return dec
        stream = torch.cuda.current_stream(self.device).cuda_stream
        dec = nvc.SimpleDecoder(path, gpu_id=self.device.index or 0, cuda_stream=stream, use_device_memory=True,
                                output_color_type=nvc.OutputColorType.RGB)
        self._local.decoder = dec
        return dec

    def decode(self, source: Source, pick: Any, threads: int = 1,
               info: VideoInfo | None = None) -> tuple[VideoInfo, list[torch.Tensor]]:
        """Probe on the CPU (unless `info`, the source's probe, is given), choose the clips
        (`pick(info)`), decode them on NVDEC; on any failure of the GPU path decode the file
        on the CPU instead and count why."""
        from .video import probe

        if self.missing is not None:
            return self._cpu(source, pick, threads, self.missing, info)
        if not isinstance(source, (str, os.PathLike)):
            return self._cpu(source, pick, threads, "the video is bytes in memory (NVDEC reads files)", info)
        if info is None:
            info = probe(source)  # errors here are the file's, not the GPU's: they propagate
        clips = [np.asarray(c, dtype=np.int64).reshape(-1) for c in pick(info)]
        try:
            with torch.cuda.device(self.device):
                dec = self._decoder(os.fspath(source))
                if len(dec) != info.frames:
                    raise _Mismatch(f"NVDEC counts {len(dec)} frames, the CPU probe {info.frames}")
                out = self._frames(dec, clips, info)
        except Exception as e:  # the decoder's own error types differ between releases
            self._local.decoder = None  # a failed decoder is not reused
            return self._cpu(source, lambda _: clips, threads, _reason(e), info)
        self.stats.add("nvdec")
        return info, out

    def _frames(self, dec: Any, clips: Sequence[np.ndarray], info: VideoInfo) -> list[torch.Tensor]:
        """Each clip's frames as one [T, H, W, 3] uint8 CUDA tensor: the distinct frames of all
        clips in one batch call, then gathered (a padded clip repeats its last frame)."""
        wanted = np.unique(np.concatenate(clips))
        surfaces = dec.get_batch_frames_by_index(wanted.tolist())
        if len(surfaces) != len(wanted):
            raise _Mismatch(f"NVDEC returned {len(surfaces)} of {len(wanted)} frames")
        views = [torch.from_dlpack(s) for s in surfaces]
        if views and views[0].dim() == 3 and views[0].shape[0] == 3 and views[0].shape[-1] != 3:
            views = [v.permute(1, 2, 0) for v in views]  # planar RGB from a release that gives it
        # copied out of the decoder's surfaces, which it reuses for the next call
        frames = torch.stack(views).to(self.device, torch.uint8)
        if tuple(frames.shape[1:]) != (info.height, info.width, 3):
            raise _Mismatch(f"NVDEC frames are {tuple(frames.shape[1:])}, the CPU probe says "
                            f"({info.height}, {info.width}, 3)")
        where = {int(f): k for k, f in enumerate(wanted.tolist())}
        return [frames[torch.as_tensor([where[int(f)] for f in c.tolist()], device=self.device)] for c in clips]

    def _cpu(self, source: Source, pick: Any, threads: int, why: str,
             info: VideoInfo | None = None) -> tuple[VideoInfo, list[torch.Tensor]]:
        info, clips = decode_sampled(source, pick, info, threads)
        self.stats.add("cpu", why)
        return info, [torch.from_numpy(c) for c in clips]


class _Mismatch(RuntimeError):
    """The hardware decoder disagrees with the CPU probe: the file is decoded on the CPU."""
