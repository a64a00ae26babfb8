"""A CUDA device that torch cannot reach is refused where a pipeline or an Engine is made,
with a message that says why (data/devices.py), not at the first batch; decode(device=...) checks
the same way."""

from __future__ import annotations

import pytest
import torch
from corpus import samples

import pixelpipe as pp
from pixelpipe.data.devices import check_device

NO_CUDA = pytest.mark.skipif(torch.cuda.is_available(), reason="checks a machine without CUDA")


def test_cpu_and_the_inputs_device_pass() -> None:
    check_device(None)
    check_device(torch.device("cpu"))


@NO_CUDA
@pytest.mark.parametrize("device", ["cuda", "cuda:1"])
def test_cuda_without_cuda_is_refused_when_the_pipeline_is_made(device: str) -> None:
    data = [(it.data, it.label) for it in samples(4)]
    with pytest.raises(RuntimeError, match="sees no CUDA device.*use device='cpu'"):
        pp.Pipeline(data, [pp.Resize((8, 8))], batch_size=2, device=device)
    with pytest.raises(RuntimeError, match="sees no CUDA device"):
        pp.Engine(device)


def test_a_cuda_index_past_the_devices_is_refused(monkeypatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    check_device(torch.device("cuda:1"))
    check_device(torch.device("cuda"))
    with pytest.raises(ValueError, match=r"sees 2 CUDA device\(s\): cuda:0 to cuda:1"):
        check_device(torch.device("cuda:2"))
