"""Fission rules: softmax and the normalizations (Layer, Instance, Batch, Group, Lp, MeanVariance).

All of them standardize the same way (see `standardize`): mean by reduce_mean, variance as
mean((x - mean)^2) rather than E[x^2] - E[x]^2 (no cancellation when |mean| >> std), and
normalized = (x - mean) * reciprocal(sqrt(var + eps)). We multiply by a reciprocal rather than
divide by sqrt because the reciprocal runs once per reduced element and the full-size data path
is then a multiply (cheaper than a divide on every backend, and it fuses as a plain scale); it
costs at most one extra rounding. LayerNormalization's InvStdDev output is that reciprocal.
"""

from __future__ import annotations

from collections.abc import Sequence

from korch.frontend.fission import FissionContext, FissionError, OnnxNode, fission, normalize_axis
from korch.ir.graph import Value
from korch.ir.types import DType

# MeanVarianceNormalization adds this to the standard deviation (not the variance): the ONNX
# function body's fixed constant, there is no attribute for it.
MVN_EPSILON = 1e-9

# Default `epsilon` attribute of Layer/Instance/Batch/GroupNormalization.
DEFAULT_EPSILON = 1e-5


def standardize(ctx: FissionContext, x: Value, axes: Sequence[int], epsilon: float) -> tuple[Value, Value, Value]:
    """(x - mean) * reciprocal(sqrt(var + eps)) over `axes`; returns (normalized, mean, inv_std),
    mean and inv_std with the reduced axes kept as 1s."""
    mean = ctx.reduce_mean(x, axes, keepdims=True)
    centered = ctx.emit("sub", x, mean)
    var = ctx.reduce_mean(ctx.emit("mul", centered, centered), axes, keepdims=True)
    inv_std = ctx.emit("reciprocal", ctx.emit("sqrt", ctx.emit("add", var, ctx.scalar(epsilon, x.dtype))))
    return ctx.emit("mul", centered, inv_std), mean, inv_std


def per_channel(ctx: FissionContext, v: Value, rank: int, dtype: DType) -> Value:
    """A (C,) vector laid along axis 1 of a rank-`rank` N x C x ... tensor: shape (C, 1, ..., 1)."""
    return ctx.reshape(ctx.cast(v, dtype), (v.type.size,) + (1,) * (rank - 2))


def _stash_type(node: OnnxNode) -> DType:
    code = node.attr("stash_type", 1)
    try:
        dtype = DType.from_onnx(code)
    except ValueError:
        dtype = None
    if dtype is None or not dtype.is_float:
        raise FissionError(f"{node.op_type}: stash_type={code} is not a supported float type")
    return dtype


def _require_rank(node: OnnxNode, x: Value, least: int) -> None:
    if x.rank < least:
        raise FissionError(f"{node.op_type} needs an input of rank >= {least}, got shape {x.shape}")


@fission("Softmax", "LogSoftmax")
def softmax(ctx: FissionContext, node: OnnxNode) -> list[Value]:
    """s = x - max(x); Softmax = exp(s) * reciprocal(sum exp(s)); LogSoftmax = s - log(sum exp(s)).

    Opset 13+ reduces over `axis` (default -1); opsets 11-12 coerce to 2-D at `axis` (default 1),
    i.e. reduce over every dim from `axis` on.
    """
    x = node.inputs[0]
    _require_rank(node, x, 1)
    if node.opset >= 13:
        axes = (normalize_axis(node.attr("axis", -1), x.rank),)
    else:
        axes = tuple(range(normalize_axis(node.attr("axis", 1), x.rank), x.rank))
    shifted = ctx.emit("sub", x, ctx.emit("reduce_max", x, axes=axes, keepdims=True))
    exp = ctx.emit("exp", shifted)
    total = ctx.emit("reduce_sum", exp, axes=axes, keepdims=True)
    if node.op_type == "Softmax":
        return [ctx.emit("mul", exp, ctx.emit("reciprocal", total))]
    return [ctx.emit("sub", shifted, ctx.emit("log", total))]


@fission("LayerNormalization")
def layer_normalization(ctx: FissionContext, node: OnnxNode) -> list[Value]:
    """Standardize over dims axis.. in stash_type, cast back, then * scale + bias.
    Outputs Y, Mean, InvStdDev (the last two in stash_type, reduced dims kept as 1s)."""
    x, scale, bias = node.inputs[0], node.inputs[1], node.input(2)
    axis = normalize_axis(node.attr("axis", -1), x.rank)
    stash = _stash_type(node)
    normalized, mean, inv_std = standardize(ctx, ctx.cast(x, stash), range(axis, x.rank),
                                            node.attr("epsilon", DEFAULT_EPSILON))
    y = ctx.emit("mul", ctx.cast(normalized, x.dtype), scale)
    if bias is not None:
        y = ctx.emit("add", y, bias)
    return [y, mean, inv_std]


