"""The Triton volume kernel compiles for sm_90 (Hopper) wherever triton is installed, GPU or
not: type and constexpr errors of any variant show up before a GPU machine runs it (the
interpreter, PIXELPIPE_TRITON_INTERPRET=1 in test_volumes_gpu.py, does not catch them)."""

from __future__ import annotations

import pytest

triton = pytest.importorskip("triton")

from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from pixelpipe.kernels.triton.warp3d import _warp3d_kernel  # noqa: E402

POINTERS = {"src_ptr": "*i16", "table_ptr": "*i64", "inv_ptr": "*fp32", "ep_ptr": "*fp32", "norm_ptr": "*fp32",
            "part_ptr": "*fp32", "out_ptr": "*fp16", "lab_ptr": "*u8", "lab_out_ptr": "*i64", "def_ptr": "*fp32",
            "field_ptr": "*fp32"}
FLAGS = ("BORDER", "NORM", "NONZERO", "SUMS", "STORE", "LABELS", "DEFORM")
VARIANTS = [  # (BORDER, NORM, NONZERO, SUMS, STORE, LABELS, DEFORM), source, label, output dtypes
    ((0, False, False, False, True, True, False), "*i16", "*u8", "*fp16"),
    ((1, True, False, False, True, True, False), "*u8", "*i64", "*fp32"),
    ((2, True, True, False, True, False, True), "*fp32", "*i16", "*bf16"),
    ((0, False, True, True, False, False, True), "*u16", "*u8", "*fp16"),
    ((1, False, False, False, True, True, True), "*fp16", "*i32", "*fp16"),
]


@pytest.mark.parametrize(("flags", "src", "lab", "out"), VARIANTS)
def test_kernel_compiles_for_hopper(flags, src, lab, out) -> None:
    names = _warp3d_kernel.arg_names
    types = {**POINTERS, "src_ptr": src, "lab_ptr": lab, "out_ptr": out}
    sig = {n: types.get(n, "fp32" if n == "fill" else "constexpr" if n in (*FLAGS, "BLOCK") else "i32")
           for n in names}
    consts = {(names.index(k),): v for k, v in zip(FLAGS, flags)}
    consts[(names.index("BLOCK"),)] = 512
    kernel = triton.compile(ASTSource(_warp3d_kernel, sig, consts), target=GPUTarget("cuda", 90, 32),
                            options={"num_warps": 4})
    assert "ptx" in kernel.asm and len(kernel.asm["ptx"]) > 1000
