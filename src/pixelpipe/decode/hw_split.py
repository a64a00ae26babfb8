"""The hardware share that follows the images: `GpuDecoder(hw_fraction="auto")`.

nvImageCodec splits a batch between the hardware JPEG decoder and the CUDA one by a share fixed
when the decoder is made. The best share depends on the images: nvImageCodec's decode call
alone, on one H200 (`benchmarks/gpu_decoder_ceiling.py --shares 0.6 0.75`, rn50's regions,
batches of 256), was fastest at 0.75 on the ImageNet sample (20.3k against 17.7k images/s at
0.6) and at 0.6 on two sets it was not tuned on (generated JPEGs 31.0k against 25.4k, rescaled
photographs 27.0k against 25.0k). A fixed default is wrong for somebody's images.

So with "auto" pixelpipe splits each batch itself, between two nvImageCodec decoders (two lanes
of GpuDecoder, each on its own native thread and stream): one whose first backend is the
hardware decoder, one without it. The largest regions go to the hardware (nvImageCodec orders
them that way too; with the split by position instead of size the CUDA part ran 40% slower),
up to a share of the batch's pixels, and after every batch the share moves towards the one
that would have made both parts take as long (`HardwareSplit.observe`, from the two decode
durations the lanes' native threads timed). The same call on the same H200, split by the
caller at its best share: 35.2k (generated), 27.8k (photographs), 21.0k (sample) images/s.

Which decoder a sample goes to then depends on timing; the hardware and CUDA decoders give
pixels within the GPU decoder's stated tolerance of each other (tests/test_decode_gpu.py), not
bit-identical ones. A fixed `hw_fraction` gives the same decoder per sample every run.

This is pure Python with no CUDA: GpuDecoder calls `split` on the planning thread and
`observe` on the decode thread (a float assignment: no lock).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["AUTO_FIXED", "CUDA_ONLY", "HW_FIRST", "HardwareSplit", "check_hw_fraction"]

AUTO_FIXED = 0.75  # the share "auto" starts from, and the one it means with the Python binding

# the two lanes' nvImageCodec backends: (BackendKind name, load hint or None for the default)
HW_FIRST = [("HW_GPU_ONLY", None), ("GPU_ONLY", None), ("HYBRID_CPU_GPU", None)]  # refused: CUDA
CUDA_ONLY = [("GPU_ONLY", None), ("HYBRID_CPU_GPU", None)]


def check_hw_fraction(value: Any) -> None:
    """Raise ValueError unless `value` is a valid hw_fraction: None, "auto" or a number in [0, 1]."""
    if value is None or value == "auto":
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
        raise ValueError(f'hw_fraction must be None, "auto" or a number in [0, 1], got {value!r}')


class HardwareSplit:
    """The share of a batch's decoded pixels given to the hardware decoder, and how it moves.

    Args:
        share: the share to start from, in [low, high].
        gain: how far each batch moves the share towards the balancing one (0-1].
        low, high: the share's bounds: each lane keeps some samples, so that both stay timed.
        step: how far the share moves after a batch where one lane had no samples.
    """

    def __init__(self, share: float = 0.75, gain: float = 0.3, low: float = 0.05, high: float = 0.98,
                 step: float = 0.05) -> None:
        if not 0.0 < low <= share <= high < 1.0:
            raise ValueError(f"need 0 < low <= share <= high < 1, got {low}, {share}, {high}")
        if not 0.0 < gain <= 1.0:
            raise ValueError(f"gain must be in (0, 1], got {gain}")
        self.share, self.gain, self.low, self.high, self.step = float(share), float(gain), low, high, step
        self.batches = 0  # batches observed

    def split(self, jobs: Sequence[Any]) -> list[tuple[int, list[Any]]]:
        """The jobs (each with `decoded_size` (h, w) and `index`) as [(0, hardware part), (1, CUDA
        part)], empty parts left out, each in the jobs' order: the largest first to the
        hardware until its pixels reach `share` of the batch's (at least one job there)."""
        if not jobs:
            return []
        areas = [h * w for h, w in (job.decoded_size for job in jobs)]
        order = sorted(range(len(jobs)), key=lambda i: (-areas[i], i))
        goal, taken, hw = self.share * sum(areas), 0, set()
        for i in order:
            if hw and taken >= goal:
                break
            hw.add(i)
            taken += areas[i]
        parts = [[job for i, job in enumerate(jobs) if i in hw], [job for i, job in enumerate(jobs) if i not in hw]]
        return [(lane, part) for lane, part in enumerate(parts) if part]

    def observe(self, hw: tuple[int, float] | None, cuda: tuple[int, float] | None) -> float:
        """After a batch: each lane's (decoded pixels, decode seconds), or None where it had no
        samples. The share moves `gain` of the way to the one at which both lanes, at the rates
        just seen, would take as long; with one lane idle, `step` towards it. Returns the share."""
        self.batches += 1
        if hw is None and cuda is None:
            return self.share
        if hw is None or cuda is None:
            target = self.share + (self.step if hw is None else -self.step)
        else:
            (hw_px, hw_s), (cuda_px, cuda_s) = hw, cuda
            if min(hw_px, cuda_px) <= 0 or min(hw_s, cuda_s) <= 0:
                return self.share
            hw_rate, cuda_rate = hw_px / hw_s, cuda_px / cuda_s
            target = self.share + self.gain * (hw_rate / (hw_rate + cuda_rate) - self.share)
        self.share = min(self.high, max(self.low, target))
        return self.share
