"""What Compose takes as a batch, before any planning: encoded files (`EncodedSource`, whose
headers are read up front so that the plan knows every size), decoded images (an ImageBatch),
or the float tensor a Lambda returns between stages; the batch's global sample indices; and
`SampleError`, which names the sample of a batch that could not be read."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from ..data.batch import ImageBatch, batch_or_images, dense_table
from ..data.errors import SampleError

__all__ = ["EncodedSource", "SampleError", "as_source", "sample_indices", "tensor_source"]


class EncodedSource:
    """Encoded images whose headers are read; decoded per plan, region by region."""

    def __init__(self, blobs: Sequence[bytes | bytearray | memoryview], max_pixels: int = 100_000_000) -> None:
        from ..decode import read_header
        from ..decode.headers import parse_jpeg
        from ..decode.headers_batch import parse_jpegs

        self.blobs = list(blobs)
        self.max_pixels = max_pixels
        self.infos = []
        # JPEGs parsed up to their first scan: the GPU decoder's checks use the layout too,
        # so no header is parsed twice (None where that parse failed: the decoder says why);
        # the batch in one C call first, parse_jpeg for what that leaves
        self.jpeg_headers: list[Any] = []
        failures: list[tuple[int, str]] = []  # every sample whose header fails, reported at once
        for i, (b, header) in enumerate(zip(self.blobs, parse_jpegs(self.blobs))):
            try:
                if header is None and b[:3] == b"\xff\xd8\xff":
                    try:
                        header = parse_jpeg(b, to_scan=True)
                    except ValueError:
                        pass
                info = header[0] if header is not None else read_header(b)
            except ValueError as e:
                failures.append((i, str(e)))
                continue
            if info.height * info.width > max_pixels:
                failures.append((i, f"{info.width}x{info.height} image has more pixels than max_pixels={max_pixels}"))
            elif info.height == 0 or info.width == 0:
                failures.append((i, f"{info.width}x{info.height} image has no pixels"))
            self.infos.append(info)
            self.jpeg_headers.append(header)
        if failures:
            raise SampleError.of(failures)

    def __len__(self) -> int:
        return len(self.blobs)

    def sizes(self) -> np.ndarray:
        """float64 [N, 2] displayed (height, width), EXIF orientation applied."""
        rows = [(i.width, i.height) if i.orientation >= 5 else (i.height, i.width) for i in self.infos]
        return np.array(rows, dtype=np.float64).reshape(-1, 2)

    def scales(self, regions: np.ndarray, min_sizes: np.ndarray) -> np.ndarray:
        """float64 [N]: the DCT scale each region will be decoded at (known from the headers)."""
        from ..decode import dct_scale

        return np.array([dct_scale(info, tuple(r), tuple(m)) for info, r, m in
                         zip(self.infos, regions.tolist(), min_sizes.tolist())], dtype=np.float64)

    def loader(self, regions: np.ndarray, min_sizes: np.ndarray, scales: np.ndarray) -> Callable[[int], torch.Tensor]:
        """load(i): decode sample i's region (at its planned scale) as an HWC uint8 tensor.
        Called on worker threads; errors become SampleError naming the sample."""
        from ..decode import decode_region

        regs = [tuple(r) for r in regions.tolist()]
        mins = [tuple(m) for m in min_sizes.tolist()]
        planned = scales.tolist()

        def load(i: int) -> torch.Tensor:
            try:
                arr, s = decode_region(self.blobs[i], region=regs[i], min_size=mins[i], rgb=False,
                                       max_pixels=self.max_pixels)
            except ValueError as e:
                raise SampleError(i, str(e)) from e
            if abs(s - planned[i]) > 1e-9:
                raise RuntimeError(f"sample {i}: decoded at scale {s}, planned {planned[i]}")
            return torch.from_numpy(arr)

        return load


def sample_indices(indices: Any, n: int) -> np.ndarray:
    """int64 [n] global sample indices (default 0..n-1) from a tensor (any device), an array
    or a sequence."""
    if indices is None:
        return np.arange(n, dtype=np.int64)
    if isinstance(indices, torch.Tensor):
        indices = indices.detach().cpu().numpy()
    idx = np.asarray(indices)
    if idx.size == 0 and n == 0:
        return np.zeros(0, dtype=np.int64)
    if idx.shape != (n,):
        raise ValueError(f"indices must have one entry per image ({n}), got shape {tuple(idx.shape)}")
    if idx.dtype.kind not in "iu":
        raise ValueError(f"indices must be integers, got {idx.dtype}")
    return idx.astype(np.int64, copy=False)


def tensor_source(x: torch.Tensor) -> ImageBatch:
    """A float NCHW batch in [0, 1] as a ragged float source in pixel units (for the next warp)."""
    if x.dim() != 4:
        raise ValueError(f"a Lambda must return a 4-D NCHW tensor, got shape {tuple(x.shape)}")
    n, c, h, w = x.shape
    if c not in (1, 3):
        raise ValueError(f"a Lambda must return 1 or 3 channels (NCHW), got {c}")
    data = (x.detach().to(torch.float32) * 255.0).permute(0, 2, 3, 1).reshape(-1).contiguous()
    return _FloatBatch.trusted(data, dense_table(n, h, w, c))


class _FloatBatch(ImageBatch):
    """An ImageBatch-shaped holder of float32 pixels between stages (made by `trusted`: its
    data is float32, which the constructor's checks refuse)."""


def as_source(images: Any, max_pixels: int) -> ImageBatch | EncodedSource:
    images = batch_or_images(images)
    if isinstance(images, ImageBatch):
        return images
    images = list(images)
    if not images:
        return ImageBatch.empty()
    if all(isinstance(b, (bytes, bytearray, memoryview)) for b in images):
        return EncodedSource(images, max_pixels)
    if any(isinstance(b, (bytes, bytearray, memoryview)) for b in images):
        raise TypeError("mixed encoded and decoded images in one batch; decode them first")
    return ImageBatch.from_list(images)
