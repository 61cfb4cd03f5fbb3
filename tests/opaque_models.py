"""Small ONNX models around ops korch has no fission rule for (they stay whole as opaque nodes).

Each model surrounds its opaque node(s) with ops that do have rules (MatMul, Conv, Relu, Add ...),
has random weights, static input shapes and outputs that depend on the inputs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 8          # onnxruntime loads it; onnx would write 14 otherwise


def _weight(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return (rng.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32)


def _model(nodes: Sequence[onnx.NodeProto], inputs: dict[str, tuple[int, list[int]]],
           outputs: dict[str, tuple[int, list[int | str]]], initializers: dict[str, np.ndarray],
           opset: int = OPSET, extra_opsets: Sequence[tuple[str, int]] = ()) -> onnx.ModelProto:
    graph = helper.make_graph(
        list(nodes), "opaque_test",
        [helper.make_tensor_value_info(n, t, s) for n, (t, s) in inputs.items()],
        [helper.make_tensor_value_info(n, t, s) for n, (t, s) in outputs.items()],
        initializer=[numpy_helper.from_array(np.asarray(a), n) for n, a in initializers.items()])
    opsets = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, v) for d, v in extra_opsets]
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = IR_VERSION
    return model


def topk_model(seed: int = 0) -> onnx.ModelProto:
    """TopK with both outputs used: values, and indices cast to float and added to them."""
    rng = np.random.default_rng(seed)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
             helper.make_node("Relu", ["h"], ["r"], name="relu"),
             helper.make_node("TopK", ["r", "k"], ["values", "indices"], name="topk", axis=1),
             helper.make_node("Cast", ["indices"], ["indices_f"], name="cast", to=TensorProto.FLOAT),
             helper.make_node("Add", ["values", "indices_f"], ["y"], name="add")]
    return _model(nodes, {"x": (TensorProto.FLOAT, [2, 16])}, {"y": (TensorProto.FLOAT, [2, 4])},
                  {"w": _weight(rng, 16, 12), "k": np.array([4], np.int64)})


def nms_model(seed: int = 0, boxes: int = 8) -> onnx.ModelProto:
    """NonMaxSuppression (output [?, 3]) and the Gathers and Identity that read it, which thereby
    become opaque too; two outputs of data-dependent shape."""
    rng = np.random.default_rng(seed)
    nodes = [helper.make_node("MatMul", ["x", "wb"], ["b"], name="mm_boxes"),
             helper.make_node("Reshape", ["b", "box_shape"], ["boxes"], name="reshape_boxes"),
             helper.make_node("MatMul", ["x", "ws"], ["s"], name="mm_scores"),
             helper.make_node("Sigmoid", ["s"], ["sg"], name="sigmoid"),
             helper.make_node("Reshape", ["sg", "score_shape"], ["scores"], name="reshape_scores"),
             helper.make_node("NonMaxSuppression", ["boxes", "scores", "max_out", "iou", "threshold"], ["selected"],
                              name="nms"),
             helper.make_node("Gather", ["selected", "two"], ["box_index"], name="pick_box_index", axis=1),
             helper.make_node("Reshape", ["boxes", "flat_shape"], ["boxes2d"], name="flat_boxes"),
             helper.make_node("Gather", ["boxes2d", "box_index"], ["picked"], name="gather_boxes", axis=0),
             helper.make_node("Identity", ["selected"], ["selected_copy"], name="copy_selected")]
    initializers = {"wb": _weight(rng, 16, boxes * 4), "ws": _weight(rng, 16, boxes),
                    "box_shape": np.array([1, boxes, 4], np.int64), "score_shape": np.array([1, 1, boxes], np.int64),
                    "flat_shape": np.array([boxes, 4], np.int64), "max_out": np.array([boxes], np.int64),
                    "iou": np.array([0.3], np.float32), "threshold": np.array([0.2], np.float32),
                    "two": np.array(2, np.int64)}
    return _model(nodes, {"x": (TensorProto.FLOAT, [1, 16])},
                  {"picked": (TensorProto.FLOAT, ["n", 4]), "selected_copy": (TensorProto.INT64, ["n", 3])},
                  initializers)


def lstm_model(seed: int = 0, hidden: int = 6) -> onnx.ModelProto:
    """LSTM with omitted optional inputs (B, sequence_lens; initial_c left off) and output (Y_c)."""
    rng = np.random.default_rng(seed)
    seq, batch, size = 5, 2, 8
    nodes = [helper.make_node("MatMul", ["x", "w_in"], ["h"], name="mm"),
             helper.make_node("Relu", ["h"], ["r"], name="relu"),
             helper.make_node("LSTM", ["r", "W", "R", "", "", "h0"], ["Y", "Y_h", ""], name="lstm", hidden_size=hidden),
             helper.make_node("Tanh", ["Y"], ["y"], name="tanh"),
             helper.make_node("Add", ["Y_h", "bias"], ["last"], name="add")]
    initializers = {"w_in": _weight(rng, size, size), "W": _weight(rng, 1, 4 * hidden, size),
                    "R": _weight(rng, 1, 4 * hidden, hidden), "h0": _weight(rng, 1, batch, hidden),
                    "bias": _weight(rng, hidden)}
    return _model(nodes, {"x": (TensorProto.FLOAT, [seq, batch, size])},
                  {"y": (TensorProto.FLOAT, [seq, 1, batch, hidden]), "last": (TensorProto.FLOAT, [1, batch, hidden])},
                  initializers)


def scatternd_model(seed: int = 0) -> onnx.ModelProto:
    """ScatterND writing rows computed from one input into a matrix computed from another."""
    rng = np.random.default_rng(seed)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["data"], name="mm"),
             helper.make_node("Sigmoid", ["u"], ["updates"], name="sigmoid"),
             helper.make_node("ScatterND", ["data", "indices", "updates"], ["scattered"], name="scatter"),
             helper.make_node("Add", ["scattered", "bias"], ["y"], name="add")]
    initializers = {"w": _weight(rng, 6, 6), "indices": np.array([[3], [1]], np.int64), "bias": _weight(rng, 6)}
    return _model(nodes, {"x": (TensorProto.FLOAT, [4, 6]), "u": (TensorProto.FLOAT, [2, 6])},
                  {"y": (TensorProto.FLOAT, [4, 6])}, initializers)


def cumsum_model(seed: int = 0) -> onnx.ModelProto:
    """Conv + Relu, then an exclusive reverse CumSum along the width, then a bias."""
    rng = np.random.default_rng(seed)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("CumSum", ["r", "axis"], ["s"], name="cumsum", exclusive=1, reverse=1),
             helper.make_node("Add", ["s", "bias"], ["y"], name="add")]
    initializers = {"w": _weight(rng, 4, 3, 3, 3), "b": _weight(rng, 4), "axis": np.array(3, np.int64),
                    "bias": _weight(rng, 4, 1, 1)}
    return _model(nodes, {"x": (TensorProto.FLOAT, [1, 3, 8, 8])}, {"y": (TensorProto.FLOAT, [1, 4, 8, 8])},
                  initializers)


CUSTOM_DOMAIN = "com.example"


def custom_model(seed: int = 0, import_domain: bool = True) -> onnx.ModelProto:
    """A made-up custom op between two ops with rules: no engine can run it."""
    rng = np.random.default_rng(seed)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
             helper.make_node("MyOp", ["h"], ["m"], name="my_custom", domain=CUSTOM_DOMAIN),
             helper.make_node("Relu", ["m"], ["y"], name="relu")]
    extra = [(CUSTOM_DOMAIN, 1)] if import_domain else []
    return _model(nodes, {"x": (TensorProto.FLOAT, [2, 8])}, {"y": (TensorProto.FLOAT, [2, 4])},
                  {"w": _weight(rng, 8, 4)}, extra_opsets=extra)


# name -> (builder, ONNX node names that become opaque)
RUNNABLE: dict[str, tuple[Callable[..., onnx.ModelProto], tuple[str, ...]]] = {
    "topk": (topk_model, ("topk",)),
    "nms": (nms_model, ("nms", "pick_box_index", "gather_boxes", "copy_selected")),
    "lstm": (lstm_model, ("lstm",)),
    "scatternd": (scatternd_model, ("scatter",)),
    "cumsum": (cumsum_model, ("cumsum",)),
}
