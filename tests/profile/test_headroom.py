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
from korch.profile.guided import profile_last
from korch.profile.profiler import profile, record_version
from korch.profile.prune import best_times, floor_seconds, single_times
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


def test_floor_is_the_linear_primitives_best_single_times_or_the_bytes_moved(fissioned) -> None:
    graph, small = fissioned
    unique = {c.key: c for c in small}
    conv = next(c for c in unique.values() if c.size == 1 and graph.nodes[c.nodes[0]].op == "conv")
    fused = [c for c in unique.values() if c.size > 1]
    assert any(conv.nodes[0] in c.nodes for c in fused) and any(conv.nodes[0] not in c.nodes for c in fused)
    single = {conv.nodes[0]: 1e-3}
    for c in fused:
        io = sum(graph.types[v].nbytes for v in (*c.inputs, *c.outputs))
        assert io > 0
        linear = 1e-3 if conv.nodes[0] in c.nodes else 0.0
        assert floor_seconds(graph, c, single, 1e12) == pytest.approx(max(linear, io / 1e12), rel=1e-12)
        assert floor_seconds(graph, c, single, 1e3) == pytest.approx(io / 1e3)      # slow memory: the bytes
        assert floor_seconds(graph, c, {}, 1e12) == pytest.approx(io / 1e12)         # no single time: free


def test_single_times_cover_every_node_of_a_shared_key() -> None:
    """Two convs of the same shapes (different weights) share a key: both get its time alone."""
    w = [helper.make_tensor(n, TensorProto.FLOAT, [4, 4, 3, 3], [0.01 * ((i + k) % 5) for i in range(144)])
         for k, n in enumerate(("w1", "w2"))]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["a"], ["r"]),
             helper.make_node("Conv", ["r", "w2"], ["y"], pads=[1, 1, 1, 1])]
    graph = helper.make_graph(nodes, "twin", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])], w)
    g = run_fission(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)).graph
    small = enumerate_all(g, OptimizeSettings(threads=1, backends=("onnxruntime",))).small
    convs = [c for c in small if c.size == 1 and g.nodes[c.nodes[0]].op == "conv"]
    assert len(convs) == 2 and convs[0].key == convs[1].key
    single = single_times(small, {convs[0].key: 2e-3})
    assert single == {convs[0].nodes[0]: 2e-3, convs[1].nodes[0]: 2e-3}


def test_best_times_reads_accepted_profiles_only(fissioned) -> None:
    graph, small = fissioned
    fused = [c for c in {c.key: c for c in small}.values() if c.size > 1]
    records = {(c.key, "onnxruntime"): _ok(c.key, 1e-3) for c in fused}
    records[(fused[0].key, "openvino")] = _ok(fused[0].key, 0.5e-3)
    records[(fused[1].key, "openvino")] = _ok(fused[1].key, 0.2e-3, error=1e-2)        # inaccurate
    records[(fused[2].key, "onnxruntime")] = Record.rejected(fused[2].key, "onnxruntime", "v", 1, "m", "no",
                                                             Rejection.FAILED, "code")
    best = best_times(small, records, 1e-4)
    assert best[fused[0].key] == 0.5e-3 and best[fused[1].key] == 1e-3 and fused[2].key not in best


def _inductor_small(db: ProfileDB, small, settings: OptimizeSettings) -> dict:
    keys = list({c.key for c in small})
    version = record_version(get_backend("inductor"), settings.profile)
    return db.get_many(keys, "inductor", version, settings.threads, machine_fingerprint())


def _settings(budget: int = 3, batch: int = 2) -> OptimizeSettings:
    return OptimizeSettings(threads=1, backends=("onnxruntime", "inductor"), calibration=QUICK_CALIBRATION,
                            profile=replace(QUICK_PROFILE, inductor_budget=budget, inductor_batch=batch,
                                            inductor_region_budget=0, compile_workers=0))


def test_inductor_compiles_what_a_solve_at_floors_chooses_after_onnxruntime(fissioned, tmp_path: Path) -> None:
    """profile_last, with no whole model to beat: Inductor compiles the fused candidates a split-plan solve
    wanted at their floors, at most its budget; a linear primitive alone only before fused kernels
    that hold it (the budget chosen before any profile took the conv alone first, for itself);
    asked again, it measures nothing."""
    pytest.importorskip("torch")
    graph, small = fissioned
    settings = _settings()
    machine = machine_fingerprint()
    split = [c for c in small if c.size < len(graph.nodes)]
    with ProfileDB(tmp_path / "profiles.sqlite") as db:
        first = profile(graph, {"onnxruntime": split}, db, 1, machine, settings.profile, settings.accuracy)
        got = profile_last(graph, {"inductor": []}, small, first, {"onnxruntime": split}, db, settings, machine, None,
                           lambda p, c, v: 0.0)
        inductor = _inductor_small(db, small, settings)
        again = profile_last(graph, {"inductor": []}, small, first, {"onnxruntime": split}, db, settings, machine,
                             None, lambda p, c, v: 0.0)
    assert 1 <= len(inductor) <= 3, len(inductor)
    by_key = {c.key: c for c in small}
    assert any(by_key[k].size > 1 for k in inductor)
    for k, r in inductor.items():
        if by_key[k].size == 1 and graph.nodes[by_key[k].nodes[0]].op == "conv":
            holding = [q for j, q in inductor.items() if by_key[j].size > 1 and by_key[k].nodes[0] in by_key[j].nodes]
            assert all(q.created_at > r.created_at for q in holding)
    assert {k for (k, name) in got.records if name == "inductor"} >= set(inductor)
    assert got.measured - first.measured >= len(inductor) and again.measured == first.measured


