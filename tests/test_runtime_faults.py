"""A kernel that fails at run time: the error names the step, engine and ONNX nodes, and the
session stays usable (the next run gives onnxruntime's answer)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import korch
from korch.errors import ExitCode
from korch.runtime import KernelRunError
from korch.verify import diff_outputs, run_onnxruntime

ROWS = 6


def _gather_model() -> onnx.ModelProto:
    """y = relu(table[idx] * 2): onnxruntime refuses an index outside [-ROWS, ROWS-1]."""
    rng = np.random.default_rng()
    table = numpy_helper.from_array(rng.standard_normal((ROWS, 16)).astype(np.float32), "table")
    two = numpy_helper.from_array(np.array(2.0, np.float32), "two")
    nodes = [helper.make_node("Gather", ["table", "idx"], ["g"], name="lookup", axis=0),
             helper.make_node("Mul", ["g", "two"], ["m"], name="scale"),
             helper.make_node("Relu", ["m"], ["y"], name="act")]
    graph = helper.make_graph(nodes, "gather", [helper.make_tensor_value_info("idx", TensorProto.INT64, [3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 16])], [table, two])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def test_kernel_failure_names_step_engine_and_nodes_and_session_stays_usable(tmp_path: Path) -> None:
    model = _gather_model()
    plan = korch.optimize(model, threads=1, backends=["onnxruntime"], cache_dir=tmp_path / "cache")
    session = korch.compile(plan)
    with pytest.raises(KernelRunError) as caught:
        session.run(None, {"idx": np.array([0, ROWS + 40, 1], np.int64)})
    message = str(caught.value)
    assert caught.value.exit_code == ExitCode.RUN
    assert "onnxruntime kernel" in message and "'lookup'" in message, message
    assert f"of {len(plan.steps)}," in message, message

    rng = np.random.default_rng()
    for _ in range(2):       # a clean run after the failure, twice: no state left behind
        feeds = {"idx": rng.integers(-ROWS, ROWS, 3).astype(np.int64)}
        got = dict(zip(plan.graph.outputs, session.run(None, feeds)))
        assert [d.rel for d in diff_outputs(got, run_onnxruntime(model, feeds))] == [0.0]


def test_step_times_time_every_step_and_leave_run_untouched(tmp_path: Path) -> None:
    model = _gather_model()
    plan = korch.optimize(model, threads=1, backends=["onnxruntime"], cache_dir=tmp_path / "cache")
    session = korch.compile(plan)
    feeds = {"idx": np.random.default_rng().integers(-ROWS, ROWS, 3).astype(np.int64)}
    times = session.step_times(feeds)
    assert len(times) == len(plan.steps) and all(t > 0 for t in times)
    got = dict(zip(plan.graph.outputs, session.run(None, feeds)))
    assert [d.rel for d in diff_outputs(got, run_onnxruntime(model, feeds))] == [0.0]
    with pytest.raises(KernelRunError):      # a failing step raises the same way when timed
        session.step_times({"idx": np.array([0, ROWS + 40, 1], np.int64)})
