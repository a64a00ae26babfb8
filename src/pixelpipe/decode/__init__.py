"""Image decoding: header parsing and the CPU (Pillow) decoders.

`read_header` gives sizes and orientation without decoding; `decode_region` decodes the part
of one image the planner asks for; `decode` turns a list of files into an ImageBatch.
"""

import sys
import types

from .cpu import dct_scale, decode, decode_region
from .headers import DecodeError, ImageInfo, read_header

__all__ = ["DecodeError", "ImageInfo", "dct_scale", "decode", "decode_region", "read_header"]


class _CallablePackage(types.ModuleType):
    """`pixelpipe.decode` is this package and, called, the function `decode` (the API the
    project promises: `pixelpipe.decode(files, device=...)`), so that both
    `pixelpipe.decode(files)` and `import pixelpipe.decode.gpu` work whatever was imported first."""

    def __call__(self, *args, **kwargs):
        return decode(*args, **kwargs)


sys.modules[__name__].__class__ = _CallablePackage
