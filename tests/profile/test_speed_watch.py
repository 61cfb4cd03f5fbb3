"""The profiler's speed watch: kernels timed while the machine ran slow (a reading of the sentinel
more than the tolerance above the run's fastest) are timed again, and the faster profile is kept."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from korch.backends.reference import evaluate
from korch.candidates import enumerate_candidates
from korch.ir.graph import GraphBuilder
from korch.ir.types import DType, TensorType
from korch.profile.database import ProfileDB, Record, Rejection, Status
from korch.profile.profiler import ProfileOutcome, _second_profile, profile
from korch.profile.speed import SpeedWatch
from korch.settings import OptimizeSettings, ProfileSettings

QUICK = replace(ProfileSettings(), warmup=0, repeats=2, min_seconds=0.0, precision=None, watch_interval_s=0.0)


def _slow_after_first() -> Callable[[], float]:
    """A speed reader: the machine at its speed on the first reading, 3x slower on every one after."""
    calls = []

    def read() -> float:
        calls.append(1)
        return 1.0 if len(calls) == 1 else 3.0
    return read


def test_jobs_between_two_readings_are_suspect_when_either_is_slow() -> None:
    watch = SpeedWatch(0.25)
    for done, seconds in [(0, 1.0), (3, 1.1), (5, 1.4), (9, 1.0), (12, 0.9), (12, 0.95)]:
        watch.read(done, seconds)
    # 1.4 > 1.25 x the fastest (0.9): the windows on either side of it, jobs 3..4 and 5..8
    assert watch.suspects() == [3, 4, 5, 6, 7, 8]
    assert abs(watch.slowest_ratio() - 1.4 / 0.9) < 1e-12
    steady = SpeedWatch(0.25)
    for done, seconds in [(0, 1.0), (4, 1.2), (8, 1.0)]:        # within the tolerance: nothing
        steady.read(done, seconds)
    assert steady.suspects() == [] and SpeedWatch(0.25).slowest_ratio() == 1.0
    late = SpeedWatch(0.25)                 # the sentinel found after 4 jobs, in a slow spell
    for done, seconds in [(4, 2.0), (6, 1.0), (9, 1.0)]:
        late.read(done, seconds)
    assert late.suspects() == [0, 1, 2, 3, 4, 5]


def _graph(rows: int = 64):
    b = GraphBuilder("chain", fold=lambda node, arrays: evaluate(node, arrays))
    v = b.add_input("x", TensorType((rows, 512), DType.FLOAT32))
    for op in ("relu", "exp", "neg", "sigmoid", "tanh", "abs"):
        v = b.emit(op, [v])
    return b.build([("y", v)])


def _pool(graph, count: int = 6):
    small = [c for c in enumerate_candidates(graph, OptimizeSettings().limits) if c.size < len(graph.nodes)]
    unique = list({c.key: c for c in small}.values())
    return {"onnxruntime": unique[:count]}


def test_kernels_timed_in_a_slow_spell_are_timed_again(tmp_path: Path) -> None:
    graph = _graph()
    pools = _pool(graph)
    calls = []

    def reader() -> float:        # the third reading (after the second kernel) is twice as slow
        calls.append(1)
        return 2.0 if len(calls) == 3 else 1.0

    with ProfileDB(tmp_path / "p.sqlite") as db:
        outcome = profile(graph, pools, db, 1, "m", QUICK, speed_reader=reader)
        assert outcome.retimed == 2 and outcome.slowest == 2.0      # the kernels on either side of it
        assert all(r.status is Status.OK for r in outcome.records.values())
        assert len(db.get_many([c.key for c in pools["onnxruntime"]], "onnxruntime",
                               next(iter(outcome.records.values())).backend_version, 1, "m")) == len(pools["onnxruntime"])
    with ProfileDB(tmp_path / "q.sqlite") as db:
        steady = profile(graph, pools, db, 1, "m", QUICK, speed_reader=lambda: 1.0)
        assert steady.retimed == 0 and steady.slowest == 1.0
    with ProfileDB(tmp_path / "r.sqlite") as db:
        unwatched = profile(graph, pools, db, 1, "m", replace(QUICK, watch_interval_s=None), speed_reader=reader)
        assert unwatched.retimed == 0 and unwatched.slowest is None


def test_a_whole_model_timed_in_a_slow_spell_is_timed_again_where_it_compiles_quickly(tmp_path: Path) -> None:
    """A whole model's profile decides which split plans selection compiles and is a one-kernel plan's
    prediction: one profiled in a slow spell is timed again like any kernel (onnxruntime compiles it
    in seconds)."""
    graph = _graph()
    whole = next(c for c in enumerate_candidates(graph, OptimizeSettings().limits) if c.size == len(graph.nodes))
    calls = []

    def reader() -> float:        # slow on the reading after the whole model's profile
        calls.append(1)
        return 2.0 if len(calls) == 2 else 1.0

    with ProfileDB(tmp_path / "p.sqlite") as db:
        outcome = profile(graph, {"onnxruntime": [whole]}, db, 1, "m", QUICK, speed_reader=reader)
    assert outcome.retimed == 1 and outcome.records[(whole.key, "onnxruntime")].status is Status.OK
    assert outcome.whole_at_speed == {"onnxruntime"}           # its second profile, after a normal reading


def test_the_speed_is_read_right_before_a_whole_model_is_timed_and_right_after(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A whole model's compile can take a minute (Inductor's of yolov4: 55 s): the readings that judge
    its profile are taken after the compile, right before it is timed, and right after, not every
    `watch_interval_s` between jobs."""
    import korch.profile.profiler as profiler

    graph = _graph()
    whole = next(c for c in enumerate_candidates(graph, OptimizeSettings().limits) if c.size == len(graph.nodes))
    pools = {"onnxruntime": [*_pool(graph, 2)["onnxruntime"], whole]}
    events: list[tuple] = []
    measure_one = profiler._measure_one

    def spy(graph_, job, *args):
        events.append(("job", job.candidate.size == len(graph_.nodes)))
        return measure_one(graph_, job, *args)

    def reader() -> float:
        events.append(("read",))
        return 1.0

    monkeypatch.setattr(profiler, "_measure_one", spy)
    with ProfileDB(tmp_path / "p.sqlite") as db:
        outcome = profile(graph, pools, db, 1, "m", replace(QUICK, watch_interval_s=1e9), speed_reader=reader)
    # the first reading, two small kernels, the whole model (read inside it, before its timing, and
    # right after it), and the pass's last reading
    assert events == [("read",), ("job", False), ("job", False), ("job", True), ("read",), ("read",), ("read",)]
    assert outcome.whole_at_speed == {"onnxruntime"}


