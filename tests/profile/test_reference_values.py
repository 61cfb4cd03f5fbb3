"""Reference values kept across the profiler's calls: the same values the streamed run computes, read
back from disk, computed once, removed at the end, and a directory that cannot be written falls back
to streaming."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

from korch.backends.reference import evaluate
from korch.candidates import enumerate_candidates
from korch.ir.graph import GraphBuilder
from korch.ir.types import DType, TensorType
from korch.profile.database import ProfileDB, Status
from korch.profile.profiler import Job, _streamed_values, profile
from korch.profile.reference_values import ReferenceValues
from korch.settings import OptimizeSettings, ProfileSettings
from korch.verify import random_feeds

QUICK = replace(ProfileSettings(), warmup=0, repeats=2, min_seconds=0.0, precision=None, watch_interval_s=None)


def _graph():
    b = GraphBuilder("branches", fold=lambda node, arrays: evaluate(node, arrays))
    x = b.add_input("x", TensorType((8, 16), DType.FLOAT32))
    w = b.add_constant(np.random.default_rng(1).standard_normal((16, 16)).astype(np.float32), "w")
    a = b.emit("relu", [x])
    s = b.emit("sigmoid", [x])
    m = b.emit("matmul", [a, w])
    y = b.emit("add", [m, s])
    z = b.emit("tanh", [b.emit("mul", [y, a])])
    return b.build([("z", z)])


def _candidates(graph):
    return list({c.key: c for c in enumerate_candidates(graph, OptimizeSettings().limits)}.values())


def test_stored_values_are_the_streamed_ones(tmp_path: Path) -> None:
    graph = _graph()
    cands = _candidates(graph)
    jobs = [Job(c, "onnxruntime") for c in cands]
    with ReferenceValues(graph, seed=3, parent=tmp_path) as reference:
        assert reference.ready()
        for job, env in _streamed_values(graph, random_feeds(graph, 3), jobs):
            stored = reference.values(job.candidate)
            for name in (*job.candidate.inputs, *job.candidate.outputs):
                np.testing.assert_array_equal(stored[name], env[name])
                assert stored[name].dtype == env[name].dtype
        assert len(list(tmp_path.iterdir())) == 1
    assert list(tmp_path.iterdir()) == []            # removed on close


def test_the_profiler_computes_them_once_across_calls(tmp_path: Path) -> None:
    graph = _graph()
    cands = [c for c in _candidates(graph) if c.size < len(graph.nodes)]
    with ProfileDB(tmp_path / "p.sqlite") as db, ReferenceValues(graph, 0, tmp_path) as reference:
        first = profile(graph, {"onnxruntime": cands[:5]}, db, 1, "m", QUICK, reference=reference)
        computed = reference.seconds
        second = profile(graph, {"onnxruntime": cands[5:10]}, db, 1, "m", QUICK, reference=reference)
        assert computed > 0 and reference.seconds == computed
    records = {**first.records, **second.records}
    assert len(records) == 10 and all(r.status is Status.OK for r in records.values())
    assert all(r.error is not None and r.error <= 1e-5 for r in records.values())


def test_a_call_with_nothing_to_measure_computes_nothing(tmp_path: Path) -> None:
    """A warm run's profiler calls read every record from the database: the reference is never computed
    (segformer-b0's warm optimize spent 3.9 s of its 5.9 computing it for nothing)."""
    graph = _graph()
    cands = [c for c in _candidates(graph) if c.size < len(graph.nodes)][:4]
    with ProfileDB(tmp_path / "p.sqlite") as db:
        profile(graph, {"onnxruntime": cands}, db, 1, "m", QUICK)
        with ReferenceValues(graph, 0, tmp_path / "values") as reference:
            warm = profile(graph, {"onnxruntime": cands}, db, 1, "m", QUICK, reference=reference)
            assert warm.measured == 0 and warm.stored == len(cands)
            assert reference.seconds == 0


def test_a_directory_that_cannot_be_written_falls_back_to_streaming(tmp_path: Path, caplog) -> None:
    graph = _graph()
    cands = [c for c in _candidates(graph) if c.size < len(graph.nodes)][:4]
    not_a_directory = tmp_path / "file"
    not_a_directory.write_text("")
    with ProfileDB(tmp_path / "p.sqlite") as db, ReferenceValues(graph, 0, not_a_directory) as reference:
        outcome = profile(graph, {"onnxruntime": cands}, db, 1, "m", QUICK, reference=reference)
        assert not reference.ready()
    assert all(r.status is Status.OK for r in outcome.records.values()) and len(outcome.records) == 4
    assert any("cannot keep the reference values" in r.message for r in caplog.records)


def test_directories_left_by_a_killed_optimize_are_removed(tmp_path: Path) -> None:
    """A directory of a process that is gone goes when the next optimize keeps its values; one of a
    live process (another optimize sharing the cache) stays."""
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    stale = tmp_path / f"korch-reference-{gone.pid}-abc"
    stale.mkdir()
    (stale / "0.npy").write_bytes(b"x")
    live = tmp_path / f"korch-reference-{os.getppid()}-def"
    live.mkdir()
    with ReferenceValues(_graph(), 0, tmp_path) as reference:
        assert reference.ready()
        mine = [d for d in tmp_path.iterdir() if d.name.startswith(f"korch-reference-{os.getpid()}-")]
        assert len(mine) == 1 and not stale.exists() and live.exists()
