"""Timing a contender and printing what was timed: `Result` (one contender's rate), `time_runs`
(the warm-up and timed passes), `in_rounds` (every contender once per round), the table, the
per-round ratios and their spread. A contender's items are images, or clips in the video bench
(`unit`), whose results also carry the frames out and the frames decoded."""

from __future__ import annotations

import gc
import json
import statistics
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, replace

from ..progress import Progress
from .engine_use import EngineMeter


@dataclass
class Result:
    name: str
    images: int
    seconds: float
    note: str = ""
    # inside the timed passes (to tell what a slow round met): the process's CPU seconds (all
    # threads), and the garbage collections with the seconds they held the interpreter
    cpu_seconds: float = 0.0
    gc_collections: int = 0
    gc_seconds: float = 0.0
    # on a GPU, from NVML over the timed passes (engine_use.py): the mean percentage of time the
    # JPEG engines were busy, and that some kernel ran; None where NVML had nothing to say
    jpeg_busy: float | None = None
    gpu_busy: float | None = None
    # with several rounds (in_rounds): the slowest round's images/s and the coefficient of
    # variation of the rounds' rates (their standard deviation over their mean): a training
    # job meets the slow rounds, not the median
    rounds_min: float | None = None
    rounds_cv: float | None = None
    # the video bench: how busy the NVDEC engines were (as jpeg_busy), and in the timed passes
    # the frames handed out (clips x frames per clip) and the frames a decoder had to decode
    # for them (each clip's first to last frame); `images` counts the clips there
    nvdec_busy: float | None = None
    frames: int = 0
    decoded_frames: int = 0

    @property
    def rate(self) -> float:
        return self.images / self.seconds if self.seconds > 0 else 0.0

    @property
    def frame_rate(self) -> float:
        return self.frames / self.seconds if self.seconds > 0 else 0.0

    @property
    def decoded_rate(self) -> float:
        return self.decoded_frames / self.seconds if self.seconds > 0 else 0.0


def time_runs(name: str, run_pass: Callable[[int], Iterable[int]], passes: int, total: int,
              quiet: bool, note: str = "", seconds: float = 0.0,
              drain: Callable[[], None] | None = None, meter: EngineMeter | None = None) -> Result:
    """Warm up with one pass, then time `passes` passes, and more until `seconds` have passed.
    run_pass(epoch) yields batch sizes. drain() (on CUDA, a synchronize) runs after the warm-up
    and once at the end of the timed passes, inside the clock: the clock stops when the
    device has finished everything the passes asked of it, and the passes follow each other
    as a training loop's epochs do, without emptying the device's queue in between.

    A full garbage collection runs before the clock starts, for every contender: a collection
    of the oldest generation holds the GIL for ~0.1 s with torch imported (measured, 2-core
    machine), which stalls every thread of whichever contender it falls on; started clean, a
    timed run of a few seconds rarely meets one.

    meter (on a GPU): measures how busy its JPEG engines (or video decoders) and kernels were
    over the same window."""
    for _ in run_pass(0):
        pass
    if drain is not None:
        drain()
    gc.collect()
    images = 0
    with Progress(None if seconds else total * passes, f"{name:<18}", quiet=quiet) as bar, \
            _Watch() as watch:
        t0 = time.perf_counter()
        if meter is not None:
            meter.start()
        epoch = 1
        while epoch <= passes or time.perf_counter() - t0 < seconds:
            for k in run_pass(epoch):
                images += k
                bar.update(k)
            epoch += 1
        if drain is not None:
            drain()
        elapsed = time.perf_counter() - t0
        usage = meter.stop() if meter is not None else None
    return Result(name, images, elapsed, note, time.process_time() - watch.cpu0, watch.collections, watch.gc_seconds,
                  usage.jpeg if usage else None, usage.kernels if usage else None,
                  nvdec_busy=usage.decoder if usage else None)


