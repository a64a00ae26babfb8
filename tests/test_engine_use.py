"""How busy the GPU's JPEG engines were during a bench run (bench/engine_use.py): NVML's samples
read by their value type, averaged over the timed window only, carried into the bench's results
and printed. NVML itself is faked on the CPU; the test against the real NVML and the hardware
JPEG decoder is marked `gpu` and skips without them."""

from __future__ import annotations

import time

import pytest
import torch

from pixelpipe.tools.bench import engine_use
from pixelpipe.tools.bench.engine_use import (
    GPU_UTILIZATION,
    JPG_UTILIZATION,
    EngineMeter,
    Sample,
    Usage,
    open_meter,
    sample_values,
    window_mean,
)
from pixelpipe.tools.bench.timing import Result, print_round_ratios, print_table, time_runs


def test_samples_are_read_by_their_value_type():
    buf = (Sample * 2)()
    buf[0].time, buf[1].time = 5, 7
    buf[0].value.ui, buf[1].value.ui = 40, 100  # NVML_VALUE_TYPE_UNSIGNED_INT
    assert sample_values(buf, 1) == [(5, 40.0), (7, 100.0)]
    buf[0].value.d = 12.5  # the same bytes read as a double
    assert sample_values(buf[:1], 0) == [(5, 12.5)]
    assert sample_values(buf, 99) is None  # a type this does not know: no figure, not a wrong one


def test_the_window_mean_takes_only_samples_inside_it():
    samples = [(100, 90.0), (150, 10.0), (200, 20.0), (250, 70.0)]
    assert window_mean(samples, 100, 200) == 15.0  # 150 and 200; 100 is the start itself
    assert window_mean(samples, 250, 300) is None
    assert window_mean([], 0, 10) is None


class FakeNvml:
    """NVML's samples as the meter would read them; records what it was asked."""

    def __init__(self, jpeg: list[tuple[int, float]] | None, gpu: list[tuple[int, float]] | None) -> None:
        self.samples = {JPG_UTILIZATION: jpeg, GPU_UTILIZATION: gpu}
        self.asked: list[tuple[int, int]] = []

    def __call__(self, kind: int, since_us: int):
        self.asked.append((kind, since_us))
        got = self.samples[kind]
        return None if got is None else [(t, v) for t, v in got if t > since_us]


class Clock:
    def __init__(self, *times: float) -> None:
        self.times = list(times)

    def __call__(self) -> float:
        return self.times.pop(0)


def test_the_meter_averages_the_samples_between_start_and_stop():
    s = 1_000_000  # microseconds per second
    nvml = FakeNvml(jpeg=[(9 * s, 0.0), (10 * s + 5, 80.0), (11 * s, 100.0), (13 * s, 0.0)], gpu=None)
    meter = EngineMeter(nvml, Clock(10.0, 12.0))
    assert meter.stop() is None  # never started
    meter.start()
    assert meter.stop() == Usage(jpeg=90.0, kernels=None)  # the samples at 10 s + 5 µs and 11 s
    assert nvml.asked == [(JPG_UTILIZATION, 10 * s), (GPU_UTILIZATION, 10 * s)]


def test_the_meter_says_nothing_when_nvml_has_nothing():
    meter = EngineMeter(FakeNvml(None, None), Clock(1.0, 2.0))
    meter.start()
    assert meter.stop() is None
    meter = EngineMeter(FakeNvml([], [(1_500_000, 30.0)]), Clock(1.0, 2.0))  # no JPEG sample in the window
    meter.start()
    assert meter.stop() == Usage(jpeg=None, kernels=30.0)


def test_no_meter_without_a_cuda_device():
    assert open_meter(torch.device("cpu")) is None


def test_no_nvml_library_or_a_failed_init_means_no_nvml(monkeypatch):
    def missing():
        raise OSError("libnvidia-ml.so.1: cannot open shared object file")

    monkeypatch.setattr(engine_use, "_NVML", [])
    monkeypatch.setattr(engine_use, "_load_library", missing)
    assert engine_use._nvml() is None

    class Uninitialised:  # a driver whose NVML refuses to start
        @staticmethod
        def nvmlInit_v2():
            return 9  # NVML_ERROR_DRIVER_NOT_LOADED

    monkeypatch.setattr(engine_use, "_NVML", [])
    monkeypatch.setattr(engine_use, "_load_library", Uninitialised)
    assert engine_use._nvml() is None


def test_time_runs_measures_the_timed_passes_and_the_table_prints_them(capsys):
    class Meter:
        calls: list[str] = []

        def start(self):
            self.calls.append("start")

        def stop(self):
            self.calls.append("stop")
            return Usage(jpeg=93.6, kernels=41.2)

    def run(epoch):
        Meter.calls.append(f"pass {epoch}")
        yield 4

    r = time_runs("pixelpipe", run, 2, 4, quiet=True, meter=Meter())
    # pass 0 is the warm-up, outside the window
    assert Meter.calls == ["pass 0", "start", "pass 1", "pass 2", "stop"]
    assert (r.jpeg_busy, r.gpu_busy) == (93.6, 41.2)
    print_table([r, Result("dali", 8, 1.0, "", jpeg_busy=71.0), Result("kornia", 8, 1.0, "")], "header")
    out = capsys.readouterr().out
    assert "  pixelpipe                    NVJPG   94%   kernels   41%" in out
    assert "  dali                         NVJPG   71%   kernels     -" in out
    assert "kornia " not in out.split("GPU use")[1]  # no figures, no line
    assert "NVJPG at 90% or more" in out


def test_no_gpu_use_block_without_figures(capsys):
    print_table([Result("pixelpipe", 8, 1.0, ""), Result("dali", 8, 1.0, "", jpeg_busy=50.0)], "h")
    out = capsys.readouterr().out
    assert "GPU use" in out and "90% or more" not in out
    print_table([Result("pixelpipe (cpu)", 8, 1.0, "")], "h")
    assert "GPU use" not in capsys.readouterr().out
    print_round_ratios([[Result("pixelpipe", 8, 1.0, "", jpeg_busy=90.0)], [Result("pixelpipe", 8, 1.0, "")]])
    assert "per round, pixelpipe NVJPG busy: 90%, -" in capsys.readouterr().out


# ------------------------------------------------------------------------------- on a GPU
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_nvml_sees_the_hardware_jpeg_decoder_work_and_rest():
    from pixelpipe.decode.gpu import GpuDecoder, gpu_decoder_available

    device = torch.device("cuda", torch.cuda.current_device())
    meter = open_meter(device)
    if meter is None:
        pytest.skip("NVML cannot be read here")
    if not gpu_decoder_available():
        pytest.skip("nvImageCodec is not installed")
    from pixelpipe.tools.datasets import synthetic

    blobs = [b for b, _ in synthetic(64, seed=1)]
    dec = GpuDecoder(device, hw_fraction=None)  # the hardware decoder takes every JPEG it can
    try:
        meter.start()
        t_end = time.time() + 2.0
        while time.time() < t_end:
            dec.decode_regions(blobs)
        torch.cuda.synchronize()
        busy = meter.stop()
    finally:
        dec.close()
    if busy is None or busy.jpeg is None:
        pytest.skip(f"no JPEG engine samples on {torch.cuda.get_device_name(device)}")
    assert busy.jpeg > 5 and busy.kernels is not None
    meter.start()
    time.sleep(2.0)
    idle = meter.stop()
    assert idle is not None and idle.jpeg is not None and idle.jpeg < busy.jpeg / 4