def test_a_whole_model_is_at_speed_only_with_a_profile_kept_from_outside_every_slow_spell(tmp_path: Path) -> None:
    """Selection trusts a whole model's profile over another's only when neither was taken in a slow
    spell (ProfileOutcome.whole_state): slow through both of its timings, or never watched, it is not."""
    graph = _graph()
    whole = next(c for c in enumerate_candidates(graph, OptimizeSettings().limits) if c.size == len(graph.nodes))
    slow_after_first = _slow_after_first()

    with ProfileDB(tmp_path / "p.sqlite") as db:
        slow = profile(graph, {"onnxruntime": [whole]}, db, 1, "m", QUICK, speed_reader=slow_after_first)
    assert slow.retimed == 1 and slow.whole_at_speed == frozenset() and slow.whole_state("onnxruntime", 1) is None
    with ProfileDB(tmp_path / "q.sqlite") as db:
        steady = profile(graph, {"onnxruntime": [whole]}, db, 1, "m", QUICK, speed_reader=lambda: 1.0)
    assert steady.whole_at_speed == {"onnxruntime"} and steady.whole_state("onnxruntime", 1) == "one thread"
    assert steady.whole_state("openvino", 1) is None               # not profiled in this run
    with ProfileDB(tmp_path / "r.sqlite") as db:
        unwatched = profile(graph, {"onnxruntime": [whole]}, db, 1, "m", replace(QUICK, watch_interval_s=None),
                            speed_reader=lambda: 1.0)
    assert unwatched.whole_at_speed == frozenset()
    # the later profile of a whole model decides, as its record is the one kept
    assert steady.merged(slow).whole_at_speed == frozenset() and slow.merged(steady).whole_at_speed == {"onnxruntime"}


