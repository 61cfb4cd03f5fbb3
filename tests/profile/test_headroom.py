"""Inductor's budget, chosen by the headroom the engines profiled before it leave (profile/prune.py)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from korch.backends import get_backend
from korch.pipeline import enumerate_all, optimize, run_fission
from korch.profile.database import ProfileDB, Record, Rejection, machine_fingerprint
from korch.profile.profiler import record_version
from korch.profile.prune import by_headroom, floor_seconds, headroom_budget, worth_profiling
from korch.profile.timing import Timing
from korch.settings import QUICK_CALIBRATION, QUICK_PROFILE, OptimizeSettings


def _model() -> onnx.ModelProto:
    """conv -> relu -> sigmoid -> mul(relu, sigmoid) -> add: a linear primitive and a pointwise tail."""
    w = helper.make_tensor("w", TensorProto.FLOAT, [8, 4, 3, 3], [0.01 * (i % 7) for i in range(288)])
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Sigmoid", ["r"], ["s"]),
             helper.make_node("Mul", ["r", "s"], ["m"]),
             helper.make_node("Add", ["m", "c"], ["y"])]
    graph = helper.make_graph(nodes, "tail", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 16, 16])], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.fixture(scope="module")
def fissioned():
    f = run_fission(_model())
    return f.graph, enumerate_all(f.graph, OptimizeSettings(threads=1, backends=("onnxruntime",))).small


def _ok(key: str, seconds: float, error: float = 0.0) -> Record:
    return Record.ok(key, "onnxruntime", "v", 1, "m", Timing(seconds, seconds, seconds, 5), error, "code")


def test_headroom_ranks_fused_candidates_by_what_the_engines_leave(fissioned) -> None:
    graph, small = fissioned
    unique = {c.key: c for c in small}
    conv = next(c for c in unique.values() if c.size == 1 and graph.nodes[c.nodes[0]].op == "conv")
    fused = [c for c in unique.values() if c.size > 1]
    assert len(fused) >= 3
    single = {conv.nodes[0]: 1e-3}
    bandwidth = 1e12                 # the bytes term is negligible: floors are the conv's single time, or 0
    # each fused candidate: a time of 1 ms + 0.1 ms per primitive, except the first, measured below its floor
    best = {c.key: 1e-3 + 1e-4 * c.size for c in fused}
    with_conv = [c for c in fused if conv.nodes[0] in c.nodes]
    best[with_conv[0].key] = 0.9e-3                        # faster than its conv alone: no room
    best[conv.key] = 1e-3
    chosen = by_headroom(graph, small, best, single, bandwidth, budget=len(fused))
    keys = [c.key for c in chosen]
    assert conv.key not in keys                            # single primitives are left out
    assert with_conv[0].key not in keys                    # no headroom
    room = {c.key: best[c.key] - floor_seconds(graph, c, single, bandwidth) for c in fused}
    assert all(room[k] > 0 for k in keys)
    assert {c.key for c in fused if room[c.key] > 0} == set(keys)
    # the floor of a candidate with the conv is the conv's time: 1 ms less room than one without
    for c in fused:
        expected = 1e-3 if conv.nodes[0] in c.nodes else 0.0
        assert floor_seconds(graph, c, single, bandwidth) == pytest.approx(expected, abs=1e-7)
    # a smaller budget keeps the largest rooms
    top = by_headroom(graph, small, best, single, bandwidth, budget=2)
    assert sorted(room[c.key] for c in {c.key: c for c in top}.values()) == sorted(
        sorted(room[k] for k in keys)[-2:])
    # a candidate with no profile is not ranked
    del best[fused[-1].key]
    assert fused[-1].key not in {c.key for c in by_headroom(graph, small, best, single, bandwidth, len(fused))}


def test_headroom_budget_reads_accepted_profiles_only(fissioned) -> None:
    graph, small = fissioned
    fused = [c for c in {c.key: c for c in small}.values() if c.size > 1]
    records = {(c.key, "onnxruntime"): _ok(c.key, 1e-3) for c in fused}
    inaccurate = fused[0]
    records[(inaccurate.key, "onnxruntime")] = _ok(inaccurate.key, 5e-3, error=1e-2)
    rejected = fused[1]
    records[(rejected.key, "onnxruntime")] = Record.rejected(rejected.key, "onnxruntime", "v", 1, "m", "no",
                                                             Rejection.FAILED, "code")
    chosen = {c.key for c in headroom_budget(graph, small, records, 1e-4, len(fused), 1e12)}
    assert inaccurate.key not in chosen and rejected.key not in chosen
    assert chosen and chosen <= {c.key for c in fused}
    # no profile at all: the budget chosen before any profile
    assert headroom_budget(graph, small, {}, 1e-4, 3, 1e12) == worth_profiling(graph, small, 3)


def test_optimize_gives_inductor_fused_candidates_after_onnxruntime_timed_them(fissioned, tmp_path: Path) -> None:
    """Inductor is profiled last, on fused candidates onnxruntime has profiled; before, its budget took
    the conv alone first."""
    pytest.importorskip("torch")
    graph, small = fissioned
    settings = OptimizeSettings(threads=1, backends=("onnxruntime", "inductor"), calibration=QUICK_CALIBRATION,
                                profile=replace(QUICK_PROFILE, inductor_budget=2, inductor_region_budget=0,
                                                compile_workers=0))
    machine = machine_fingerprint()
    with ProfileDB(tmp_path / "profiles.sqlite") as db:
        optimize(_model(), db, settings)
        keys = list({c.key for c in small})
        version = record_version(get_backend("inductor"), settings.profile)
        inductor = db.get_many(keys, "inductor", version, 1, machine)
        ort = db.get_many(keys, "onnxruntime", record_version(get_backend("onnxruntime"), settings.profile), 1,
                          machine)
    assert inductor, "Inductor profiled none of the small candidates"
    by_key = {c.key: c for c in small}
    assert all(by_key[k].size > 1 for k in inductor), [by_key[k].size for k in inductor]
    assert all(k in ort for k in inductor)
