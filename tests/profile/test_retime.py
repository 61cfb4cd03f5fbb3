"""Kernels timed again on request (profile(..., retime=...)): guided profiling's check of the winner's
curse. The second measurement replaces the stored record; a failed one leaves the first."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from korch.backends.reference import evaluate
from korch.candidates import enumerate_candidates
from korch.ir.graph import GraphBuilder
from korch.ir.types import DType, TensorType
from korch.profile.database import ProfileDB, Status
from korch.profile.profiler import profile
from korch.settings import OptimizeSettings, ProfileSettings

QUICK = replace(ProfileSettings(), warmup=0, repeats=2, min_seconds=0.0, precision=None, watch_interval_s=None)


def _graph():
    b = GraphBuilder("chain", fold=lambda node, arrays: evaluate(node, arrays))
    v = b.add_input("x", TensorType((64, 512), DType.FLOAT32))
    for op in ("relu", "exp", "neg", "sigmoid"):
        v = b.emit(op, [v])
    return b.build([("y", v)])


def _pool(graph, count: int = 4):
    small = [c for c in enumerate_candidates(graph, OptimizeSettings().limits) if c.size < len(graph.nodes)]
    return {"onnxruntime": list({c.key: c for c in small}.values())[:count]}


def test_retimed_pairs_are_measured_again_and_their_new_record_stored(tmp_path: Path) -> None:
    graph = _graph()
    pools = _pool(graph)
    chosen = pools["onnxruntime"][1]
    pair = (chosen.key, "onnxruntime")
    with ProfileDB(tmp_path / "p.sqlite") as db:
        first = profile(graph, pools, db, 1, "m", QUICK)
        assert first.measured == len(pools["onnxruntime"])
        again = profile(graph, pools, db, 1, "m", QUICK, retime=[pair])
        assert again.measured == 1 and again.stored == len(pools["onnxruntime"]) - 1
        new = again.records[pair]
        assert new.status is Status.OK and new.created_at > first.records[pair].created_at
        stored = db.get_many([chosen.key], "onnxruntime", new.backend_version, 1, "m")[chosen.key]
        assert stored.created_at == new.created_at and stored.median_s == new.median_s
        others = [c for c in pools["onnxruntime"] if c.key != chosen.key]
        assert all(again.records[(c.key, "onnxruntime")] == first.records[(c.key, "onnxruntime")] for c in others)
        # a pair with no stored record is simply measured, as without `retime`
        fresh = ProfileDB(tmp_path / "q.sqlite")
        with fresh:
            once = profile(graph, pools, fresh, 1, "m", QUICK, retime=[pair])
            assert once.measured == len(pools["onnxruntime"])


def test_a_failed_second_measurement_leaves_the_first_record(tmp_path: Path, monkeypatch) -> None:
    import korch.profile.profiler as profiler

    graph = _graph()
    pools = _pool(graph)
    chosen = pools["onnxruntime"][0]
    pair = (chosen.key, "onnxruntime")
    with ProfileDB(tmp_path / "p.sqlite") as db:
        first = profile(graph, pools, db, 1, "m", QUICK)
        real = profiler._measure_one

        def failing(graph_, job, *args, **kwargs):
            record = real(graph_, job, *args, **kwargs)
            return replace(record, status=Status.REJECTED, reason="compile failed: out of memory", median_s=None)

        monkeypatch.setattr(profiler, "_measure_one", failing)
        again = profile(graph, pools, db, 1, "m", QUICK, retime=[pair])
        assert again.records[pair] == first.records[pair]
        stored = db.get_many([chosen.key], "onnxruntime", first.records[pair].backend_version, 1, "m")[chosen.key]
        assert stored.status is Status.OK and stored.median_s == first.records[pair].median_s


def test_a_retimed_pair_with_an_eviction_is_timed_after_its_sweep_and_the_others_back_to_back(
        tmp_path: Path, monkeypatch) -> None:
    """profile(..., evict=...): the retimed kernel's every timed call follows a sweep of its bytes
    (timing.PlanEviction), capped by nothing else; kernels measured for the first time, and a pair
    in `evict` that is not retimed, are timed back to back as always."""
    import korch.profile.profiler as profiler

    graph = _graph()
    pools = _pool(graph)
    chosen, other = pools["onnxruntime"][0], pools["onnxruntime"][1]
    pair = (chosen.key, "onnxruntime")
    sweeps: dict[str, object] = {}
    real = profiler._measure_one

    def spying(graph_, job, env, options, threads, machine, source, settings, tolerance, seconds, sweep, *rest):
        sweeps[job.candidate.key] = sweep
        return real(graph_, job, env, options, threads, machine, source, settings, tolerance, seconds, sweep, *rest)

    monkeypatch.setattr(profiler, "_measure_one", spying)
    with ProfileDB(tmp_path / "p.sqlite") as db:
        profile(graph, pools, db, 1, "m", QUICK, evict={pair: 1 << 20})
        assert set(sweeps) == {c.key for c in pools["onnxruntime"]} and not any(sweeps.values())
        sweeps.clear()
        again = profile(graph, pools, db, 1, "m", QUICK, retime=[pair],
                        evict={pair: 1 << 20, (other.key, "onnxruntime"): 1 << 20})
        assert set(sweeps) == {chosen.key} and callable(sweeps[chosen.key])
        assert again.records[pair].status is Status.OK


def test_an_evicted_retime_is_timed_in_turn_with_calls_back_to_back(tmp_path: Path, monkeypatch) -> None:
    """The pair retimed with an eviction gets its time back to back beside its record (the other side
    of its refill, ProfileOutcome.hot_beside); a pair retimed without one, and a first profile, do not."""
    import korch.profile.profiler as profiler

    graph = _graph()
    pools = _pool(graph)
    evicted, plain = pools["onnxruntime"][0], pools["onnxruntime"][1]
    pair, plain_pair = (evicted.key, "onnxruntime"), (plain.key, "onnxruntime")
    real = profiler.measure_beside
    calls: list[int] = []

    def counting(fn, sweep, **kwargs):
        calls.append(1)
        return real(fn, sweep, **kwargs)

    monkeypatch.setattr(profiler, "measure_beside", counting)
    with ProfileDB(tmp_path / "p.sqlite") as db:
        first = profile(graph, pools, db, 1, "m", QUICK, evict={pair: 1 << 20})
        assert not first.hot_beside and not calls
        again = profile(graph, pools, db, 1, "m", QUICK, retime=[pair, plain_pair], evict={pair: 1 << 20})
        assert set(again.hot_beside) == {pair} and again.hot_beside[pair] > 0 and len(calls) == 1
        assert again.records[pair].status is Status.OK and again.records[pair].runs == QUICK.repeats
        merged = first.merged(again)
        assert merged.hot_beside == again.hot_beside


def test_plan_eviction_sweeps_at_most_its_buffer_and_unmaps_it() -> None:
    from korch.profile.timing import CacheSweep, PlanEviction

    with PlanEviction(1 << 20) as eviction:
        assert eviction.sweep(0) is None and eviction.sweep(CacheSweep.LINE - 1) is None
        whole, part = eviction.sweep(64 << 20), eviction.sweep(1 << 16)
        assert whole() == (1 << 20) // CacheSweep.LINE          # every line of the buffer, once, and no more
        assert part() == (1 << 16) // CacheSweep.LINE
    assert eviction.sweep(1 << 16) is None                    # closed: nothing left to sweep


def test_touched_bytes_counts_inputs_constants_and_computed_values_once() -> None:
    from korch.profile.guided import touched_bytes

    graph = _graph()                                          # x -> relu -> exp -> neg -> sigmoid, (64, 512) fp32
    cands = [c for c in enumerate_candidates(graph, OptimizeSettings().limits) if c.size == 2]
    assert cands and all(touched_bytes(graph, c) == 3 * 64 * 512 * 4 for c in cands)