def test_a_whole_models_link_state_is_near_far_or_unknown_against_the_runs_nearest_reading() -> None:
    at_speed = frozenset({"onnxruntime", "openvino", "inductor", "apart"})
    outcome = ProfileOutcome(
        {}, 0, 0, 1e-3, None, link=(48.0, 700.0),
        whole_links={"onnxruntime": (50.0, 55.0), "openvino": (350.0, 700.0), "inductor": (53.0, 334.0), "apart": ()},
        whole_at_speed=at_speed)
    assert outcome.whole_state("onnxruntime", 2) == "near" and outcome.whole_state("openvino", 2) == "far"
    assert outcome.whole_state("inductor", 2) is None           # the host moved the vCPUs during the profile
    assert outcome.whole_state("apart", 2) is None              # no link read (no probe): cannot say
    assert outcome.whole_state("onnxruntime", 1) == "one thread"
    assert replace(outcome, whole_at_speed=frozenset()).whole_state("onnxruntime", 2) is None
    # Judged against the nearest reading of the run: all far readings of a run far throughout read near.
    assert replace(outcome, link=None, whole_links={"openvino": (350.0, 400.0)}).whole_state("openvino", 2) == "near"


def test_without_a_reader_a_small_timed_kernel_becomes_the_sentinel(tmp_path: Path) -> None:
    graph = _graph(rows=4096)              # 8 MB tensors: kernels of milliseconds
    with ProfileDB(tmp_path / "p.sqlite") as db:
        outcome = profile(graph, _pool(graph), db, 1, "m", QUICK)
    assert outcome.slowest is not None and outcome.slowest >= 1.0
    assert outcome.seconds.get("speed watch", 0.0) > 0


def test_the_second_profile_is_kept_unless_it_was_slow_too_or_failed() -> None:
    def ok(median: float) -> Record:
        return Record("k", "onnxruntime", "v", 1, "m", median, median, median, 5, Status.OK)

    slow_first, calm_second = ok(0.015), ok(0.011)
    assert _second_profile(slow_first, calm_second, second_slow=False) is calm_second
    # a false alarm: the second is kept even if slower, as a kernel timed once would be
    assert _second_profile(ok(0.010), ok(0.011), second_slow=False).median_s == 0.011
    assert _second_profile(ok(0.010), ok(0.013), second_slow=True).median_s == 0.010       # both slow: the faster
    assert _second_profile(ok(0.014), ok(0.012), second_slow=True).median_s == 0.012
    failed = Record.rejected("k", "onnxruntime", "v", 1, "m", "transient failure: MemoryError", Rejection.TRANSIENT,
                              None)
    assert _second_profile(slow_first, failed, second_slow=False) is slow_first


def _spell(monkeypatch, real: bool):
    """Every kernel's profile is 1 ms, or 2 ms the first time if `real` (a slow spell that slowed the
    kernels); the sentinel reads slow from its second reading until the first kernel is timed again."""
    from korch.profile import profiler
    from korch.profile.timing import Timing

    timed: dict[tuple[str, str], int] = {}

    def fake(graph, job, *args):
        pair = (job.candidate.key, job.backend)
        timed[pair] = timed.get(pair, 0) + 1
        seconds = 2e-3 if real and timed[pair] == 1 else 1e-3
        return Record.ok(job.candidate.key, job.backend, "v", 1, "m", Timing(seconds, seconds, seconds, 5))

    readings = []

    def reader() -> float:
        readings.append(1)
        return 1.0 if len(readings) == 1 or any(n > 1 for n in timed.values()) else 2.0

    monkeypatch.setattr(profiler, "_measure_one", fake)
    return reader, timed


