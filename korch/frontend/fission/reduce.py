"""Fission rules: ONNX reductions (ReduceSum ... ReduceLogSumExp) and ArgMax/ArgMin.

Every reduction is "pre-map, reduce_sum/max/min/prod, post-map". Reducing over no axes
(noop_with_empty_axes=1 with empty axes) emits no reduce primitive, only the maps: that is what
onnxruntime computes (ReduceL2 of x is |x|, ReduceLogSum is log x, ...).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from korch.frontend.fission import FissionContext, FissionError, OnnxNode, fission, normalize_axis
from korch.ir.graph import Value
from korch.ir.types import DType

# First opset in which `axes` is an input rather than an attribute.
_AXES_INPUT_SINCE = {"ReduceSum": 13}
_AXES_INPUT_SINCE_DEFAULT = 18

# Reductions whose post-map (sqrt, log, exp) onnxruntime evaluates in integer arithmetic for
# integer inputs; we only handle float inputs for them.
_FLOAT_ONLY = ("ReduceL2", "ReduceLogSum", "ReduceLogSumExp")


def reduction_axes(ctx: FissionContext, node: OnnxNode) -> tuple[int, ...]:
    """The sorted, normalized axes a Reduce* node reduces over; () when it is a no-op."""
    x = node.inputs[0]
    if node.opset >= _AXES_INPUT_SINCE.get(node.op_type, _AXES_INPUT_SINCE_DEFAULT):
        given = node.input(1)
        raw = [] if given is None else ctx.require_constant(given, f"{node.op_type}'s axes input").reshape(-1).tolist()
    else:
        raw = list(node.attr("axes", []))
    if not raw:
        return () if node.attr("noop_with_empty_axes", 0) else tuple(range(x.rank))
    axes = sorted({normalize_axis(int(a), x.rank) for a in raw})
    if len(axes) != len(raw):
        raise FissionError(f"{node.op_type}: axes {raw} name a dimension twice")
    return tuple(axes)


def reduce(ctx: FissionContext, op: str, x: Value, axes: Sequence[int], keepdims: bool) -> Value:
    """One reduce primitive; none when there is nothing to reduce."""
    return ctx.emit(op, x, axes=tuple(axes), keepdims=keepdims) if axes else x


def log_sum_exp(ctx: FissionContext, x: Value, axes: Sequence[int], keepdims: bool) -> Value:
    """log(sum(exp(x - m))) + m with m = max(x): exp never overflows."""
    if not axes:
        return x
    peak = reduce(ctx, "reduce_max", x, axes, True)
    total = reduce(ctx, "reduce_sum", ctx.emit("exp", ctx.emit("sub", x, peak)), axes, keepdims)
    return ctx.emit("add", ctx.emit("log", total), ctx.reshape(peak, total.shape))


def _mean(ctx: FissionContext, x: Value, axes: Sequence[int], keepdims: bool) -> Value:
    """sum * (1/n); integers: sum / n, truncating toward zero as onnxruntime does."""
    if not axes:
        return x
    if x.dtype.is_float:
        return ctx.reduce_mean(x, axes, keepdims)
    count = int(np.prod([x.shape[a] for a in axes], dtype=np.int64))
    return ctx.emit("div", reduce(ctx, "reduce_sum", x, axes, keepdims), ctx.scalar(count, x.dtype))


def _sum_square(ctx: FissionContext, x: Value, axes: Sequence[int], keepdims: bool) -> Value:
    return reduce(ctx, "reduce_sum", ctx.emit("mul", x, x), axes, keepdims)


Reducer = Callable[[FissionContext, Value, Sequence[int], bool], Value]

_REDUCERS: dict[str, Reducer] = {
    "ReduceSum": lambda ctx, x, axes, keep: reduce(ctx, "reduce_sum", x, axes, keep),
    "ReduceMax": lambda ctx, x, axes, keep: reduce(ctx, "reduce_max", x, axes, keep),
    "ReduceMin": lambda ctx, x, axes, keep: reduce(ctx, "reduce_min", x, axes, keep),
    "ReduceProd": lambda ctx, x, axes, keep: reduce(ctx, "reduce_prod", x, axes, keep),
    "ReduceMean": _mean,
    "ReduceL1": lambda ctx, x, axes, keep: reduce(ctx, "reduce_sum", ctx.emit("abs", x), axes, keep),
    "ReduceSumSquare": _sum_square,
    "ReduceL2": lambda ctx, x, axes, keep: ctx.emit("sqrt", _sum_square(ctx, x, axes, keep)),
    "ReduceLogSum": lambda ctx, x, axes, keep: ctx.emit("log", reduce(ctx, "reduce_sum", x, axes, keep)),
    "ReduceLogSumExp": log_sum_exp,
}


@fission(*_REDUCERS)
def reduction(ctx: FissionContext, node: OnnxNode) -> list[Value]:
    """Sum/Max/Min/Prod: one primitive. Mean: sum * (1/n). L1: sum |x|. SumSquare: sum x*x.
    L2: sqrt(sum x*x). LogSum: log(sum x). LogSumExp: see log_sum_exp."""
    x = node.inputs[0]
    axes = reduction_axes(ctx, node)
    if node.op_type in _FLOAT_ONLY and not x.dtype.is_float:
        raise FissionError(f"{node.op_type} on {x.dtype.value} input is not supported (float inputs only)")
    return [_REDUCERS[node.op_type](ctx, x, axes, bool(node.attr("keepdims", 1)))]


@fission("ArgMax", "ArgMin")
def arg_extremum(ctx: FissionContext, node: OnnxNode) -> list[Value]:
    """index = reduce_min(where(x == max(x), iota, n)) along the axis (first occurrence);
    select_last_index=1: reduce_max(where(x == max(x), iota, -1)). ArgMin uses min(x).

    iota is the constant int64 [0, n) laid along the axis, so this is exact and needs no
    index-producing primitive; a constant input folds to a constant as it is built.
    """
    x = node.inputs[0]
    axis = normalize_axis(node.attr("axis", 0), x.rank)
    keepdims = bool(node.attr("keepdims", 1))
    last = node.attr("select_last_index", 0)
    if last not in (0, 1):
        raise FissionError(f"{node.op_type}: select_last_index={last} must be 0 or 1")
    n = x.shape[axis]
    extremum = ctx.emit("reduce_max" if node.op_type == "ArgMax" else "reduce_min", x, axes=(axis,), keepdims=True)
    hit = ctx.emit("equal", x, extremum)
    iota = ctx.const(np.arange(n, dtype=np.int64).reshape((n,) + (1,) * (x.rank - axis - 1)))
    miss = ctx.scalar(-1 if last else n, DType.INT64)
    index = ctx.emit("where", hit, iota, miss)
    return [ctx.emit("reduce_max" if last else "reduce_min", index, axes=(axis,), keepdims=keepdims)]
