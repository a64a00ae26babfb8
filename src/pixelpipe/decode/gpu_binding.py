"""GpuDecoder's path through nvImageCodec's Python binding (`api="python"`, or where the C API
is not usable): code streams made by the binding, its decode call, and the reuse of its images
across batches. GpuDecoder mixes this in; it provides `_nvc` (the nvidia.nvimgcodec module),
`_decoder` and `_params` (the binding's decoder and decode parameters) and the free list
(`_free`, `_free_lock`, `_free_cap`).

The binding's API as relied on here (nvidia-nvimgcodec-cu13 0.9.0.20; `Decoder(...)`, its
backends and options, and the known problems are in gpu's docstring):

- `decode(srcs, *, images=None, params=None, cuda_stream=0)` (keyword-only after `srcs`, a
  list of CodeStreams; bytes convert implicitly): one entry per input, None where a sample
  failed (very old releases dropped those instead: we check the length); the whole call can
  also raise (we then retry sample by sample). Outputs are allocated and made ready in the
  order of `cuda_stream` (an int cudaStream_t). `images=` only reuses Images that own their
  buffer, so decoding straight into our buffer is impossible: hence views of its buffers.
- `CodeStream(bytes)` keeps a reference to the bytes; `cs.get_sub_code_stream(region=Region(
  start_y=, start_x=, end_y=, end_x=))` (end-exclusive) is a ROI view of it (no nesting).
- `DecodeParams(color_spec=ColorSpec.SRGB, apply_exif_orientation=, allow_any_depth=False)`:
  interleaved RGB uint8 (grey comes out as 3 equal channels). An `Image` has shape (H, W, C),
  `.strides` in bytes (rows may be padded), `__cuda_array_interface__` v3 with its stream (older
  releases gave strides=None for interleaved images whatever the pitch: we use `.strides`),
  `__dlpack__`, `.cpu()`.
"""

from __future__ import annotations

from typing import Any

import torch

from .gpu_plan import Planned
from .gpu_views import Job, Row, view_row

# What nvImageCodec's pybind11 layer raises: std::runtime_error and its own errors become
# RuntimeError, std::invalid_argument ValueError, std::out_of_range IndexError, bad
# arguments TypeError.
_NVIMGCODEC_ERRORS = (RuntimeError, ValueError, IndexError, TypeError)


class BindingPath:
    """The binding's half of GpuDecoder (see the module docstring)."""

    _nvc: Any
    _decoder: Any
    _params: Any
    _free: list[Any]
    _free_lock: Any
    _free_cap: int

    def _code_streams(self, blobs: list[bytes], jobs: list[Job], why: dict[int, str]) -> tuple[list[Any], list[Any], list[Job]]:
        """nvImageCodec code streams for `jobs` (ROI views where a job decodes a region), their
        parents (kept alive with them) and the jobs they belong to; unparsable ones go into `why`."""
        nvc = self._nvc
        code_streams, parents, decodable = [], [], []
        for job in jobs:
            try:
                cs = nvc.CodeStream(blobs[job.index])
                if job.roi:
                    parents.append(cs)
                    y0, x0, y1, x1 = job.box
                    cs = cs.get_sub_code_stream(
                        region=nvc.Region(start_y=y0, start_x=x0, end_y=y1, end_x=x1))
            except _NVIMGCODEC_ERRORS as e:
                why[job.index] = f"nvImageCodec cannot parse it: {type(e).__name__}: {e}"
                continue
            code_streams.append(cs)
            decodable.append(job)
        return code_streams, parents, decodable

    def _decode_binding(
        self, planned: Planned, stream: torch.cuda.Stream, why: dict[int, str],
    ) -> dict[int, tuple[Job, Any, Row]]:
        """As GpuDecoder._decode_gpu, through the binding: nvImageCodec's images, reused from
        earlier batches where it can (see _take_free)."""
        nvc = self._nvc
        decodable = planned.decodable
        code_streams = planned.opened[:len(decodable)]
        if not decodable:
            return {}
        cuda_stream = stream.cuda_stream
        errors: list[str | None] = [None] * len(code_streams)
        reuse = self._take_free(len(code_streams))
        try:
            images = self._decoder.decode(code_streams, params=self._params,
                                          cuda_stream=cuda_stream, **reuse)
        except _NVIMGCODEC_ERRORS:  # a failure of the whole call: find the sample(s) one by one
            images = []
            for k, cs in enumerate(code_streams):
                try:
                    images.append(self._decoder.decode(cs, params=self._params,
                                                       cuda_stream=cuda_stream))
                except _NVIMGCODEC_ERRORS as e:
                    images.append(None)
                    errors[k] = f"nvImageCodec raised {type(e).__name__}: {e}"
        if len(images) != len(code_streams):
            raise RuntimeError(
                f"nvImageCodec returned {len(images)} images for {len(code_streams)} code "
                f"streams (version {getattr(nvc, '__version__', '?')}); expected one per input"
            )
        out: dict[int, tuple[Job, Any, Row]] = {}
        for job, img, err in zip(decodable, images, errors):
            if img is None:
                why[job.index] = err or "nvImageCodec could not decode it (unsupported or corrupt)"
                continue
            try:
                row = view_row(job, img.__cuda_array_interface__, img.strides)
            except (*_NVIMGCODEC_ERRORS, AttributeError, KeyError) as e:
                why[job.index] = f"nvImageCodec image unreadable: {type(e).__name__}: {e}"
                continue
            out[job.index] = (job, img, row)
        return out

    def _take_free(self, n: int) -> dict[str, list[Any]]:
        """`images=` for nvImageCodec: n images of earlier batches no kernel reads any more,
        whose buffers it decodes into (it grows a buffer that is too small). Reusing them saves
        an allocation and a free per image (measured on an H200, 500 ImageNet JPEGs, new regions
        every epoch: 9.8k -> 10.9k images/s through decode_views)."""
        with self._free_lock:
            if len(self._free) < n:
                return {}
            taken, self._free[-n:] = self._free[-n:], []
        return {"images": taken}

    def _recycle(self, owners: list[Any]) -> None:
        """Takes back the images of a retired batch (see DeviceViews.retire)."""
        images = [o for o in owners if not isinstance(o, torch.Tensor)]
        with self._free_lock:
            room = self._free_cap - len(self._free)
            if room > 0 and self._decoder is not None:
                self._free.extend(images[:room])
