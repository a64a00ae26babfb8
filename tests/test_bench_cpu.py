"""The CPU bench's rounds (bench/runner.py): every contender runs once per round, each one's
median round is reported, the JSON keeps every round. Its Pillow peer (pillow_loop.py) runs the
measured pipeline's own ops, for every pipeline and preset, and is the default peer wherever the
bench runs on the CPU (--device cpu, or auto without CUDA). No timing is asserted."""

from __future__ import annotations

import json

import pytest

from pixelpipe.tools.bench.runner import run_bench
from pixelpipe.tools.bench.timing import Result, _median_result


def test_median_result_picks_the_middle_rate():
    runs = [Result("x", 100, 1.0, "n"), Result("x", 100, 4.0, "n"), Result("x", 100, 2.0, "n")]
    got = _median_result(runs)
    assert (got.images, got.seconds) == (100, 2.0) and got.note == "n; median of 3 rounds"
    even = _median_result(runs + [Result("x", 100, 3.0, "n")])  # the lower middle one
    assert even.seconds == 3.0
    assert _median_result(runs[:1]).note == "n"


def test_rounds_run_every_contender_and_report_medians(capsys):
    results = run_bench(None, "rn50", "cpu", 8, 1, ["pillow"], 1, 12, True, True, rounds=3)
    out = json.loads(capsys.readouterr().out)
    assert [r.name for r in results] == ["pixelpipe (cpu)", "pillow loop (cpu)"]
    assert len(out["rounds"]) == 3 and all(len(row) == 2 for row in out["rounds"])
    for k, r in enumerate(results):
        rates = sorted(row[k]["images_per_s"] for row in out["rounds"])
        assert r.rate == pytest.approx(rates[1])  # the median round
        assert all(row[k]["images"] == 12 for row in out["rounds"])  # one pass of 12 images
    assert "rounds=3" in out["header"]


def test_rounds_must_be_positive():
    with pytest.raises(SystemExit, match="rounds"):
        run_bench(None, "rn50", "cpu", 8, 1, [], 1, 4, True, True, rounds=0)


