"""Image decoding: header parsing and the CPU (Pillow) decoders.

`read_header` gives sizes and orientation without decoding; `decode_region` decodes the part
of one image the planner asks for; `decode` turns a list of files into an ImageBatch.
"""

from .cpu import dct_scale, decode, decode_region
from .headers import DecodeError, ImageInfo, read_header

__all__ = ["DecodeError", "ImageInfo", "dct_scale", "decode", "decode_region", "read_header"]
