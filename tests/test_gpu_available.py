"""Without a GPU decoder, decoding stays on the CPU with one notice on stderr that says why:
the install line when nvImageCodec is not installed, the failure when it does not load."""

from __future__ import annotations

import sys
import types

import pytest

from pixelpipe.decode import gpu_available, on_device


@pytest.fixture
def fresh(monkeypatch):
    check = gpu_available.gpu_decoder_missing  # cached: the tests change what it finds
    check.cache_clear()
    monkeypatch.setattr(on_device, "_NOTICE", type(on_device._NOTICE)())
    yield
    check.cache_clear()


def test_not_installed_names_the_extra(fresh, monkeypatch, capsys) -> None:
    monkeypatch.setitem(sys.modules, "nvidia.nvimgcodec", None)  # its import fails as if absent
    if "nvidia" in sys.modules:  # where it is installed and imported, the package holds it too
        monkeypatch.delattr(sys.modules["nvidia"], "nvimgcodec", raising=False)
    assert gpu_available.gpu_decoder_missing() == "nvImageCodec is not installed"
    assert not gpu_available.gpu_decoder_available()
    on_device.cpu_decoding_notice()
    on_device.cpu_decoding_notice()  # once per process
    out, err = capsys.readouterr()
    assert out == ""  # stdout stays clean (bench --json)
    assert err == ('pixelpipe: decoding on the CPU (nvImageCodec is not installed); '
                   'for GPU decoding: pip install "pixelpipe[gpu]"\n')


def test_a_failing_install_says_what_failed(fresh, monkeypatch, capsys) -> None:
    monkeypatch.setattr(gpu_available, "gpu_decoder_missing",
                        lambda: "nvImageCodec does not load (OSError: libnvjpeg.so.13: cannot open)")
    on_device.cpu_decoding_notice()
    out, err = capsys.readouterr()
    assert out == ""
    assert "libnvjpeg.so.13" in err and "pip install" not in err


def test_no_cuda_device_is_named(fresh, monkeypatch) -> None:
    fake = types.ModuleType("nvidia.nvimgcodec")
    package = sys.modules.get("nvidia") or types.ModuleType("nvidia")
    monkeypatch.setitem(sys.modules, "nvidia", package)
    monkeypatch.setitem(sys.modules, "nvidia.nvimgcodec", fake)
    monkeypatch.setattr(package, "nvimgcodec", fake, raising=False)
    monkeypatch.setattr(gpu_available.torch.cuda, "is_available", lambda: False)
    assert gpu_available.gpu_decoder_missing() == "torch sees no CUDA device"