def test_the_cli_passes_rounds_and_refuses_bad_ones(capsys):
    from pixelpipe.tools.cli import main

    assert main(["bench", "--device", "cpu", "-n", "6", "--batch", "3", "--threads", "1", "--passes", "1",
                 "--rounds", "2", "--json", "--quiet"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["rounds"]) == 2 and "rounds=2" in out["header"]
    for bad in (["--rounds", "0"], ["--seconds", "-1"]):
        with pytest.raises(SystemExit) as e:
            main(["bench", *bad])
        assert e.value.code == 2


def test_rounds_alternate_the_order_and_report_each_median():
    """in_rounds runs every job once per round, the order reversed every other round, and
    reports each job's median round (the lower middle one for an even count)."""
    from pixelpipe.tools.bench.timing import Result, in_rounds

    calls = []
    rates = {"a": iter([10.0, 30.0, 20.0]), "b": iter([5.0, 1.0, 3.0])}

    def job(name):
        def run():
            calls.append(name)
            return Result(name, int(next(rates[name]) * 10), 10.0)
        return run

    results, per_round = in_rounds([job("a"), job("b")], 3)
    assert calls == ["a", "b", "b", "a", "a", "b"]
    assert [r.rate for r in results] == [20.0, 3.0]
    assert [[r.rate for r in row] for row in per_round] == [[10.0, 5.0], [30.0, 1.0], [20.0, 3.0]]


def test_time_runs_keeps_timing_passes_until_the_seconds_have_passed():
    """With seconds, a fast contender runs more passes than asked (every pass counted) and a
    slow one at least the passes asked."""
    import time

    from pixelpipe.tools.bench.timing import time_runs

    epochs = []

    def run_pass(epoch):
        epochs.append(epoch)
        time.sleep(0.01)
        yield 4

    r = time_runs("fast", run_pass, 2, 4, quiet=True, seconds=0.2)
    timed = epochs[1:]  # the first is the warm-up
    assert timed == list(range(1, len(timed) + 1)) and len(timed) >= 10
    assert r.images == 4 * len(timed) and r.seconds >= 0.2
    epochs.clear()
    r = time_runs("slow", run_pass, 3, 4, quiet=True, seconds=0.001)
    assert epochs == [0, 1, 2, 3] and r.images == 12


def test_time_runs_drains_after_the_warm_up_and_inside_the_clock() -> None:
    """drain (a CUDA synchronize in the GPU bench) runs once after the warm-up pass and once
    after the last timed pass, and its time counts: the clock stops when the device is done."""
    import time

    from pixelpipe.tools.bench.timing import time_runs

    log = []

    def run_pass(epoch):
        log.append(("pass", epoch))
        yield 4

    def drain():
        log.append(("drain",))
        time.sleep(0.2)

    r = time_runs("drained", run_pass, 3, 4, quiet=True, drain=drain)
    assert log == [("pass", 0), ("drain",), ("pass", 1), ("pass", 2), ("pass", 3), ("drain",)]
    assert r.images == 12 and r.seconds >= 0.2  # the final drain is inside the clock


def test_time_runs_records_cpu_time_and_the_collections_of_the_timed_passes_only() -> None:
    """Result.cpu_seconds is the process's CPU time of the timed passes (a pass that burns
    0.15 s of CPU per epoch shows about that much, a sleeping one about none), and
    gc_collections / gc_seconds count the collections that ran inside them, not the warm-up's."""
    import gc
    import time

    from pixelpipe.tools.bench.timing import time_runs

    def burn(epoch):
        end = time.process_time() + 0.15
        while time.process_time() < end:
            pass
        if epoch:  # one collection per timed pass
            gc.collect()
        else:
            gc.collect()
            gc.collect()
        yield 4

    r = time_runs("burn", burn, 2, 4, quiet=True)
    assert 0.25 <= r.cpu_seconds <= r.seconds * 2.5
    assert r.gc_collections >= 2  # one per gc.collect() of a timed pass
    assert r.gc_collections <= 4  # the warm-up's two, and the one before the clock, left out
    assert 0 < r.gc_seconds < r.seconds

    def sleep(epoch):
        time.sleep(0.1)
        yield 4

    r = time_runs("sleep", sleep, 2, 4, quiet=True)
    assert r.cpu_seconds < 0.1 and r.seconds >= 0.2 and r.gc_collections <= 1


def test_a_contender_with_fallbacks_says_so_in_its_note() -> None:
    """A run with pipeline statistics (pixelpipe_full's) that counted CPU fallbacks gets their
    share in its note; one without fallbacks keeps its note."""
    import torch

    from pixelpipe.engine.stats import BatchDecode, DecodeStats
    from pixelpipe.tools.bench.gpu_peers import run_contender

    def contender(fallbacks: int):
        def make():
            def run(epoch: int):
                yield 8

            run.stats = DecodeStats()
            run.stats.add(BatchDecode(gpu=8 - fallbacks, fallbacks=[(i, "png") for i in range(fallbacks)]))
            return run
        return make

    cpu = torch.device("cpu")
    with_some = run_contender("pixelpipe", contender(2), 1, 8, True, "Pipeline", cpu)
    assert with_some.note == "Pipeline; 25% decoded on the CPU (not JPEGs nvImageCodec takes)"
    assert run_contender("pixelpipe", contender(0), 1, 8, True, "Pipeline", cpu).note == "Pipeline"


def test_a_contender_names_its_gpu_decoders_settings() -> None:
    import types

    import torch

    from pixelpipe.tools.bench.gpu_peers import run_contender

    def make():
        def run(epoch: int):
            yield 8

        run.decoder = lambda: types.SimpleNamespace(api="c", hw_fraction=0.75, roi_decode=False, lanes=1)
        return run

    got = run_contender("pixelpipe", make, 1, 8, True, "Pipeline", torch.device("cpu")).note
    assert got == "Pipeline; nvImageCodec c API, hw_fraction 0.75, regions off, 1 lane(s)"


def test_cuda_without_a_cuda_device_exits_with_a_message() -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    with pytest.raises(SystemExit, match="--device cuda: torch sees no CUDA device"):
        run_bench(None, "rn50", "cuda", None, 1, [], 1, 4, False, True)


def _jpeg(h: int = 180, w: int = 240) -> bytes:
    import io

    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    arr = (rng.random((h, w, 3)) * 60 + np.linspace(0, 190, w)[None, :, None]).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, "JPEG", quality=90)
    return buf.getvalue()


@pytest.mark.parametrize("name", ["rn50", "rich", "val", "fastai_like", "heavy", "light", "imagenet_train",
                                  "imagenet_val", "randaugment", "simclr", "deit"])
def test_the_pillow_loop_runs_the_pipelines_own_ops(name):
    """One Pillow op per pixelpipe op (Normalize is the loop's own last step), every one run
    (p=1 where an op has a probability would not change the count), float16 CHW out."""
    import numpy as np

    from pixelpipe.ops import Normalize
    from pixelpipe.tools.bench.pillow_loop import pillow_ops, run_one
    from pixelpipe.tools.bench.pipelines import pipeline_ops

    ops = pillow_ops(name)
    assert len(ops) == sum(not isinstance(op, Normalize) for op in pipeline_ops(name))
    data = _jpeg()
    for seed in range(6):  # the random branches of every op
        out = run_one(data, seed, ops)
        assert out.shape == (3, 224, 224) and out.dtype == np.float16 and np.isfinite(out).all()


def test_the_rich_pillow_loop_is_not_the_val_one():
    """The Pillow peer once ran the val transforms for every pipeline but rn50."""
    from pixelpipe.tools.bench.pillow_loop import pillow_ops

    assert len(pillow_ops("rich")) == 4 and len(pillow_ops("val")) == 2
    with pytest.raises(ValueError, match="no Pillow loop"):
        pillow_ops("nope")


