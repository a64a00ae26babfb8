"""engine.process: glibc's malloc thresholds fixed once per process, where glibc is; the
garbage collector frozen at an engine's first batch."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's mallopt")
def test_keep_host_memory_sets_the_thresholds_once():
    code = ("import ctypes, pixelpipe.engine.process as h\n"
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


def test_an_engine_freezes_the_collector_at_its_first_batch_only_when_asked():
    """(Something imported may have frozen objects already: counts are compared, not assumed 0.)"""
    code = ("import gc, numpy as np, pixelpipe as pp\n"
            "img = [np.zeros((8, 8, 3), np.uint8)]\n"
            "t = pp.Compose([pp.Resize((4, 4))])\n"
            "t(img, engine=pp.Engine(freeze_gc=False)); before = gc.get_freeze_count()\n"
            "t(img, engine=pp.Engine(freeze_gc=False)); a = gc.get_freeze_count()\n"
            "e = pp.Engine(); t(img, engine=e); b = gc.get_freeze_count(); t(img, engine=e)\n"
            "print(a == before, b > a, gc.get_freeze_count() == b)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.split() == ["True", "True", "True"]
