"""Clips: which frames of a video make each clip, and the same augmentation on every frame.

A clip is T frames of one video. `ClipSampler` picks them: `frames_per_clip` frames, `stride`
frames apart (or, with `fps=`, 1 / fps * stride seconds apart, whatever the video's own rate),
`clips_per_video` clips per video, starting at random or evenly spread over the video. Random
starts are counter-based draws keyed by (seed, epoch, video index, clip number): the same
clip comes out in any batch, on any rank and after a resume, and another epoch draws another.

`pixelpipe.engine.clips.augment_clips` runs a Compose on the frames of N clips at once, as one batch of N * T images
whose sample indices are the clips' ids repeated T times. Every random draw of every op is a
function of (seed, epoch, sample index, op), so the frames of a clip share one draw of each op
(the same crop, flip, colour, noise field, erased rectangle) and the clips of a batch differ;
every op works on clips unchanged, in the same fused passes, the frames of all clips in one
launch. An op given `per_frame=True` draws per frame instead, keyed by (seed, epoch, clip id,
frame number in the clip, op): temporal jitter for that op alone. Batch ops (MixUp, CutMix) mix whole clips: they run after the frames are regrouped,
on the clips as samples, so a clip's partner is another clip and every frame of it gets the
same weight and rectangle.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from .random import Draws

__all__ = ["LAYOUTS", "Clip", "ClipSampler", "clip_ids", "to_layout"]

LAYOUTS = ("NTCHW", "NCTHW", "NTHWC")
STARTS = ("random", "uniform")
_CLIP_OP = 0xC11B  # the op id of the clip starts' draws (distinct from ops' positions in a Compose)


@dataclass(frozen=True)
class Clip:
    """One clip of one video.

    Attributes:
        video: the video's index in its reader.
        clip: the clip's number within the video (0 .. clips_per_video - 1).
        frames: int64 [T], the frame indices, in order (the last frame repeated when a padded
            clip runs past the end).
        timestamps: float64 [T], each frame's time in seconds from the video's first frame.
        fps: the video's average frame rate.
    """

    video: int
    clip: int
    frames: np.ndarray
    timestamps: np.ndarray
    fps: float

    @property
    def start(self) -> int:
        """The first frame's index."""
        return int(self.frames[0])


