"""A stage's pixel ops (blur, erasing, the policies' colour and levels steps, Lambdas),
Normalize where it stands among them and the output form, on the warped float image.

On the CPU the batch is split by samples into consecutive pieces, and each piece runs the whole
chain of pixel ops on one of the Engine's threads (one torch intra-op thread each, see
data.threads), writing its rows of the output. Pixel ops are per-sample functions (kinds.PixelOp;
one that is not, `per_sample = False`, makes the stage run as one piece) and every draw is a
function of the sample, not of the batch, so a piece gives its samples' rows bit for bit as the
whole batch does (tests/test_engine_pixels.py checks this for several thread counts and piece
sizes). Run as one batch on the thread that calls the Engine, the chain left the decoding
threads idle: the SimCLR, DeiT and RandAugment pipelines used 1.1-1.4 of 2 cores.
Pieces, not a row band of every image: the ops' per-image statistics (equalize's histograms,
autocontrast's range, contrast's mean) and a blur's borders would need the whole image in one
place. Small pieces (a few samples) balance the threads, since samples cost different amounts
(a blur for half of them, a policy's operation per sample); each piece pays the chain's
per-call overhead once, so pieces are not single samples. The pieces are rows of the stage's
warped batch, which nothing reads afterwards: Normalize and the ops that can (`apply_owned`)
write into them instead of into copies (run_pixels' `owned`), and every op's leading draws are
hashed once per batch (pixel_blocks). On a GPU the batch runs whole, on the calling thread (the
kernels are launched, not run, there), owned as well. On either, an op with a fast form for the
device (kernels.pixel_forms) runs that, writing into owned rows where it can.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from ..data.random import Draws, epochs, op_blocks_by_prefix, prefix
from ..data.transfer import device_constant
from ..kernels.cpu.stage import MapFn, for_each
from ..kernels.pixel_forms import finishing_form, pixel_form
from ..plan import Stage
from ..plan.output import Output, finish_tensor

__all__ = ["PIECE", "normalize_cpu", "pixel_blocks", "pixel_pieces", "pixel_prefixes", "run_pixels"]

# samples per piece on the CPU: measured on 2 cores, 64-image batches of 224x224, medians of 5
# alternating rounds, process CPU ms per batch in pieces of 4 / 8 / 16: SimCLR 157 / 155 / 176
# (its blur's temporaries stay in the cache), DeiT 186 / 174 / 182, RandAugment 174 / 166 / 169
# (a policy's dozen ops pay their per-call overhead per piece); as one piece (64) SimCLR took
# 230 ms of CPU per batch against 154 in pieces of 8
PIECE = 8


def run_pixels(stage: Stage, x: torch.Tensor, seed: int, epoch: Any, idx: np.ndarray, prefixes: list[np.ndarray],
               output: Output | None, targets: bool, dest: Callable[[torch.Tensor], torch.Tensor] | None = None,
               owned: bool = False, blocks: list[np.ndarray] | None = None) -> torch.Tensor:
    """The stage's pixel ops on x (float [N, C, H, W]: the whole batch or a piece of it, idx the
    rows' sample indices, prefixes each pixel op's draw prefixes of the rows (Stage.prefixes:
    per frame for per-frame ops on clips), epoch an int or the rows' epochs),
    Normalize where it stands among them, then, with `output` (the last stage), the output form.

    dest, if given, maps the result before its last pass (float NCHW) to the tensor the result
    goes in (its rows of the batch's output): the last pass (Normalize, the cast to the output
    dtype, the layout) writes there, the same numbers as without, in one pass fewer. Without
    it, a new output is made here where that saves a pass (Normalize last into another dtype, or
    an NHWC output).

    owned: x is the caller's to overwrite (it reads it no more). Then, and for the tensors the
    chain makes itself, Normalize works in place and an op with an `apply_owned` method (the
    policies' pixel part, RandomErasing) is handed the tensor to write into: the same numbers
    without a copy of the batch per op (on the CPU a copy of a piece of 8 224x224 images cost
    about 0.2 ms an image, as much as most of a policy's operations).

    blocks: each pixel op's leading draws of the rows, hashed already (pixel_blocks; hashed
    here when not given).

    An op with a fast form for x's device (kernels.pixel_forms: GaussianBlur's Triton kernel
    on CUDA, its C pass on the CPU) runs that instead of its apply(). When the output needs a
    pass of its own after the ops (Normalize last, a cast, a layout, dest's rows) and the last op
    has a finishing form (kernels.pixel_forms.finishing_form: GaussianBlur on CUDA), that form
    writes the output itself, normalised and cast: one pass fewer."""
    norm_at = stage.normalize_at if stage.normalize is not None else -1
    if blocks is None:
        blocks = pixel_blocks(stage, prefixes)
    stores = _stores_after_cast(stage, norm_at, output, x)
    norm_last = norm_at == len(stage.pixels) and norm_at > 0
    # the output needs a pass of its own after the ops (Normalize, a cast, a layout, dest's rows):
    # the last op may make that pass itself (kernels.pixel_forms.finishing_form)
    last_pass = (output is not None and output.dtype != torch.uint8 and norm_at in (-1, len(stage.pixels))
                 and (dest is not None or norm_last or output.layout == "NHWC" or output.dtype != x.dtype))
    for j, (pos, op) in enumerate(stage.pixels):
        if stores and j == norm_at:  # the ops left only store values: cast first (see _stores_after_cast)
            assert output is not None
            out = (dest or _new_output(output))(x)
            x = normalize(x, stage, out)
            owned = True
        elif j == norm_at and j > 0:
            x = normalize(x, stage, x if owned else None)
            owned = True  # in place, or a new tensor
        draws = Draws(seed, epoch, idx, pos, prefixes[j], blocks[j])
        sizes = np.tile(np.array(x.shape[-2:], dtype=np.float64), (x.shape[0], 1))
        finish = finishing_form(op, x) if last_pass and j == len(stage.pixels) - 1 else None
        if finish is not None:
            assert output is not None
            out = (dest or _new_output(output))(x)
            scale, bias = _operands(stage, x) if norm_last else (None, None)
            finish(x, op.sample(draws, sizes), out.permute(0, 3, 1, 2) if output.layout == "NHWC" else out,
                   scale, bias)
            return out
        form = pixel_form(op, x)
        if form is not None:
            y = form(x, op.sample(draws, sizes), owned, draws)
            owned = owned or y is not x  # x itself, or a new tensor of the form's
        else:
            into = getattr(op, "apply_owned", None) if owned else None
            y = (op.apply if into is None else into)(x, op.sample(draws, sizes), draws)
            owned = into is not None  # another op's result may be anything (a user's Lambda: a tensor it keeps)
        if not isinstance(y, torch.Tensor):
            raise TypeError(f"op {pos} ({type(op).__name__}) returned {type(y).__name__}, expected a tensor")
        if y.dim() != 4 or y.shape[:2] != x.shape[:2] or not y.is_floating_point():
            raise ValueError(f"op {pos} ({type(op).__name__}) must return a float [N, C, H, W] tensor of "
                             f"{x.shape[0]} samples and {x.shape[1]} channels, got {y.dtype} {tuple(y.shape)}")
        if targets and y.shape[2:] != x.shape[2:]:
            raise ValueError(f"op {pos} ({type(op).__name__}) changed the image size; boxes, keypoints and "
                             "masks cannot follow it (resize or crop with a geometric op instead)")
        x = y
    if stores:  # the ops wrote into the output where it is contiguous; a copy they made goes there
        if x is not out:
            out.copy_(x)
        return out
    if dest is None and output is not None and output.dtype != torch.uint8 and (
            output.layout == "NHWC" or (norm_last and output.dtype != x.dtype)):
        dest = _new_output(output)  # the last pass writes the output: Normalize casts as it stores
    if dest is None:
        if norm_last:
            x = normalize(x, stage, x if owned else None)
        return x if output is None else finish_tensor(x, output)
    out = dest(x)
    if output is not None and output.dtype == torch.uint8:  # rounded: the reference's steps
        out.copy_(finish_tensor(normalize(x, stage) if norm_last else x, output))
        return out
    # float32 NCHW values, cast once to the output's dtype as they are stored (as .to() casts)
    view = out.permute(0, 3, 1, 2) if output is not None and output.layout == "NHWC" else out
    if norm_last:
        normalize(x, stage, view)
    else:
        view.copy_(x)
    return out


def _stores_after_cast(stage: Stage, norm_at: int, output: Output | None, x: torch.Tensor) -> bool:
    """Whether Normalize may write the output's lower-precision floats at once, the pixel ops
    after it running on them: on the CPU, into float16 or bfloat16 NCHW, when every op after
    Normalize only stores values that do not depend on the image (`stores_values`: RandomErasing's
    noise, computed in float32 and rounded as it is stored). Each stored value is then rounded
    once, as the cast after them would round it: the same bits, and the float32 batch is not
    read again for the cast (about 3% of the RandAugment pipeline's CPU time)."""
    if (output is None or output.layout != "NCHW" or output.dtype not in (torch.float16, torch.bfloat16)
            or x.device.type != "cpu" or x.dtype != torch.float32 or not 0 < norm_at < len(stage.pixels)):
        return False
    return all(getattr(op, "stores_values", False) for _, op in stage.pixels[norm_at:])


def _new_output(output: Output) -> Callable[[torch.Tensor], torch.Tensor]:
    """run_pixels' `dest` for a whole batch: a new tensor of the output's dtype and layout."""
    def make(y: torch.Tensor) -> torch.Tensor:
        n, c, h, w = y.shape
        return torch.empty((n, h, w, c) if output.layout == "NHWC" else (n, c, h, w), dtype=output.dtype,
                           device=y.device)

    return make


def pixel_pieces(stage: Stage, x: torch.Tensor, seed: int, epoch: Any, idx: np.ndarray, output: Output | None,
                 targets: bool, map_fn: MapFn, piece: int | None = None, frames: Any = None,
                 owned: bool = False) -> torch.Tensor:
    """run_pixels over the batch in pieces of `piece` consecutive samples (default PIECE), on the
    threads behind map_fn (an Engine's pool), each piece writing its rows of one output tensor
    (made by the first piece to get there, from the shape of its result): the same bits as one
    run_pixels of the whole batch. A stage with an op that is not per-sample (PixelOp.per_sample
    False: a Lambda by default) runs as one piece, on one of those threads too. The first
    failing piece's error is raised. frames: the rows' frame numbers in their clips (None for
    images), for per-frame ops. owned: the pieces may overwrite x (run_pixels' `owned`)."""
    n = x.shape[0]
    prefixes = pixel_prefixes(stage, seed, epoch, idx, frames)
    blocks = pixel_blocks(stage, prefixes)
    per = epochs(epoch)
    piece = max(1, PIECE if piece is None else piece)
    if not all(getattr(op, "per_sample", True) for _, op in stage.pixels):
        piece = max(n, 1)
    starts = list(range(0, n, piece))
    if len(starts) <= 1:
        one: list[torch.Tensor] = []
        for_each(lambda _: one.append(run_pixels(stage, x, seed, per, idx, prefixes, output, targets, owned=owned,
                                                 blocks=blocks)), [0], map_fn)
        return one[0]
    made: list[torch.Tensor] = []  # the output, made by the first piece to get there
    lock = threading.Lock()

    def run(a: int) -> None:
        b = min(a + piece, n)

        def rows(y: torch.Tensor) -> torch.Tensor:
            shape = tuple(y.shape[1:])
            if output is not None and output.layout == "NHWC":
                shape = (*shape[1:], shape[0])
            dtype = y.dtype if output is None else output.dtype
            with lock:
                if not made:
                    made.append(torch.empty((n, *shape), dtype=dtype))
            out = made[0]
            if out.shape[1:] != shape or out.dtype != dtype:
                raise ValueError(f"the pixel ops gave samples {a}..{b - 1} as {dtype} {shape} and others as "
                                 f"{out.dtype} {tuple(out.shape[1:])}: every sample of a batch must come out alike")
            return out[a:b]

        rows_epoch = per[a:b] if isinstance(per, np.ndarray) else per
        run_pixels(stage, x[a:b], seed, rows_epoch, idx[a:b], [p[a:b] for p in prefixes], output, targets, rows,
                   owned, [blk[a:b] for blk in blocks])

    for_each(run, starts, map_fn)
    return made[0]


def pixel_prefixes(stage: Stage, seed: int, epoch: Any, idx: np.ndarray, frames: Any = None) -> list[np.ndarray]:
    """Each pixel op's draw prefixes of the batch's rows (per frame for per-frame ops on clips)."""
    return stage.prefixes(prefix(seed, epoch, idx), frames, [pos for pos, _ in stage.pixels])


def pixel_blocks(stage: Stage, prefixes: list[np.ndarray]) -> list[np.ndarray]:
    """Each pixel op's leading draws (`Op.draws` of them) for the batch's rows, uint32 [N, D],
    hashed in one evaluation per prefix for all the stage's pixel ops (as the stage does for
    its other ops), then sliced per piece: without them each piece hashed each op's draws
    itself (RandomErasing's 23 of them, a policy's choices), numpy calls holding the GIL."""
    return op_blocks_by_prefix(prefixes, [pos for pos, _ in stage.pixels], [op.draws for _, op in stage.pixels])


def normalize(x: torch.Tensor, stage: Stage, out: torch.Tensor | None = None) -> torch.Tensor:
    """Normalize of the stage on float NCHW x, into `out` if given (cast as it is stored)."""
    scale, bias = _operands(stage, x)
    if x.device.type != "cpu":  # one kernel
        return torch.addcmul(bias, x, scale) if out is None else torch.addcmul(bias, x, scale, out=out)
    return normalize_cpu(x, scale, bias, out)


def _operands(stage: Stage, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(scale, bias) of the stage's Normalize for x's channels, device and dtype."""
    norm = stage.normalize
    assert norm is not None
    return normalize_operands(norm.mean, norm.std, x.shape[1], x.device, x.dtype)


_OPERANDS: dict[tuple[Any, ...], tuple[torch.Tensor, torch.Tensor]] = {}


def normalize_operands(mean: Any, std: Any, c: int, device: torch.device, dtype: torch.dtype,
                       ) -> tuple[torch.Tensor, torch.Tensor]:
    """(scale, bias) [1, C, 1, 1] of Normalize(mean, std) on C channels: x * (1 / std) + (-mean /
    std), one pass fewer than (x - mean) / std. Made once per device and dtype (on a GPU the
    five small launches that make them cost about 0.1 ms of host time a call)."""
    key = (tuple(mean), tuple(std), c, str(device), dtype)
    if key not in _OPERANDS:
        m = device_constant(tuple(mean) * c if len(mean) == 1 else tuple(mean[:c]), device)
        s = device_constant(tuple(std) * c if len(std) == 1 else tuple(std[:c]), device)
        _OPERANDS[key] = ((1.0 / s).view(1, c, 1, 1).to(dtype), (-m / s).view(1, c, 1, 1).to(dtype))
    return _OPERANDS[key]


def normalize_cpu(x: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor, out: torch.Tensor | None = None
                  ) -> torch.Tensor:
    """addcmul(bias, x, scale) (into `out`, cast as it is stored) as one torch.add(bias_c, x_c,
    alpha=scale_c) per channel: on the CPU both round x * scale + bias once (a fused
    multiply-add), so the same numbers (tests/test_engine_pixels.py), but torch's addcmul with
    per-channel operands took 0.19 ms a 224x224 image into float32, 0.24 into float16 and 0.85
    into a channels-last float16 view on one thread, against 0.11, 0.12 and 0.22 so."""
    if out is None:
        out = torch.empty_like(x, memory_format=torch.contiguous_format)
    scales = scale.reshape(-1).tolist()
    bias = bias.reshape(-1)
    for c in range(x.shape[1]):
        torch.add(bias[c], x[:, c], alpha=scales[c], out=out[:, c])
    return out
