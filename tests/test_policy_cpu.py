"""A policy's pixel operations in C (kernels.cpu.policy, native/policy.c, reached through
kernels.pixel_forms) against their twin on the CPU, PolicySteps.apply (each (step, operation)
pair's rows, the operation's torch form, written back). Skips where policy.c was not built.
The tests run whichever copy of policy.c's body the CPU takes (its AVX2 one where it has AVX2).

Tolerance: policy.c computes each value with the twin's float32 operations in the twin's order
(built without fused multiply-adds), so samples that took no Contrast are bit-identical (atol
0). Contrast's image mean is summed in float64 and rounded once, where torch sums in float32 in
its own order: within 2e-6 on its samples, except where a later operation of the same sample
quantises (Posterize, Equalize, Solarize's threshold) and a value sits on a level's edge: there
a level (1/255) may differ, at under 0.5% of the values (the Triton kernel's tolerance,
tests/test_policy_kernel.py).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import POLICIES, count_pixel_forms, no_pixel_forms, pixel_part

import pixelpipe as pp
from pixelpipe import native
from pixelpipe.data.random import Draws
from pixelpipe.kernels.cpu.policy import CODES, policy_library, policy_steps_cpu
from pixelpipe.kernels.pixel_forms import pixel_form, policy_cpu_form
from pixelpipe.ops.augment_space import AUTOAUGMENT_SPACE, apply_columns, operands, primitive
from pixelpipe.ops.policies import PolicySteps

pytestmark = pytest.mark.skipif(policy_library() is None,
                                reason="native/policy.c was not built (or PIXELPIPE_NATIVE=0)")

FACTORS = ("Brightness", "Color", "Contrast", "Sharpness")




def images(n: int, c: int, h: int, w: int, seed: int) -> torch.Tensor:
    """Half the samples on whole grey levels (as decoded), half anywhere in [0, 1] (as warped);
    one on a few dark levels and one white pixel (Equalize's tables far from the identity, its
    highest level present once), one with a flat first
    channel (AutoContrast keeps it, stretches the others), one of values whose 255 x falls on a
    half level (the rounding's ties), one of a single value (flat channels, Equalize's one level)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, c, h, w, generator=g)
    x[: n // 2] = torch.randint(0, 256, (n // 2, c, h, w), generator=g).float() / 255.0
    x[0] = torch.randint(0, 6, (c, h, w), generator=g).float() / 255.0
    x[0, :, -1, -1] = 1.0
    x[1, 0] = 0.25
    halves = (torch.arange(256, dtype=torch.float32) + 0.5) / 255.0
    ties = halves[halves * 255.0 == torch.arange(256, dtype=torch.float32) + 0.5]
    assert len(ties) > 10
    x[n // 2] = ties[torch.randint(0, len(ties), (c, h, w), generator=g)]
    x[-1] = 0.4
    return x


def sampled(part: PolicySteps, n: int, seed: int, size: tuple[int, int]) -> tuple[dict, Draws]:
    draws = Draws(seed, 2, np.arange(n), 5)
    return part.sample(draws, np.tile(np.array(size, dtype=np.float64), (n, 1))), draws


def contrast_rows(part: PolicySteps, params: dict) -> np.ndarray:
    names = part.operation_names()
    return np.array([any(k >= 0 and names[k] == "Contrast" for k in row) for row in params["steps"]])


def close_but_contrast(got: torch.Tensor, want: torch.Tensor, contrast: np.ndarray) -> None:
    """got equals want bit for bit on the samples without Contrast, within the module's
    tolerance on the others."""
    exact = ~torch.from_numpy(np.asarray(contrast, dtype=bool))
    assert torch.equal(got[exact], want[exact])
    if not exact.all():
        diff = (got[~exact] - want[~exact]).abs()
        assert (diff > 2e-6).float().mean().item() < 0.005
        assert diff.max().item() <= 2.0 / 255.0 + 1e-6


def compare(part: PolicySteps, x: torch.Tensor, params: dict, draws: Draws, owned: bool) -> None:
    want = part.apply(x.clone(), params, draws)
    given = x.clone()
    got = policy_cpu_form(part, given, params, owned, draws)
    assert got.dtype == torch.float32 and got.shape == x.shape
    if not owned:
        assert torch.equal(given, x)  # the caller's images untouched
    elif given.is_contiguous() and params["steps"].max() >= 0:
        assert got.data_ptr() == given.data_ptr()  # written in place
    close_but_contrast(got, want, contrast_rows(part, params))


@pytest.mark.parametrize("name", list(POLICIES))
@pytest.mark.parametrize("channels", [3, 1])
def test_form_is_the_twin(name, channels):
    part = pixel_part(POLICIES[name]())
    n = 32
    for seed, (h, w) in enumerate([(31, 37), (61, 47), (24, 24), (17, 90)]):
        x = images(n, channels, h, w, seed)
        params, draws = sampled(part, n, seed, (h, w))
        assert (params["steps"] >= 0).any()
        compare(part, x, params, draws, owned=bool(seed % 2))


def _magnitudes(name: str, n: int) -> list[np.ndarray]:
    """Per-sample magnitudes of operation `name` to try (n samples)."""
    if name in FACTORS:  # factors 1 + m from 0.01 (all but the smoothed image) to 1.99
        m = np.array([-0.99, -0.5, -0.1, 0.0, 0.3, 0.9, 0.99, -0.73])
        return [np.resize(m, n), np.resize(m[::-1], n), np.full(n, 0.45)]
    if name == "Posterize":  # bits kept: masks 0x00 .. 0xFF
        return [np.resize(np.arange(9.0), n), np.full(n, 4.0), np.full(n, 8.0)]
    if name == "Solarize":  # thresholds in image units
        return [np.resize(np.linspace(0.0, 1.0, 7), n), np.full(n, 128 / 255), np.full(n, 1.0)]
    return [np.zeros(n)]


@pytest.mark.parametrize("name", [name for name in CODES if name != "SolarizeAdd"])
@pytest.mark.parametrize("channels", [3, 1])
def test_every_operation_alone(name, channels):
    """Each operation on every sample at once (one step), at several numbers per sample, against
    its torch forms: the policy's operation (PixelPrimitive.apply, the CPU twin) and its
    device-independent form (augment_space.apply_columns)."""
    n = 8
    op = primitive(AUTOAUGMENT_SPACE[name], 10, 0)
    for k, (h, w) in enumerate([(40, 45), (9, 14), (3, 3)]):
        x = images(n, channels, h, w, 7 + k)
        for m in _magnitudes(name, n):
            want = op.apply(x.clone(), {"magnitude": m}, None)
            numbers = operands(name, m)
            columns = {key: torch.from_numpy(v).to(torch.int32 if v.dtype.kind == "i" else torch.float32)
                       .view(-1, 1, 1, 1) for key, v in numbers.items()}
            reference = apply_columns(name, x.clone(), columns)
            value = next(iter(numbers.values())) if numbers else np.zeros(n)
            got = policy_steps_cpu(x.clone(), np.full((1, n), CODES[name]), value[None, :], False)
            if name == "Contrast":
                torch.testing.assert_close(got, want, atol=2e-6, rtol=0)
                torch.testing.assert_close(got, reference, atol=2e-6, rtol=0)
            else:
                assert torch.equal(got, want), (name, m)
                assert torch.equal(got, reference), (name, m)


@pytest.mark.parametrize("channels", [3, 1])
def test_solarize_add_alone(channels):
    """timm's SolarizeAdd at addends 0..128 against its twins (TimmPixels.apply: the CPU's
    levels_cpu form, and the device-independent solarize_add_reference): levels under 128
    raised, at most to 255; whole levels, halves and values between them."""
    from pixelpipe.ops.timm_augment import TimmPixels, solarize_add_reference

    n = 9
    add = np.array([0.0, 1.0, 17.0, 64.0, 100.0, 110.0, 127.0, 128.0, 55.0])
    op = TimmPixels("SolarizeAdd", 9.0, 0.0)
    np.testing.assert_array_equal(op.operands({"arg": add})["add"], add)
    for k, (h, w) in enumerate([(40, 45), (3, 3)]):
        x = images(n, channels, h, w, 11 + k)
        want = op.apply(x.clone(), {"arg": add}, None)
        got = policy_steps_cpu(x.clone(), np.full((1, n), CODES["SolarizeAdd"]), add[None, :], False)
        assert torch.equal(got, want)
        assert torch.equal(got, solarize_add_reference(x.clone(), add))
        assert not torch.equal(got, x)


def test_solarize_at_its_threshold():
    """Values whose 255 x is exactly the threshold (in levels, less the thousandth of slack, as
    float32) are inverted, those a float step below are not: the twin's >=."""
    n = 5
    m = np.array([0.5, 100 / 255, 0.2, 0.77, 1.0])
    at = operands("Solarize", m)["at"].astype(np.float32)
    x = torch.rand(n, 3, 6, 7, generator=torch.Generator().manual_seed(3))
    hits = 0
    for i, a in enumerate(at):
        v = np.float32(a / np.float32(255.0))
        near = [np.nextafter(v, np.float32(-1)), v, np.nextafter(v, np.float32(2))]
        x[i, :, 0, :3] = torch.tensor(near)
        hits += sum(np.float32(u * np.float32(255.0)) == a for u in near)
    assert hits >= n  # a tie in every sample
    want = primitive(AUTOAUGMENT_SPACE["Solarize"], 10, 0).apply(x.clone(), {"magnitude": m}, None)
    got = policy_steps_cpu(x, np.full((1, n), CODES["Solarize"]), at[None, :], False)
    assert torch.equal(got, want)
    assert not torch.equal(got, x) and not torch.equal(got, 1.0 - x)


def test_every_pair_of_operations_in_two_steps():
    """Each sample of 81 takes one ordered pair of operations (two steps, each step's operations
    mixed across the samples): the twin's rows operation by operation, step by step."""
    codes = np.array([[a, b] for a in range(1, 10) for b in range(1, 10)]).T  # [2, 81]
    n = codes.shape[1]
    names = {v: k for k, v in CODES.items()}
    numbers = {"Brightness": 1.4, "Color": 0.2, "Contrast": 1.7, "Sharpness": 1.9, "Posterize": 0xE0,
               "Solarize": 150.0 - 1e-3}
    values = np.vectorize(lambda c: numbers.get(names[c], 0.0))(codes).astype(np.float64)
    x = images(n, 3, 13, 19, 4)
    want = x.clone()
    for s in range(2):
        for code in range(1, 10):
            rows = torch.from_numpy(np.flatnonzero(codes[s] == code))
            key = {"Posterize": "mask", "Solarize": "at"}.get(names[code], "factor")
            dtype = torch.int32 if key == "mask" else torch.float32
            column = torch.full((len(rows), 1, 1, 1), numbers.get(names[code], 0.0)).to(dtype)
            want[rows] = apply_columns(names[code], want[rows], {key: column})
    got = policy_steps_cpu(x.clone(), codes, values, True)
    close_but_contrast(got, want, (codes == CODES["Contrast"]).any(0))


@pytest.mark.parametrize("hw", [(1, 1), (2, 5), (5, 2), (2, 2), (3, 3), (3, 40), (1, 30)])
def test_small_images(hw):
    """Images of 2 pixels or fewer a side keep Sharpness as they are (as the twin does); every
    other operation runs on them as on any image."""
    h, w = hw
    part = pixel_part(pp.RandAugment(3, 15))
    n = 24
    x = images(n, 3, h, w, h * w)
    params, draws = sampled(part, n, 1, (h, w))
    compare(part, x, params, draws, owned=False)
    compare(part, x, params, draws, owned=True)
    sharp = policy_steps_cpu(x, np.full((1, n), CODES["Sharpness"]), np.full((1, n), 1.9), False)
    assert sharp.data_ptr() != x.data_ptr()
    assert torch.equal(sharp, x) == (min(h, w) <= 2)


def test_owned_is_written_in_place_and_nothing_to_do_is_x():
    x = images(4, 3, 10, 12, 5)
    before = x.clone()
    got = policy_steps_cpu(x, np.full((1, 4), CODES["Invert"]), np.zeros((1, 4)), True)
    assert got is x and torch.equal(x, 1.0 - before)
    y = images(4, 3, 10, 12, 5)
    assert policy_steps_cpu(y, np.zeros((2, 4)), np.zeros((2, 4)), False) is y
    assert policy_steps_cpu(y[:0], np.zeros((2, 0)), np.zeros((2, 0)), False).shape[0] == 0
    rows = images(8, 3, 10, 12, 6)  # a piece of a batch: rows 2..5, the others untouched
    keep = rows.clone()
    got = policy_steps_cpu(rows[2:6], np.full((1, 4), CODES["Invert"]), np.zeros((1, 4)), True)
    assert got.data_ptr() == rows[2:6].data_ptr()
    assert torch.equal(rows[2:6], 1.0 - keep[2:6]) and torch.equal(rows[:2], keep[:2]) and torch.equal(rows[6:], keep[6:])


@pytest.mark.parametrize("layout", ["channels_last", "slice", "transposed", "channel_view"])
@pytest.mark.parametrize("owned", [False, True])
def test_strided_inputs(layout, owned):
    base = images(12, 3, 18, 22, 9)
    if layout == "channels_last":
        x = base.contiguous(memory_format=torch.channels_last)
    elif layout == "slice":
        x = base[:, :, 2:16, 1:21]
    elif layout == "transposed":
        x = base.transpose(2, 3)
    else:  # one channel of three: each sample's plane contiguous, samples 3 planes apart
        x = base[:, 1:2]
    part = pixel_part(pp.RandAugment(3, 15))
    params, draws = sampled(part, 12, 3, tuple(x.shape[2:]))
    compare(part, x.clone(), params, draws, owned)


def test_wrong_inputs_are_refused():
    with pytest.raises(ValueError, match="1 or 3 channels"):
        policy_steps_cpu(torch.rand(2, 2, 4, 4), np.ones((1, 2)), np.ones((1, 2)), False)
    with pytest.raises(ValueError, match="float32"):
        policy_steps_cpu(torch.rand(2, 3, 4, 4).double(), np.ones((1, 2)), np.ones((1, 2)), False)
    with pytest.raises(ValueError, match="float32"):
        policy_steps_cpu(torch.rand(2, 3, 4, 4).half(), np.ones((1, 2)), np.ones((1, 2)), False)
    with pytest.raises(ValueError, match=r"\[N, C, H, W\]"):
        policy_steps_cpu(torch.rand(3, 4, 4), np.ones((1, 3)), np.ones((1, 3)), False)
    with pytest.raises(ValueError, match="codes must lie in 0..10"):
        policy_steps_cpu(torch.rand(2, 3, 4, 4), np.full((1, 2), 11), np.ones((1, 2)), False)
    with pytest.raises(ValueError, match="codes must lie in 0..10"):
        policy_steps_cpu(torch.rand(2, 3, 4, 4), np.full((1, 2), -1), np.ones((1, 2)), False)


def test_pixel_form_on_the_cpu():
    part = pixel_part(pp.RandAugment(2, 9))
    x = torch.rand(2, 3, 8, 8)
    assert pixel_form(part, x) is not None
    assert pixel_form(part, x[:, :1]) is not None
    assert pixel_form(part, x.double()) is None  # float32 alone: the twin
    assert pixel_form(part, torch.rand(2, 4, 8, 8)) is None  # 1 or 3 channels alone
    geometry = [p for p in pp.RandAugment(2, 9).parts() if p.kind == "geometry"][0]
    assert pixel_form(geometry, x) is None
    with native.disabled():
        assert pixel_form(part, x) is None  # the twin runs


@pytest.mark.parametrize("policy", ["randaugment", "autoaugment-imagenet", "timm-deit"])
def test_the_engine_runs_the_form_on_the_cpu(monkeypatch, policy):
    """A Compose with a policy on the CPU runs the policy's pixel part through policy.c on each
    of the Engine's pieces, and gives the twin's numbers (the engine without forms, and with
    native code off: those two the same bits)."""
    imgs = [torch.randint(0, 256, (60 + k, 50 + 2 * k, 3), dtype=torch.uint8) for k in range(20)]
    batch = pp.ImageBatch.from_list(imgs)
    t = pp.Compose([pp.RandomResizedCrop(48), pp.RandomFlip(), POLICIES[policy](),
                    pp.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
    calls = count_pixel_forms(monkeypatch)
    fast = t(batch, seed=3)
    assert calls and {name for name, _ in calls} == {"PolicySteps"}
    assert sum(rows for _, rows in calls) == len(imgs)  # every piece of the batch
    no_pixel_forms(monkeypatch)
    slow = t(batch, seed=3)
    diff = (fast - slow).abs()
    assert (diff > 1e-5).float().mean().item() < 0.005  # Contrast's mean (module docstring), in normalised units
    assert diff.max().item() < 2.0 / 255.0 / 0.224 + 1e-4
    monkeypatch.undo()
    calls = count_pixel_forms(monkeypatch)
    with native.disabled():
        assert torch.equal(t(batch, seed=3), slow)
    assert calls == []  # no form taken
