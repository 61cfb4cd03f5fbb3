"""Fission rules: pooling ONNX ops (MaxPool, AveragePool, Global*Pool) onto pad + window reductions."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from korch.frontend.fission import FissionContext, FissionError, OnnxNode, fission
from korch.frontend.fission.linear import AUTO_PADS, explicit_pads, split_same_padding
from korch.ir.graph import Value
from korch.ir.types import DType

AVERAGE_POOL_DILATIONS_OPSET = 19   # AveragePool-19 added the dilations attribute


@dataclass(frozen=True)
class PoolGeometry:
    """Where the windows of a pooling node lie: begin/end padding (ONNX order) and output size per spatial dim.

    `ceil_pads` is the extra end padding ceil_mode needs so the last, partial windows fit; the
    windows are over the input padded by pads + ceil_pads.
    """

    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    pads: tuple[int, ...]
    ceil_pads: tuple[int, ...]
    out: tuple[int, ...]


def _span(kernel: int, dilation: int) -> int:
    return dilation * (kernel - 1) + 1


def pool_geometry(node: OnnxNode, in_sizes: Sequence[int], dilations_allowed: bool = True) -> PoolGeometry:
    """The window layout of MaxPool/AveragePool: auto_pad resolved, ceil_mode applied as ONNX/onnxruntime do."""
    nsp = len(in_sizes)
    kernel = tuple(int(k) for k in node.attr("kernel_shape"))
    strides = tuple(int(s) for s in node.attr("strides", [1] * nsp))
    dilations = tuple(int(d) for d in node.attr("dilations", [1] * nsp)) if dilations_allowed else (1,) * nsp
    if not len(kernel) == len(strides) == len(dilations) == nsp or min(kernel + strides + dilations) < 1:
        raise FissionError(f"{node.op_type} kernel_shape {list(kernel)}, strides {list(strides)} and dilations "
                           f"{list(dilations)} must be {nsp} positive ints")
    auto_pad = node.attr("auto_pad", "NOTSET")
    if auto_pad == "NOTSET":
        pads = explicit_pads(node, nsp)
    elif auto_pad == "VALID":
        pads = (0,) * 2 * nsp
    elif auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        pads = _same_pads(in_sizes, kernel, strides, dilations, auto_pad)
    else:
        raise FissionError(f"{node.op_type} auto_pad {auto_pad!r} is not one of {', '.join(AUTO_PADS)}")
    ceil_mode = int(node.attr("ceil_mode", 0))
    if ceil_mode not in (0, 1):
        raise FissionError(f"{node.op_type} ceil_mode {ceil_mode} is not 0 or 1")
    out, ceil_pads = [], []
    for i, (size, k, s, d) in enumerate(zip(in_sizes, kernel, strides, dilations)):
        padded = size + pads[i] + pads[nsp + i]
        if padded < _span(k, d):
            raise FissionError(f"{node.op_type} window of span {_span(k, d)} does not fit in padded size {padded}")
        n = (padded - _span(k, d)) // s + 1
        if ceil_mode and (padded - _span(k, d)) % s and n * s < size + pads[i]:
            n += 1   # one more, partial window; a window starting in the end padding is dropped
        out.append(n)
        ceil_pads.append(max(0, (n - 1) * s + _span(k, d) - padded))
    return PoolGeometry(kernel, strides, dilations, pads, tuple(ceil_pads), tuple(out))


def _same_pads(in_sizes: Sequence[int], kernel: Sequence[int], strides: Sequence[int], dilations: Sequence[int],
               auto_pad: str) -> tuple[int, ...]:
    """Pads making the output size ceil(in / stride); the odd element goes at the end (UPPER) or begin (LOWER)."""
    total = [max(0, (-(-size // s) - 1) * s + _span(k, d) - size)
             for size, k, s, d in zip(in_sizes, kernel, strides, dilations)]
    return split_same_padding(total, auto_pad)


def _pad_spatial(ctx: FissionContext, x: Value, g: PoolGeometry, value: float) -> Value:
    """Constant-pad the spatial dims by pads + ceil_pads; no primitive when there is nothing to pad."""
    nsp = len(g.kernel)
    begin = g.pads[:nsp]
    end = tuple(p + c for p, c in zip(g.pads[nsp:], g.ceil_pads))
    if not any(begin + end):
        return x
    return ctx.emit("pad", x, pads=(0, 0) + begin + (0, 0) + end, mode="constant", value=value)


def _lowest(dtype: DType) -> float:
    """The dtype's lowest finite value: what onnxruntime's MaxPool yields for a window with no input element."""
    info = np.finfo(dtype.numpy) if dtype.is_float else np.iinfo(dtype.numpy)
    return float(info.min)


@fission("MaxPool")
def max_pool(ctx: FissionContext, node: OnnxNode) -> list[Value]:
    """pad (the dtype's lowest value) then window_max."""
    if node.num_outputs > 1 and node.proto.output[1]:
        raise FissionError("MaxPool's Indices output is not supported")
    x = node.inputs[0]
    g = pool_geometry(node, x.shape[2:])
    padded = _pad_spatial(ctx, x, g, _lowest(x.dtype))
    return [ctx.emit("window_max", padded, kernel=g.kernel, strides=g.strides, dilations=g.dilations)]


def _window_counts(begin: int, lo: int, hi: int, k: int, s: int, d: int, n: int) -> np.ndarray:
    """Per output position along one dim: how many of its window's taps land in [lo, hi).

    Positions are input coordinates (the input is [0, size)); window j starts at j * s - begin.
    """
    taps = np.arange(n)[:, None] * s + np.arange(k)[None, :] * d - begin
    return ((taps >= lo) & (taps < hi)).sum(axis=1)


@fission("AveragePool")
def average_pool(ctx: FissionContext, node: OnnxNode) -> list[Value]:
    """pad (zeros) then window_mean, then mul by kernel_size / counted elements (a 1 x 1 x out... constant)
    where the window covers padding that does not count (count_include_pad=0, or the ceil_mode extra)."""
    x = node.inputs[0]
    nsp = x.rank - 2
    g = pool_geometry(node, x.shape[2:], dilations_allowed=node.opset >= AVERAGE_POOL_DILATIONS_OPSET)
    count_pad = int(node.attr("count_include_pad", 0))
    if count_pad not in (0, 1):
        raise FissionError(f"AveragePool count_include_pad {count_pad} is not 0 or 1")
    y = ctx.emit("window_mean", _pad_spatial(ctx, x, g, 0.0), kernel=g.kernel, strides=g.strides, dilations=g.dilations)
    counts = np.ones((1, 1) + g.out, dtype=np.float64)
    for i, size in enumerate(x.shape[2:]):
        begin, end = g.pads[i], g.pads[nsp + i]
        lo, hi = (-begin, size + end) if count_pad else (0, size)
        c = _window_counts(begin, lo, hi, g.kernel[i], g.strides[i], g.dilations[i], g.out[i])
        counts = counts * c.reshape((-1,) + (1,) * (nsp - 1 - i))
    kernel_size = int(np.prod(g.kernel))
    if np.all(counts == kernel_size):
        return [y]
    factor = kernel_size / np.maximum(counts, 1)
    return [ctx.emit("mul", y, ctx.const(factor.astype(x.dtype.numpy)))]


@fission("GlobalAveragePool")
def global_average_pool(ctx: FissionContext, node: OnnxNode) -> list[Value]:
    """reduce_sum over the spatial dims (kept) times 1 / their size."""
    x = node.inputs[0]
    return [ctx.reduce_mean(x, range(2, x.rank), keepdims=True)]


@fission("GlobalMaxPool")
def global_max_pool(ctx: FissionContext, node: OnnxNode) -> list[Value]:
    """reduce_max over the spatial dims (kept)."""
    x = node.inputs[0]
    return [ctx.emit("reduce_max", x, axes=tuple(range(2, x.rank)), keepdims=True)]
