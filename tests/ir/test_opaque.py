"""Opaque primitives in the IR: dynamic dims, invariants, exact save/load, text, and ONNX export.

Numeric checks draw fresh random inputs and compare with onnxruntime within EXPORT_RTOL of each
output's largest magnitude.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from korch.errors import UnsupportedError
from korch.frontend import fission
from korch.ir.check import graph_problems
from korch.ir.graph import Graph, GraphBuilder
from korch.ir.onnx_export import EXPORT_OPSET, export_opsets, to_onnx
from korch.ir.opaque import OPAQUE, opaque_attrs
from korch.ir.serialize import load_graph, save_graph
from korch.ir.text import dump
from korch.ir.types import UNKNOWN_DIM, DType, TensorType
from korch.verify import diff_outputs, random_feeds, run_onnxruntime
from tests.opaque_models import lstm_model, nms_model, topk_model

# The export runs the same ops as the original in onnxruntime: only float rounding differs.
EXPORT_RTOL = 1e-5


def _fresh_seed() -> int:
    return int(np.random.SeedSequence().entropy % 2**31)


def test_dynamic_dims() -> None:
    t = TensorType((UNKNOWN_DIM, 3), DType.INT64)
    assert not t.is_static and TensorType((2, 3), DType.INT64).is_static
    assert str(t) == "int64[?x3]"
    assert t.admits((5, 3)) and t.admits((0, 3)) and not t.admits((5, 4)) and not t.admits((5,))
    with pytest.raises(ValueError, match="data-dependent"):
        _ = t.size


def test_only_opaque_primitives_read_values_of_data_dependent_shape() -> None:
    b = GraphBuilder("g")
    x = b.add_input("x", TensorType((4, 2), DType.FLOAT32))
    nonzero = helper.make_node("NonZero", ["a"], ["b"])
    attrs = opaque_attrs(nonzero, 0, {"": 17}, TensorType((2, UNKNOWN_DIM), DType.INT64))
    nz = b.emit(OPAQUE, [x], attrs, origin="nonzero")
    graph = b.build([("y", b.emit("neg", [nz]))])
    assert any("data-dependent shape" in p for p in graph_problems(graph))
    assert not graph_problems(b.build([("y", nz)]))


@pytest.mark.parametrize("build", [topk_model, nms_model, lstm_model])
def test_save_load_and_text_are_exact(build, tmp_path: Path) -> None:
    graph = fission(build())
    save_graph(graph, tmp_path)
    loaded = load_graph(tmp_path)
    assert loaded.nodes == graph.nodes and dict(loaded.types) == dict(graph.types)
    assert loaded.inputs == graph.inputs and loaded.outputs == graph.outputs
    assert all(np.array_equal(loaded.constants[k], v) for k, v in graph.constants.items())
    assert dump(loaded) == dump(graph)


def test_text_shows_the_onnx_node() -> None:
    text = dump(fission(topk_model()))
    assert "float32[2x4] = opaque[TopK(axis=1) output 0; opsets :17](" in text
    assert "int64[2x4] = opaque[TopK(axis=1) output 1; opsets :17](" in text
    assert "int64[?x3] = opaque[NonMaxSuppression() output 0;" in dump(fission(nms_model()))


def _check_export(graph: Graph, model: onnx.ModelProto) -> onnx.ModelProto:
    exported = to_onnx(graph)
    onnx.checker.check_model(exported)
    seed = _fresh_seed()
    feeds = random_feeds(graph, seed)
    for diff in diff_outputs(run_onnxruntime(exported, feeds), run_onnxruntime(model, feeds)):
        assert diff.rel <= EXPORT_RTOL, f"seed {seed}: {diff}"
    return exported


def test_a_node_with_several_outputs_is_exported_once() -> None:
    model = topk_model()
    exported = _check_export(fission(model), model)
    assert [n.op_type for n in exported.graph.node].count("TopK") == 1


def test_data_dependent_dims_export_without_a_value() -> None:
    model = nms_model()
    exported = _check_export(fission(model), model)
    (picked,) = [o for o in exported.graph.output if o.name == "picked"]
    dims = picked.type.tensor_type.shape.dim
    assert not dims[0].HasField("dim_value") and dims[1].dim_value == 4


def _model(nodes, inputs, outputs, initializers, opset: int) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs],
                              initializer=[numpy_helper.from_array(a, n) for n, a in initializers.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = helper.find_min_ir_version_for(list(model.opset_import))
    return model


@pytest.mark.parametrize("opset", [20, 21])
def test_a_node_whose_meaning_changed_since_the_export_opset_exports_at_its_own(opset: int) -> None:
    """GridSample changed at opset 20: exported at the model's opset, every primitive lowered there."""
    rng = np.random.default_rng(_fresh_seed())
    nodes = [helper.make_node("Softmax", ["x"], ["p"], name="softmax", axis=-1),
             helper.make_node("GridSample", ["p", "grid"], ["s"], name="grid_sample", mode="linear"),
             helper.make_node("ReduceMax", ["s", "axes"], ["y"], name="reduce", keepdims=1)]
    model = _model(nodes, [("x", [1, 2, 5, 6])], [("y", [1, 2, 1, 3])],
                   {"grid": rng.uniform(-1, 1, (1, 4, 3, 2)).astype(np.float32),
                    "axes": np.array([2], np.int64)}, opset)
    graph = fission(model)
    assert export_opsets(graph) == {"": opset}
    _check_export(graph, model)


def test_an_unchanged_node_exports_at_the_export_opset() -> None:
    model = topk_model()
    model.opset_import[0].version = 21
    model.ir_version = 10
    assert export_opsets(fission(model)) == {"": EXPORT_OPSET}


def test_old_opsets_lower_reductions_with_attributes() -> None:
    """ScatterND changed at 13, 16 and 18: an opset-11 model exports at 11, where reductions take
    their axes as an attribute."""
    nodes = [helper.make_node("Softmax", ["x"], ["p"], name="softmax", axis=1),
             helper.make_node("ReduceMean", ["p"], ["m"], name="mean", axes=[1], keepdims=1),
             helper.make_node("Sub", ["p", "m"], ["centred"], name="centre"),
             helper.make_node("ScatterND", ["centred", "indices", "u"], ["y"], name="scatter")]
    model = _model(nodes, [("x", [4, 6]), ("u", [2, 6])], [("y", [4, 6])],
                   {"indices": np.array([[2], [0]], np.int64)}, 11)
    graph = fission(model)
    assert export_opsets(graph) == {"": 11}
    exported = _check_export(graph, model)
    reductions = [n for n in exported.graph.node if n.op_type.startswith("Reduce")]
    assert reductions and all(len(n.input) == 1 for n in reductions)


def test_opaque_nodes_of_different_opsets_cannot_share_an_export() -> None:
    b = GraphBuilder("g")
    x = b.add_input("x", TensorType((2, 3, 3), DType.FLOAT32))
    det = helper.make_node("Det", ["a"], ["d"])
    a = b.emit(OPAQUE, [x], opaque_attrs(det, 0, {"": 17}, TensorType((2,), DType.FLOAT32)), origin="a")
    c = b.emit(OPAQUE, [x], opaque_attrs(det, 0, {"": 18}, TensorType((2,), DType.FLOAT32)), origin="c")
    with pytest.raises(UnsupportedError, match=r"different ai.onnx opsets \[17, 18\]"):
        to_onnx(b.build([("a", a), ("c", c)]))
