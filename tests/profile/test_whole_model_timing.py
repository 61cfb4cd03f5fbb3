"""A whole model's timing goes on past `repeats` until its median is pinned or the cap is reached;
every other kernel stops as before."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from korch.pipeline import enumerate_all, optimize, run_fission
from korch.profile.database import ProfileDB, Status
from korch.settings import QUICK_CALIBRATION, QUICK_PROFILE, QUICK_SELECTION, OptimizeSettings
from tests.profile.test_accuracy import _records


def two_matmuls() -> onnx.ModelProto:
    """Each part does half the whole model's work, so the whole model is the slowest kernel by ~2x."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 128])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [64, 128])
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="mm1"),
             helper.make_node("MatMul", ["h", "w2"], ["y"], name="mm2")]
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.standard_normal((128, 128)).astype(np.float32), w) for w in ("w1", "w2")]
    model = helper.make_model(helper.make_graph(nodes, "two_matmuls", [x], [y], weights),
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_only_the_whole_model_is_timed_until_its_median_is_pinned(tmp_path: Path) -> None:
    # a precision no timing reaches: the whole model runs until the cap, every other kernel `repeats` times
    # (every kernel profiled: guided, this model's parts need not be measured at all)
    profile = replace(QUICK_PROFILE, repeats=3, precision=1e-12, whole_model_max_seconds=0.1, guided=False)
    settings = OptimizeSettings(threads=1, backends=("onnxruntime",), profile=profile, selection=QUICK_SELECTION,
                                calibration=QUICK_CALIBRATION)
    with ProfileDB(tmp_path / "profiles.sqlite") as db:
        start = time.perf_counter()
        optimize(two_matmuls(), db, settings, compile_session=False)
        elapsed = time.perf_counter() - start
        records = [r for r in _records(db, profile=profile) if r.status is Status.OK]
    # the whole model's kernel is timed twice, as a fused candidate and as an onnxruntime region ("region:KEY")
    extended = {r.candidate_key.split(":")[-1] for r in records if r.runs > 3}
    assert len(extended) == 1 and all(r.runs == 3 for r in records if r.candidate_key.split(":")[-1] not in extended)
    # the whole model: the candidate of every primitive (found by structure, not as the slowest
    # record: a part timed while another test's compiles load both cores can read slower)
    graph = run_fission(two_matmuls()).graph
    whole = {c.key.split(":")[-1] for c in enumerate_all(graph, settings).all if c.size == len(graph.nodes)}
    assert extended == whole and len(records) > 2
    assert elapsed > 0.1
