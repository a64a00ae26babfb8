"""What GpuDecoder decides per sample before decoding: nvImageCodec or the CPU decoder (and
why), the region in stored coordinates, the orientation. Pure Python on the headers; GpuDecoder.plan
runs it on the pipeline's planning thread."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .cpu import _JPEG_END, _check_region, _stored_box
from .gpu_views import Job
from .headers import DecodeError, parse_jpeg, read_header

__all__ = ["Planned", "backends", "lane_settings", "plan_job", "split_by_pixels"]

_MAX_PIXELS = 100_000_000  # larger files go to the CPU decoder (decode_region), as do those over max_pixels
_LOSSLESS_SOF = frozenset({0xC3, 0xC7, 0xCB, 0xCF})


@dataclass
class Planned:
    """A batch planned for nvImageCodec (see GpuDecoder.plan)."""

    blobs: list[bytes]
    regions: list[tuple[int, int, int, int]] | None
    exif: bool
    why: dict[int, str]  # samples for the CPU decoder, and why
    decodable: list[Job]
    # the decodable jobs' code streams: nvimgcodec_c.Opened (C API, with the images and their
    # buffer), or a list of the Python binding's code streams followed by the whole-file ones
    # the region views hang on
    opened: Any
    # the samples of `why`, started on the CPU decoder's threads by plan() (a gpu_fallback.CpuUpload)
    pending: Any
    # C API: sample -> its DeviceViews row, known before decoding (the slots are made here)
    rows: dict[int, Any] | None = None


def plan_job(i: int, blob: bytes, region: tuple[int, int, int, int] | None,
             roi_decode: bool, header: Any = None, exif: bool = True, max_pixels: int = _MAX_PIXELS) -> Job | str:
    """The nvImageCodec job for sample i, or why it goes to the CPU decoder instead. header:
    parse_jpeg(blob, to_scan=True) if the caller has it. exif=False ignores the orientation.
    Images over max_pixels (or 100M) go to the CPU decoder, which raises for those over
    max_pixels with the CPU path's error."""
    try:
        if blob[:3] != b"\xff\xd8\xff":
            return f"{read_header(blob).format}: no GPU decoder for this format"
        info, layout = header if header is not None else parse_jpeg(blob, to_scan=True)
    except DecodeError as e:
        return f"header: {e}"
    if info.channels not in (1, 3):
        return f"{info.channels}-component (CMYK/YCCK) JPEG: Pillow's colour conversion"
    if info.bits != 8 or layout.sof in _LOSSLESS_SOF:
        return f"{info.bits}-bit {'lossless ' if layout.sof in _LOSSLESS_SOF else ''}JPEG"
    if info.height * info.width > min(max_pixels, _MAX_PIXELS):
        return f"{info.width}x{info.height} pixels: over {min(max_pixels, _MAX_PIXELS):,} pixels"
    if blob.rfind(_JPEG_END, layout.sos_end) < 0:
        return "truncated JPEG: no end-of-image marker after the scan"
    orientation = info.orientation if exif else 1
    disp_h, disp_w = info.oriented_size if exif else (info.height, info.width)
    try:
        box = _check_region(region, disp_h, disp_w)
    except ValueError as e:
        raise ValueError(f"sample {i}: {e}") from None
    stored = _stored_box(box, orientation, info.height, info.width)
    whole = stored == (0, 0, info.height, info.width)
    return Job(i, (box[2] - box[0], box[3] - box[1]), (info.height, info.width), stored,
               orientation, roi_decode and not whole)


def split_by_pixels(jobs: list[Job], lanes: int) -> list[tuple[int, list[Job]]]:
    """The jobs in at most `lanes` consecutive parts of about equal decoded pixel counts, as
    (lane, part), empty parts left out: what each of the lanes decodes."""
    if lanes == 1 or len(jobs) < 2:
        return [(0, jobs)] if jobs else []
    area = np.cumsum([h * w for h, w in (job.decoded_size for job in jobs)], dtype=np.float64)
    # each part ends with the job whose running pixel count reaches its share of the total
    cuts = np.minimum(np.searchsorted(area, area[-1] * np.arange(1, lanes) / lanes) + 1, len(jobs))
    bounds = [0, *cuts.tolist(), len(jobs)]
    return [(lane, jobs[a:b]) for lane, (a, b) in enumerate(zip(bounds[:-1], bounds[1:])) if b > a]


def backends(hw_fraction: float | None) -> list[tuple[str, float | None]]:
    """nvImageCodec's JPEG backends in order of preference, as (BackendKind name, load hint or
    None for the default), the same for the C API and the Python binding. CPU_ONLY stays out:
    what no GPU decoder takes comes back as a failure and goes to decode_region, counted."""
    if hw_fraction is None:
        hw = [("HW_GPU_ONLY", None)]
    elif hw_fraction > 0:
        hw = [("HW_GPU_ONLY", float(hw_fraction))]
    else:
        hw = []
    return [*hw, ("GPU_ONLY", None), ("HYBRID_CPU_GPU", None)]


def lane_settings(hw_fraction: float | None, threads: int, lanes: int,
                  lane_fractions: list[float | None] | None) -> list[tuple[list[tuple[str, float | None]], int]]:
    """Per decoder lane of a GpuDecoder, its backends and executor threads: `lanes` equal lanes
    sharing the threads, or one lane per share of `lane_fractions` (then lanes must be 1), each
    with every thread (the lanes a Pipeline chooses between are mostly idle by turns). Raises
    ValueError for lane_fractions that are empty, given with lanes > 1, or out of [0, 1]."""
    if lane_fractions is None:
        return [(backends(hw_fraction), max(1, threads // lanes))] * lanes
    if lanes != 1 or not lane_fractions:
        raise ValueError(f"lane_fractions replaces lanes: give one or more shares and lanes=1, got "
                         f"{len(lane_fractions)} shares and lanes={lanes}")
    for f in lane_fractions:
        if f is not None and not 0.0 <= f <= 1.0:
            raise ValueError(f"lane_fractions: each share must be None or in [0, 1], got {f}")
    return [(backends(f), threads) for f in lane_fractions]
