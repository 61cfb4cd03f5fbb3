"""Fission rules: shape computations and graph plumbing (Shape, Constant, Identity, Dropout, ...).

With static shapes these fold to constants as they are built; Identity and Dropout just alias.
"""

from __future__ import annotations

import numpy as np
from onnx import numpy_helper

from korch.frontend.fission import FissionContext, FissionError, OnnxNode, fission
from korch.ir.graph import Value
from korch.ir.types import DType


@fission("Identity")
def identity(ctx: FissionContext, node: OnnxNode) -> list[Value]:
    return [node.inputs[0]]


@fission("Dropout")
def dropout(ctx: FissionContext, node: OnnxNode) -> list[Value | None]:
    training = ctx.constant_value(node.input(2))
    if training is not None and bool(training):
        raise FissionError("Dropout with training_mode=True is not an inference graph")
    x = node.inputs[0]
    mask = ctx.const(np.ones(x.shape, dtype=bool)) if node.num_outputs > 1 else None
    return [x, mask]


@fission("Shape")
def shape(ctx: FissionContext, node: OnnxNode) -> list[Value]:
    dims = node.inputs[0].shape
    start, end = node.attr("start", 0), node.attr("end", None)
    return [ctx.const(np.array(dims[start:end], dtype=np.int64))]


@fission("Size")
def size(ctx: FissionContext, node: OnnxNode) -> list[Value]:
    return [ctx.const(np.array(node.inputs[0].type.size, dtype=np.int64))]


_CONSTANT_ATTRS = {
    "value_float": np.float32, "value_floats": np.float32, "value_int": np.int64, "value_ints": np.int64,
}


@fission("Constant")
def constant(ctx: FissionContext, node: OnnxNode) -> list[Value]:
    for a in node.proto.attribute:
        if a.name == "value":
            return [ctx.const(numpy_helper.to_array(a.t))]
        if a.name in _CONSTANT_ATTRS:
            return [ctx.const(np.array(node.attr(a.name), dtype=_CONSTANT_ATTRS[a.name]))]
    raise FissionError("Constant without a supported value attribute (sparse and string values are not supported)")


@fission("ConstantOfShape")
def constant_of_shape(ctx: FissionContext, node: OnnxNode) -> list[Value]:
    dims = ctx.require_constant(node.inputs[0], "ConstantOfShape's shape input")
    fill = np.zeros((1,), dtype=np.float32)
    for a in node.proto.attribute:
        if a.name == "value":
            fill = numpy_helper.to_array(a.t)
    return [ctx.const(np.full(tuple(int(d) for d in dims), fill.reshape(-1)[0], dtype=fill.dtype))]


@fission("Range")
def range_(ctx: FissionContext, node: OnnxNode) -> list[Value]:
    start, limit, delta = (ctx.require_constant(v, f"Range's {w} input") for v, w in zip(node.inputs, ("start", "limit", "delta")))
    return [ctx.const(np.arange(start.item(), limit.item(), delta.item(), dtype=start.dtype))]


@fission("EyeLike")
def eye_like(ctx: FissionContext, node: OnnxNode) -> list[Value]:
    x = node.inputs[0]
    dtype = DType.from_onnx(node.attr("dtype")) if node.attr("dtype", None) is not None else x.dtype
    return [ctx.const(np.eye(x.shape[0], x.shape[1], k=node.attr("k", 0), dtype=dtype.numpy))]
