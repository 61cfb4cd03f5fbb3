"""Export a primitive graph as a standard ONNX model: one ONNX node per primitive.

The result opens in Netron and runs in onnxruntime; it is how a primitive graph (or a piece of
one) is handed to ONNX-based tools.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from korch.ir.graph import Graph, Node

EXPORT_OPSET = 19        # AveragePool takes dilations from 19 on
EXPORT_IR_VERSION = 9    # the IR version that goes with opset 19

_SIMPLE = {
    "neg": "Neg", "abs": "Abs", "exp": "Exp", "log": "Log", "sqrt": "Sqrt", "reciprocal": "Reciprocal",
    "tanh": "Tanh", "sigmoid": "Sigmoid", "erf": "Erf", "relu": "Relu", "floor": "Floor", "ceil": "Ceil",
    "round": "Round", "sign": "Sign", "sin": "Sin", "cos": "Cos", "not": "Not",
    "add": "Add", "sub": "Sub", "mul": "Mul", "div": "Div", "pow": "Pow", "max": "Max", "min": "Min",
    "greater": "Greater", "less": "Less", "equal": "Equal", "and": "And", "or": "Or", "where": "Where",
    "matmul": "MatMul",
}
_REDUCE = {"reduce_sum": "ReduceSum", "reduce_max": "ReduceMax", "reduce_min": "ReduceMin", "reduce_prod": "ReduceProd"}


class _Emitter:
    """Collects ONNX nodes and the int64 constant inputs that some ops take instead of attributes."""

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []

    def const(self, node: Node, tag: str, values: Any, dtype: np.dtype = np.dtype(np.int64)) -> str:
        name = f"{node.output}::{tag}"
        self.initializers.append(numpy_helper.from_array(np.asarray(values, dtype=dtype), name))
        return name

    def add(self, node: Node, op_type: str, inputs: list[str], **attrs: Any) -> None:
        name = f"{node.origin}/{node.op}/{node.output}" if node.origin else f"{node.op}/{node.output}"
        self.nodes.append(helper.make_node(op_type, inputs, [node.output], name=name, **attrs))


Lowering = Callable[[_Emitter, Node, Graph], None]
_LOWER: dict[str, Lowering] = {}


def _lowers(*ops: str) -> Callable[[Lowering], Lowering]:
    def register(fn: Lowering) -> Lowering:
        for op in ops:
            _LOWER[op] = fn
        return fn
    return register


@_lowers(*_SIMPLE)
def _simple(e: _Emitter, n: Node, g: Graph) -> None:
    e.add(n, _SIMPLE[n.op], list(n.inputs))


@_lowers("cast")
def _cast(e: _Emitter, n: Node, g: Graph) -> None:
    e.add(n, "Cast", list(n.inputs), to=n.attrs["to"].onnx)


@_lowers(*_REDUCE)
def _reduce(e: _Emitter, n: Node, g: Graph) -> None:
    axes = e.const(n, "axes", n.attrs["axes"])
    e.add(n, _REDUCE[n.op], [n.inputs[0], axes], keepdims=int(n.attrs["keepdims"]))


@_lowers("window_max", "window_mean")
def _window(e: _Emitter, n: Node, g: Graph) -> None:
    op_type = "MaxPool" if n.op == "window_max" else "AveragePool"
    e.add(n, op_type, list(n.inputs), kernel_shape=list(n.attrs["kernel"]), strides=list(n.attrs["strides"]),
          dilations=list(n.attrs["dilations"]))


@_lowers("expand")
def _expand(e: _Emitter, n: Node, g: Graph) -> None:
    e.add(n, "Expand", [n.inputs[0], e.const(n, "shape", n.attrs["shape"])])


@_lowers("transpose")
def _transpose(e: _Emitter, n: Node, g: Graph) -> None:
    e.add(n, "Transpose", list(n.inputs), perm=list(n.attrs["perm"]))


@_lowers("reshape")
def _reshape(e: _Emitter, n: Node, g: Graph) -> None:
    shape = n.attrs["shape"]
    e.add(n, "Reshape", [n.inputs[0], e.const(n, "shape", shape)], allowzero=int(0 in shape))


@_lowers("slice")
def _slice(e: _Emitter, n: Node, g: Graph) -> None:
    starts, steps, sizes = n.attrs["starts"], n.attrs["steps"], n.attrs["sizes"]
    dims = g.types[n.inputs[0]].shape
    # An end below zero means "before index 0"; ONNX reads negative ends from the back, so use -(dim+1).
    ends = [s + k * st if s + k * st >= 0 else -(d + 1) for s, st, k, d in zip(starts, steps, sizes, dims)]
    e.add(n, "Slice", [n.inputs[0], e.const(n, "starts", starts), e.const(n, "ends", ends),
                       e.const(n, "axes", range(len(starts))), e.const(n, "steps", steps)])


@_lowers("concat")
def _concat(e: _Emitter, n: Node, g: Graph) -> None:
    e.add(n, "Concat", list(n.inputs), axis=n.attrs["axis"])


@_lowers("pad")
def _pad(e: _Emitter, n: Node, g: Graph) -> None:
    inputs = [n.inputs[0], e.const(n, "pads", n.attrs["pads"])]
    if n.attrs["mode"] == "constant":
        inputs.append(e.const(n, "value", n.attrs["value"], g.types[n.inputs[0]].dtype.numpy))
    e.add(n, "Pad", inputs, mode=n.attrs["mode"])


@_lowers("gather")
def _gather(e: _Emitter, n: Node, g: Graph) -> None:
    e.add(n, "Gather", list(n.inputs), axis=n.attrs["axis"])


@_lowers("conv", "conv_transpose")
def _conv(e: _Emitter, n: Node, g: Graph) -> None:
    a = n.attrs
    extra = {"output_padding": list(a["output_padding"])} if n.op == "conv_transpose" else {}
    e.add(n, "Conv" if n.op == "conv" else "ConvTranspose", list(n.inputs),
          kernel_shape=list(g.types[n.inputs[1]].shape[2:]), strides=list(a["strides"]), pads=list(a["pads"]),
          dilations=list(a["dilations"]), group=a["group"], **extra)


def to_onnx(graph: Graph, doc: str = "") -> onnx.ModelProto:
    """The primitive graph as an ONNX model (opset EXPORT_OPSET), weights embedded."""
    e = _Emitter()
    for node in graph.nodes:
        _LOWER[node.op](e, node, graph)

    def info(name: str) -> onnx.ValueInfoProto:
        t = graph.types[name]
        return helper.make_tensor_value_info(name, t.dtype.onnx, list(t.shape))

    initializers = [numpy_helper.from_array(np.asarray(a), name) for name, a in graph.constants.items()]
    outputs = set(graph.outputs)
    g = helper.make_graph(
        e.nodes, graph.name or "korch", [info(n) for n in graph.inputs], [info(n) for n in graph.outputs],
        initializer=initializers + e.initializers,
        value_info=[info(n.output) for n in graph.nodes if n.output not in outputs],
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", EXPORT_OPSET)], producer_name="korch",
                              doc_string=doc)
    model.ir_version = EXPORT_IR_VERSION
    return model


def lowerable_ops() -> Mapping[str, Lowering]:
    return dict(_LOWER)
