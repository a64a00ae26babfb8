"""benchmarks/heldout_set.py (a held-out JPEG set, the same files on every run) and
benchmarks/pipeline_ab.py (a Pipeline alone, two trees alternating) on stand-ins, and
gpu_decoding_ab.py's settings; no GPU."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
heldout_set = pytest.importorskip("heldout_set")
pipeline_ab = pytest.importorskip("pipeline_ab")


def _photos(folder: Path) -> list[bytes]:
    folder.mkdir()
    rng = np.random.default_rng(0)
    out = []
    for i, (h, w) in enumerate([(120, 90), (64, 160)]):
        buf = io.BytesIO()
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(buf, "JPEG", quality=90)
        (folder / f"p{i}.jpg").write_bytes(buf.getvalue())
        out.append(buf.getvalue())
    return out


def test_heldout_set_writes_the_same_varied_jpegs_every_time(tmp_path, monkeypatch, capsys):
    _photos(tmp_path / "src")
    written = []
    for run in ("a", "b"):
        monkeypatch.setattr(sys, "argv", ["heldout_set.py", "--out", str(tmp_path / run), "--synthetic", "3",
                                          "--photos", str(tmp_path / "src"), "--variants", "3"])
        heldout_set.main()
        written.append({p.name: p.read_bytes() for p in sorted((tmp_path / run).iterdir())})
    assert written[0] == written[1] and len(written[0]) == 3 + 2 * 3
    assert "9 JPEGs in" in capsys.readouterr().out
    sizes = {Image.open(io.BytesIO(b)).size for b in written[0].values()}
    assert len(sizes) >= 7  # rescaled and recropped: other sizes than the two sources'
    assert all(Image.open(io.BytesIO(b)).format == "JPEG" for b in written[0].values())


def test_heldout_set_refuses_nothing_to_write(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["heldout_set.py", "--out", str(tmp_path / "o"), "--synthetic", "0"])
    with pytest.raises(SystemExit):
        heldout_set.main()


FAKE = '''
import os, sys
tree = os.environ["PYTHONPATH"].split(os.pathsep)[0]
name = os.path.basename(os.path.dirname(tree))
rate = {"old": 20000.0, "new": 22000.0}[name] * (1.0 if sys.argv[1] == "memory" else 0.5)
print("RATE", rate if "fail" not in sys.argv[2] else 0.0)
'''


def _ab(tmp_path, monkeypatch, capsys, *args: str) -> str:
    """pipeline_ab's output over two stand-in trees, the child the FAKE above."""
    for name in ("old", "new"):
        (tmp_path / name / "src").mkdir(parents=True)
    monkeypatch.setattr(pipeline_ab, "CHILD", FAKE)
    monkeypatch.setattr(sys, "argv", ["pipeline_ab.py", "--trees", f"{tmp_path / 'old'},{tmp_path / 'new'}", *args])
    pipeline_ab.main()
    return capsys.readouterr().out


def test_pipeline_ab_alternates_the_trees_and_sums_up(tmp_path, monkeypatch, capsys):
    out = _ab(tmp_path, monkeypatch, capsys, "--data", "somewhere", "--rounds", "2", "--seconds", "0.1")
    runs = [line.split()[1:4] for line in out.splitlines() if line.startswith("round")]
    assert [r[2] for r in runs] == ["old", "new", "old", "new", "new", "old", "new", "old"]
    assert "memory: old 20,000 (20,000-20,000), new 22,000 (22,000-22,000), new / old per round 1.10 (1.10-1.10)" in out
    assert "files: old 10,000" in out


def test_pipeline_ab_says_a_failed_run(tmp_path, monkeypatch, capsys):
    out = _ab(tmp_path, monkeypatch, capsys, "--data", "fail", "--rounds", "1", "--modes", "files")
    assert out.count("failed") == 2 and "files: no pair of runs" in out


def test_decoding_ab_settings_split_the_pipelines_threads_from_the_decoders() -> None:
    """benchmarks/gpu_decoding_ab.py's settings: GpuDecoding's keywords checked before any run,
    `threads` kept for the Pipeline's num_threads."""
    gpu_decoding_ab = pytest.importorskip("gpu_decoding_ab")
    assert gpu_decoding_ab.setting("threads=8,hw_fraction=0.9") == {"threads": 8, "hw_fraction": 0.9}
    assert gpu_decoding_ab.setting("hw_fraction=none,roi=false") == {"hw_fraction": None, "roi": False}
    with pytest.raises(ValueError, match="hw_fraction"):
        gpu_decoding_ab.setting("hw_fraction=2")
    with pytest.raises(TypeError):
        gpu_decoding_ab.setting("threads_per_lane=3")
    assert gpu_decoding_ab.setting("executor=pixelpipe,lanes=2") == {"executor": "pixelpipe", "lanes": 2}
    with pytest.raises(SystemExit, match="pixelpipe or nvimgcodec"):
        gpu_decoding_ab.setting("executor=dali")
