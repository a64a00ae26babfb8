"""The pointwise program's folds and the fused kernel's epilogue twin, on the CPU: the forms
the Triton kernel computes agree with the step-by-step reference."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pixelpipe.kernels.reference.pointwise3d import fold_steps, fused_epilogue_reference, run_steps, split_program
from pixelpipe.ops.volume_kinds import Step


def _ac(n: int, a, b, lo=-np.inf, hi=np.inf) -> Step:
    f = lambda v: np.broadcast_to(np.asarray(v, dtype=np.float64), (n,)).copy()
    return Step("affine_clip", {"a": f(a), "b": f(b), "lo": f(lo), "hi": f(hi)})


def _norm(n: int, nonzero: bool = False) -> Step:
    return Step("normalize", {"nonzero": np.full(n, float(nonzero)), "sub": np.full(n, np.nan),
                              "div": np.full(n, np.nan), "eps": np.full(n, 1e-8)})


def _x(n: int = 3) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 2, 5, 6, 7, generator=g) * 400
    x[:, :, :2] = 0.0  # zeros for the nonzero statistics
    return x


def test_affine_clip_chains_fold_into_one() -> None:
    rng = np.random.default_rng(1)
    x = _x()
    for trial in range(20):
        steps = []
        for _ in range(rng.integers(2, 5)):
            a = rng.uniform(-2, 2, 3)
            lo = rng.uniform(-500, 0, 3) if rng.random() < 0.6 else np.full(3, -np.inf)
            hi = np.where(np.isfinite(lo), lo, -200) + rng.uniform(0, 800, 3) if rng.random() < 0.6 else np.full(3, np.inf)
            steps.append(_ac(3, a, rng.uniform(-50, 50, 3), lo, hi))
        folded = fold_steps(steps)
        assert len(folded) == 1
        assert torch.allclose(run_steps(x, folded), run_steps(x, steps), rtol=1e-5, atol=1e-2), trial


@pytest.mark.parametrize("nonzero", [False, True])
def test_fused_epilogue_twin_agrees_with_the_steps(nonzero: bool) -> None:
    x = _x()
    programs = [
        [_ac(3, 1 / 1400, 1000 / 1400, 0, 1), _norm(3, nonzero)],
        [_ac(3, 0.001, 0.0), _ac(3, 2.0, 1.0, 0.5, 2.0), _norm(3, nonzero), _ac(3, 0.5, 0.1, -1.0, 1.0)],
        [_norm(3, nonzero), _ac(3, 3.0, 0.0)],
        [_ac(3, -0.002, 0.3, -1.0, 1.0), Step("contrast", {"factor": np.array([1.0, 1.5, 0.5])})],
    ]
    for steps in programs:
        want = run_steps(x, steps)
        got = fused_epilogue_reference(x, steps)
        assert torch.allclose(got, want, rtol=1e-4, atol=1e-4)


def test_split_program_takes_the_fusable_head() -> None:
    gamma = Step("gamma", {"gamma": np.ones(2)})
    first, norm, after, rest = split_program([_ac(2, 1, 0), _ac(2, 2, 0), _norm(2), _ac(2, 1, 1), gamma])
    assert first is not None and norm is not None and after is not None and rest == [gamma]
    first, norm, after, rest = split_program([gamma, _norm(2)])
    assert first is None and norm is None and after is None and len(rest) == 2