@fission("InstanceNormalization")
def instance_normalization(ctx: FissionContext, node: OnnxNode) -> list[Value]:
    """Standardize each (n, c) over the spatial dims, then * scale[c] + bias[c]."""
    x, scale, bias = node.inputs
    _require_rank(node, x, 3)
    normalized, _, _ = standardize(ctx, x, range(2, x.rank), node.attr("epsilon", DEFAULT_EPSILON))
    y = ctx.emit("mul", normalized, per_channel(ctx, scale, x.rank, x.dtype))
    return [ctx.emit("add", y, per_channel(ctx, bias, x.rank, x.dtype))]


@fission("BatchNormalization")
def batch_normalization(ctx: FissionContext, node: OnnxNode) -> list[Value]:
    """Inference only: y = x * a + b per channel, a = scale * reciprocal(sqrt(var + eps)),
    b = bias - mean * a. With constant statistics a and b fold to two constants."""
    x, scale, bias, mean, var = node.inputs
    if node.attr("training_mode", 0):
        raise FissionError(f"BatchNormalization with training_mode={node.attr('training_mode')} is not supported "
                           "(inference only)")
    if any(node.proto.output[1:]):
        raise FissionError("BatchNormalization with running mean/var outputs (training) is not supported")
    _require_rank(node, x, 2)
    eps = ctx.scalar(node.attr("epsilon", DEFAULT_EPSILON), x.dtype)
    var = ctx.cast(var, x.dtype)
    a = ctx.emit("mul", ctx.cast(scale, x.dtype), ctx.emit("reciprocal", ctx.emit("sqrt", ctx.emit("add", var, eps))))
    b = ctx.emit("sub", ctx.cast(bias, x.dtype), ctx.emit("mul", ctx.cast(mean, x.dtype), a))
    a, b = per_channel(ctx, a, x.rank, x.dtype), per_channel(ctx, b, x.rank, x.dtype)
    return [ctx.emit("add", ctx.emit("mul", x, a), b)]


@fission("GroupNormalization")
def group_normalization(ctx: FissionContext, node: OnnxNode) -> list[Value]:
    """Reshape to N x G x rest, standardize over rest, then scale/bias: per group on the grouped
    view (opset 18), per channel on the N x C x ... view (opset 21, which also has stash_type)."""
    x, scale, bias = node.inputs
    _require_rank(node, x, 2)
    groups = node.attr("num_groups")
    n, channels = x.shape[:2]
    if groups < 1 or channels % groups:
        raise FissionError(f"GroupNormalization: num_groups={groups} does not divide the {channels} channels")
    stash = _stash_type(node) if node.opset >= 21 else x.dtype
    grouped = ctx.cast(ctx.reshape(x, (n, groups, x.type.size // (n * groups))), stash)
    normalized, _, _ = standardize(ctx, grouped, (2,), node.attr("epsilon", DEFAULT_EPSILON))
    normalized = ctx.cast(normalized, x.dtype)
    if node.opset >= 21:
        y = ctx.emit("mul", ctx.reshape(normalized, x.shape), per_channel(ctx, scale, x.rank, x.dtype))
        return [ctx.emit("add", y, per_channel(ctx, bias, x.rank, x.dtype))]
    y = ctx.emit("mul", normalized, per_channel(ctx, scale, 3, x.dtype))
    return [ctx.reshape(ctx.emit("add", y, per_channel(ctx, bias, 3, x.dtype)), x.shape)]


@fission("LpNormalization")
def lp_normalization(ctx: FissionContext, node: OnnxNode) -> list[Value]:
    """x * reciprocal(norm) along `axis`, norm = sum |x| (p=1) or sqrt(sum x*x) (p=2)."""
    x = node.inputs[0]
    axis = normalize_axis(node.attr("axis", -1), x.rank)
    p = node.attr("p", 2)
    if p == 1:
        norm = ctx.emit("reduce_sum", ctx.emit("abs", x), axes=(axis,), keepdims=True)
    elif p == 2:
        norm = ctx.emit("sqrt", ctx.emit("reduce_sum", ctx.emit("mul", x, x), axes=(axis,), keepdims=True))
    else:
        raise FissionError(f"LpNormalization: p={p} is not supported (only 1 and 2 are defined)")
    return [ctx.emit("mul", x, ctx.emit("reciprocal", norm))]


@fission("MeanVarianceNormalization")
def mean_variance_normalization(ctx: FissionContext, node: OnnxNode) -> list[Value]:
    """(x - mean) * reciprocal(sqrt(var) + 1e-9) over `axes` (default [0, 2, 3]); as in the ONNX
    function body the epsilon is added to the standard deviation."""
    x = node.inputs[0]
    raw = list(node.attr("axes", [0, 2, 3]))
    axes = sorted({normalize_axis(int(a), x.rank) for a in raw})
    if len(axes) != len(raw):
        raise FissionError(f"MeanVarianceNormalization: axes {raw} name a dimension twice")
    mean = ctx.reduce_mean(x, axes, keepdims=True)
    centered = ctx.emit("sub", x, mean)
    std = ctx.emit("sqrt", ctx.reduce_mean(ctx.emit("mul", centered, centered), axes, keepdims=True))
    inv_std = ctx.emit("reciprocal", ctx.emit("add", std, ctx.scalar(MVN_EPSILON, x.dtype)))
    return [ctx.emit("mul", centered, inv_std)]
