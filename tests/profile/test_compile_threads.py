"""Kernels of a backend that compiles in threads (OpenVINO) are compiled a window at a time in the
profiler's threads, before any of the window is timed (korch/profile/profiler.py, `_compile_window`):
their records are those of kernels compiled in place, a compile that fails in a thread is rejected
as it would be in place, and no kernel is timed while another compiles."""

from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from korch.backends import CompileOptions, Kernel
from korch.backends.onnxruntime import OnnxRuntimeBackend
from korch.candidates import RegionLimits, enumerate_candidates, region_candidates
from korch.frontend.regions import OnnxSource
from korch.ir.graph import Graph
from korch.pipeline import run_fission
from korch.profile.database import ProfileDB, Status
from korch.profile.profiler import profile
from korch.settings import QUICK_PROFILE

MACHINE = "test machine"
THREADED = replace(QUICK_PROFILE, compile_threads=2, compile_window=3)
IN_PLACE = replace(QUICK_PROFILE, compile_threads=1)


def _convs() -> onnx.ModelProto:
    """x -> conv -> relu -> conv -> sigmoid -> add x: weights the regions carry, several regions."""
    rng = np.random.default_rng(0)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 12, 12])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 12, 12])
    w1 = numpy_helper.from_array(rng.standard_normal((8, 8, 3, 3)).astype(np.float32) * 0.2, "w1")
    w2 = numpy_helper.from_array(rng.standard_normal((8, 8, 1, 1)).astype(np.float32) * 0.2, "w2")
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r"], name="relu"),
             helper.make_node("Conv", ["r", "w2"], ["c2"], name="conv2"),
             helper.make_node("Sigmoid", ["c2"], ["s"], name="sigmoid"),
             helper.make_node("Add", ["s", "x"], ["y"], name="add")]
    model = helper.make_model(helper.make_graph(nodes, "convs", [x], [y], [w1, w2]),
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_openvino_regions_compiled_in_threads_are_profiled_as_in_place(tmp_path: Path) -> None:
    pytest.importorskip("openvino")
    fissioned = run_fission(_convs())
    graph = fissioned.graph
    source = OnnxSource(fissioned.model, dict(fissioned.value_map or {}))
    regions = list({r.key: r for r in region_candidates(graph, RegionLimits())}.values())
    assert len(regions) > THREADED.compile_window          # more than one window
    pools = {"openvino": regions}
    with ProfileDB(tmp_path / "threads.sqlite") as db:
        threaded = profile(graph, pools, db, 2, MACHINE, THREADED, source=source)
    with ProfileDB(tmp_path / "in_place.sqlite") as db:
        in_place = profile(graph, pools, db, 2, MACHINE, IN_PLACE, source=source)
    assert "compile in threads" in threaded.seconds and "compile in threads" not in in_place.seconds
    assert set(threaded.records) == set(in_place.records) == {(r.key, "openvino") for r in regions}
    for pair, record in threaded.records.items():
        # each kernel's outputs were compared with the reference's on the profiler's random inputs
        assert record.status is Status.OK, record.reason
        assert record.error is not None and record.error <= 1e-4
        assert in_place.records[pair].status is Status.OK


class _Watched(Kernel):
    def __init__(self, inner: Kernel, backend: _ThreadedOrt) -> None:
        self.inner, self.backend, self.ran = inner, backend, False
        with backend.lock:
            backend.waiting += 1                    # compiled, not yet run: held by the profiler
            backend.most_waiting = max(backend.most_waiting, backend.waiting)

    def run(self, inputs):
        self.backend.ran_while_compiling += self.backend.compiling > 0
        if not self.ran:
            self.ran = True
            self.backend.waiting -= 1
        return self.inner.run(inputs)


class _ThreadedOrt(OnnxRuntimeBackend):
    """onnxruntime, declared to compile in threads, counting compiles under way and failing on Sigmoid."""

    name = "threaded-ort"
    compiles_in_threads = True

    def __init__(self) -> None:
        super().__init__()
        self.lock = threading.Lock()
        self.compiling = self.most = self.ran_while_compiling = self.waiting = self.most_waiting = 0
        self.threads: set[str] = set()

    def compile(self, graph: Graph, options: CompileOptions) -> Kernel:
        with self.lock:
            self.compiling += 1
            self.most = max(self.most, self.compiling)
            self.threads.add(threading.current_thread().name)
        try:
            if any(n.op == "sigmoid" for n in graph.nodes):
                raise RuntimeError("this backend cannot compile sigmoid")
            return _Watched(super().compile(graph, options), self)
        finally:
            with self.lock:
                self.compiling -= 1


def _profile_with(tmp_path: Path, name: str, settings, monkeypatch) -> tuple[object, _ThreadedOrt]:
    import korch.backends.base as base

    backend = _ThreadedOrt()
    monkeypatch.setitem(base._REGISTRY, backend.name, _ThreadedOrt)
    monkeypatch.setitem(base._INSTANCES, backend.name, backend)
    graph = run_fission(_convs()).graph
    cands = list({c.key: c for c in enumerate_candidates(graph)}.values())
    with ProfileDB(tmp_path / f"{name}.sqlite") as db:
        return profile(graph, {backend.name: cands}, db, 1, MACHINE, settings), backend


def test_no_kernel_is_timed_while_another_compiles_and_failures_are_rejected_as_in_place(
        tmp_path: Path, monkeypatch) -> None:
    threaded, backend = _profile_with(tmp_path, "threads", THREADED, monkeypatch)
    assert any(name.startswith("korch-compile") for name in backend.threads)
    assert backend.most <= THREADED.compile_threads
    assert 1 < backend.most_waiting <= THREADED.compile_window      # a window at a time
    assert backend.ran_while_compiling == 0
    in_place, _ = _profile_with(tmp_path, "in_place", IN_PLACE, monkeypatch)
    assert set(threaded.records) == set(in_place.records)
    failed = 0
    for pair, record in threaded.records.items():
        other = in_place.records[pair]
        assert (record.status, record.kind, record.reason) == (other.status, other.kind, other.reason)
        failed += record.status is Status.REJECTED
    assert failed and failed < len(threaded.records)      # the sigmoid kernels, and only those
