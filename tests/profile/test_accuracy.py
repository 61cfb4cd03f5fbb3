"""One accuracy policy for kernels and plans: on a model where fp32 rounding alone puts onnxruntime
far from the float64 reference, kernels are accepted within the same fp32-aware tolerance as the
plan check, and rejections made under a stricter tolerance are retried."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from korch.pipeline import optimize
from korch.profile.database import ProfileDB, Status
from korch.profile.profiler import ACCURACY_REJECTION
from korch.settings import QUICK_CALIBRATION, QUICK_PROFILE, QUICK_SELECTION, AccuracyPolicy, OptimizeSettings
from korch.verify import diff_outputs, random_feeds, run_onnxruntime

# Terms per row, and the offset each term carries: the row sum is ~ N * OFFSET, minus N * OFFSET again,
# so fp32 accumulation loses ~1e-3 of the result (measured: onnxruntime 7.7e-4 from float64).
N = 4096
OFFSET = 100.0


def cancelling_sum() -> onnx.ModelProto:
    """y = sum(x + OFFSET, axis 1) - N * OFFSET: ill-conditioned in fp32 by construction."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, N])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 1])
    nodes = [helper.make_node("Add", ["x", "offset"], ["a"], name="add"),
             helper.make_node("ReduceSum", ["a", "axes"], ["s"], keepdims=1, name="sum"),
             helper.make_node("Sub", ["s", "total"], ["y"], name="sub")]
    inits = [numpy_helper.from_array(np.array(OFFSET, np.float32), "offset"),
             numpy_helper.from_array(np.array([1], np.int64), "axes"),
             numpy_helper.from_array(np.array(OFFSET * N, np.float32), "total")]
    model = helper.make_model(helper.make_graph(nodes, "cancel", [x], [y], inits),
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_kernels_are_judged_by_the_fp32_floor_and_strict_rejections_are_retried(tmp_path: Path) -> None:
    """Under a flat 1e-4 (the old per-kernel rule) onnxruntime's own whole-model kernel is rejected,
    as yolov4's was; under the policy it is accepted, because the tolerance follows onnxruntime's own
    fp32 error, and the stored rejections are measured again rather than trusted."""
    model = cancelling_sum()
    base = OptimizeSettings(threads=1, backends=("onnxruntime",), profile=QUICK_PROFILE, selection=QUICK_SELECTION,
                            calibration=QUICK_CALIBRATION)
    strict = replace(base, accuracy=AccuracyPolicy(fp32_factor=0.0))
    with ProfileDB(tmp_path / "profiles.sqlite") as db:
        _, _, before = optimize(model, db, strict)
        rejected = [r for r in _records(db) if r.status is Status.REJECTED]
        plan, session, stats = optimize(model, db, base)
        after = {r.candidate_key: r for r in _records(db)}
    assert "onnxruntime" not in before.selection.whole_model_ms and before.kernel_tolerance == 1e-4
    assert rejected and all(r.reason.startswith(ACCURACY_REJECTION) and r.error > 1e-4 for r in rejected)
    assert stats.fp32_error is not None and 2e-4 < stats.fp32_error < 1e-2
    assert stats.kernel_tolerance == pytest.approx(2 * stats.fp32_error)
    assert "onnxruntime" in stats.selection.whole_model_ms           # the whole model is an option again
    assert stats.profiled_new == len(rejected)                        # exactly the accuracy rejections, again
    assert all(after[r.candidate_key].status is Status.OK for r in rejected)
    assert stats.check_inputs == 3 and stats.max_rel_error <= stats.check_tolerance
    feeds = random_feeds(plan.graph, seed=123)
    (d,) = diff_outputs(dict(zip(plan.graph.outputs, session.run(None, feeds))), run_onnxruntime(model, feeds))
    assert d.rel <= stats.kernel_tolerance, d


def _records(db: ProfileDB):
    import sqlite3

    with sqlite3.connect(db.path) as conn:
        keys = [row[0] for row in conn.execute("SELECT DISTINCT candidate_key FROM profiles")]
    from korch.backends import get_backend
    from korch.profile.database import machine_fingerprint
    from korch.profile.profiler import record_version
    from korch.settings import ProfileSettings

    version = record_version(get_backend("onnxruntime"), ProfileSettings())
    return db.get_many(keys, "onnxruntime", version, 1, machine_fingerprint()).values()
