"""Loading ONNX models: external data, symbolic dims, and one clear error per kind of bad input."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from korch.errors import ModelLoadError, ShapeError, UnsupportedError
from korch.frontend import fission, load_model, parse_input_shape
from korch.verify import verify_graph

RTOL = 1e-5


def _matmul_model(batch: int | str = 2, opset: int = 17, weight_size: int = 64) -> onnx.ModelProto:
    w = np.random.default_rng(0).standard_normal((weight_size, 8)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"), helper.make_node("Relu", ["h"], ["y"], name="act")],
        "mm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, weight_size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 8])],
        initializer=[numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def test_loads_path_and_proto_without_changing_the_callers_model(tmp_path: Path) -> None:
    model = _matmul_model("batch")
    before = model.SerializeToString()
    graph = fission(model, {"x": (3, 64)})
    assert graph.types["x"].shape == (3, 64)
    assert model.SerializeToString() == before
    onnx.save(_matmul_model(), tmp_path / "m.onnx")
    assert [n.op for n in fission(tmp_path / "m.onnx").nodes] == ["matmul", "relu"]


def test_external_data_is_loaded(tmp_path: Path) -> None:
    model = _matmul_model(weight_size=4096)
    onnx.save(model, tmp_path / "ext.onnx", save_as_external_data=True, location="ext.data", size_threshold=0)
    assert (tmp_path / "ext.data").exists()
    loaded = load_model(tmp_path / "ext.onnx")
    report = verify_graph(loaded, fission(tmp_path / "ext.onnx"), seed=3, rtol=RTOL)
    assert report.ok, report.summary()


def test_missing_external_data(tmp_path: Path) -> None:
    onnx.save(_matmul_model(weight_size=4096), tmp_path / "ext.onnx", save_as_external_data=True,
              location="ext.data", size_threshold=0)
    (tmp_path / "ext.data").unlink()
    with pytest.raises(ModelLoadError, match="ext.onnx.*external data"):
        load_model(tmp_path / "ext.onnx")


def test_truncated_and_garbage_files(tmp_path: Path) -> None:
    data = _matmul_model().SerializeToString()
    (tmp_path / "cut.onnx").write_bytes(data[: len(data) // 2])
    (tmp_path / "junk.onnx").write_bytes(b"\x00\xffnot a model at all" * 10)
    (tmp_path / "empty.onnx").write_bytes(b"")
    for name in ("cut.onnx", "junk.onnx", "empty.onnx"):
        with pytest.raises(ModelLoadError, match=name):
            load_model(tmp_path / name)
    with pytest.raises(ModelLoadError, match="no such file"):
        load_model(tmp_path / "absent.onnx")


def test_checker_failure_names_the_problem() -> None:
    model = _matmul_model()
    model.graph.node[1].input[0] = "undefined_tensor"
    with pytest.raises(ModelLoadError, match="checker"):
        load_model(model)


def test_opset_out_of_range() -> None:
    with pytest.raises(ModelLoadError, match="opset 9 is outside"):
        load_model(_matmul_model(opset=9))


def test_symbolic_dims_need_input_shape() -> None:
    with pytest.raises(ShapeError, match="input 'x' dim 0 is a symbolic dim 'batch'"):
        load_model(_matmul_model("batch"))
    with pytest.raises(ShapeError, match=r"names \['y'\]"):
        load_model(_matmul_model("batch"), {"y": (1, 64)})
    with pytest.raises(ShapeError, match="rank 2"):
        load_model(_matmul_model("batch"), {"x": (1, 2, 64)})
    with pytest.raises(ShapeError, match="fixed at 64"):
        load_model(_matmul_model("batch"), {"x": (1, 65)})


def test_parse_input_shape() -> None:
    assert parse_input_shape("input_ids=1x128") == ("input_ids", (1, 128))
    assert parse_input_shape("a=b=2x3") == ("a=b", (2, 3))
    for bad in ("x", "=1x2", "x=1x0", "x=1xq"):
        with pytest.raises(ShapeError, match="NAME=D1xD2"):
            parse_input_shape(bad)


def test_non_float_input_where_float_is_required() -> None:
    graph = helper.make_graph(
        [helper.make_node("Exp", ["x"], ["y"], name="e")], "g",
        [helper.make_tensor_value_info("x", TensorProto.INT64, [4])],
        [helper.make_tensor_value_info("y", TensorProto.INT64, [4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    with pytest.raises(ModelLoadError, match="node 'e' \\(Exp\\): input 'x' is int64, but Exp takes"):
        load_model(model)


def test_strict_reports_all_unsupported_nodes_at_once() -> None:
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="ok"),
             helper.make_node("TopK", ["a", "k"], ["v", "i"], name="topk_1"),
             helper.make_node("NonZero", ["a"], ["nz"], name="nonzero_2"),
             helper.make_node("Det", ["sq"], ["d"], name="det_3"),
             helper.make_node("Relu", ["v"], ["after"], name="downstream")]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 6]),
                     helper.make_tensor_value_info("sq", TensorProto.FLOAT, [3, 3])],
        [helper.make_tensor_value_info("after", TensorProto.FLOAT, [4, 2]),
         helper.make_tensor_value_info("nz", TensorProto.INT64, [2, "n"]),
         helper.make_tensor_value_info("d", TensorProto.FLOAT, [])],
        initializer=[numpy_helper.from_array(np.array([2], np.int64), "k")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    with pytest.raises(UnsupportedError) as info:
        fission(model, strict=True)
    message = str(info.value)
    assert message.startswith("3 node(s) cannot be fissioned")
    for name, op in (("topk_1", "TopK"), ("nonzero_2", "NonZero"), ("det_3", "Det")):
        assert f"'{name}' ({op})" in message
    assert "downstream" not in message


def _local_function_model() -> onnx.ModelProto:
    """y = sigmoid(gelu_like(x @ w) + gelu_like(x)): a model-local function, called twice, that calls
    another one (torch's exporter writes models like this)."""
    inner = helper.make_function("local", "Scale", ["a"], ["b"],
                                 [helper.make_node("Constant", [], ["c"], value_float=0.5),
                                  helper.make_node("Mul", ["a", "c"], ["b"])],
                                 opset_imports=[helper.make_opsetid("", 17)])
    outer = helper.make_function("local", "Act", ["a"], ["y"],
                                 [helper.make_node("Scale", ["a"], ["h"], domain="local"),
                                  helper.make_node("Tanh", ["h"], ["t"]),
                                  helper.make_node("Mul", ["a", "t"], ["y"])],
                                 opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("local", 1)])
    w = np.random.default_rng(0).standard_normal((8, 8)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"),
             helper.make_node("Act", ["m"], ["a1"], domain="local", name="act_1"),
             helper.make_node("Act", ["x"], ["a2"], domain="local", name="act_2"),
             helper.make_node("Add", ["a1", "a2"], ["s"], name="add"),
             helper.make_node("Sigmoid", ["s"], ["y"], name="out")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])],
                              initializer=[numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("local", 1)],
                              functions=[inner, outer])
    model.ir_version = 8
    return model


