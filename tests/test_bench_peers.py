"""The GPU bench's plumbing (bench/gpu_peers.py and its peers): peer names, rows for missing or
failing peers, the header, and the kornia peer on a small CPU batch. The GPU runs themselves are
marked `gpu` and skip without CUDA; no timing is asserted anywhere."""

from __future__ import annotations

import functools
import json
import os
import sys
from datetime import datetime

import pytest
import torch

from pixelpipe import ImageBatch
from pixelpipe.tools.bench import gpu_peers
from pixelpipe.tools.bench.batches import spans
from pixelpipe.tools.bench.gpu_peers import (
    GPU_PEERS,
    PACKAGES,
    bench_header,
    package_versions,
    parse_peers,
    run_contender,
    run_gpu_bench,
)
from pixelpipe.tools.bench.machine import cpu_model

CPU = torch.device("cpu")
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@functools.cache
def _blobs(n: int) -> tuple[bytes, ...]:
    from pixelpipe.tools.datasets import synthetic

    return tuple(b for b, _ in synthetic(n, seed=3))


def _images(n: int, size: tuple[int, int] = (40, 56)) -> ImageBatch:
    g = torch.Generator().manual_seed(0)
    return ImageBatch.from_list([torch.randint(0, 256, (*size, 3), dtype=torch.uint8, generator=g)
                                 for _ in range(n)])


# ----------------------------------------------------------------------------- peer names
class TestParsePeers:
    def test_all_is_every_peer_in_run_order(self):
        assert parse_peers(["all"]) == list(GPU_PEERS)
        assert parse_peers(["dali", "all"]) == list(GPU_PEERS)

    def test_names_are_trimmed_lowered_and_deduplicated(self):
        assert parse_peers([" Kornia", "dali", "kornia", ""]) == ["kornia", "dali"]
        assert parse_peers([]) == []

    @pytest.mark.parametrize("names", [["pillow"], ["dali", "nvjpeg"], ["al"]])
    def test_unknown_names_exit_with_the_list(self, names):
        with pytest.raises(SystemExit) as e:
            parse_peers(names)
        message = str(e.value)
        assert all(p in message for p in (*GPU_PEERS, "all"))

    def test_bench_exits_before_any_work(self, monkeypatch):
        monkeypatch.setattr(gpu_peers, "decode_head", lambda *a: pytest.fail("decoded first"))
        with pytest.raises(SystemExit):
            run_gpu_bench([], "none", "rn50", "cpu", 4, 1, ["bogus"], 1, True, True,
                          augment_only=True)


# ----------------------------------------------------------------------------- rows that fail
class TestRows:
    def test_a_missing_peer_is_a_row_with_rate_zero_and_the_reason(self, monkeypatch):
        from pixelpipe.tools.bench import peer_dali, peer_kornia

        monkeypatch.setitem(sys.modules, "kornia", None)  # "import kornia" raises ImportError
        for name in ("nvidia.dali", "nvidia.dali.plugin", "nvidia.dali.plugin.pytorch"):  # imported or not
            monkeypatch.setitem(sys.modules, name, None)
        images = _images(2)
        rows = [
            run_contender("kornia", lambda: peer_kornia.kornia_augment(images, 4, "rn50", CPU),
                          1, 4, True, "note", CPU),
            run_contender("dali", lambda: peer_dali.dali_full(list(_blobs(2)), "rn50", 2, 1, CPU),
                          1, 2, True, "note", CPU),
        ]
        for r, pip in zip(rows, ("kornia", "nvidia-dali"), strict=True):
            assert r.rate == 0 and r.images == 0
            assert r.note.startswith("not installed") and f"pip install {pip}" in r.note

    def test_a_failing_peer_is_a_row_with_rate_zero_and_the_reason(self, capsys):
        def broken_factory():
            raise RuntimeError("no decoder for you")

        def broken_pass(epoch):
            yield 2
            raise ValueError("bad batch\n" + "x" * 500)

        r1 = run_contender("peer a", broken_factory, 1, 2, True, "", CPU)
        r2 = run_contender("peer b", lambda: broken_pass, 1, 2, True, "", CPU)
        assert r1.rate == 0 and r1.note == "failed: RuntimeError: no decoder for you"
        assert r2.rate == 0 and r2.note.startswith("failed: ValueError: bad batch x")
        assert len(r2.note) <= gpu_peers.NOTE_CHARS
        assert "Traceback" in capsys.readouterr().err  # the whole story goes to stderr

    def test_a_working_contender_is_timed_over_the_passes(self):
        r = run_contender("ok", lambda: lambda epoch: iter([3, 2]), 3, 5, True, "n", CPU)
        assert r.images == 15 and r.seconds > 0 and r.note == "n"


