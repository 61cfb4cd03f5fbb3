"""Export a primitive graph as a standard ONNX model: one ONNX node per primitive.

The result opens in Netron and runs in onnxruntime; it is how a primitive graph (or a piece of
one) is handed to ONNX-based tools. An opaque primitive lowers to its original ONNX node (the
primitives of one node's several outputs share one node). The export opset is EXPORT_OPSET unless an
opaque node means something else there than in its own model's opset; then it is that opset (the
lowerings below are written for every opset korch loads).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from korch.errors import UnsupportedError
from korch.ir.graph import Graph, Node
from korch.ir.opaque import DEFAULT_DOMAIN, OPAQUE, bind_node, describe, opsets_of
from korch.ir.types import TensorType

EXPORT_OPSET = 19        # AveragePool takes dilations from 19 on
# Opsets where inputs replaced attributes that the lowerings set: reduction axes, Reshape's allowzero.
AXES_INPUT_OPSET = {"ReduceSum": 13, "ReduceMax": 18, "ReduceMin": 18, "ReduceProd": 18}
ALLOWZERO_OPSET = 14
AVERAGE_POOL_DILATIONS_OPSET = 19


class ExportError(UnsupportedError):
    """A primitive graph that cannot be written as one ONNX model (an opaque node's opset)."""

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

    def __init__(self, opset: int) -> None:
        self.opset = opset
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.opaque: dict[tuple[str, str, tuple[str, ...]], onnx.NodeProto] = {}   # one node per ONNX node

    def const(self, node: Node, tag: str, values: Any, dtype: np.dtype = np.dtype(np.int64)) -> str:
        name = f"{node.output}::{tag}"
        self.initializers.append(numpy_helper.from_array(np.asarray(values, dtype=dtype), name))
        return name

    def add(self, node: Node, op_type: str, inputs: list[str], **attrs: Any) -> None:
        self.nodes.append(helper.make_node(op_type, inputs, [node.output], name=self.node_name(node), **attrs))

    @staticmethod
    def node_name(node: Node) -> str:
        return f"{node.origin}/{node.op}/{node.output}" if node.origin else f"{node.op}/{node.output}"


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
    op_type, axes, keepdims = _REDUCE[n.op], list(n.attrs["axes"]), int(n.attrs["keepdims"])
    if not axes:        # a reduction over no axis is the identity; an ONNX Reduce* without axes reduces all
        e.add(n, "Identity", [n.inputs[0]])
    elif e.opset >= AXES_INPUT_OPSET[op_type]:
        e.add(n, op_type, [n.inputs[0], e.const(n, "axes", axes)], keepdims=keepdims)
    else:
        e.add(n, op_type, [n.inputs[0]], axes=axes, keepdims=keepdims)


@_lowers("window_max", "window_mean")
def _window(e: _Emitter, n: Node, g: Graph) -> None:
    op_type = "MaxPool" if n.op == "window_max" else "AveragePool"
    dilations = list(n.attrs["dilations"])
    extra = {"dilations": dilations}
    if op_type == "AveragePool" and e.opset < AVERAGE_POOL_DILATIONS_OPSET:
        if any(d != 1 for d in dilations):
            raise ExportError(f"primitive {n.output!r} (from {n.origin or '?'}): a dilated average pool needs "
                              f"opset {AVERAGE_POOL_DILATIONS_OPSET}, the export is at opset {e.opset}")
        extra = {}
    e.add(n, op_type, list(n.inputs), kernel_shape=list(n.attrs["kernel"]), strides=list(n.attrs["strides"]), **extra)


@_lowers("expand")
def _expand(e: _Emitter, n: Node, g: Graph) -> None:
    e.add(n, "Expand", [n.inputs[0], e.const(n, "shape", n.attrs["shape"])])


@_lowers("transpose")
def _transpose(e: _Emitter, n: Node, g: Graph) -> None:
    e.add(n, "Transpose", list(n.inputs), perm=list(n.attrs["perm"]))


@_lowers("reshape")
def _reshape(e: _Emitter, n: Node, g: Graph) -> None:
    shape = n.attrs["shape"]
    if not g.types[n.output].is_static:           # the copy of a value of data-dependent shape
        e.add(n, "Identity", [n.inputs[0]])
    elif e.opset >= ALLOWZERO_OPSET:
        e.add(n, "Reshape", [n.inputs[0], e.const(n, "shape", shape)], allowzero=int(0 in shape))
    elif 0 in shape:
        raise ExportError(f"primitive {n.output!r} (from {n.origin or '?'}): a reshape to an empty shape needs "
                          f"opset {ALLOWZERO_OPSET}, the export is at opset {e.opset}")
    else:
        e.add(n, "Reshape", [n.inputs[0], e.const(n, "shape", shape)])


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


@_lowers(OPAQUE)
def _opaque(e: _Emitter, n: Node, g: Graph) -> None:
    """The original node; its other outputs get names no other value has, or the names of the
    primitives that compute them (when they come first, the node is written once)."""
    key = (n.origin, n.attrs["node"], n.inputs)
    index = n.attrs["index"]
    node = e.opaque.get(key)
    if node is None:
        node = bind_node(n.attrs, n.inputs, lambda k: f"{n.output}::out{k}", name=e.node_name(n))
        e.opaque[key] = node
        e.nodes.append(node)
    node.output[index] = n.output


def value_info(name: str, t: TensorType) -> onnx.ValueInfoProto:
    """A tensor value's ONNX type; a data-dependent dim is left without a value."""
    return helper.make_tensor_value_info(name, t.dtype.onnx, [d if d >= 0 else None for d in t.shape])


def export_opsets(graph: Graph) -> dict[str, int]:
    """domain -> version for the export: EXPORT_OPSET, or the opset of the model the opaque nodes
    came from when one of them means something else at EXPORT_OPSET (its schema changed between)."""
    opsets: dict[str, int] = {DEFAULT_DOMAIN: EXPORT_OPSET}
    opaque = [n for n in graph.nodes if n.op == OPAQUE]
    model_opsets: dict[str, set[int]] = {}
    for n in opaque:
        for domain, version in opsets_of(n.attrs).items():
            model_opsets.setdefault(domain, set()).add(version)
    for domain, versions in model_opsets.items():
        if len(versions) > 1:
            raise ExportError(f"opaque nodes come from models of different {domain or 'ai.onnx'} opsets "
                              f"{sorted(versions)}; they cannot share one exported model")
        if domain != DEFAULT_DOMAIN:
            opsets[domain] = versions.pop()
    (model_opset,) = model_opsets.get(DEFAULT_DOMAIN, {EXPORT_OPSET})
    if any(_schema_version(n, EXPORT_OPSET) != _schema_version(n, model_opset) for n in opaque):
        opsets[DEFAULT_DOMAIN] = model_opset
    return opsets


def _schema_version(node: Node, opset: int) -> int | None:
    """The version of an opaque node's schema in effect at `opset` (None: not a standard ONNX op)."""
    if node.attrs["domain"] != DEFAULT_DOMAIN:
        return None
    try:
        return onnx.defs.get_schema(node.attrs["op_type"], opset).since_version
    except onnx.defs.SchemaError:
        raise ExportError(f"opaque node {node.origin!r} ({describe(node)}) does not exist at opset {opset}") from None


def to_onnx(graph: Graph, doc: str = "") -> onnx.ModelProto:
    """The primitive graph as an ONNX model (opset from export_opsets), weights embedded."""
    opsets = export_opsets(graph)
    e = _Emitter(opsets[DEFAULT_DOMAIN])
    for node in graph.nodes:
        _LOWER[node.op](e, node, graph)

    def info(name: str) -> onnx.ValueInfoProto:
        return value_info(name, graph.types[name])

    initializers = [numpy_helper.from_array(np.asarray(a), name) for name, a in graph.constants.items()]
    outputs = set(graph.outputs)
    g = helper.make_graph(
        e.nodes, graph.name or "korch", [info(n) for n in graph.inputs], [info(n) for n in graph.outputs],
        initializer=initializers + e.initializers,
        value_info=[info(n.output) for n in graph.nodes if n.output not in outputs],
    )
    opset_ids = [helper.make_opsetid(d, v) for d, v in sorted(opsets.items())]
    model = helper.make_model(g, opset_imports=opset_ids, producer_name="korch", doc_string=doc)
    model.ir_version = helper.find_min_ir_version_for(opset_ids, ignore_unknown=True)
    return model


def lowerable_ops() -> Mapping[str, Lowering]:
    return dict(_LOWER)