def test_model_local_functions_are_inlined_and_fissioned() -> None:
    model = _local_function_model()
    graph = fission(model)
    assert "opaque" not in {n.op for n in graph.nodes}
    assert sum(n.op == "tanh" for n in graph.nodes) == 2
    seed = int(np.random.SeedSequence().entropy % 2**31)
    report = verify_graph(model, graph, seed=seed)
    assert report.ok, f"seed {seed}: {report}"


def test_shapes_are_inferred_with_the_weights_set_aside_and_the_weights_kept() -> None:
    """load_model infers shapes with large float weights' bytes taken out (their values never set a
    shape): the same value types as onnx's inference of the whole model, a Reshape whose shape is an
    integer initializer included, and every weight byte back in place."""
    rng = np.random.default_rng(3)
    w = rng.standard_normal((64, 96)).astype(np.float32)              # 24 KiB: set aside
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Reshape", ["h", "shape"], ["r"]),
         helper.make_node("Relu", ["r"], ["y"])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["a", "b"])],
        initializer=[numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.array([4, 48], np.int64), "shape")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    loaded = load_model(model)
    expected = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    assert {v.name: v.type for v in loaded.graph.value_info} == {v.name: v.type for v in expected.graph.value_info}
    assert [d.dim_value for d in loaded.graph.output[0].type.tensor_type.shape.dim] == [4, 48]
    assert np.array_equal(numpy_helper.to_array(loaded.graph.initializer[0]), w)
    assert np.array_equal(numpy_helper.to_array(model.graph.initializer[0]), w)     # the caller's model untouched
