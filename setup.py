"""Builds pixelpipe's C helpers (every src/pixelpipe/native/*.c) at install; the rest of the
package is declared in pyproject.toml.

Each C file becomes pixelpipe/native/_<name>.<platform tag>.so, a plain shared library that
pixelpipe.native loads with ctypes (no Python.h). The flags keep each float64 operation
rounding as numpy's does (no fused multiply-adds, no fast-math): the C planner must give
numpy's bits. The extensions are optional: where one does not compile (no C compiler), the
install goes on without it and pixelpipe runs that part in numpy or Python instead.

From a checkout (PYTHONPATH=src, or an editable install made before the C files changed):
    python setup.py build_ext --inplace
"""

from pathlib import Path

from setuptools import Extension, setup

NATIVE = Path("src/pixelpipe/native")

setup(
    ext_modules=[
        Extension(
            f"pixelpipe.native._{c.stem}",
            sources=[c.as_posix()],
            depends=[h.as_posix() for h in sorted(NATIVE.glob("*.h"))],  # headers a C file includes
            extra_compile_args=["-O3", "-ffp-contract=off", "-fno-fast-math", "-std=c99", "-pthread"],
            extra_link_args=["-pthread"],
            libraries=["m"],
            optional=True,
        )
        for c in sorted(NATIVE.glob("*.c"))
    ],
)