def test_a_kernel_whose_backend_compiles_slowly_never_becomes_the_sentinel(tmp_path: Path) -> None:
    """The sentinel is compiled again to be kept: never an Inductor kernel (seconds to a minute a
    compile; an Inductor region chosen so took 26 s of yolox-nano's cold optimize). Its kernels here
    run for milliseconds, inside the sentinel's range, so only the backend rules them out."""
    pytest.importorskip("torch")
    graph = _graph(rows=4096)
    pools = {"inductor": _pool(graph, count=2)["onnxruntime"]}
    with ProfileDB(tmp_path / "p.sqlite") as db:
        outcome = profile(graph, pools, db, 1, "m", replace(QUICK, compile_workers=0))
    times = [r.median_s for r in outcome.records.values() if r.status is Status.OK]
    assert times and any(QUICK.watch_sentinel_s[0] <= t <= QUICK.watch_sentinel_s[1] for t in times)
    assert outcome.slowest is None and "speed watch" not in outcome.seconds


def test_a_sample_of_the_suspects_is_timed_first_and_a_false_alarm_times_no_more(
        tmp_path: Path, monkeypatch, caplog) -> None:
    graph = _graph()
    pools = _pool(graph, count=10)
    settings = replace(QUICK, watch_check=3)
    reader, timed = _spell(monkeypatch, real=False)
    with ProfileDB(tmp_path / "p.sqlite") as db:
        outcome = profile(graph, pools, db, 1, "m", settings, speed_reader=reader)
    assert len(pools["onnxruntime"]) == 10 and outcome.retimed == 3
    assert sorted(timed.values()) == [1] * 7 + [2] * 3
    assert any("did not slow them" in r.message for r in caplog.records)


def test_a_sample_that_comes_back_faster_has_every_suspect_timed_again(tmp_path: Path, monkeypatch) -> None:
    graph = _graph()
    pools = _pool(graph, count=10)
    reader, timed = _spell(monkeypatch, real=True)
    with ProfileDB(tmp_path / "p.sqlite") as db:
        outcome = profile(graph, pools, db, 1, "m", replace(QUICK, watch_check=3), speed_reader=reader)
    assert outcome.retimed == 10 and set(timed.values()) == {2}
    assert {r.median_s for r in outcome.records.values()} == {1e-3}       # the second profiles, at speed


def test_the_core_link_read_beside_each_speed_reading_is_kept_as_its_nearest_and_farthest() -> None:
    watch = SpeedWatch(0.25)
    assert watch.link_range() is None
    for done, seconds, link_ns in [(0, 1.0, 60.0), (3, 1.0, None), (5, 1.2, 710.0), (9, 1.0, 55.0)]:
        watch.read(done, seconds, link_ns)
    assert watch.link_range() == (55.0, 710.0) and len(watch.readings) == 4


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2 or not (shutil.which("cc") or shutil.which("gcc")),
                    reason="the core link needs two CPUs and a C compiler")
def test_a_profile_at_two_threads_reads_the_core_link_and_one_thread_does_not(tmp_path: Path) -> None:
    from korch.cli import link_note

    graph = _graph()
    pools = _pool(graph, 3)
    with ProfileDB(tmp_path / "p.sqlite") as db:
        two = profile(graph, pools, db, 2, "m", QUICK, speed_reader=lambda: 1.0)
    assert two.link is not None and 1.0 < two.link[0] <= two.link[1] < 1e6
    assert two.merged(replace(two, link=(two.link[0], 50 * two.link[1]))).link == (two.link[0], 50 * two.link[1])
    with ProfileDB(tmp_path / "q.sqlite") as db:
        assert profile(graph, pools, db, 1, "m", QUICK, speed_reader=lambda: 1.0).link is None
    assert link_note((55.0, 80.0)) == "" and link_note(None) == ""
    assert "moved the vCPUs apart while profiling (core link 55-710 ns)" in link_note((55.0, 710.0))


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2 or not (shutil.which("cc") or shutil.which("gcc")),
                    reason="the core link needs two CPUs and a C compiler")
