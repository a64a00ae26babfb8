"""The ctypes mirrors of nvImageCodec's structs (decode/nvimgcodec_structs.py)
have the sizes and field offsets the installed library's own header gives: a small C program
compiled against `nvimgcodec.h` of the installed wheel prints them. Needs the wheel
(pixelpipe[gpu]) and a C compiler, not a GPU; skipped otherwise."""

from __future__ import annotations

import ctypes as C
import shutil
import subprocess
from pathlib import Path

import pytest

from pixelpipe.decode import nvimgcodec_c as capi
from pixelpipe.decode import nvimgcodec_structs as S


def _include_dir() -> Path | None:
    base = capi.package_dir()
    if base is None:
        return None
    inc = Path(base) / "include"
    return inc if (inc / "nvimgcodec.h").is_file() else None


INCLUDE = _include_dir()
pytestmark = pytest.mark.skipif(INCLUDE is None or shutil.which("cc") is None,
                                reason="needs nvImageCodec's header (pip install 'pixelpipe[gpu]') and a C compiler")

MIRRORS = {  # C type -> ctypes mirror
    "nvimgcodecProperties_t": S.Properties,
    "nvimgcodecBackendParams_t": S.BackendParams,
    "nvimgcodecBackend_t": S.Backend,
    "nvimgcodecExecutionParams_t": S.ExecutionParams,
    "nvimgcodecInstanceCreateInfo_t": S.InstanceCreateInfo,
    "nvimgcodecOrientation_t": S.Orientation,
    "nvimgcodecImagePlaneInfo_t": S.PlaneInfo,
    "nvimgcodecImageInfo_t": S.ImageInfo,
    "nvimgcodecRegion_t": S.Region,
    "nvimgcodecCodeStreamView_t": S.CodeStreamView,
    "nvimgcodecDecodeParams_t": S.DecodeParams,
    "nvimgcodecDeviceAllocator_t": S.DeviceAllocator,
    "nvimgcodecPinnedAllocator_t": S.PinnedAllocator,
    "nvimgcodecExecutorDesc_t": S.ExecutorDesc,
}


@pytest.fixture(scope="module")
def header_layout(tmp_path_factory) -> dict[str, int]:
    """'type' -> sizeof, 'type.field' -> offsetof, from the C compiler."""
    d = tmp_path_factory.mktemp("layout")
    # the header includes cuda_runtime_api.h for cudaStream_t only: a stand-in keeps the CUDA toolkit out
    (d / "cuda_runtime_api.h").write_text("typedef struct CUstream_st *cudaStream_t;\n")
    lines = ['#include <stdio.h>', '#include <stddef.h>', '#include "nvimgcodec.h"', "int main(void) {"]
    for ctype, mirror in MIRRORS.items():
        lines.append(f'printf("{ctype} %zu\\n", sizeof({ctype}));')
        for name, *_ in mirror._fields_:
            lines.append(f'printf("{ctype}.{name} %zu\\n", offsetof({ctype}, {name}));')
    lines += ["return 0;", "}"]
    (d / "layout.c").write_text("\n".join(lines))
    subprocess.run(["cc", "-std=c99", f"-I{d}", f"-I{INCLUDE}", "-o", str(d / "layout"), str(d / "layout.c")],
                   check=True, capture_output=True)
    out = subprocess.run([str(d / "layout")], check=True, capture_output=True, text=True).stdout
    return {k: int(v) for k, v in (line.split() for line in out.splitlines())}


@pytest.mark.parametrize("ctype", sorted(MIRRORS))
def test_mirror_matches_the_header(header_layout: dict[str, int], ctype: str) -> None:
    mirror = MIRRORS[ctype]
    assert C.sizeof(mirror) == header_layout[ctype], ctype
    for name, *_ in mirror._fields_:
        assert getattr(mirror, name).offset == header_layout[f"{ctype}.{name}"], f"{ctype}.{name}"