def test_inductor_compiles_nothing_small_when_no_split_plan_could_beat_the_whole_model(
        tmp_path: Path, caplog, fissioned, monkeypatch: pytest.MonkeyPatch) -> None:
    """onnxruntime's whole model beats any split plan even at Inductor's floors: every onnxruntime kernel
    profiles at 1 ms here (real times made this race close, and it failed under load), so any split
    plan spends 1 ms on the conv alone or at a floor of at least that, plus its tail. The first
    relaxation says so, and no small candidate is compiled; a warm run measures nothing."""
    pytest.importorskip("torch")
    import korch.profile.profiler as profiler

    measure_one = profiler._measure_one

    def one_ms(graph, job, *args):
        record = measure_one(graph, job, *args)
        if job.backend == "onnxruntime" and record.median_s is not None:
            record = replace(record, median_s=1e-3, p10_s=1e-3, p90_s=1e-3)
        return record

    monkeypatch.setattr(profiler, "_measure_one", one_ms)
    _, small = fissioned
    settings = _settings()
    with ProfileDB(tmp_path / "profiles.sqlite") as db:
        with caplog.at_level("INFO", logger="korch.profile"):
            optimize(_model(), db, settings)
        inductor = _inductor_small(db, small, settings)
        _, _, warm = optimize(_model(), db, settings)
    assert not inductor
    assert any("no split plan can run below" in r.message for r in caplog.records)
    assert warm.profiled_new == 0, warm.profiled_new


def test_linear_primitives_not_timed_alone_are_timed_on_the_other_backends_before_the_floors(
        fissioned, tmp_path: Path) -> None:
    """Guided profiling may leave a conv alone untimed, and a floor would count it free (yolox-nano:
    floors 11-24x under Inductor's kernels): profile_last times it first on onnxruntime, whose pool
    holds it, and Inductor still never compiles it alone."""
    pytest.importorskip("torch")
    graph, small = fissioned
    settings = _settings()
    machine = machine_fingerprint()
    split = [c for c in small if c.size < len(graph.nodes)]
    conv = next(c for c in split if c.size == 1 and graph.nodes[c.nodes[0]].op == "conv")
    with ProfileDB(tmp_path / "profiles.sqlite") as db:
        first = profile(graph, {"onnxruntime": [c for c in split if c.key != conv.key]}, db, 1, machine,
                        settings.profile, settings.accuracy)
        assert (conv.key, "onnxruntime") not in first.records
        got = profile_last(graph, {"inductor": []}, small, first, {"onnxruntime": split}, db, settings, machine, None,
                           lambda p, c, v: 0.0)
    record = got.records[(conv.key, "onnxruntime")]
    assert record.median_s and record.median_s > 0


def test_inductor_runs_a_linear_primitive_alone_before_the_fused_kernels_that_hold_it(
        fissioned, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """onnxruntime's fused kernels holding the conv are made 50x slow, so a solve at floors picks
    Inductor's. Inductor then runs the conv alone first (its own library's time raises those floors),
    and a fused kernel holding it is measured, if at all, only in a later round, at the floors it raised."""
    pytest.importorskip("torch")
    import korch.profile.profiler as profiler

    graph, small = fissioned
    conv_node = next(i for i, n in enumerate(graph.nodes) if n.op == "conv")
    measure_one = profiler._measure_one

    def fused_conv_slow(g, job, *args):
        record = measure_one(g, job, *args)
        if job.candidate.size > 1 and conv_node in job.candidate.nodes and record.median_s is not None:
            record = replace(record, median_s=record.median_s * 50, p10_s=record.p10_s * 50, p90_s=record.p90_s * 50)
        return record

    monkeypatch.setattr(profiler, "_measure_one", fused_conv_slow)
    settings = _settings(budget=3, batch=2)
    machine = machine_fingerprint()
    split = [c for c in small if c.size < len(graph.nodes)]
    conv = next(c for c in small if c.nodes == (conv_node,))
    with ProfileDB(tmp_path / "profiles.sqlite") as db, caplog.at_level("INFO", logger="korch.profile"):
        first = profile(graph, {"onnxruntime": split}, db, 1, machine, settings.profile, settings.accuracy)
        profile_last(graph, {"inductor": []}, small, first, {"onnxruntime": split}, db, settings, machine, None,
                     lambda p, c, v: 0.0)
        inductor = _inductor_small(db, small, settings)
    by_key = {c.key: c for c in small}
    holding = [r for k, r in inductor.items() if by_key[k].size > 1 and conv_node in by_key[k].nodes]
    assert conv.key in inductor, sorted(by_key[k].nodes for k in inductor)
    assert min(inductor.values(), key=lambda r: r.created_at) is inductor[conv.key]      # the first compiled
    assert all(r.created_at > inductor[conv.key].created_at for r in holding)
    assert any("measured first to raise the floors" in r.message for r in caplog.records)