def test_spans_cover_a_pass():
    assert spans(10, 4) == [(0, 4), (4, 4), (8, 2)]
    assert spans(3, 8) == [(0, 3)]
    assert spans(0, 8) == []


# ----------------------------------------------------------------------------- header
class TestHeader:
    def test_header_lists_settings_gpu_and_versions(self):
        versions = {"torch": "2.11.0+cu130", "triton": "3.6.0", "dali": "2.4.0", "kornia": "0.9.0"}
        h = bench_header("rich", "cuda:0", 256, 16, 2, "synthetic (256 JPEGs)", True,
                         versions=versions, gpu="NVIDIA H100 80GB HBM3")
        first, second = h.split("\n")
        for part in ("pipeline=rich", "mode=augment-only", "device=cuda:0", "batch=256",
                     "threads=16", "passes=2", "data=synthetic (256 JPEGs)"):
            assert part in first
        assert str(datetime.now().year) in second and "NVIDIA H100 80GB HBM3" in second
        assert f"CUDA_DEVICE_MAX_CONNECTIONS={os.environ.get('CUDA_DEVICE_MAX_CONNECTIONS', 'unset (8)')}" in second
        assert "CPUs" in second and f"({cpu_model()})" in second
        assert "torch 2.11.0+cu130, triton 3.6.0, dali 2.4.0, kornia 0.9.0" in second
        assert "torchvision" not in second  # absent packages are left out

    def test_versions_come_from_what_is_installed(self):
        import importlib.util

        v = package_versions()
        assert set(v) <= set(PACKAGES) and v["torch"] == torch.__version__
        assert list(v) == [k for k in PACKAGES if k in v]  # a stable order
        assert ("kornia" in v) == (importlib.util.find_spec("kornia") is not None)
        assert ("torchvision" in v) == (importlib.util.find_spec("torchvision") is not None)

    def test_the_cpu_model_comes_from_cpuinfo(self, tmp_path):
        info = tmp_path / "cpuinfo"
        info.write_text("processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R)  Xeon(R) Platinum 8480C\n"
                        "processor\t: 1\nmodel name\t: Intel(R)  Xeon(R) Platinum 8480C\n")
        assert cpu_model(info) == "Intel(R) Xeon(R) Platinum 8480C"
        info.write_text("processor\t: 0\nModel\t\t: Raspberry Pi 4 Model B\n")  # ARM boards say Model
        assert cpu_model(info) == "Raspberry Pi 4 Model B"
        info.write_text("processor\t: 0\n")
        assert cpu_model(info) and cpu_model(tmp_path / "missing")  # platform's answer, never empty

    def test_the_cpu_header_says_there_is_no_gpu(self):
        assert "no GPU" in bench_header("rn50", "cpu", 4, 1, 1, "x", False, versions={})
        assert "CUDA_DEVICE_MAX_CONNECTIONS" not in bench_header("rn50", "cpu", 4, 1, 1, "x", False, versions={})


