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
