"""The device a pipeline, an Engine or decode() is asked to run on, checked when it is made or
called: a CUDA device that this torch cannot reach is an error that says why then, not a torch
error at the first batch (`torch.cuda.Stream requires CUDA support`, from deep inside the
producer)."""

from __future__ import annotations

import torch

__all__ = ["check_device"]


def check_device(device: torch.device | None) -> None:
    """Raise RuntimeError for a CUDA device when torch sees none, ValueError for a CUDA
    device index past the ones it sees; anything else passes (None: the input's device)."""
    if device is None or device.type != "cuda":
        return
    if not torch.cuda.is_available():
        raise RuntimeError(
            f"device {str(device)!r} asked for, but this torch ({torch.__version__}) sees no CUDA device: "
            "a CPU build of torch, or no GPU visible to the process (CUDA_VISIBLE_DEVICES); "
            "use device='cpu'")
    count = torch.cuda.device_count()
    if device.index is not None and device.index >= count:
        raise ValueError(f"device {str(device)!r} asked for, but torch sees {count} CUDA device(s): "
                         f"cuda:0 to cuda:{count - 1}")
