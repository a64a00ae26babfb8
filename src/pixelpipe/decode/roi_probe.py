"""Is nvImageCodec's region (ROI) decoding safe on this GPU? Asked once, in a subprocess.

nvImageCodec 0.9.0 crashes the process (SIGSEGV) on some GPUs when it decodes ordinary JPEG
regions (NVIDIA/nvImageCodec#55: H100 and B200, seen through DALI), and a crash cannot be caught.
Region decoding is also what makes decoding cheaper (only the blocks a crop needs). So
`roi_decode_safe(device)` decodes a batch of generated JPEG regions with every backend split in
a child process that imports nothing but nvImageCodec and numpy; region decoding is used only if
that child exits cleanly with the right sizes. The answer is cached per device for the process
(set PIXELPIPE_GPU_ROI=0 or 1 to skip the probe).
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys

__all__ = ["roi_decode_safe"]

_CHILD = r"""
import io, sys
import numpy as np
from PIL import Image
from nvidia import nvimgcodec as nvc
rng = np.random.default_rng(0)
blobs, boxes = [], []
for i in range(24):
    h, w = (int(v) for v in rng.integers(64, 700, 2))
    y, x = np.mgrid[0:h, 0:w]
    img = np.stack([x * 255 // w, y * 255 // h, (x ^ y) % 256], -1) + rng.normal(0, 8, (h, w, 3))
    buf = io.BytesIO()
    Image.fromarray(img.clip(0, 255).astype(np.uint8)).save(buf, "JPEG", quality=90,
                                                             subsampling=i % 3)
    y0, x0 = int(rng.integers(0, h // 2)), int(rng.integers(0, w // 2))
    boxes.append((y0, x0, int(rng.integers(y0 + 1, h + 1)), int(rng.integers(x0 + 1, w + 1))))
    blobs.append(buf.getvalue())
kinds = nvc.BackendKind
params = nvc.DecodeParams(color_spec=nvc.ColorSpec.SRGB, apply_exif_orientation=False)
for hw in (None, 0.5):
    first = [nvc.Backend(kinds.HW_GPU_ONLY)] if hw is None else [
        nvc.Backend(kinds.HW_GPU_ONLY, load_hint=hw, load_hint_policy=nvc.LoadHintPolicy.FIXED)]
    dec = nvc.Decoder(device_id=int(sys.argv[1]), max_num_cpu_threads=2, options=sys.argv[2],
                      backends=first + [nvc.Backend(kinds.GPU_ONLY), nvc.Backend(kinds.HYBRID_CPU_GPU)])
    streams = [nvc.CodeStream(data).get_sub_code_stream(
        region=nvc.Region(start_y=y0, start_x=x0, end_y=y1, end_x=x1))
        for data, (y0, x0, y1, x1) in zip(blobs, boxes)]
    for img, (y0, x0, y1, x1) in zip(dec.decode(streams, params=params), boxes):
        if img is not None and tuple(img.shape[:2]) != (y1 - y0, x1 - x0):
            sys.exit(3)
print("ok")
"""


@functools.cache
def roi_decode_safe(device_index: int, options: str) -> bool:
    """True when region decoding ran cleanly in a child process on this device (cached)."""
    forced = os.environ.get("PIXELPIPE_GPU_ROI")
    if forced in ("0", "1"):
        return forced == "1"
    try:
        done = subprocess.run([sys.executable, "-c", _CHILD, str(device_index), options],
                              capture_output=True, text=True, timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    safe = done.returncode == 0 and done.stdout.strip().endswith("ok")
    if not safe:
        lines = (done.stderr or done.stdout or "").strip().splitlines()
        why = f"signal {-done.returncode}" if done.returncode < 0 else f"exit {done.returncode}"
        LAST_FAILURE[device_index] = f"{why}: {lines[-1] if lines else 'no output'}"
    return safe


LAST_FAILURE: dict[int, str] = {}  # device -> how the probe failed (shown in the notice)
