"""Fission rules: ONNX activation functions (LeakyRelu, PRelu, Softplus, Gelu, Clip, Elu, ...).

Relu, Sigmoid, Tanh and Erf are one primitive each and live in elementwise.py. Every constant is a
0-d scalar of the input's dtype, so float32 stays float32 and broadcasting adds no tensors.
"""

from __future__ import annotations

import math

import numpy as np

from korch.frontend.fission import FissionContext, FissionError, OnnxNode, fission
from korch.ir.graph import Value

# Gelu(approximate="tanh") = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). With
# 0.5 (1 + tanh(z)) = sigmoid(2 z) this is x * sigmoid(x * (A + B x^2)):
_GELU_TANH_A = 2.0 * math.sqrt(2.0 / math.pi)
_GELU_TANH_B = _GELU_TANH_A * 0.044715
# ONNX Selu defaults (float32-exact values from the spec).
_SELU_ALPHA = 1.67326319217681884765625
_SELU_GAMMA = 1.05070102214813232421875


# ---- shared compositions --------------------------------------------------------------------

def _affine(ctx: FissionContext, x: Value, scale: float, shift: float) -> Value:
    """scale * x + shift, leaving out a multiply by 1 or an add of 0."""
    if scale != 1.0:
        x = ctx.emit("mul", x, ctx.scalar(scale, x.dtype))
    if shift != 0.0:
        x = ctx.emit("add", x, ctx.scalar(shift, x.dtype))
    return x


def _hard_sigmoid(ctx: FissionContext, x: Value, alpha: float, beta: float) -> Value:
    """min(relu(alpha * x + beta), 1)."""
    y = ctx.emit("relu", _affine(ctx, x, alpha, beta))
    return ctx.emit("min", y, ctx.scalar(1, x.dtype))


def _softplus(ctx: FissionContext, x: Value) -> Value:
    """relu(x) - log(sigmoid(|x|)), i.e. relu(x) + log(1 + exp(-|x|)) in two fewer primitives.

    Nothing overflows: sigmoid(|x|) is in [0.5, 1], so the log never sees 0.
    """
    tail = ctx.emit("log", ctx.emit("sigmoid", ctx.emit("abs", x)))
    return ctx.emit("sub", ctx.emit("relu", x), tail)


def _exponential_linear(ctx: FissionContext, x: Value, alpha: float, inner_scale: float = 1.0) -> Value:
    """relu(x) + alpha * (exp(min(x, 0) / inner_scale) - 1).

    Equals x for x >= 0 (the second term is exactly 0) and alpha * (exp(x / inner_scale) - 1) below;
    clamping before exp keeps the unused branch from overflowing.
    """
    negative = ctx.emit("min", x, ctx.scalar(0, x.dtype))
    if inner_scale != 1.0:
        negative = ctx.emit("div", negative, ctx.scalar(inner_scale, x.dtype))
    tail = ctx.emit("sub", ctx.emit("exp", negative), ctx.scalar(1, x.dtype))
    if alpha != 1.0:
        tail = ctx.emit("mul", tail, ctx.scalar(alpha, x.dtype))
    return ctx.emit("add", ctx.emit("relu", x), tail)


# ---- piecewise-linear -----------------------------------------------------------------------

@fission("LeakyRelu")
def leaky_relu(ctx: FissionContext, node: OnnxNode) -> list[Value]:
    """max(x, alpha * x) when alpha <= 1, else min(x, alpha * x): exact, as the product rounds monotonically."""
    x = node.inputs[0]
    alpha = float(node.attr("alpha", 0.01))
    scaled = ctx.emit("mul", x, ctx.scalar(alpha, x.dtype))
    return [ctx.emit("max" if alpha <= 1.0 else "min", x, scaled)]


@fission("PRelu")
def prelu(ctx: FissionContext, node: OnnxNode) -> list[Value]:
    """where(x < 0, slope * x, x); with a constant slope all <= 1 (or all >= 1), max (min) of x and slope * x.

    The slope broadcasts to x unidirectionally, so the output keeps x's shape.
    """
    x, slope = node.inputs
    if not _broadcasts_to(slope.shape, x.shape):
        raise FissionError(f"PRelu slope of shape {slope.shape} does not broadcast to input shape {x.shape}")
    scaled = ctx.emit("mul", x, slope)
    known = ctx.constant_value(slope)
    if known is not None and np.all(known <= 1):
        return [ctx.emit("max", x, scaled)]
    if known is not None and np.all(known >= 1):
        return [ctx.emit("min", x, scaled)]
    negative = ctx.emit("less", x, ctx.scalar(0, x.dtype))
    return [ctx.emit("where", negative, scaled, x)]


def _broadcasts_to(shape: tuple[int, ...], target: tuple[int, ...]) -> bool:
    """Whether `shape` broadcasts to `target` unidirectionally (numpy rules, `target` unchanged)."""
    return len(shape) <= len(target) and all(d in (1, t) for d, t in zip(reversed(shape), reversed(target)))


@fission("ThresholdedRelu")
def thresholded_relu(ctx: FissionContext, node: OnnxNode) -> list[Value]:
    """where(x > alpha, x, 0)."""
    x = node.inputs[0]
    above = ctx.emit("greater", x, ctx.scalar(float(node.attr("alpha", 1.0)), x.dtype))
    return [ctx.emit("where", above, x, ctx.scalar(0, x.dtype))]


