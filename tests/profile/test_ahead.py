"""Inductor's kernels compiled ahead in worker processes (korch/profile/ahead.py): loaded and profiled
as kernels compiled in place are, checked against the reference on the profiler's random inputs; and
a job no worker can do (a backend the worker does not know, a worker that dies) is compiled by the
profiler itself, with the same outcome."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from korch.backends import CompileOptions
from korch.candidates import enumerate_candidates, extract_subgraph
from korch.pipeline import run_fission
from korch.profile.ahead import AheadJob, compile_ahead
from korch.profile.database import ProfileDB, Status
from korch.profile.profiler import profile
from korch.settings import QUICK_PROFILE

pytest.importorskip("torch")

MACHINE = "test machine"
AHEAD = replace(QUICK_PROFILE, compile_workers=2, compile_ahead_min_work=2.0)
IN_PLACE = replace(QUICK_PROFILE, compile_workers=0)


def _chain() -> onnx.ModelProto:
    """x -> relu -> * w -> + x -> sigmoid: a few distinct elementwise kernels and their fusions."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 16])
    w = numpy_helper.from_array(np.linspace(-2, 2, 64, dtype=np.float32).reshape(4, 16), "w")
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Mul", ["r", "w"], ["m"], name="mul"),
             helper.make_node("Add", ["m", "x"], ["a"], name="add"),
             helper.make_node("Sigmoid", ["a"], ["y"], name="sigmoid")]
    model = helper.make_model(helper.make_graph(nodes, "chain", [x], [y], [w]),
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _pools(graph):
    unique = {c.key: c for c in enumerate_candidates(graph)}
    return {"inductor": list(unique.values())[:4]}


def test_kernels_compiled_ahead_are_loaded_checked_and_timed_as_kernels_compiled_in_place(tmp_path: Path) -> None:
    graph = run_fission(_chain()).graph
    pools = _pools(graph)
    with ProfileDB(tmp_path / "ahead.sqlite") as db:
        ahead = profile(graph, pools, db, 1, MACHINE, AHEAD)
    with ProfileDB(tmp_path / "in_place.sqlite") as db:
        in_place = profile(graph, pools, db, 1, MACHINE, IN_PLACE)
    assert ahead.ahead == len(pools["inductor"]) and "compile ahead" in ahead.seconds
    assert in_place.ahead == 0 and "compile ahead" not in in_place.seconds
    assert set(ahead.records) == set(in_place.records)
    for pair, record in ahead.records.items():
        # each kernel's outputs were compared with the reference's on the profiler's random inputs
        assert record.status is Status.OK, record.reason
        assert record.error is not None and record.error <= 1e-5
        assert in_place.records[pair].status is Status.OK


def test_a_job_the_workers_cannot_do_is_compiled_by_the_profiler(tmp_path: Path, monkeypatch) -> None:
    """A backend registered only in this process is unknown to the workers: every job comes back
    undone, and the profiler compiles each as it would have without workers."""
    import korch.backends.base as base
    from korch.backends.inductor.provider import InductorBackend

    class LocalInductor(InductorBackend):
        name = "local-inductor"

    monkeypatch.setitem(base._REGISTRY, "local-inductor", LocalInductor)
    monkeypatch.setitem(base._INSTANCES, "local-inductor", LocalInductor())
    graph = run_fission(_chain()).graph
    pools = {"local-inductor": _pools(graph)["inductor"]}
    with ProfileDB(tmp_path / "p.sqlite") as db:
        outcome = profile(graph, pools, db, 1, MACHINE, AHEAD)
    assert outcome.ahead == 0 and "compile ahead" in outcome.seconds
    assert len(outcome.records) == len(pools["local-inductor"])
    assert all(r.status is Status.OK for r in outcome.records.values())


class _Exit:
    """Unpickled, it ends the process: a worker that dies while it reads its job."""

    def __reduce__(self):
        return os._exit, (3,)


def test_a_worker_that_dies_leaves_its_job_undone_and_the_other_goes_on(tmp_path: Path) -> None:
    graph = run_fission(_chain()).graph
    subs = [extract_subgraph(graph, c) for c in _pools(graph)["inductor"][:2]]
    jobs = [AheadJob(("dies", "inductor"), _Exit(), CompileOptions(threads=1), 10.0)]      # type: ignore[arg-type]
    jobs += [AheadJob((f"k{i}", "inductor"), sub, CompileOptions(threads=1), 1.0) for i, sub in enumerate(subs)]
    calls = []
    ahead = compile_ahead(jobs, 2, tmp_path, lambda *a: calls.append(a))
    assert set(ahead.saved) == {("k0", "inductor"), ("k1", "inductor")} and ahead.failed == 1
    assert [c[0] for c in calls] == [0, 1, 2, 3] and calls[0][2:] == (0.0, 12.0) and calls[-1][2:] == (12.0, 12.0)
    assert all((path / "artifact.json").is_file() for path in ahead.saved.values())


def test_a_loaded_kernel_saved_again_is_the_files_it_was_loaded_from(tmp_path: Path) -> None:
    """The profiler keeps a whole-model kernel compiled ahead (a loaded kernel) in its kernel store:
    saving it again copies its files. Its code holds stand-ins for weights packed at load, which the
    saving analysis would have stored as if they were its weights."""
    from korch.backends import get_backend
    from korch.verify import random_feeds

    graph = run_fission(_chain()).graph
    backend = get_backend("inductor")
    options = CompileOptions(threads=1)
    backend.save_kernel(backend.compile(graph, options), graph, tmp_path / "first")
    loaded = backend.load_kernel(tmp_path / "first", graph, options)
    backend.save_kernel(loaded, graph, tmp_path / "again")
    again = backend.load_kernel(tmp_path / "again", graph, options)
    feeds = random_feeds(graph, seed=5)
    inputs = [feeds[name] for name in graph.inputs]
    np.testing.assert_array_equal(again.run(inputs)[0], loaded.run(inputs)[0])
    assert sorted(p.name for p in (tmp_path / "again").iterdir()) == sorted(p.name for p in (tmp_path / "first").iterdir())
