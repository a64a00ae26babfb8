"""The policy kernel (kernels.triton.policy, reached through kernels.pixel_forms) against its twin,
PolicySteps.apply_gathered (each (step, operation) pair's rows gathered, its torch form,
written back). Needs CUDA and Triton for the kernel tests; PIXELPIPE_TRITON_INTERPRET=1 (with
triton installed) runs them on the CPU through Triton's interpreter (small images).

Tolerance: the kernel computes each value with the twin's float32 operations in the twin's
order, so samples that took no Contrast are bit-identical (atol 0). Contrast's image mean sums
the pixels in another order than torch's reduction: within 2e-6 on its samples, except where
a later operation of the same sample quantises (Posterize, Equalize, Solarize's threshold) and
a value sits on a level's edge: there a level (1/255) may differ, at under 0.5% of the values.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import POLICIES, count_pixel_forms, no_pixel_forms, pixel_part, triton_device

import pixelpipe as pp
from pixelpipe.data.random import Draws
from pixelpipe.ops.policies import PolicySteps

DEVICE, INTERPRET = triton_device()





def images(n: int, c: int, h: int, w: int, seed: int, device: str) -> torch.Tensor:
    """Half the samples on whole grey levels (as decoded), half anywhere in [0, 1] (as warped);
    one on a few dark levels (Equalize's tables far from the identity), one of values whose
    255 x falls on a half level (the rounding's ties), one of a single value (AutoContrast's
    flat channels, Equalize's one level)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, c, h, w, generator=g)
    x[: n // 2] = torch.randint(0, 256, (n // 2, c, h, w), generator=g).float() / 255.0
    x[0] = torch.randint(0, 6, (c, h, w), generator=g).float() / 255.0
    halves = (torch.arange(256, dtype=torch.float32) + 0.5) / 255.0
    ties = halves[halves * 255.0 == torch.arange(256, dtype=torch.float32) + 0.5]
    assert len(ties) > 10
    x[n // 2] = ties[torch.randint(0, len(ties), (c, h, w), generator=g)]
    x[-1] = 0.4
    return x.to(device)


def sampled(part: PolicySteps, n: int, seed: int) -> tuple[dict, Draws]:
    draws = Draws(seed, 2, np.arange(n), 5)
    return part.sample(draws, np.tile([20.0, 20.0], (n, 1))), draws


def contrast_rows(part: PolicySteps, params: dict) -> np.ndarray:
    names = part.operation_names()
    steps = params["steps"]
    return np.array([any(k >= 0 and names[k] == "Contrast" for k in row) for row in steps])



def compare(part, x, params, draws, owned):
    from pixelpipe.kernels.pixel_forms import policy_form

    want = part.apply_gathered(x.clone(), params, draws, owned=False)
    given = x.clone()
    got = policy_form(part, given, params, owned, draws)
    if not owned:
        assert torch.equal(given, x)  # the caller's images untouched
    exact = ~torch.from_numpy(contrast_rows(part, params)).to(x.device)
    assert torch.equal(got[exact], want[exact])
    if not exact.all():
        diff = (got[~exact] - want[~exact]).abs()
        assert (diff > 2e-6).float().mean().item() < 0.005
        assert diff.max().item() <= 2.0 / 255.0 + 1e-6

@pytest.mark.parametrize("name", list(POLICIES))
@pytest.mark.parametrize("channels", [3, 1])
def test_kernel_is_the_twin(name, channels):
    part = pixel_part(POLICIES[name]())
    n, (h, w) = (24, (31, 37)) if INTERPRET else (96, (61, 47))
    for seed in range(2 if INTERPRET else 4):
        x = images(n, channels, h, w, seed, DEVICE)
        params, draws = sampled(part, n, seed)
        compare(part, x, params, draws, owned=bool(seed % 2))

@pytest.mark.parametrize("channels", [3, 1])
def test_statistics_over_many_tiles(monkeypatch, channels):
    """Samples of several statistics tiles (the last one partial), each tile of several blocks:
    the tiles' sums, ranges and histograms combine into the twin's numbers, also over the
    steps that reuse the histograms (zeroed again after each step's tables)."""
    from pixelpipe.kernels.triton import policy

    monkeypatch.setattr(policy, "TILE", 256)
    monkeypatch.setattr(policy, "BLOCK", 128)
    part = pixel_part(pp.RandAugment(3, 15))
    n = 16
    x = images(n, channels, 31, 37, 11, DEVICE)  # 1,147 pixels: 5 tiles
    params, draws = sampled(part, n, 11)
    compare(part, x, params, draws, owned=False)
    for name, code in policy.CODES.items():
        if code in policy._NEEDS_STATS:  # two steps: the histograms zeroed again after the first
            alone_against_torch(name, x, 1.8 if name == "Contrast" else 0.0, steps=2)


def alone_against_torch(name, x, v, steps=1):
    """Operation `name` with number v on every sample of x for `steps` steps, against its torch
    form applied as many times: bit for bit, Contrast within 2e-6 a step (its mean's order)."""
    from pixelpipe.kernels.triton.policy import CODES, policy_steps
    from pixelpipe.ops.augment_space import apply_columns

    n = x.shape[0]
    col = {"Posterize": "mask", "Solarize": "at"}.get(name, "factor")
    dtype = torch.int32 if name == "Posterize" else torch.float32
    want = x.clone()
    for _ in range(steps):
        want = apply_columns(name, want, {col: torch.full((n, 1, 1, 1), v, dtype=dtype, device=x.device)})
    got = policy_steps(x.clone(), np.full((steps, n), CODES[name]), np.full((steps, n), v), False)
    if name == "Contrast":
        torch.testing.assert_close(got, want, atol=2e-6 * steps, rtol=0)
    else:
        assert torch.equal(got, want), name


def test_every_operation_alone():
    """Each operation on every sample at once (one step), against its torch form."""
    from pixelpipe.kernels.triton.policy import CODES

    x = images(6, 3, 40, 45, 7, DEVICE)
    numbers = {"Brightness": 1.6, "Color": 0.3, "Contrast": 1.8, "Sharpness": 1.9, "Posterize": 0xF0,
               "Solarize": 128.0 - 1e-3}
    for name in CODES:
        if name != "SolarizeAdd":  # timm's, not an augment_space operation: test_solarize_add_alone
            alone_against_torch(name, x, numbers.get(name, 0.0))

def test_solarize_add_alone():
    """timm's SolarizeAdd at addends 0..128 against its device-independent twin."""
    from pixelpipe.kernels.triton.policy import CODES, policy_steps
    from pixelpipe.ops.timm_augment import solarize_add_reference

    n = 9
    add = np.array([0.0, 1.0, 17.0, 64.0, 100.0, 110.0, 127.0, 128.0, 55.0])
    x = images(n, 3, 20, 23, 13, DEVICE)
    got = policy_steps(x.clone(), np.full((1, n), CODES["SolarizeAdd"]), add[None, :], False)
    assert torch.equal(got, solarize_add_reference(x.clone(), add))
    assert not torch.equal(got, x)

def test_small_images_keep_sharpness_and_nothing_to_do_is_x():
    from pixelpipe.kernels.triton.policy import CODES, policy_steps

    x = images(3, 3, 2, 5, 1, DEVICE)
    assert torch.equal(policy_steps(x, np.full((1, 3), CODES["Sharpness"]), np.full((1, 3), 2.0), False), x)
    assert policy_steps(x, np.zeros((2, 3)), np.zeros((2, 3)), False) is x

def test_wrong_inputs_are_refused():
    from pixelpipe.kernels.triton.policy import policy_steps

    with pytest.raises(ValueError, match="1 or 3 channels"):
        policy_steps(torch.rand(2, 2, 4, 4, device=DEVICE), np.ones((1, 2)), np.ones((1, 2)), False)
    with pytest.raises(ValueError, match="float32"):
        policy_steps(torch.rand(2, 3, 4, 4, device=DEVICE).double(), np.ones((1, 2)), np.ones((1, 2)), False)

def test_channels_last_input():
    part = pixel_part(pp.RandAugment(2, 9))
    n = 12
    x = images(n, 3, 10, 12, 3, DEVICE).contiguous(memory_format=torch.channels_last)
    params, draws = sampled(part, n, 3)
    compare(part, x, params, draws, owned=False)

@pytest.mark.skipif(INTERPRET, reason="the engine runs the form on CUDA tensors only")
def test_the_engine_runs_the_form_on_cuda(monkeypatch):
    """A Compose with RandAugment on CUDA runs the policy's pixel part through the kernel,
    once per call, and gives the twin's numbers (the engine without forms)."""
    imgs = [torch.randint(0, 256, (60 + k, 50 + 2 * k, 3), dtype=torch.uint8) for k in range(32)]
    batch = pp.ImageBatch.from_list(imgs).to("cuda")
    t = pp.Compose([pp.RandomResizedCrop(48), pp.RandomFlip(), pp.RandAugment(2, 9),
                    pp.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
    calls = count_pixel_forms(monkeypatch)
    fast = t(batch, seed=3)
    assert calls == [("PolicySteps", 32)]
    no_pixel_forms(monkeypatch)
    slow = t(batch, seed=3)
    diff = (fast - slow).abs()
    assert (diff > 1e-5).float().mean().item() < 0.005  # Contrast's mean (module docstring), in normalised units
