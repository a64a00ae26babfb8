"""Image decoding: header parsing and the CPU (Pillow) decoders.

`read_header` gives sizes and orientation without decoding; `decode_region` decodes the part
of one image the planner asks for; `decode` turns a list of files into an ImageBatch.
"""

import inspect
import sys
import types

from .cpu import dct_scale, decode_region
from .files import decode
from .headers import DecodeError, ImageInfo, read_header
from .on_device import release_gpu_decoders

__all__ = ["DecodeError", "ImageInfo", "dct_scale", "decode", "decode_region", "read_header",
           "release_gpu_decoders"]


def _with_self(fn):
    sig = inspect.signature(fn)
    return sig.replace(parameters=[inspect.Parameter("self", inspect.Parameter.POSITIONAL_ONLY),
                                   *sig.parameters.values()])


class _CallablePackage(types.ModuleType):
    """`pixelpipe.decode` is this package and, called, the function `decode` (the API the
    project promises: `pixelpipe.decode(files, device=...)`), so that both
    `pixelpipe.decode(files)` and `import pixelpipe.decode.gpu` work whatever was imported first."""

    def __call__(self, *args, **kwargs):
        return decode(*args, **kwargs)

    # inspect.signature(pixelpipe.decode) and help() show decode's arguments, not (*args, **kwargs)
    __call__.__signature__ = _with_self(decode)  # type: ignore[attr-defined]
    __call__.__doc__ = decode.__doc__


sys.modules[__name__].__class__ = _CallablePackage