@fission("Clip")
def clip(ctx: FissionContext, node: OnnxNode) -> list[Value]:
    """min(max(x, lo), hi), skipping an omitted bound; with lo > hi every element is hi, as ONNX says.

    Opset 11+ only (the loader rejects older opsets): the bounds are optional 0-d inputs, constant or not.
    """
    x = node.inputs[0]
    lo, hi = (_clip_bound(ctx, node.input(k), name) for k, name in ((1, "min"), (2, "max")))
    if lo is not None:
        x = ctx.emit("max", x, lo)
    if hi is not None:
        x = ctx.emit("min", x, hi)
    return [x]


def _clip_bound(ctx: FissionContext, bound: Value | None, name: str) -> Value | None:
    """A Clip bound as a 0-d value (a one-element tensor is accepted and reshaped)."""
    if bound is None:
        return None
    if bound.type.size != 1:
        raise FissionError(f"Clip's {name} input must be a scalar, got shape {bound.shape}")
    return ctx.reshape(bound, ())


@fission("HardSigmoid")
def hard_sigmoid(ctx: FissionContext, node: OnnxNode) -> list[Value]:
    """min(relu(alpha * x + beta), 1)."""
    return [_hard_sigmoid(ctx, node.inputs[0], float(node.attr("alpha", 0.2)), float(node.attr("beta", 0.5)))]


@fission("HardSwish")
def hard_swish(ctx: FissionContext, node: OnnxNode) -> list[Value]:
    """x * min(relu(x / 6 + 0.5), 1)."""
    x = node.inputs[0]
    return [ctx.emit("mul", x, _hard_sigmoid(ctx, x, 1.0 / 6.0, 0.5))]


# ---- smooth ---------------------------------------------------------------------------------

@fission("Softplus")
def softplus(ctx: FissionContext, node: OnnxNode) -> list[Value]:
    """relu(x) - log(sigmoid(|x|)) (= log(1 + exp(x)), stable for any x)."""
    return [_softplus(ctx, node.inputs[0])]


@fission("Softsign")
def softsign(ctx: FissionContext, node: OnnxNode) -> list[Value]:
    """x / (1 + |x|)."""
    x = node.inputs[0]
    return [ctx.emit("div", x, ctx.emit("add", ctx.emit("abs", x), ctx.scalar(1, x.dtype)))]


@fission("Mish")
def mish(ctx: FissionContext, node: OnnxNode) -> list[Value]:
    """x * tanh(softplus(x)), with the stable softplus above."""
    x = node.inputs[0]
    return [ctx.emit("mul", x, ctx.emit("tanh", _softplus(ctx, x)))]


@fission("Gelu")
def gelu(ctx: FissionContext, node: OnnxNode) -> list[Value]:
    """approximate="none": x * (0.5 + 0.5 * erf(x / sqrt(2)));
    approximate="tanh": x * sigmoid(x * (A + B * x^2)), the tanh form rewritten with 0.5 (1 + tanh z) = sigmoid(2z).
    """
    x = node.inputs[0]
    approximate = node.attr("approximate", "none")
    if approximate == "none":
        cdf = _affine(ctx, ctx.emit("erf", _affine(ctx, x, 1.0 / math.sqrt(2.0), 0.0)), 0.5, 0.5)
    elif approximate == "tanh":
        inner = ctx.emit("mul", x, _affine(ctx, ctx.emit("mul", x, x), _GELU_TANH_B, _GELU_TANH_A))
        cdf = ctx.emit("sigmoid", inner)
    else:
        raise FissionError(f"Gelu approximate={approximate!r} is not supported (ONNX defines 'none' and 'tanh')")
    return [ctx.emit("mul", x, cdf)]


@fission("Elu")
def elu(ctx: FissionContext, node: OnnxNode) -> list[Value]:
    """relu(x) + alpha * (exp(min(x, 0)) - 1)."""
    return [_exponential_linear(ctx, node.inputs[0], float(node.attr("alpha", 1.0)))]


@fission("Selu")
def selu(ctx: FissionContext, node: OnnxNode) -> list[Value]:
    """gamma * (relu(x) + alpha * (exp(min(x, 0)) - 1))."""
    x = node.inputs[0]
    alpha, gamma = float(node.attr("alpha", _SELU_ALPHA)), float(node.attr("gamma", _SELU_GAMMA))
    return [_affine(ctx, _exponential_linear(ctx, x, alpha), gamma, 0.0)]


@fission("Celu")
def celu(ctx: FissionContext, node: OnnxNode) -> list[Value]:
    """relu(x) + alpha * (exp(min(x, 0) / alpha) - 1), which equals max(0, x) + min(0, alpha * (exp(x / alpha) - 1))
    for alpha > 0.
    """
    alpha = float(node.attr("alpha", 1.0))
    if not alpha > 0.0:
        raise FissionError(f"Celu alpha={alpha} is not supported (it must be positive)")
    return [_exponential_linear(ctx, node.inputs[0], alpha, inner_scale=alpha)]