class _Watch:
    """While open: the garbage collections (how many, and the seconds between each one's start
    and stop), and the process's CPU time at the start."""

    def __enter__(self) -> _Watch:
        self.collections, self.gc_seconds, self._start = 0, 0.0, 0.0
        self.cpu0 = time.process_time()
        gc.callbacks.append(self._seen)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._seen)

    def _seen(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._start = time.perf_counter()
        else:
            self.collections += 1
            self.gc_seconds += time.perf_counter() - self._start


def print_table(results: list[Result], header: str, unit: str = "images") -> None:
    """The table: each contender's `unit`/s (and frames/s where results carry frames), the
    spread of its rounds, its ratio to pixelpipe (the first row), then the GPU use."""
    base = results[0].rate
    spread = any(r.rounds_min is not None for r in results)
    framed = any(r.frames for r in results)
    print(header)
    extra = f"{'slowest round':>15}{'CV':>7}" if spread else ""
    frames = f"{'frames/s':>12}" if framed else ""
    print(f"{'contender':<28}{unit + '/s':>12}{frames}{extra}{'ratio to pixelpipe':>22}  note")
    for r in results:
        ratio = r.rate / base if base else 0.0
        cols = f"{r.frame_rate:>12,.0f}" if framed else ""
        if spread:
            low = "-" if r.rounds_min is None else f"{r.rounds_min:,.1f}"
            cv = "-" if r.rounds_cv is None else f"{100 * r.rounds_cv:.1f}%"
            cols += f"{low:>15}{cv:>7}"
        print(f"{r.name:<28}{r.rate:>12,.1f}{cols}{ratio:>22.2f}  {r.note}")
    print_engine_use(results)
    peers = [r for r in results[1:] if not r.name.startswith("pixelpipe")]  # not its own cached rows
    best = max(peers, key=lambda r: r.rate) if peers else None
    if best is not None and best.rate:
        for own in (r for r in results[1:] if r.name.startswith("pixelpipe")):  # e.g. the cached epochs
            print(f"{own.name} is {own.rate / best.rate:.2f}x {best.name}")
        print(f"pixelpipe is {base / best.rate:.2f}x {best.name}")
    elif peers:
        print()


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}%"


def print_engine_use(results: list[Result]) -> None:
    """How busy the GPU's JPEG engines (or video decoders) and kernels were while each
    contender was timed (NVML, engine_use.py); nothing where no contender has such figures (a
    CPU run, no NVML). Beside the video decoders' figure: the frames decoded per second, and
    what that rate would be with the decoders busy all the time (their capacity, as far as a
    straight line from the measured point says)."""
    measured = [r for r in results if r.jpeg_busy is not None or r.gpu_busy is not None or r.nvdec_busy is not None]
    if not measured:
        return
    jpeg = any(r.jpeg_busy is not None for r in measured) or not any(r.nvdec_busy is not None for r in measured)
    nvdec = any(r.nvdec_busy is not None for r in measured)
    engines = ", ".join(([] if not jpeg else ["JPEG engines busy (NVJPG)"])
                        + ([] if not nvdec else ["video decoders busy (NVDEC)"]))
    print(f"GPU use in the timed passes (NVML; whole GPU): {engines}, some kernel running"
          + ("; decoded frames: each clip's first to last frame" if nvdec else ""))
    for r in measured:
        line = f"  {r.name:<28}"
        if jpeg:
            line += f" NVJPG {_percent(r.jpeg_busy):>5}  "
        if nvdec:
            line += f" NVDEC {_percent(r.nvdec_busy):>5}  "
        line += f" kernels {_percent(r.gpu_busy):>5}"
        if nvdec and r.decoded_frames:
            line += f"   decoded frames/s {r.decoded_rate:>9,.0f}"
            if r.nvdec_busy:
                line += f" (at 100% NVDEC: {100 * r.decoded_rate / r.nvdec_busy:,.0f})"
        print(line)
    if any(r.jpeg_busy is not None and r.jpeg_busy >= 90 for r in measured):
        print("  NVJPG at 90% or more: the JPEG engines were nearly full; no library decoding with them goes much faster")
    if any(r.nvdec_busy is not None and r.nvdec_busy >= 90 for r in measured):
        print("  NVDEC at 90% or more: the video decoders were nearly full; no library decoding with them goes much faster")


def in_rounds(jobs: Sequence[Callable[[], Result]], rounds: int) -> tuple[list[Result], list[list[Result]]]:
    """Run every job (a contender, built and timed) once per round, the order reversed every
    other round, so that a machine's drift (20% and more over tens of seconds on a shared
    2-core VM; on the GPU hosts the hardware decoder's rate moves as much between runs) falls
    on all of them alike. Returns each job's median round and every round's results."""
    per_round: list[list[Result]] = []
    for r in range(rounds):
        order = range(len(jobs)) if r % 2 == 0 else reversed(range(len(jobs)))
        got: dict[int, Result] = {k: jobs[k]() for k in order}
        per_round.append([got[k] for k in range(len(jobs))])
    return [_median_result([row[k] for row in per_round]) for k in range(len(jobs))], per_round