def test_presets_are_bench_pipelines(capsys):
    from pixelpipe.presets import PRESETS
    from pixelpipe.tools.bench.pipelines import BENCH_PIPELINES, pipeline_ops

    for name in PRESETS:
        if name == "yolo":  # a detection preset with a batch op: no per-image peer
            assert name not in BENCH_PIPELINES
            continue
        assert name in BENCH_PIPELINES
        assert [type(op) for op in pipeline_ops(name, 64)] == [type(op) for op in PRESETS[name](64).ops]
    results = run_bench(None, "heavy", "cpu", 4, 1, ["pillow"], 1, 4, True, True)
    assert [r.name for r in results] == ["pixelpipe (cpu)", "pillow loop (cpu)"]
    assert "pipeline=heavy" in json.loads(capsys.readouterr().out)["header"]
    with pytest.raises(SystemExit, match="unknown pipeline"):
        run_bench(None, "nope", "cpu", 4, 1, [], 1, 4, True, True)


def test_auto_on_a_machine_without_cuda_compares_with_pillow(capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device: auto means cuda here")
    results = run_bench(None, "rn50", "auto", 4, 1, None, 1, 4, True, True)
    assert [r.name for r in results] == ["pixelpipe (cpu)", "pillow loop (cpu)"]
    assert run_bench(None, "rn50", "auto", 4, 1, [], 1, 4, True, True)[-1].name == "pixelpipe (cpu)"


def test_the_cli_takes_presets_and_no_peers(capsys):
    import torch

    from pixelpipe.tools.cli import main

    args = ["bench", "-n", "4", "--batch", "4", "--threads", "1", "--passes", "1", "--json", "--quiet"]
    assert main([*args, "--device", "cpu", "--pipeline", "light", "--peers", "none"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [r["name"] for r in out["results"]] == ["pixelpipe (cpu)"] and "pipeline=light" in out["header"]
    if not torch.cuda.is_available():  # plain `pixelpipe bench` (device auto) has the Pillow peer
        assert main([*args, "--pipeline", "fastai_like"]) == 0
        out = json.loads(capsys.readouterr().out)
        assert [r["name"] for r in out["results"]] == ["pixelpipe (cpu)", "pillow loop (cpu)"]
    with pytest.raises(SystemExit) as e:
        main(["bench", "--pipeline", "nope"])
    assert e.value.code == 2


def test_torchvision_has_every_pipeline_the_pillow_loop_has() -> None:
    """The torchvision peer mirrors every pipeline and preset the Pillow loop runs, and its
    transforms make 224 x 224 normalised images from an image of any size."""
    pytest.importorskip("torchvision", exc_type=ImportError)
    import torch
    from torchvision.transforms import v2

    from pixelpipe.tools.bench import pillow_loop
    from pixelpipe.tools.bench.peer_torchvision import v2_ops

    torch.manual_seed(0)
    image = torch.randint(0, 256, (3, 180, 260), dtype=torch.uint8)
    names = [n for n in ("rn50", "rich", "val", "randaugment", "imagenet_train", "imagenet_val", "light", "heavy",
                         "deit", "simclr", "fastai_like") if pillow_loop.pillow_ops(n)]
    for name in names:
        out = v2.Compose(v2_ops(name))(image)
        assert out.shape == (3, 224, 224) and out.dtype == torch.float32, name
        assert out.min() < 0 < out.max(), name  # normalised
    with pytest.raises(ValueError, match="no torchvision pipeline"):
        v2_ops("ssd")


def test_the_torchvision_dataloader_is_a_cpu_peer(capsys) -> None:
    pytest.importorskip("torchvision", exc_type=ImportError)
    results = run_bench(None, "rn50", "cpu", 4, 1, ["torchvision"], 1, 8, True, True)
    assert [r.name for r in results] == ["pixelpipe (cpu)", "torchvision DataLoader (cpu)"]
    assert all(r.rate > 0 for r in results)


def test_a_contender_is_freed_before_the_next_is_built() -> None:
    """run_contender drops its references to the contender before its own garbage collection, so
    that a contender held in reference cycles (a DALI pipeline and its threads) is gone when
    run_contender returns, not at some later collection while the next contender runs."""
    import gc
    import weakref

    import torch

    from pixelpipe.tools.bench.gpu_peers import run_contender

    class Contender:  # in a reference cycle, as a DALI pipeline's Python objects are
        def __init__(self) -> None:
            self.me = self

        def __call__(self, epoch: int):
            yield 8

        def notes(self) -> list[str]:
            return []

    made: list[weakref.ref] = []

    def make():
        c = Contender()
        made.append(weakref.ref(c))
        return c

    enabled = gc.isenabled()
    gc.disable()  # only run_contender's own collection may free it
    try:
        run_contender("cycle", make, 1, 8, True, "", torch.device("cpu"))
        assert made and made[0]() is None
    finally:
        if enabled:
            gc.enable()
