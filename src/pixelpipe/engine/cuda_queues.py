"""How many hardware work queues CUDA gives the process: `CUDA_DEVICE_MAX_CONNECTIONS`, set to 32
when pixelpipe is imported before CUDA starts.

Why: CUDA maps every stream of a process onto a few hardware work queues, 8 unless
`CUDA_DEVICE_MAX_CONNECTIONS` says otherwise when the CUDA context is made. A training loop
keeps hundreds of kernels queued on its stream (the host runs a step or more ahead of the
GPU); a Pipeline's GPU decode and kernels use streams of their own, and nvImageCodec's decoders
more. Past eight streams, two share a queue, and work on a stream that shares the training
stream's queue waits behind everything queued there, as if it depended on it. Measured beside
ResNet-50 on an H200 (benchmarks/train_throughput.py with each decode timed; docs/benchmarks.md,
"Training: CUDA's hardware queues"): with 8 queues a batch's GPU decode took 18 ms at the median
but 133 ms at the 90th percentile and up to 269 ms (two to five training steps), and the loop
waited for data 15.6% of the time; with 32, 15 ms at the median, 31 ms at the 90th percentile
and 69 ms at most, waiting 4.7%, and the loop trained 6% faster (4,552 against 4,287 images/s,
its step's GPU time unchanged).

What: `claim_queues()` runs once, when this module is imported (by `import pixelpipe`). Where
the variable is not set and torch has not started CUDA yet, it sets 32 (CUDA's largest value)
for the context torch makes later; a value the user set (Megatron-LM, for example, asks for 1)
is kept, and so is a context already made; `PIXELPIPE_CUDA_QUEUES=0` in the environment leaves
the variable alone (for a framework that sets its own value later, from Python, with
setdefault). `queues_notice()`, called when an Engine makes its GPU decoder, says once on stderr
when CUDA had started before pixelpipe was imported and the variable was not set. The setting
is the process's: other CUDA work in it (a DALI pipeline, NCCL) gets the same queues.
"""

from __future__ import annotations

import os
import sys

import torch

__all__ = ["OPT_OUT", "QUEUES", "VARIABLE", "claim_queues", "queues_notice"]

VARIABLE = "CUDA_DEVICE_MAX_CONNECTIONS"
OPT_OUT = "PIXELPIPE_CUDA_QUEUES"  # "0": leave VARIABLE alone
QUEUES = "32"
_STATE = {"late": False, "told": False}  # late: CUDA had started, unset, when claim_queues ran


def claim_queues() -> bool:
    """Set CUDA_DEVICE_MAX_CONNECTIONS to 32 if it is unset and CUDA has not started in this
    process; returns whether it did."""
    if VARIABLE in os.environ or os.environ.get(OPT_OUT) == "0":
        return False
    if torch.cuda.is_initialized():
        _STATE["late"] = True
        return False
    os.environ[VARIABLE] = QUEUES
    return True


def queues_notice() -> None:
    """Say once per process, on stderr, that CUDA started with its default 8 hardware queues
    before pixelpipe could ask for 32 (see the module docstring), and how to avoid it."""
    if _STATE["late"] and not _STATE["told"] and VARIABLE not in os.environ and os.environ.get(OPT_OUT) != "0":
        _STATE["told"] = True
        print(f"pixelpipe: CUDA started before pixelpipe was imported, with its default of 8 hardware "
              f"queues; a GPU Pipeline's decodes can then wait behind a training step's queued kernels. "
              f"Import pixelpipe before using CUDA, or set {VARIABLE}={QUEUES} in the environment "
              f"(docs/training.md)", file=sys.stderr)


claim_queues()  # at import: before anything in pixelpipe, or the user's code after it, starts CUDA
