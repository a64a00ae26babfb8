"""engine.host_memory: glibc's malloc thresholds fixed once per process, where glibc is."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's mallopt")
def test_keep_host_memory_sets_the_thresholds_once():
    code = ("import ctypes, pixelpipe.engine.host_memory as h\n"
            "calls = []\n"
            "real = h._set\n"
            "h._set = lambda: calls.append(1) or real()\n"
            "print(h.keep_host_memory(), h.keep_host_memory(), len(calls))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.split() == ["True", "True", "1"]


def test_it_is_a_gpu_decoding_setting():
    import pixelpipe as pp

    assert pp.GpuDecoding().keep_host_memory is True
    assert pp.GpuDecoding(keep_host_memory=False).keep_host_memory is False