# ----------------------------------------------------------------------------- runs on the CPU
class TestCpuRun:
    """run_gpu_bench on a CPU device: the same code paths as on a GPU minus the synchronize."""

    def test_json_has_pixelpipe_first_and_every_image(self, capsys):
        blobs = list(_blobs(5))
        results = run_gpu_bench(blobs, "5 synthetic", "rn50", "cpu", 2, 2, [], 2, True, True)
        out = json.loads(capsys.readouterr().out)
        assert [r["name"] for r in out["results"]] == ["pixelpipe"] == [r.name for r in results]
        assert out["results"][0]["images"] == 10 and out["results"][0]["images_per_s"] > 0
        assert out["versions"]["torch"] == torch.__version__
        assert "mode=full" in out["header"]

    def test_augment_only_repeats_the_decoded_batch(self, capsys):
        blobs = list(_blobs(5))
        results = run_gpu_bench(blobs, "5 synthetic", "val", "cpu", 2, 1, [], 1, False, True,
                                augment_only=True)
        assert results[0].images == 5 and results[0].rate > 0
        text = capsys.readouterr().out
        assert "the first 2 images decoded once" in text and "contender" in text

    def test_cache_row_times_epochs_from_the_device_cache(self, capsys):
        import importlib.util

        blobs = list(_blobs(3))
        results = run_gpu_bench(blobs, "3 synthetic", "rn50", "cpu", 2, 1, [], 1, True, True,
                                cache=True)
        names = [r.name for r in results]
        if importlib.util.find_spec("pixelpipe.loader.cache") is None:
            assert names == ["pixelpipe"] and "pixelpipe.loader.cache" in capsys.readouterr().err
        else:
            assert names == ["pixelpipe", "pixelpipe (gpu cache)", "pixelpipe (cache, Pipeline)"]
            for r in results[1:]:
                assert r.images == 3 and r.rate > 0, r.note

    def test_pixelpipe_augment_gives_new_draws_to_repeated_images(self):
        images = _images(2, (64, 80))
        outs = []
        from pixelpipe.compose import Compose

        original = Compose.__call__

        def spy(self, *args, **kwargs):
            outs.append(original(self, *args, **kwargs))
            return outs[-1]

        with pytest.MonkeyPatch.context() as m:
            m.setattr(Compose, "__call__", spy)
            run = gpu_peers.pixelpipe_augment(images, 4, "rn50", 1, CPU)
            assert list(run(1)) == [2, 2]
        assert outs[0].shape == (2, 3, 224, 224) and outs[0].dtype == torch.float16
        assert not torch.equal(outs[0], outs[1])  # same pixels, other indices, other crops


# ----------------------------------------------------------------------------- kornia on the CPU
class TestKorniaPeer:
    """Needs kornia (pip install kornia); it is not part of the test extra."""

    @pytest.fixture(autouse=True)
    def _kornia(self):
        pytest.importorskip("kornia")

    @pytest.mark.parametrize("pipeline", ["rn50", "rich", "val", "randaugment", "simclr"])
    def test_transform_gives_normalised_float16_batches(self, pipeline):
        from pixelpipe.tools.bench.peer_kornia import kornia_transform

        x = torch.rand(3, 3, 256, 256)
        out = kornia_transform(pipeline, CPU)(x)
        assert out.shape == (3, 3, 224, 224) and out.dtype == torch.float16
        assert out.isfinite().all() and out.min() < 0 < out.max()  # normalised, not in [0, 1]

    def test_parameters_are_drawn_per_sample(self):
        from pixelpipe.tools.bench.peer_kornia import kornia_transform

        torch.manual_seed(0)
        x = torch.rand(1, 3, 256, 256).expand(4, -1, -1, -1).contiguous()
        out = kornia_transform("rn50", CPU)(x)
        assert not all(torch.equal(out[0], out[i]) for i in range(1, 4))

    def test_val_is_deterministic(self):
        from pixelpipe.tools.bench.peer_kornia import kornia_transform

        x = torch.rand(2, 3, 256, 256)
        t = kornia_transform("val", CPU)
        assert torch.equal(t(x), t(x))

    def test_augment_only_pass_repeats_the_batch(self):
        from pixelpipe.tools.bench.peer_kornia import kornia_augment, square

        images = _images(3)
        assert square([img.permute(2, 0, 1) for img in images.tolist()]).shape == (3, 3, 256, 256)
        run = kornia_augment(images, 7, "rich", CPU)
        assert list(run(0)) == [3, 3, 1]

    def test_bench_row_on_the_cpu(self, capsys):
        results = run_gpu_bench(list(_blobs(3)), "3 synthetic", "rn50", "cpu", 3, 1, ["kornia"],
                                1, True, True, augment_only=True)
        assert [r.name for r in results] == ["pixelpipe", "kornia"]
        assert results[1].images == 3 and results[1].rate > 0, results[1].note


