"""Fission rules: ONNX elementwise ops that are one primitive each (plus broadcasting n-ary forms)."""

from __future__ import annotations

from functools import reduce as fold_left

import numpy as np

from korch.frontend.fission import FissionContext, FissionError, OnnxNode, fission
from korch.ir.graph import Value
from korch.ir.types import DType

_UNARY = {
    "Neg": "neg", "Abs": "abs", "Exp": "exp", "Log": "log", "Sqrt": "sqrt", "Reciprocal": "reciprocal",
    "Tanh": "tanh", "Sigmoid": "sigmoid", "Erf": "erf", "Relu": "relu", "Floor": "floor", "Ceil": "ceil",
    "Round": "round", "Sign": "sign", "Sin": "sin", "Cos": "cos", "Not": "not",
}
_BINARY = {
    "Add": "add", "Sub": "sub", "Mul": "mul", "Div": "div",
    "Greater": "greater", "Less": "less", "Equal": "equal", "And": "and", "Or": "or",
}
_VARIADIC = {"Max": "max", "Min": "min", "Sum": "add"}


@fission(*_UNARY)
def unary(ctx: FissionContext, node: OnnxNode) -> list[Value]:
    return [ctx.emit(_UNARY[node.op_type], node.inputs[0])]


@fission(*_BINARY)
def binary(ctx: FissionContext, node: OnnxNode) -> list[Value]:
    a, b = node.inputs
    return [ctx.emit(_BINARY[node.op_type], a, b)]


@fission(*_VARIADIC)
def variadic(ctx: FissionContext, node: OnnxNode) -> list[Value]:
    op = _VARIADIC[node.op_type]
    return [fold_left(lambda a, b: ctx.emit(op, a, b), [v for v in node.inputs if v is not None])]


@fission("Mean")
def mean(ctx: FissionContext, node: OnnxNode) -> list[Value]:
    args = [v for v in node.inputs if v is not None]
    total = fold_left(lambda a, b: ctx.emit("add", a, b), args)
    return [ctx.emit("div", total, ctx.scalar(len(args), total.dtype))] if len(args) > 1 else [total]


@fission("GreaterOrEqual", "LessOrEqual")
def compare_or_equal(ctx: FissionContext, node: OnnxNode) -> list[Value]:
    a, b = node.inputs
    strict = ctx.emit("less" if node.op_type == "GreaterOrEqual" else "greater", a, b)
    return [ctx.emit("not", strict)]


@fission("Xor")
def xor(ctx: FissionContext, node: OnnxNode) -> list[Value]:
    a, b = node.inputs
    return [ctx.emit("not", ctx.emit("equal", a, b))]


@fission("Where")
def where(ctx: FissionContext, node: OnnxNode) -> list[Value]:
    cond, x, y = node.inputs
    return [ctx.emit("where", cond, x, y)]


@fission("Cast")
def cast(ctx: FissionContext, node: OnnxNode) -> list[Value]:
    to = node.attr("to")
    try:
        dtype = DType.from_onnx(to)
    except ValueError as e:
        raise FissionError(f"Cast to {e}") from None
    return [ctx.cast(node.inputs[0], dtype)]


@fission("CastLike")
def cast_like(ctx: FissionContext, node: OnnxNode) -> list[Value]:
    return [ctx.cast(node.inputs[0], node.inputs[1].dtype)]


@fission("Pow")
def power(ctx: FissionContext, node: OnnxNode) -> list[Value]:
    base, exponent = node.inputs
    constant = ctx.constant_value(exponent)
    if constant is not None and constant.size == 1 and base.dtype.is_float:
        value = float(constant.reshape(()))
        if value == 1.0:
            return [ctx.emit("mul", base, ctx.scalar(1.0, base.dtype))] if exponent.rank > base.rank else [base]
        if value == 2.0 and exponent.rank <= base.rank:
            return [ctx.emit("mul", base, base)]
        if value == 0.5 and exponent.rank <= base.rank:
            return [ctx.emit("sqrt", base)]
    return [ctx.emit("pow", base, ctx.cast(exponent, base.dtype))]


@fission("Mod")
def mod(ctx: FissionContext, node: OnnxNode) -> list[Value]:
    a, b = node.inputs
    if node.attr("fmod", 0) or not a.dtype.is_float:
        if a.dtype.is_float:
            # fmod: a - trunc(a / b) * b, with trunc(q) = sign(q) * floor(|q|)
            q = ctx.emit("div", a, b)
            t = ctx.emit("mul", ctx.emit("sign", q), ctx.emit("floor", ctx.emit("abs", q)))
            return [ctx.emit("sub", a, ctx.emit("mul", t, b))]
        if ctx.constant_value(a) is None or ctx.constant_value(b) is None:
            raise FissionError("integer Mod on non-constant values is not supported")
        return [ctx.const(_integer_mod(ctx.constant_value(a), ctx.constant_value(b), node.attr("fmod", 0)))]
    raise FissionError("Mod with fmod=0 needs integer inputs")


def _integer_mod(a: np.ndarray, b: np.ndarray, fmod: int) -> np.ndarray:
    return np.fmod(a, b) if fmod else np.mod(a, b)
