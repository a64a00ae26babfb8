"""benchmarks/ddp_scaling.py, the scale-out run, on the CPU with gloo: 1 and 2 processes under
torchrun, its own checks passing (exactly-once coverage, equal batch counts, the same
augmentation for a sample whatever the world size)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "ddp_scaling.py"


def test_one_and_two_cpu_processes_pass_the_checks():
    done = subprocess.run([sys.executable, str(SCRIPT), "--device", "cpu", "--gpus", "1,2", "--loaders", "pixelpipe",
                           "--models", "none", "--synthetic", "24", "--repeat", "1", "--batch", "8", "--warmup", "1",
                           "--steps", "2", "--epochs", "2", "--threads", "1", "--timeout", "300"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert [r["world"] for r in rows] == [1, 2]
    for r in rows:
        assert r["exactly_once"] and r["checks_ok"] and len(set(r["steps"])) == 1 and r["rate"] > 0
    assert rows[1]["batches_per_epoch"] == [2, 2] and rows[0]["batches_per_epoch"] == [3, 3]
    assert "24 samples in every pixelpipe run, largest thumbnail difference 0.0000" in done.stdout