def print_round_ratios(per_round: list[list[Result]], unit: str = "images") -> None:
    """With several rounds: each row's `unit`/s per round (so that a slow round shows whose it
    was), then per round pixelpipe's rate over each other row's (the first result of a round
    is pixelpipe's), and each of pixelpipe's other rows (its cached epochs) over each peer's."""
    if len(per_round) < 2:
        return
    names = [r.name for r in per_round[0]]
    for k, name in enumerate(names):
        print(f"per round, {name} {unit}/s: " + ", ".join(f"{row[k].rate:,.0f}" for row in per_round))
        if any(row[k].seconds for row in per_round):  # what each round met (see Result)
            print(f"per round, {name} CPU and garbage collections: " + "; ".join(
                f"{row[k].cpu_seconds / row[k].seconds:.1f} cores, {row[k].gc_collections} in "
                f"{row[k].gc_seconds * 1e3:.0f} ms" if row[k].seconds else "-" for row in per_round))
        if any(row[k].jpeg_busy is not None for row in per_round):
            print(f"per round, {name} NVJPG busy: " + ", ".join(_percent(row[k].jpeg_busy) for row in per_round))
        if any(row[k].nvdec_busy is not None for row in per_round):
            print(f"per round, {name} NVDEC busy: " + ", ".join(_percent(row[k].nvdec_busy) for row in per_round))
    own = [i for i, name in enumerate(names) if i and name.startswith("pixelpipe")]
    peers = [k for k, name in enumerate(names) if not name.startswith("pixelpipe")]
    for i, k in [(0, k) for k in range(1, len(names))] + [(i, k) for i in own for k in peers]:
        ratios = ", ".join(f"{row[i].rate / row[k].rate:.2f}" if row[k].rate else "-" for row in per_round)
        print(f"per round, {names[i]} / {names[k]}: {ratios}")
    for i, k in [(i, k) for i in [0, *own] for k in peers]:  # how far the rounds agree: a machine's drift
        print_spread(names[i], names[k], [row[i].rate / row[k].rate for row in per_round if row[k].rate])


def print_spread(ours: str, peer: str, ratios: list[float]) -> None:
    """With 3 or more rounds: the median and range of the per-round ratios, and a warning when
    the rounds disagree on which contender is faster (then the medians' ratio says little)."""
    if len(ratios) < 3:
        return
    low, high = min(ratios), max(ratios)
    line = (f"{ours} / {peer} over {len(ratios)} rounds: median {statistics.median(ratios):.2f}, "
            f"range {low:.2f}-{high:.2f}")
    if low < 1.0 < high:
        line += "; the rounds disagree on which is faster (more rounds, --rounds, narrow it)"
    print(line)


def _median_result(runs: list[Result]) -> Result:
    """The run with the median rate (the lower middle one for an even count); with several
    rounds it carries their slowest rate and coefficient of variation."""
    ranked = sorted(runs, key=lambda r: r.rate)
    pick = ranked[(len(ranked) - 1) // 2]
    if len(runs) < 2:
        return pick
    rates = [r.rate for r in runs]
    mean = statistics.fmean(rates)
    return replace(pick, note=pick.note + f"; median of {len(runs)} rounds", rounds_min=min(rates),
                   rounds_cv=statistics.pstdev(rates) / mean if mean else None)


def report(results: list[Result], per_round: list[list[Result]], header: str, as_json: bool,
           extra: dict | None = None, unit: str = "images") -> None:
    """Print a benchmark's results: the table and the per-round lines, or one JSON object with
    the header, `extra` (e.g. package versions), the median results and every round's. With
    `unit` "clips" (the video bench) a JSON row names its count "clips" and its rates
    "clips_per_s", "frames_per_s" and "decoded_frames_per_s"."""
    if as_json:
        def row(r: Result) -> dict:
            d = asdict(r)
            if unit == "images":
                return d | {"images_per_s": r.rate}
            d[unit] = d.pop("images")
            return d | {f"{unit}_per_s": r.rate, "frames_per_s": r.frame_rate, "decoded_frames_per_s": r.decoded_rate}

        print(json.dumps({"header": header, **(extra or {}), "results": [row(r) for r in results],
                          "rounds": [[row(r) for r in rs] for rs in per_round]}, indent=2))
    else:
        print_table(results, header, unit)
        print_round_ratios(per_round, unit)