def test_the_link_is_read_around_each_whole_model_profile_at_two_threads(tmp_path: Path) -> None:
    from korch.candidates.regions import whole_model_region

    graph = _graph()
    pools = {"onnxruntime": [*_pool(graph, 2)["onnxruntime"], whole_model_region(graph)]}
    with ProfileDB(tmp_path / "p.sqlite") as db:
        outcome = profile(graph, pools, db, 2, "m", QUICK, speed_reader=lambda: 1.0)
    assert set(outcome.whole_links) == {"onnxruntime"} and len(outcome.whole_links["onnxruntime"]) == 2
    assert all(1.0 < x < 1e6 for x in outcome.whole_links["onnxruntime"])
    # A later profile of a whole model replaces its readings (its record is the one kept)
    merged = outcome.merged(replace(outcome, whole_links={"onnxruntime": (700.0, 710.0), "openvino": (50.0, 52.0)}))
    assert merged.whole_links == {"onnxruntime": (700.0, 710.0), "openvino": (50.0, 52.0)}
    assert merged.whole_state("onnxruntime", 2) == "far" and merged.whole_state("openvino", 2) is None  # not at speed
    with ProfileDB(tmp_path / "q.sqlite") as db:       # one thread: profiled here, no link to read
        assert profile(graph, pools, db, 1, "m", QUICK, speed_reader=lambda: 1.0).whole_links == {"onnxruntime": ()}


@pytest.mark.parametrize("second_slower", [True, False])
def test_a_whole_models_link_readings_are_those_of_the_profile_kept(
        second_slower: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A whole model timed again after a slow spell, and slow again, keeps the faster of its two
    profiles, and the core link read around that profile, not the last one's: yolov4's onnxruntime
    whole model kept its 541.79 ms profile taken near (52 / 53 ns) and the far readings of its
    655.61 ms second profile (349 / 328 ns), and was timed a third time for a far state it had not
    been profiled in. Here the link reads near around the first timing and far around the second,
    and the second reports 10x slower (or 10x faster) than it ran."""
    import korch.profile.profiler as profiler
    from korch.profile import link

    graph = _graph()
    whole = next(c for c in enumerate_candidates(graph, OptimizeSettings().limits) if c.size == len(graph.nodes))
    timings: list[Record] = []
    started = []
    measure_one = profiler._measure_one

    def spy(graph_, job, *args):
        if job.candidate.size == len(graph_.nodes):
            started.append(1)
        record = measure_one(graph_, job, *args)
        if job.candidate.size == len(graph_.nodes):
            if timings:                       # the second timing, reported slower or faster than the first
                factor = 10.0 if second_slower else 0.1
                m = timings[0].median_s * factor
                record = replace(record, median_s=m, p10_s=m, p90_s=m)
            timings.append(record)
        return record

    monkeypatch.setattr(profiler, "_measure_one", spy)
    monkeypatch.setattr(link, "reader", lambda *a, **k: lambda: 50.0 if len(started) <= 1 else 400.0)
    slow_after_first = _slow_after_first()

    with ProfileDB(tmp_path / "p.sqlite") as db:
        outcome = profile(graph, {"onnxruntime": [whole]}, db, 2, "m", QUICK, speed_reader=slow_after_first)
    assert outcome.retimed == 1 and len(timings) == 2
    kept = outcome.records[(whole.key, "onnxruntime")]
    assert kept.median_s == (timings[0] if second_slower else timings[1]).median_s
    assert outcome.whole_links["onnxruntime"] == ((50.0, 50.0) if second_slower else (400.0, 400.0))
