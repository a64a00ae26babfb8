"""How busy the GPU's JPEG engines (and, for the video bench, its video decoders) were during a
bench run (bench/engine_use.py): NVML's samples read by their value type, averaged over the
timed window only, the decoder's readings polled inside the window, carried into the bench's
results and printed. NVML itself is faked on the CPU; the tests against the real NVML and the
hardware decoders are marked `gpu` and skip without them."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest
import torch

from pixelpipe.tools.bench import engine_use
from pixelpipe.tools.bench.engine_use import (
    GPU_UTILIZATION,
    JPG_UTILIZATION,
    EngineMeter,
    Sample,
    Usage,
    decoder_poll,
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


# ------------------------------------------------------------------------------- NVDEC
class FakeDecoder:
    """nvmlDeviceGetDecoderUtilization as the poll reads it: `readings` in turn (the last one
    again once they run out), each with a 1 ms sampling period; counts the calls."""

    def __init__(self, *readings: float | None) -> None:
        self.readings, self.calls = list(readings), 0

    def __call__(self):
        self.calls += 1
        value = self.readings.pop(0) if len(self.readings) > 1 else self.readings[0]
        return None if value is None else (value, 1000)


def test_the_decoder_readings_inside_the_window_are_averaged():
    s = 1_000_000
    nvml = FakeNvml(jpeg=[(11 * s, 50.0)], gpu=[(11 * s, 30.0)])
    poll = FakeDecoder(100.0, 40.0, 40.0, 70.0, 70.0)  # 100: before the window, read at start() for the period
    meter = EngineMeter(nvml, Clock(10.0, 12.0), decoder=poll, jpeg=False)
    meter.start()
    time.sleep(0.1)  # the poll thread reads every 20 ms (the shortest wait) until stop()
    usage = meter.stop()
    assert usage is not None and (usage.jpeg, usage.kernels) == (None, 30.0)  # no NVJPG asked for
    assert nvml.asked == [(GPU_UTILIZATION, 10 * s)]
    assert poll.calls >= 2  # the period reading, any made every 20 ms, and the one at stop()
    assert 40.0 <= usage.decoder <= 70.0 and usage.decoder != 100.0  # the reading before the window is left out


def test_one_reading_at_stop_when_the_window_is_short():
    poll = FakeDecoder(0.0, 88.0)
    meter = EngineMeter(FakeNvml(None, None), Clock(1.0, 1.001), decoder=poll, jpeg=False)
    meter.start()
    assert meter.stop() == Usage(jpeg=None, kernels=None, decoder=88.0)


def test_a_decoder_nvml_cannot_read_gives_no_figure():
    meter = EngineMeter(FakeNvml(None, None), Clock(1.0, 2.0), decoder=FakeDecoder(None), jpeg=False)
    meter.start()
    assert meter.stop() is None  # nothing at all: no figures, as without NVML
    meter = EngineMeter(FakeNvml(None, [(1_500_000, 12.0)]), Clock(1.0, 2.0), decoder=FakeDecoder(None), jpeg=False)
    meter.start()
    assert meter.stop() == Usage(jpeg=None, kernels=12.0, decoder=None)


class FakeLib:
    """libnvidia-ml's nvmlDeviceGetDecoderUtilization: writes through its pointer arguments."""

    def __init__(self, code: int, busy: int = 55, period: int = 166_666) -> None:
        self.code, self.busy, self.period, self.handles = code, busy, period, []

    def nvmlDeviceGetDecoderUtilization(self, handle, busy, period):
        self.handles.append(handle)
        busy._obj.value, period._obj.value = self.busy, self.period  # ctypes.byref(x)._obj is x
        return self.code


def test_decoder_poll_reads_nvml_and_says_none_when_it_fails():
    lib = FakeLib(0)
    assert decoder_poll(lib, "handle")() == (55.0, 166_666) and lib.handles == ["handle"]
    assert decoder_poll(FakeLib(3), "handle")() is None  # NVML_ERROR_NOT_SUPPORTED
    assert decoder_poll(object(), "handle")() is None  # an NVML without the call
    assert open_meter(torch.device("cpu"), nvdec=True) is None


def test_the_table_says_how_busy_nvdec_was_beside_the_decoded_frames(capsys):
    class Meter:
        def start(self):
            pass

        def stop(self):
            return Usage(jpeg=None, kernels=20.0, decoder=50.0)

    r = time_runs("pixelpipe", lambda epoch: iter([2]), 1, 2, quiet=True, meter=Meter())
    assert (r.nvdec_busy, r.jpeg_busy, r.gpu_busy) == (50.0, None, 20.0)
    r.images, r.seconds, r.frames, r.decoded_frames = 10, 1.0, 160, 310  # 10 clips/s of 16 frames, span 31
    dali = Result("dali", 5, 1.0, "", gpu_busy=10.0, nvdec_busy=95.0, frames=80, decoded_frames=155)
    print_table([r, dali, Result("pyav", 0, 0.0, "not run")], "header", unit="clips")
    out = capsys.readouterr().out
    assert "clips/s" in out and "frames/s" in out
    assert "video decoders busy (NVDEC)" in out and "NVJPG" not in out
    assert "  pixelpipe                    NVDEC   50%   kernels   20%   decoded frames/s       310 (at 100% NVDEC: 620)" in out
    assert "  dali                         NVDEC   95%   kernels   10%   decoded frames/s       155 (at 100% NVDEC: 163)" in out
    assert "NVDEC at 90% or more" in out
    print_round_ratios([[r], [replace(r, nvdec_busy=None)]], unit="clips")
    out = capsys.readouterr().out
    assert "per round, pixelpipe clips/s: 10, 10" in out and "per round, pixelpipe NVDEC busy: 50%, -" in out


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


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_nvml_sees_the_video_decoders_work_and_rest(tmp_path):
    pytest.importorskip("av")
    from pixelpipe.decode.video_gpu import nvdec_missing
    from pixelpipe.tools.bench.video import pixelpipe_video
    from pixelpipe.tools.video_data import open_videos
    from pixelpipe.tools.videos import synthetic_videos

    device = torch.device("cuda", torch.cuda.current_device())
    meter = open_meter(device, nvdec=True)
    if meter is None:
        pytest.skip("NVML cannot be read here")
    if nvdec_missing(device) is not None:
        pytest.skip(nvdec_missing(device))
    synthetic_videos(tmp_path, 8, frames=64, gop=30, height=720, width=1280)
    run = pixelpipe_video(open_videos(str(tmp_path)), 16, 2, 112, 4, 4, device)
    try:
        for _ in run(0):  # warm-up: the decoders made
            pass
        meter.start()
        t_end, epoch = time.time() + 2.0, 1
        while time.time() < t_end:
            for _ in run(epoch):
                pass
            epoch += 1
        torch.cuda.synchronize()
        busy = meter.stop()
    finally:
        run.close()
    assert run.pipe.decode_stats.state()["decoded"].get("nvdec", 0) > 0
    assert busy is not None and busy.decoder is not None and busy.decoder > 5 and busy.jpeg is None
    meter.start()
    time.sleep(2.0)
    idle = meter.stop()
    assert idle is not None and idle.decoder is not None and idle.decoder < busy.decoder / 4
