"""benchmarks/train_ab.py on a stand-in for train_throughput.py (no GPU needed): runs alternate
between the two trees with each tree's src first on PYTHONPATH, rates and waiting shares are read
from train_throughput's lines, and the summary gives each tree's median and range and the
per-round ratio new / old; a run that prints no result line counts as failed."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
train_ab = pytest.importorskip("train_ab")

FAKE = '''
import os, sys
tree = os.environ["PYTHONPATH"].split(os.pathsep)[0]
rate = {"old": "8,000", "new": "9,200"}.get(os.path.basename(os.path.dirname(tree)), "")
if "--fail" in sys.argv or not rate:
    print("resnet18 pixelpipe: failed")
else:
    print(f"resnet18  pixelpipe    train     {rate} img/s   nan of synthetic  waiting  12.5%  loader alone    17,000 img/s")
'''


def _trees(tmp_path):
    for name in ("old", "new"):
        (tmp_path / name / "src" / "pixelpipe").mkdir(parents=True)
    fake = tmp_path / "bench"
    fake.mkdir()
    (fake / "train_throughput.py").write_text(FAKE)
    return fake


def test_alternating_runs_and_their_summary(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(train_ab, "HERE", _trees(tmp_path))
    monkeypatch.setattr(sys, "argv", ["train_ab.py", "--trees", f"{tmp_path / 'old'},{tmp_path / 'new'}",
                                      "--rounds", "2", "--", "--data", "x"])
    train_ab.main()
    out = capsys.readouterr().out
    rounds = [line.split()[2] for line in out.splitlines() if line.startswith("round")]
    assert rounds == ["old", "new", "new", "old"]  # the order flips every round
    assert "| old `" in out and "8,000 (8,000-8,000)" in out and "9,200 (9,200-9,200)" in out
    assert "12.5 (12.5-12.5)" in out and "17,000" in out
    assert "new / old, per round: 1.15 (1.15-1.15) over 2 rounds" in out


def test_a_run_without_a_result_line_is_failed_and_left_out(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(train_ab, "HERE", _trees(tmp_path))
    assert train_ab.one_run(tmp_path / "old", ["--fail"], 60) is None
    assert train_ab.one_run(tmp_path / "new", [], 60) == (9200.0, 12.5, 17000.0)
    monkeypatch.setattr(sys, "argv", ["train_ab.py", "--trees", f"{tmp_path / 'old'},{tmp_path}", "--", "x"])
    with pytest.raises(SystemExit, match="two folders"):
        train_ab.main()