@pytest.mark.parametrize("pipeline", ["rn50", "rich", "val", "randaugment", "simclr"])
def test_torchvision_transforms_give_normalised_float_images(pipeline):
    """The torchvision peer's v2 list on one uint8 CHW image (what its GPU loop calls per image)."""
    pytest.importorskip("torchvision")
    from torchvision.transforms import v2

    from pixelpipe.tools.bench.peer_torchvision import v2_ops

    torch.manual_seed(0)  # torchvision draws from torch's global generator
    out = v2.Compose(v2_ops(pipeline))(torch.randint(0, 256, (3, 256, 300), dtype=torch.uint8))
    assert out.shape == (3, 224, 224) and out.dtype == torch.float32
    # ImageNet-normalised: [0, 1] maps into [-2.12, 2.64]; a darker view (SimCLR's jitter and
    # grayscale) may lie wholly below the mean, so only the lower side is certain to be negative
    assert -2.2 < out.min() < 0 and out.max() < 2.7 and out.std() > 0


# ----------------------------------------------------------------------------- on a GPU
@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("augment_only", [False, True])
@pytest.mark.parametrize("pipeline", ["rn50", "rich", "val"])
def test_every_installed_peer_runs_on_the_gpu(pipeline, augment_only, capsys):
    blobs = list(_blobs(10))
    results = run_gpu_bench(blobs, "10 synthetic", pipeline, "cuda", 4, 2, ["all"], 1, True, True,
                            augment_only=augment_only, cache=True)
    out = json.loads(capsys.readouterr().out)
    assert out["results"][0]["name"] == "pixelpipe"
    for r in results:
        if not r.note.startswith("not installed"):
            assert r.rate > 0 and r.images == len(blobs), f"{r.name}: {r.note}"


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("pipeline", ["randaugment", "simclr"])
def test_policy_pipelines_run_against_torchvision_and_kornia_on_the_gpu(pipeline, capsys):
    """The issue's comparisons (DALI has no twin of these lists here)."""
    blobs = list(_blobs(10))
    results = run_gpu_bench(blobs, "10 synthetic", pipeline, "cuda", 4, 2, ["torchvision", "kornia"], 1, True, True,
                            augment_only=True)
    for r in results:
        if not r.note.startswith("not installed"):
            assert r.rate > 0 and r.images == len(blobs), f"{r.name}: {r.note}"


@pytest.mark.gpu
@needs_cuda
def test_gpu_header_names_the_device():
    h = bench_header("rn50", "cuda:0", 8, 1, 1, "x", False)
    assert torch.cuda.get_device_name(0) in h and f"torch {torch.__version__}" in h


def test_the_summary_line_compares_with_the_fastest_peer_not_pixelpipes_own_rows(capsys):
    from pixelpipe.tools.bench.timing import Result, print_table

    # Result(name, images, seconds): rates 10, 40, 20 and 5 images/s
    print_table([Result("pixelpipe", 100, 10.0, ""), Result("pixelpipe (gpu cache)", 100, 2.5, ""),
                 Result("dali", 100, 5.0, ""), Result("kornia", 100, 20.0, "")], "header")
    out = capsys.readouterr().out
    assert out.strip().endswith("pixelpipe is 0.50x dali")
    assert "pixelpipe (gpu cache) is 2.00x dali" in out  # its own rows against the fastest peer
    print_table([Result("pixelpipe", 100, 10.0, ""), Result("pixelpipe (gpu cache)", 100, 2.5, "")], "h")
    assert "pixelpipe is" not in capsys.readouterr().out


def test_round_ratios_compare_pixelpipes_own_rows_with_each_peer(capsys):
    from pixelpipe.tools.bench.timing import Result, print_round_ratios

    rounds = [[Result("pixelpipe", 10, 1.0, "", 4.5, 2, 0.0123), Result("pixelpipe (gpu cache)", 100, 1.0, ""),
               Result("dali", 20, 1.0, "")],
              [Result("pixelpipe", 12, 2.0, "", 3.0, 0, 0.0), Result("pixelpipe (gpu cache)", 90, 1.0, ""),
               Result("dali", 0, 0.0, "")]]
    print_round_ratios(rounds)
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines == ["per round, pixelpipe images/s: 10, 6",
                     "per round, pixelpipe CPU and garbage collections: 4.5 cores, 2 in 12 ms; 1.5 cores, 0 in 0 ms",
                     "per round, pixelpipe (gpu cache) images/s: 100, 90",
                     "per round, pixelpipe (gpu cache) CPU and garbage collections: 0.0 cores, 0 in 0 ms; "
                     "0.0 cores, 0 in 0 ms",
                     "per round, dali images/s: 20, 0",
                     "per round, dali CPU and garbage collections: 0.0 cores, 0 in 0 ms; -",
                     "per round, pixelpipe / pixelpipe (gpu cache): 0.10, 0.07",
                     "per round, pixelpipe / dali: 0.50, -",
                     "per round, pixelpipe (gpu cache) / dali: 5.00, -"]


