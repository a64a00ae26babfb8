"""benchmarks/train_throughput.py --sched: the flag each name gives cudaSetDeviceFlags, and a
refusal ends the run (a stand-in runtime: no GPU needed)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
train_throughput = pytest.importorskip("train_throughput")


class FakeRuntime:
    def __init__(self, status: int = 0) -> None:
        self.status, self.flags = status, 0

    def cudaSetDeviceFlags(self, flags):
        if self.status == 0:
            self.flags = flags.value | 0x8  # the runtime reports cudaDeviceMapHost beside the schedule
        return self.status

    def cudaGetDeviceFlags(self, out):
        out._obj.value = self.flags
        return 0


@pytest.mark.parametrize("name, flag", [("auto", 0), ("spin", 1), ("yield", 2), ("blocking", 4)])
def test_each_schedule_sets_its_flag(name, flag, monkeypatch, capsys):
    from pixelpipe.decode import cudart

    fake = FakeRuntime()
    monkeypatch.setattr(cudart, "runtime", lambda: fake)
    train_throughput.set_sched(name)
    assert fake.flags == flag | 0x8
    assert f"--sched {name}" in capsys.readouterr().out


def test_a_refusal_ends_the_run(monkeypatch):
    from pixelpipe.decode import cudart

    monkeypatch.setattr(cudart, "runtime", lambda: FakeRuntime(status=708))
    with pytest.raises(SystemExit, match="returned 708"):
        train_throughput.set_sched("blocking")
    monkeypatch.setattr(cudart, "runtime", lambda: None)
    with pytest.raises(SystemExit, match="no CUDA runtime"):
        train_throughput.set_sched("spin")
