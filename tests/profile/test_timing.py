"""The timing harness: run counts, stopping rules and statistics on a fake clock; one real sleep check."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import pytest

from korch.profile.timing import (
    TURN_WARMUP,
    Timing,
    interleaved,
    measure,
    measure_beside,
    median_ratio_decided,
    paired_ratio,
    side_by_side,
    summarize,
)

# Fake-clock results are exact up to float rounding of ns -> s conversions.
REL = 1e-9


class FakeClock:
    """A nanosecond clock that moves only when a scripted callable says so."""

    def __init__(self) -> None:
        self.now = 0
        self.calls: list[str] = []

    def __call__(self) -> int:
        return self.now

    def task(self, name: str, durations_ns: Sequence[int]) -> Callable[[], None]:
        """A callable that advances the clock by the next duration (cycling) and logs its name."""
        counter = iter(range(10**9))

        def run() -> None:
            self.calls.append(name)
            self.now += durations_ns[next(counter) % len(durations_ns)]
        return run


def test_warmup_calls_are_not_timed() -> None:
    clock = FakeClock()
    # The two warm-up calls are slow (1 ms); every timed call takes 1 µs.
    fn = clock.task("f", [1_000_000, 1_000_000] + [1_000] * 100)
    timing = measure(fn, warmup=2, repeats=5, min_seconds=0.0, clock=clock)
    assert timing == Timing(median_s=pytest.approx(1e-6, rel=REL), p10_s=pytest.approx(1e-6, rel=REL),
                            p90_s=pytest.approx(1e-6, rel=REL), runs=5)
    assert len(clock.calls) == 7


def test_measure_beside_times_calls_back_to_back_and_after_the_sweep_in_turn() -> None:
    """Each round: a call right after the previous one, the sweep (untimed), a call after it; a slow
    spell that starts mid-way then falls on both series alike, where a back-to-back profile taken
    before it and a timing after the sweep taken in it would read the spell as a refill."""
    clock = FakeClock()
    state = {"swept": False, "calls": 0}

    def fn() -> None:
        clock.calls.append("f")
        state["calls"] += 1
        slow = 3 if state["calls"] > 8 else 1            # from the 9th call (the 4th round) on
        clock.now += slow * (1_000 + (400 if state["swept"] else 0))
        state["swept"] = False

    def sweep() -> None:
        clock.calls.append("sweep")
        state["swept"] = True

    back, swept = measure_beside(fn, sweep, warmup=2, repeats=6, min_seconds=0.0, clock=clock)
    assert clock.calls == ["f", "f"] + ["f", "sweep", "f"] * 6
    assert back.runs == swept.runs == 6
    assert back.median_s == pytest.approx(2e-6, rel=REL)            # 1, 1, 1, 3, 3, 3 us
    assert swept.median_s == pytest.approx(2.8e-6, rel=REL)         # 1.4 x3, 4.2 x3 us
    # min_seconds: rounds go on past `repeats` until that much time has passed (2 us a round here)
    clock = FakeClock()
    fast, _ = measure_beside(clock.task("g", [1_000]), lambda: None, warmup=0, repeats=2, min_seconds=10e-6,
                             clock=clock)
    assert fast.runs == 5
    with pytest.raises(ValueError):
        measure_beside(fn, sweep, min_seconds=-1.0, clock=clock)


def test_median_and_percentiles_interpolate() -> None:
    clock = FakeClock()
    fn = clock.task("f", [7_000, 1_000, 10_000, 3_000, 5_000, 2_000, 9_000, 4_000, 8_000, 6_000])
    timing = measure(fn, warmup=0, repeats=10, min_seconds=0.0, clock=clock)
    assert timing.runs == 10
    assert timing.median_s == pytest.approx(5.5e-6, rel=REL)
    assert timing.p10_s == pytest.approx(1.9e-6, rel=REL)     # 1 + 0.9 * (2 - 1) µs
    assert timing.p90_s == pytest.approx(9.1e-6, rel=REL)     # 9 + 0.1 * (10 - 9) µs


def test_precision_stops_once_the_median_is_pinned_and_not_before_repeats() -> None:
    clock = FakeClock()
    steady = clock.task("f", [1_000_000, 1_010_000, 990_000])        # 1 ms, +-1%
    timing = measure(steady, warmup=0, repeats=5, min_seconds=1.0, clock=clock, precision=0.03)
    assert timing.runs == 5                                           # not the 1000 runs min_seconds asks for
    assert timing.median_s == pytest.approx(1e-3, rel=0.02)
    clock = FakeClock()
    noisy = clock.task("f", [1_000_000, 2_000_000, 500_000, 1_500_000])
    timing = measure(noisy, warmup=0, repeats=5, min_seconds=0.1, clock=clock, precision=0.03)
    assert timing.runs > 50                                           # never pinned: min_seconds decides
    clock = FakeClock()
    timing = measure(clock.task("f", [1_000_000]), warmup=0, repeats=3, min_seconds=0.010, clock=clock)
    assert timing.runs == 10                                          # no precision: as before


def test_max_seconds_extends_a_slow_noisy_timing_until_its_median_is_pinned() -> None:
    """Five runs of a 0.4 s call fill min_seconds at once; with max_seconds a noisy start keeps it going."""
    ms = 1_000_000
    # a noisy first five (min to max 300-520 ms), then steady at 400 ms +-1%
    durations = [520 * ms, 300 * ms, 480 * ms, 350 * ms, 450 * ms] + [400 * ms, 404 * ms, 396 * ms] * 100
    clock = FakeClock()
    timing = measure(clock.task("f", durations), warmup=0, repeats=5, min_seconds=0.02, clock=clock, precision=0.03)
    assert timing.runs == 5                                           # as before: stops at repeats
    clock = FakeClock()
    timing = measure(clock.task("f", durations), warmup=0, repeats=5, min_seconds=0.02, clock=clock, precision=0.03,
                     max_seconds=30.0)
    assert 5 < timing.runs < 75                                       # pinned before the cap
    assert timing.median_s == pytest.approx(0.4, rel=0.03)
    clock = FakeClock()
    noisy = clock.task("f", [520 * ms, 300 * ms, 480 * ms, 350 * ms])  # never pinned: the cap ends it
    timing = measure(noisy, warmup=0, repeats=5, min_seconds=0.02, clock=clock, precision=0.03, max_seconds=3.0)
    assert timing.runs == 8                                           # 2.95 s after seven calls, 3.3 after eight
    with pytest.raises(ValueError, match="max_seconds"):
        measure(lambda: None, min_seconds=0.1, precision=0.03, max_seconds=0.05)
    with pytest.raises(ValueError, match="max_seconds"):
        measure(lambda: None, max_seconds=1.0)


def test_median_is_known_from_order_statistics() -> None:
    from korch.profile.timing import median_known

    assert median_known([100, 101, 99, 100, 102], 0.03)
    assert not median_known([100, 101, 99, 100, 110], 0.03)          # with five, min to max must fit
    assert median_known([100] * 9 + [150], 0.03)                      # with ten, one outlier falls outside
    assert not median_known([], 0.03)
    with pytest.raises(ValueError, match="precision"):
        measure(lambda: None, precision=0.0)


def test_min_seconds_extends_runs_beyond_repeats() -> None:
    clock = FakeClock()
    fn = clock.task("f", [1_000_000])                          # 1 ms per call
    timing = measure(fn, warmup=0, repeats=3, min_seconds=0.010, clock=clock)
    assert timing.runs == 10


def test_repeats_extend_runs_beyond_min_seconds() -> None:
    clock = FakeClock()
    fn = clock.task("f", [1_000_000])
    assert measure(fn, warmup=0, repeats=25, min_seconds=0.010, clock=clock).runs == 25


def test_max_runs_bounds_a_callable_that_takes_no_time() -> None:
    clock = FakeClock()
    fn = clock.task("f", [0])                                  # the fake clock never reaches min_seconds
    timing = measure(fn, warmup=0, repeats=3, min_seconds=1.0, max_runs=50, clock=clock)
    assert timing.runs == 50
    assert timing.median_s == 0.0


@pytest.mark.parametrize("kwargs", [dict(warmup=-1), dict(repeats=0), dict(min_seconds=-0.1),
                                    dict(repeats=10, max_runs=5)])
def test_measure_rejects_bad_arguments(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        measure(lambda: None, **kwargs)  # type: ignore[arg-type]


def test_real_sleep_is_at_least_its_duration() -> None:
    # time.sleep never returns early, so the lower bound holds on any machine; no upper bound is asserted.
    timing = measure(lambda: time.sleep(0.002), warmup=1, repeats=5, min_seconds=0.0)
    assert timing.runs == 5
    assert 0.002 <= timing.p10_s <= timing.median_s <= timing.p90_s


def test_interleaved_rotates_order_and_reports_per_call_means() -> None:
    clock = FakeClock()
    fns = {"a": clock.task("a", [1_000]), "b": clock.task("b", [3_000]), "c": clock.task("c", [2_000])}
    timings = interleaved(fns, rounds=6, warmup=1, calls_per_round=4, clock=clock)
    assert {name: t.median_s for name, t in timings.items()} == {
        "a": pytest.approx(1e-6, rel=REL), "b": pytest.approx(3e-6, rel=REL), "c": pytest.approx(2e-6, rel=REL)}
    assert all(t.runs == 6 for t in timings.values())
    timed = clock.calls[3:]                                    # after one warm-up call each
    firsts = [timed[r * 12] for r in range(6)]                 # 3 systems x 4 calls per round
    assert firsts == ["a", "b", "c", "a", "b", "c"]


def test_interleaved_turn_warmup_keeps_each_turns_cold_call_out_of_the_sample() -> None:
    clock = FakeClock()
    # Each turn's first call is cold (1 ms), the rest take 1 µs: as after an idle pause.
    fns = {"a": clock.task("a", [1_000_000, 1_000, 1_000]), "b": clock.task("b", [1_000_000, 2_000, 2_000])}
    timings = interleaved(fns, rounds=5, warmup=0, calls_per_round=2, turn_warmup=1, clock=clock)
    assert timings["a"].p90_s == pytest.approx(1e-6, rel=REL)
    assert timings["b"].p90_s == pytest.approx(2e-6, rel=REL)
    cold = interleaved(fns, rounds=5, warmup=0, calls_per_round=2, clock=clock)
    assert cold["a"].median_s > 100e-6                          # without it the cold call dominates
    with pytest.raises(ValueError):
        interleaved(fns, rounds=1, turn_warmup=-1)


@pytest.mark.parametrize("rounds", [5, 6, 15])
@pytest.mark.parametrize("seed", range(20))
def test_a_duel_stopped_once_decided_gives_the_verdict_of_all_its_rounds(rounds: int, seed: int) -> None:
    """Rounds of random ratios around a threshold: timing stops as soon as more than half of all the
    rounds' ratios fall on one side, and the median of the rounds run is then on the side the median
    of all of them would be; a clear duel stops at that majority, a close one may run to the end."""
    import numpy as np

    rng = np.random.default_rng(seed)
    clock = FakeClock()
    b_times = [int(1000 * r) for r in rng.uniform(0.9, 1.1 + 0.4 * (seed % 2), size=rounds)]
    def fns():                # each run from the same first round
        return {"a": clock.task("a", [1000]), "b": clock.task("b", b_times)}
    for threshold, wins in ((1.0, lambda r: r < 1.0), (1.02, lambda r: r <= 1.02)):
        full = interleaved(fns(), rounds, warmup=0, clock=clock)
        early = interleaved(fns(), rounds, warmup=0, clock=clock, decided=median_ratio_decided("a", "b", rounds, wins))
        assert early["a"].samples_s == full["a"].samples_s[:early["a"].runs]
        assert wins(paired_ratio(early["a"], early["b"])) == wins(paired_ratio(full["a"], full["b"])), threshold
        said = [wins(b / a) for a, b in zip(early["a"].samples_s, early["b"].samples_s)]
        majority = max(sum(said), len(said) - sum(said))
        assert majority == rounds // 2 + 1 or early["a"].runs == rounds
    clear = {"a": clock.task("a", [1000]), "b": clock.task("b", [2000])}
    stopped = interleaved(clear, rounds, warmup=0, clock=clock, decided=median_ratio_decided("a", "b", rounds,
                                                                                              lambda r: r < 1.0))
    assert stopped["b"].runs == rounds // 2 + 1


@pytest.mark.parametrize(("round_s", "timed_per_turn"), [(None, 1), (0.04, 4), (0.001, 1)])
def test_side_by_side_times_calls_for_round_s_per_turn(round_s: float | None, timed_per_turn: int) -> None:
    """Each turn times as many calls of a 10 ms system as fill `round_s` (at least one), after its
    untimed warm-up call; by default a round is MIN_ROUND_SECONDS, one call of such a system."""
    calls = {"a": 0, "b": 0}

    def count(name: str) -> Callable[[], None]:
        def run() -> None:
            calls[name] += 1
        return run

    extra = {} if round_s is None else {"round_s": round_s}
    timings = side_by_side({n: count(n) for n in calls}, 2, 0.01, warmup=0, **extra)
    assert calls == {n: 2 * (TURN_WARMUP + timed_per_turn) for n in calls}
    assert all(t.runs == 2 for t in timings.values())


def test_interleaved_needs_callables_and_rounds() -> None:
    with pytest.raises(ValueError):
        interleaved({}, rounds=3)
    with pytest.raises(ValueError):
        interleaved({"a": lambda: None}, rounds=0)


def test_summarize_single_sample_and_empty() -> None:
    assert summarize([0.25]) == Timing(0.25, 0.25, 0.25, 1)
    with pytest.raises(ValueError):
        summarize([])


def test_before_runs_untimed_ahead_of_every_timed_call_and_counts_toward_min_seconds() -> None:
    clock = FakeClock()
    fn = clock.task("f", [1_000])                  # 1 µs per call
    sweep = clock.task("sweep", [2_000_000])       # 2 ms per sweep: not in the samples
    timing = measure(fn, warmup=1, repeats=3, min_seconds=0.01, clock=clock, before=sweep)
    assert timing.median_s == pytest.approx(1e-6, rel=REL)
    # One untimed warm-up call, then sweep/call pairs until 10 ms of wall time (sweeps included) are done.
    assert clock.calls[:3] == ["f", "sweep", "f"] and clock.calls.count("sweep") == timing.runs == 5


def test_cache_sweep_covers_the_last_level_cache_up_to_its_cap() -> None:
    from korch.profile.timing import SWEPT_CACHE_CAP_BYTES, CacheSweep, last_level_cache_bytes

    llc = last_level_cache_bytes()
    assert llc >= 1 << 20, "a machine korch runs on has a last-level cache of at least 1 MiB"
    sweep = CacheSweep()
    assert sweep.nbytes == 2 * min(llc, SWEPT_CACHE_CAP_BYTES)
    assert sweep.nbytes <= 2 * SWEPT_CACHE_CAP_BYTES      # a VM reporting its host's whole cache sweeps no more
    sweep()
    sweep()


def test_interleaved_samples_pair_up_by_round_and_paired_ratio_follows_the_rounds() -> None:
    """The machine slows every round more than the last (1, 2, 4, 8, 16 ms for A); B is always 1.1x A
    in the same round, except one round where something else took B's cores (10x). The medians'
    ratio is thrown off by the drift and the burst together; the ratio within each round is not."""
    clock = FakeClock()
    a_ns = [1_000_000 * 2**r for r in range(5)]
    b_ns = [int(1.1 * d) for d in a_ns]
    b_ns[2] *= 10
    fns = {"A": clock.task("A", a_ns), "B": clock.task("B", b_ns)}
    timings = interleaved(fns, rounds=5, warmup=0, clock=clock)
    assert timings["A"].samples_s == pytest.approx([d / 1e9 for d in a_ns], rel=REL)
    assert timings["B"].samples_s == pytest.approx([d / 1e9 for d in b_ns], rel=REL)
    assert timings["B"].median_s / timings["A"].median_s == pytest.approx(2.2, rel=1e-6)
    assert paired_ratio(timings["A"], timings["B"]) == pytest.approx(1.1, rel=1e-6)
    assert paired_ratio(timings["B"], timings["A"]) == pytest.approx(1 / 1.1, rel=1e-6)

    with pytest.raises(ValueError, match="two interleaved timings of the same rounds"):
        paired_ratio(summarize([1.0, 2.0]), summarize([1.0, 2.0]))       # no samples kept
    other = interleaved({"C": clock.task("C", [1_000])}, rounds=3, warmup=0, clock=clock)["C"]
    with pytest.raises(ValueError, match="got 5 and 3 samples"):
        paired_ratio(timings["A"], other)