def _positive(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    return int(value)


class ClipSampler:
    """Which frames make the clips of a video.

    Args:
        frames_per_clip: T, frames in a clip.
        stride: frames between consecutive frames of a clip (1: consecutive frames); with
            `fps`, steps of 1 / fps seconds.
        clips_per_video: clips taken from each video per epoch.
        start: "random" (each clip starts anywhere the whole clip fits, drawn anew each epoch)
            or "uniform" (the clips' starts evenly spread from the first possible start to the
            last; one clip is centred), the same every epoch: for evaluation.
        fps: None: frames by index. A rate: frames by time, the clip's frames 1 / fps * stride
            seconds apart, each the frame shown at that time (a 60 fps video sampled at
            fps=30 gives every other frame, a 15 fps one repeats frames).
        pad_last: a video shorter than one clip gives a clip that starts at its first frame
            and repeats its last frame (True), or is an error (False; a Pipeline's on_error
            policy decides), its message naming both lengths.

    Example:
        >>> s = ClipSampler(frames_per_clip=4, stride=2, clips_per_video=2, start="uniform")
        >>> s.span_frames
        7
    """

    def __init__(self, frames_per_clip: int = 16, stride: int = 1, clips_per_video: int = 1, start: str = "random",
                 fps: float | None = None, pad_last: bool = True) -> None:
        self.frames_per_clip = _positive("frames_per_clip", frames_per_clip)
        self.stride = _positive("stride", stride)
        self.clips_per_video = _positive("clips_per_video", clips_per_video)
        if start not in STARTS:
            raise ValueError(f"start must be one of {', '.join(map(repr, STARTS))}, got {start!r}")
        self.start = start
        if fps is not None and (isinstance(fps, bool) or not np.isfinite(float(fps)) or float(fps) <= 0):
            raise ValueError(f"fps must be a number > 0 or None, got {fps!r}")
        self.fps = None if fps is None else float(fps)
        if not isinstance(pad_last, bool):
            raise ValueError(f"pad_last must be True or False, got {pad_last!r}")
        self.pad_last = pad_last

    @property
    def span_frames(self) -> int:
        """Frames from a clip's first to its last, inclusive, when sampling by index."""
        return (self.frames_per_clip - 1) * self.stride + 1

    @property
    def span_seconds(self) -> float:
        """Seconds from a clip's first frame's time to its last's, when sampling by time."""
        assert self.fps is not None
        return (self.frames_per_clip - 1) * self.stride / self.fps

    def _fractions(self, seed: int, epoch: int, video: int) -> np.ndarray:
        """float64 [C] in [0, 1]: where each clip starts within the room the video leaves."""
        c = self.clips_per_video
        if self.start == "uniform":
            return np.full(1, 0.5) if c == 1 else np.linspace(0.0, 1.0, c)
        draws = Draws(seed, epoch, np.array([video], dtype=np.int64), _CLIP_OP)
        return draws.uniforms_np(c)[0].astype(np.float64)

    def sample(self, info: Any, seed: int, epoch: int, video: int) -> list[Clip]:
        """The clips of one video (a decode.video.VideoInfo: its frame count and times).

        Raises:
            ValueError: pad_last is False and the video is shorter than one clip (the message
                gives both lengths).
        """
        n, times = int(info.frames), np.asarray(info.times, dtype=np.float64)
        steps = np.arange(self.frames_per_clip, dtype=np.int64) * self.stride
        fractions = self._fractions(seed, epoch, video)
        clips = []
        for c, f in enumerate(fractions.tolist()):
            if self.fps is None:
                room = n - self.span_frames
                if room < 0:
                    self._too_short(f"{n} frames", f"{self.span_frames} frames")
                    frames = np.minimum(steps, n - 1)
                else:
                    first = min(int(np.floor(f * (room + 1))), room) if self.start == "random" else int(round(f * room))
                    frames = first + steps
            else:
                room_s = float(times[-1]) - self.span_seconds
                if room_s < 0:
                    self._too_short(f"{times[-1]:.3f} s from its first frame to its last",
                                    f"{self.span_seconds:.3f} s")
                t0 = max(room_s, 0.0) * f
                at = t0 + steps.astype(np.float64) / self.fps
                # the frame shown at each time (1 microsecond of slack for rounded timestamps)
                frames = np.clip(np.searchsorted(times, at + 1e-6, side="right") - 1, 0, n - 1).astype(np.int64)
            clips.append(Clip(video, c, frames, times[frames], float(info.fps)))
        return clips

    def _too_short(self, has: str, needs: str) -> None:
        if not self.pad_last:
            raise ValueError(f"the video is shorter than one clip: it has {has}, a clip spans {needs} "
                             "(pad_last=True repeats its last frame instead)")

    def __repr__(self) -> str:
        fps = f", fps={self.fps}" if self.fps is not None else ""
        return (f"ClipSampler(frames_per_clip={self.frames_per_clip}, stride={self.stride}, "
                f"clips_per_video={self.clips_per_video}, start={self.start!r}{fps}, pad_last={self.pad_last})")


def clip_ids(videos: Any, clips: Any, clips_per_video: int) -> np.ndarray:
    """int64 [N]: each clip's global id, video * clips_per_video + clip: the sample index its
    frames' augmentation draws are keyed by (distinct clips, distinct draws)."""
    return np.asarray(videos, dtype=np.int64) * int(clips_per_video) + np.asarray(clips, dtype=np.int64)


def to_layout(video: torch.Tensor, layout: str) -> torch.Tensor:
    """[N, T, C, H, W] as `layout`: "NTCHW" (unchanged), "NCTHW" (channels before time, as 3-D
    convolutions take it) or "NTHWC"; contiguous."""
    if layout == "NTCHW":
        return video
    if layout == "NCTHW":
        return video.permute(0, 2, 1, 3, 4).contiguous()
    if layout == "NTHWC":
        return video.permute(0, 1, 3, 4, 2).contiguous()
    raise ValueError(f"layout must be one of {', '.join(map(repr, LAYOUTS))}, got {layout!r}")
