"""The timing harness: how long a callable takes, as a median with its spread.

`measure` times one callable: warm-up calls first, then timed calls until both a minimum number of
runs and a minimum total time are reached (a fast kernel gets many runs, so that timer resolution and
jitter average out; a slow one gets `repeats`), never more than a run cap. With a `precision`, it stops
sooner, as soon as the median is known that well (a distribution-free confidence interval from the
order statistics): on a quiet machine a kernel needs a handful of runs, on a noisy one it gets them all. `interleaved` times several
callables side by side, alternating them round by round, so that a slow phase of a noisy machine
(another process, frequency scaling) hits every system alike instead of the one that happened to run
during it.

The clock is a parameter (nanoseconds, like `time.perf_counter_ns`) so that tests can drive a fake one.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

Clock = Callable[[], int]

# First calls pay one-time costs (lazy allocation, page faults, cold caches, JIT/guard set-up).
DEFAULT_WARMUP = 3
# Enough samples that the median and the 10th/90th percentiles are more than one outlier each.
DEFAULT_REPEATS = 20
# Microsecond kernels keep running until 50 ms have passed: thousands of samples, still cheap per kernel.
DEFAULT_MIN_SECONDS = 0.05
# Bounds a ~1 µs kernel under `min_seconds`: more samples than this no longer move the median.
MAX_RUNS = 10_000
# The normal quantile of a two-sided 90% confidence interval: how sure `measure(precision=...)` is
# that the median lies within its interval when it stops early.
MEDIAN_CI_Z = 1.645
# Side by side (`korch bench`, and optimize's last check of its plan): a round should last at least this
# long per system, so microsecond models are not timer noise.
MIN_ROUND_SECONDS = 0.002
# Untimed pause before each system's turn, so the previous system's spinning threads have parked
# (measured on candy, without a pause torch.compile read 72 ms interleaved against 43 ms alone). After
# a call, onnxruntime's default session keeps a thread spinning ~38 ms, OpenVINO ~1 ms, libgomp and a
# spin-stopped onnxruntime under 0.4 ms (benchmarks/engine_handoff.py, spin tail, 2 threads): the
# pause outlasts the longest with half of it to spare.
SETTLE_SECONDS = 0.06
# Untimed calls after the pause: the first call after idling runs cold (2-3x slower on a 5 ms model).
TURN_WARMUP = 1


# The largest cache a sweep evicts. A virtual machine may report its host's whole last-level cache:
# this project's 2-vCPU VM reports 480 MiB, whose sweep read 960 MiB in 60 ms before every timed
# call, and what a call then measured was the idle vCPU's wake-up, not a cold cache (an onnxruntime
# matmul with 1 MiB of weights: 25 us hot, 106 us after a 32 MiB sweep, 113 after 64 MiB, 330 after
# 960 MiB; 2026-11-25). 16 MiB, a sweep of 32 MiB (~2 ms), is the regime every in-plan comparison in
# BENCHMARKS.md was made with (a host whose cache was 16 MiB).
SWEPT_CACHE_CAP_BYTES = 16 << 20


class CacheSweep:
    """Reads a buffer twice the last-level cache's size (at most twice SWEPT_CACHE_CAP_BYTES), one byte
    per cache line: afterwards nothing of the next call's weights, inputs, workspace or code is cached,
    and its thread pool has parked (a sweep takes milliseconds). The profiler sweeps before each timed
    call only with ProfileSettings.cold_cache, off by default: on the Intel host a sweep brought
    efficientvit-b1's kernels closer to their time in a plan (6.0 ms back to back, 7.1 in the plan, 7.8
    after a sweep: benchmarks/plan_breakdown.py), but on the AMD host a 32 MiB sweep takes 8-17 ms,
    and small kernels timed after it summed to 1.31-1.58x their time in plans, back to back to
    0.99-1.08x (benchmarks/profile_protocols.py)."""

    LINE = 64

    def __init__(self, nbytes: int | None = None) -> None:
        self.nbytes = nbytes if nbytes is not None else 2 * min(last_level_cache_bytes(), SWEPT_CACHE_CAP_BYTES)
        self._lines: np.ndarray | None = None      # one byte of each line, allocated on first use

    def __call__(self) -> None:
        if self._lines is None:
            self._lines = np.ones(self.nbytes, np.uint8)[:: self.LINE]
        self._lines.sum()


class PlanEviction:
    """What a split plan's other kernels do to a kernel's caches between two of its calls, as a sweep
    of up to `max_bytes`: `sweep(n)` is a callable that reads one byte per cache line of the first n
    bytes of one buffer, mapped from the kernel (not the C heap, whose freed blocks korch keeps,
    korch/heap.py) and given back by `close()`. For guided profiling's second timing of the kernels a
    plan is made of (profile/guided.py `_confirm`): on the model-167 Xeon host, which reports 480 MiB
    of last-level cache and keeps a kernel's whole working set in it between back-to-back calls,
    the six kernels of segformer-b0's first split plan summed 46.4 ms back to back, 52.2 inside
    their plan, and 50.9 each after a sweep of 640 MiB (benchmarks/plan_eviction.py)."""

    def __init__(self, max_bytes: int) -> None:
        import mmap

        if max_bytes < 0:
            raise ValueError(f"an eviction sweeps >= 0 bytes, got {max_bytes}")
        self.max_bytes = max_bytes
        self._map = mmap.mmap(-1, max_bytes) if max_bytes else None
        self._lines = None if self._map is None else np.frombuffer(self._map, np.uint8)[:: CacheSweep.LINE]
        if self._lines is not None:
            self._lines[:] = 1                 # its pages are mapped now, not during the first timed call

    def sweep(self, nbytes: int) -> Callable[[], object] | None:
        """A callable sweeping min(nbytes, max_bytes) bytes, or None for none."""
        lines = min(nbytes, self.max_bytes) // CacheSweep.LINE
        if self._lines is None or lines <= 0:
            return None
        return lambda: self._lines[:lines].sum()        # (no view outlives a call: close() can unmap)

    def close(self) -> None:
        if self._map is not None:
            self._lines = None
            self._map.close()
            self._map = None

    def __enter__(self) -> PlanEviction:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def last_level_cache_bytes(default: int = 32 << 20) -> int:
    """The largest CPU cache of cpu0 (Linux sysfs), else `default`."""
    from pathlib import Path

    sizes = []
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            text = (index / "size").read_text().strip().upper()
        except OSError:
            continue
        scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        digits = text.rstrip("KMG")
        if digits.isdigit():
            sizes.append(int(digits) * scale)
    return max(sizes, default=default)


@dataclass(frozen=True)
class Timing:
    """Seconds per call: the median and the 10th and 90th percentiles over `runs` timed samples. From
    `interleaved`, also its samples, one per round in round order, so two systems' samples pair up
    round by round (`measure` keeps none: it may take thousands)."""

    median_s: float
    p10_s: float
    p90_s: float
    runs: int
    samples_s: tuple[float, ...] = field(default=(), compare=False, repr=False)


def measure(fn: Callable[[], object], *, warmup: int = DEFAULT_WARMUP, repeats: int = DEFAULT_REPEATS,
            min_seconds: float = DEFAULT_MIN_SECONDS, max_runs: int = MAX_RUNS,
            clock: Clock = time.perf_counter_ns, before: Callable[[], object] | None = None,
            precision: float | None = None, max_seconds: float | None = None) -> Timing:
    """Time `fn()`: `warmup` untimed calls, then timed calls until `repeats` runs and `min_seconds` are done.

    Each call is timed on its own. The time counted toward `min_seconds` is wall time since the first
    timed call (loop overhead included), so a callable that returns at once still ends. Stops at
    `max_runs` timed calls whatever the elapsed time. `before`, if given, runs untimed before every
    timed call (a CacheSweep: each call then starts as it would inside a plan).

    `precision` (a fraction): once `repeats` runs are done, stop as soon as the median is pinned
    within +-precision (`median_known`), without waiting for `min_seconds`. With `max_seconds` too,
    a median not yet pinned when `repeats` and `min_seconds` are done keeps the timing going until it
    is, or until `max_seconds` have passed: a slow call otherwise stops at `repeats` runs, and five
    runs of a noisy one can put its median anywhere between their min and max.
    """
    _check_counts(warmup=warmup, repeats=repeats, max_runs=max_runs)
    if min_seconds < 0:
        raise ValueError(f"min_seconds must be >= 0, got {min_seconds}")
    if precision is not None and not precision > 0:
        raise ValueError(f"precision must be > 0, got {precision}")
    if max_seconds is not None and (precision is None or not max_seconds >= min_seconds):
        raise ValueError(f"max_seconds ({max_seconds}) needs a precision and must be >= min_seconds ({min_seconds})")
    for _ in range(warmup):
        fn()
    stop_ns = (max_seconds if max_seconds is not None else min_seconds) * 1e9          # >= min_seconds
    samples: list[int] = []
    start = clock()
    while len(samples) < max_runs:
        if len(samples) >= repeats:
            if precision is not None and median_known(samples, precision):
                break
            if clock() - start >= stop_ns:
                break
        if before is not None:
            before()
        t0 = clock()
        fn()
        samples.append(clock() - t0)
    return summarize([s / 1e9 for s in samples])


def measure_beside(fn: Callable[[], object], sweep: Callable[[], object], *, warmup: int = DEFAULT_WARMUP,
                   repeats: int = DEFAULT_REPEATS, min_seconds: float = DEFAULT_MIN_SECONDS,
                   max_runs: int = MAX_RUNS, clock: Clock = time.perf_counter_ns) -> tuple[Timing, Timing]:
    """`fn()` back to back and after `sweep()`, alternately: each round times one call right after the
    previous call (its caches as that call left them), runs `sweep` untimed, and times one call
    after it. Returns (back to back, after the sweep), `repeats` rounds and `min_seconds` at least each.

    What a sweep adds (a refill, korch/profile/refill.py) is the difference of the two medians: timed
    minutes apart, a slow spell or a move of the vCPUs between them read as a refill of either sign
    (one yolov4 optimize charged its split kernels a median 0.05 ms, the next 0.36 ms); timed in turn,
    both series see the same machine."""
    _check_counts(warmup=warmup, repeats=repeats, max_runs=max_runs)
    if min_seconds < 0:
        raise ValueError(f"min_seconds must be >= 0, got {min_seconds}")
    for _ in range(warmup):
        fn()
    back: list[int] = []
    swept: list[int] = []
    start = clock()
    while len(back) < max_runs and (len(back) < repeats or clock() - start < min_seconds * 1e9):
        t0 = clock()
        fn()
        back.append(clock() - t0)
        sweep()
        t0 = clock()
        fn()
        swept.append(clock() - t0)
    return summarize([s / 1e9 for s in back]), summarize([s / 1e9 for s in swept])


def median_known(samples: Sequence[float], precision: float) -> bool:
    """Whether a 90% confidence interval of the median, from order statistics (no assumption on the
    distribution), lies within median x (1 +- precision). With n samples it runs from the
    floor(n/2 - z sqrt(n)/2)-th to the ceil(n/2 + z sqrt(n)/2)-th smallest, so with 5 it is min to max."""
    n = len(samples)
    if n == 0:
        return False
    ordered = sorted(samples)
    half = MEDIAN_CI_Z * math.sqrt(n) / 2
    low = ordered[max(0, math.floor(n / 2 - half))]
    high = ordered[min(n - 1, math.ceil(n / 2 + half))]
    median = _quantile(ordered, 0.5)
    return median * (1 - precision) <= low and high <= median * (1 + precision)


def interleaved(fns: Mapping[str, Callable[[], object]], rounds: int, *, warmup: int = DEFAULT_WARMUP,
                calls_per_round: int = 1, settle_s: float = 0.0, turn_warmup: int = 0,
                clock: Clock = time.perf_counter_ns,
                decided: Callable[[Mapping[str, Sequence[float]]], bool] | None = None,
                between_rounds: Callable[[], object] | None = None) -> dict[str, Timing]:
    """Time several systems side by side: in each round every system runs `calls_per_round` calls.

    The order of the systems rotates from round to round, so no system always runs right after the
    same neighbour. `settle_s` is an untimed pause before each system's turn: thread pools that
    busy-wait after a call (onnxruntime, OpenMP) otherwise steal the cores of the next system. One sample per system and round: the mean time per call of that round (use
    `calls_per_round` > 1 when a single call is near the timer's resolution). `Timing.runs` is the
    number of rounds.

    `turn_warmup` untimed calls follow the pause: the first call after an idle pause runs cold
    (parked threads, idle cores; efficientvit-b1 under onnxruntime: 15.7 ms median right after a
    20 ms sleep, 4.9 ms back to back, 5.2 ms after one untimed call), so without them the pause
    would measure wake-up, not the system.

    `decided(samples)`, asked after each round with every system's samples so far, ends the timing
    early when it says the rounds left could not change what the caller decides from them.
    `between_rounds`, untimed, runs before each round (a reading of the machine's state to go with it).
    """
    _check_counts(warmup=warmup, repeats=rounds, max_runs=rounds)
    if turn_warmup < 0:
        raise ValueError(f"turn_warmup must be >= 0, got {turn_warmup}")
    if calls_per_round < 1:
        raise ValueError(f"calls_per_round must be >= 1, got {calls_per_round}")
    if not fns:
        raise ValueError("interleaved needs at least one callable")
    names = list(fns)
    for name in names:
        for _ in range(warmup):
            fns[name]()
    samples: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        if between_rounds is not None:
            between_rounds()
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            fn = fns[name]
            if settle_s > 0:
                time.sleep(settle_s)
            for _ in range(turn_warmup):
                fn()
            t0 = clock()
            for _ in range(calls_per_round):
                fn()
            samples[name].append((clock() - t0) / 1e9 / calls_per_round)
        if decided is not None and r + 1 < rounds and decided(samples):
            break
    return {name: replace(summarize(samples[name]), samples_s=tuple(samples[name])) for name in names}


def side_by_side(fns: Mapping[str, Callable[[], object]], rounds: int, one_call_s: float, *,
                 warmup: int = DEFAULT_WARMUP,
                 decided: Callable[[Mapping[str, Sequence[float]]], bool] | None = None,
                 round_s: float = MIN_ROUND_SECONDS,
                 between_rounds: Callable[[], object] | None = None) -> dict[str, Timing]:
    """`interleaved` with the settings that make whole systems comparable on a busy machine: enough
    calls per round for `round_s` (given the time of one call), a settling pause and a warm-up call
    before each turn."""
    per_round = max(1, int(round_s / max(one_call_s, 1e-9)))
    return interleaved(fns, rounds, warmup=warmup, calls_per_round=per_round, settle_s=SETTLE_SECONDS,
                       turn_warmup=TURN_WARMUP, decided=decided, between_rounds=between_rounds)


def median_ratio_decided(first: str, second: str, rounds: int, wins: Callable[[float], bool]
                         ) -> Callable[[Mapping[str, Sequence[float]]], bool]:
    """For `interleaved`'s `decided`: whether the median over all `rounds` of second's sample over
    first's, round by round (`paired_ratio`), is already known to satisfy `wins` or known not to,
    whatever the rounds left measure. `wins` must be monotone (a threshold: ratio <= t, ratio < t, or
    their negations): once more than half of the `rounds` ratios fall on one side, the median's middle
    order statistics (both, for an even count) lie there too. The verdict is then the one all rounds
    would give; only the medians reported come from fewer rounds."""
    need = rounds // 2 + 1

    def decided(samples: Mapping[str, Sequence[float]]) -> bool:
        said = [wins(b / a) for a, b in zip(samples[first], samples[second])]
        return sum(said) >= need or len(said) - sum(said) >= need
    return decided


def summarize(samples_s: Sequence[float]) -> Timing:
    """Median and 10th/90th percentiles (linear interpolation between order statistics)."""
    if not samples_s:
        raise ValueError("no samples to summarize")
    ordered = sorted(samples_s)
    return Timing(median_s=_quantile(ordered, 0.5), p10_s=_quantile(ordered, 0.1),
                  p90_s=_quantile(ordered, 0.9), runs=len(ordered))


def _quantile(ordered: Sequence[float], q: float) -> float:
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def _check_counts(*, warmup: int, repeats: int, max_runs: int) -> None:
    if warmup < 0:
        raise ValueError(f"warmup must be >= 0, got {warmup}")
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    if max_runs < repeats:
        raise ValueError(f"max_runs ({max_runs}) is below repeats ({repeats})")


def paired_ratio(a: Timing, b: Timing) -> float:
    """The median over rounds of b's sample over a's in the same round, for two systems timed by
    `interleaved`: how much slower b ran than a, with whatever slowed the machine in a round (another
    process, a frequency change) slowing both sides of that round's ratio."""
    if not a.samples_s or len(a.samples_s) != len(b.samples_s):
        raise ValueError(f"paired_ratio needs two interleaved timings of the same rounds, got {len(a.samples_s)} "
                         f"and {len(b.samples_s)} samples")
    return statistics.median(y / x for x, y in zip(a.samples_s, b.samples_s))
