"""The CPU bench's rounds (bench/runner.py): every contender runs once per round, each one's
median round is reported, the JSON keeps every round. No timing is asserted."""

from __future__ import annotations

import json

import pytest

from pixelpipe.bench.runner import Result, _median_result, run_bench


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


def test_the_cli_passes_rounds_and_refuses_them_on_cuda(capsys):
    from pixelpipe.cli import main

    assert main(["bench", "--device", "cpu", "-n", "6", "--batch", "3", "--threads", "1", "--passes", "1",
                 "--rounds", "2", "--json", "--quiet"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["rounds"]) == 2 and "rounds=2" in out["header"]
    for bad in (["--rounds", "0"], ["--device", "cuda", "--rounds", "3"]):
        with pytest.raises(SystemExit) as e:
            main(["bench", *bad])
        assert e.value.code == 2