def test_round_spread_gives_the_median_ratio_and_says_when_the_rounds_disagree(capsys):
    from pixelpipe.tools.bench.timing import Result, print_round_ratios, print_spread

    def rounds(ours, theirs):
        return [[Result("pixelpipe", a, 1.0, ""), Result("dali", b, 1.0, "")] for a, b in zip(ours, theirs)]

    print_round_ratios(rounds([97, 83, 103, 107], [100, 100, 100, 100]))
    last = capsys.readouterr().out.strip().splitlines()[-1]
    # ratios 0.97, 0.83, 1.03, 1.07: median of the middle two, (0.97 + 1.03) / 2
    assert last == ("pixelpipe / dali over 4 rounds: median 1.00, range 0.83-1.07; the rounds disagree "
                    "on which is faster (more rounds, --rounds, narrow it)")
    print_spread("pixelpipe", "dali", [1.2, 1.1, 1.3])
    assert capsys.readouterr().out.strip() == "pixelpipe / dali over 3 rounds: median 1.20, range 1.10-1.30"
    print_spread("pixelpipe", "dali", [1.2, 0.9])  # two rounds: nothing to say
    print_round_ratios(rounds([10, 12, 14], [20, 0, 0]))  # one usable round against dali
    assert "over" not in capsys.readouterr().out


def test_a_short_epoch_is_noted_under_the_header():
    from pixelpipe.tools.bench.gpu_peers import SHORT_EPOCH, short_epoch_note

    note = short_epoch_note(64, 256)
    assert "an epoch of 64 samples is 1 batch(es) of 256" in note and "192 padding sample(s)" in note
    assert "(300% more work than counted)" in note and f"at least {SHORT_EPOCH * 256} samples" in note
    assert "80 padding" in short_epoch_note(1200, 256) and "(7% more work" in short_epoch_note(1200, 256)
    assert short_epoch_note(SHORT_EPOCH * 256, 256) == "" and short_epoch_note(0, 256) == ""


def test_round_spread_for_each_of_pixelpipes_rows_against_each_peer(capsys):
    """pixelpipe's other rows (its in-memory row beside its file row) get their spread against
    each peer too: a twin row's ratio is read off one line, not worked out from the rounds."""
    from pixelpipe.tools.bench.timing import Result, print_round_ratios

    names = ["pixelpipe (files)", "pixelpipe (memory)", "dali (files)", "dali (memory)"]
    rates = [[10, 20, 10, 10], [11, 22, 10, 10], [12, 24, 10, 10]]
    print_round_ratios([[Result(n, r, 1.0, "") for n, r in zip(names, row)] for row in rates])
    spreads = [line for line in capsys.readouterr().out.splitlines() if " rounds: median " in line]
    assert spreads == ["pixelpipe (files) / dali (files) over 3 rounds: median 1.10, range 1.00-1.20",
                       "pixelpipe (files) / dali (memory) over 3 rounds: median 1.10, range 1.00-1.20",
                       "pixelpipe (memory) / dali (files) over 3 rounds: median 2.20, range 2.00-2.40",
                       "pixelpipe (memory) / dali (memory) over 3 rounds: median 2.20, range 2.00-2.40"]


def test_the_built_in_set_is_written_to_files_for_the_files_rows(capsys):
    """On a GPU the built-in set goes through a Pipeline over files too: written to a temporary
    folder in order, byte for byte; the GPU rows then read them (here on the CPU device)."""
    from pixelpipe.tools.bench.images import load_images, written

    blobs, what = load_images(None, 5)
    paths = written(blobs)
    assert [open(p, "rb").read() for p in paths] == blobs and paths == sorted(paths)
    results = gpu_peers.run_gpu_bench(blobs, what, "rn50", "cpu", 2, 1, [], 1, True, True, files=paths)
    assert [r.name for r in results] == ["pixelpipe (files)", "pixelpipe (memory)"]
    assert all(r.images == 5 and r.rate > 0 for r in results)
    capsys.readouterr()
