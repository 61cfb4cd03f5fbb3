"""Fission rules: Resize and Upsample as constant-index gathers, one resized axis at a time.

The source position of every output index is computed here, at fission time, with onnxruntime's
formulas in float32 and in its operation order. Nearest is one `gather` per resized axis; linear is
two gathers (floor and floor + 1, clamped) and a lerp `a + (b - a) * w` with a constant weight
vector that broadcasts along the axis.

Known difference: when a position is exactly a rounding tie in real arithmetic but not in float32
(sizes 7 -> 1 with tf_half_pixel_for_nn: 0.5 / (1/7) is 3.4999998), onnxruntime's compiled kernel
settles it one way or the other from case to case. Integer factors and power-of-two ratios are exact.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from korch.frontend.fission import FissionContext, FissionError, OnnxNode, fission, normalize_axis
from korch.ir.graph import Value

F32 = np.float32
HALF = F32(0.5)

# (output positions, scale, output length, input length) -> source positions, all float32.
CoordinateFn = Callable[[np.ndarray, np.float32, np.float32, np.float32], np.ndarray]


def _half_pixel(x: np.ndarray, scale: np.float32, out: np.float32, length: np.float32) -> np.ndarray:
    return (x + HALF) / scale - HALF


def _half_pixel_symmetric(x: np.ndarray, scale: np.float32, out: np.float32, length: np.float32) -> np.ndarray:
    adjustment = out / (scale * length)
    offset = length / F32(2) * (F32(1) - adjustment)
    # onnxruntime finishes this one in double (its 0.5 literals are doubles), then rounds to float
    return (np.float64(offset) + (x.astype(np.float64) + 0.5) / np.float64(scale) - 0.5).astype(F32)


def _pytorch_half_pixel(x: np.ndarray, scale: np.float32, out: np.float32, length: np.float32) -> np.ndarray:
    return _half_pixel(x, scale, out, length) if out > 1 else np.zeros_like(x)


def _align_corners(x: np.ndarray, scale: np.float32, out: np.float32, length: np.float32) -> np.ndarray:
    return np.zeros_like(x) if out == 1 else x * (length - F32(1)) / (out - F32(1))


def _asymmetric(x: np.ndarray, scale: np.float32, out: np.float32, length: np.float32) -> np.ndarray:
    return x / scale


def _tf_half_pixel_for_nn(x: np.ndarray, scale: np.float32, out: np.float32, length: np.float32) -> np.ndarray:
    return (x + HALF) / scale


COORDINATE_MODES: dict[str, CoordinateFn] = {
    "half_pixel": _half_pixel,
    "half_pixel_symmetric": _half_pixel_symmetric,
    "pytorch_half_pixel": _pytorch_half_pixel,
    "align_corners": _align_corners,
    "asymmetric": _asymmetric,
    "tf_half_pixel_for_nn": _tf_half_pixel_for_nn,
}


def _round_half_down(x: np.ndarray) -> np.ndarray:
    floor = np.floor(x)
    return np.where(x - floor > HALF, floor + 1, floor)


def _round_half_up(x: np.ndarray) -> np.ndarray:
    floor = np.floor(x)
    return np.where(x - floor >= HALF, floor + 1, floor)


NEAREST_MODES: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "round_prefer_floor": _round_half_down,
    "round_prefer_ceil": _round_half_up,
    "floor": np.floor,
    "ceil": np.ceil,
}

INTERPOLATION_MODES = ("nearest", "linear")


@dataclass(frozen=True)
class AxisResize:
    axis: int
    scale: np.float32
    size: int          # output length


@dataclass(frozen=True)
class ResizeSpec:
    mode: str                                  # "nearest" or "linear"
    coordinates: CoordinateFn
    rounding: Callable[[np.ndarray], np.ndarray]
    axes: tuple[AxisResize, ...]


def _scaled_size(scale: np.float32, length: int) -> int:
    return int(np.floor(scale * F32(length)))


def _axes_from_scales(x: Value, axes: Sequence[int], scales: np.ndarray) -> list[AxisResize]:
    if len(scales) != len(axes):
        raise FissionError(f"resize scales {scales.tolist()} need one entry per axis of {list(axes)}")
    if any(s <= 0 for s in scales):
        raise FissionError(f"resize scales {scales.tolist()} must be positive")
    return [AxisResize(a, F32(s), _scaled_size(F32(s), x.shape[a])) for a, s in zip(axes, scales)]


def _axes_from_sizes(x: Value, axes: Sequence[int], sizes: np.ndarray) -> list[AxisResize]:
    if len(sizes) != len(axes) or any(s < 1 for s in sizes):
        raise FissionError(f"Resize sizes {sizes.tolist()} need one positive entry per axis of {list(axes)}")
    return [AxisResize(a, F32(s) / F32(x.shape[a]), int(s)) for a, s in zip(axes, sizes)]


def _check_resize_attrs(node: OnnxNode) -> None:
    mode = node.attr("mode", "nearest")
    if mode not in INTERPOLATION_MODES:
        raise FissionError(f"Resize mode={mode!r} is not supported (only {', '.join(INTERPOLATION_MODES)})")
    if node.attr("antialias", 0):
        raise FissionError(f"Resize antialias={node.attr('antialias')} is not supported (only 0)")
    policy = node.attr("keep_aspect_ratio_policy", "stretch")
    if policy != "stretch":
        raise FissionError(f"Resize keep_aspect_ratio_policy={policy!r} is not supported (only 'stretch')")
    if node.attr("nearest_mode", "round_prefer_floor") not in NEAREST_MODES:
        raise FissionError(f"Resize nearest_mode={node.attr('nearest_mode')!r} is not supported")
    transform = node.attr("coordinate_transformation_mode", "half_pixel")
    if transform not in COORDINATE_MODES:
        raise FissionError(f"Resize coordinate_transformation_mode={transform!r} is not supported")


def _resize_spec(ctx: FissionContext, node: OnnxNode) -> ResizeSpec:
    """Resize (opsets 11-21): scales (input 2) or sizes (input 3) on all axes or, from 18, on `axes`."""
    _check_resize_attrs(node)
    x = node.inputs[0]
    axes = [normalize_axis(a, x.rank) for a in node.attr("axes", range(x.rank))]
    scales = ctx.require_constant(node.input(2), "Resize's scales input") if node.input(2) is not None else None
    if scales is not None and scales.size:
        resized = _axes_from_scales(x, axes, scales.reshape(-1))
    elif node.input(3) is not None:
        resized = _axes_from_sizes(x, axes, ctx.require_constant(node.input(3), "Resize's sizes input").reshape(-1))
    else:
        raise FissionError("Resize needs a scales or a sizes input")
    return ResizeSpec(node.attr("mode", "nearest"),
                      COORDINATE_MODES[node.attr("coordinate_transformation_mode", "half_pixel")],
                      NEAREST_MODES[node.attr("nearest_mode", "round_prefer_floor")], tuple(resized))


def _source_positions(spec: ResizeSpec, resize: AxisResize, length: int) -> np.ndarray:
    positions = np.arange(resize.size, dtype=F32)
    return spec.coordinates(positions, resize.scale, F32(resize.size), F32(length)).astype(F32)


def _gather_axis(ctx: FissionContext, x: Value, axis: int, index: np.ndarray) -> Value:
    if len(index) == x.shape[axis] and np.array_equal(index, np.arange(len(index))):
        return x
    return ctx.emit("gather", x, ctx.const(index.astype(np.int64)), axis=axis)


def _nearest_axis(ctx: FissionContext, x: Value, spec: ResizeSpec, resize: AxisResize) -> Value:
    length = x.shape[resize.axis]
    source = spec.rounding(_source_positions(spec, resize, length))
    return _gather_axis(ctx, x, resize.axis, np.clip(source, 0, length - 1))


def _linear_axis(ctx: FissionContext, x: Value, spec: ResizeSpec, resize: AxisResize) -> Value:
    """a + (b - a) * w with a, b the clamped floor and floor + 1 neighbours and w the fraction."""
    length = x.shape[resize.axis]
    source = np.clip(_source_positions(spec, resize, length), F32(0), F32(length - 1))
    low = np.floor(source).astype(np.int64)
    high = np.minimum(low + 1, length - 1)
    weight = source - low.astype(F32)
    if not weight.any():
        return _gather_axis(ctx, x, resize.axis, low)
    a = _gather_axis(ctx, x, resize.axis, low)
    b = _gather_axis(ctx, x, resize.axis, high)
    broadcast = (resize.size,) + (1,) * (x.rank - 1 - resize.axis)
    w = ctx.const(weight.astype(x.dtype.numpy).reshape(broadcast))
    return ctx.emit("add", a, ctx.emit("mul", ctx.emit("sub", b, a), w))


def _apply(ctx: FissionContext, x: Value, spec: ResizeSpec) -> Value:
    if spec.mode == "linear" and not x.dtype.is_float:
        raise FissionError(f"linear resize of {x.dtype.value} tensors is not supported (float only)")
    if all(resize.size == x.shape[resize.axis] for resize in spec.axes):
        return x
    resize_axis = _linear_axis if spec.mode == "linear" else _nearest_axis
    for resize in spec.axes:
        if resize.scale != 1:
            x = resize_axis(ctx, x, spec, resize)
    return x


@fission("Resize")
def resize(ctx: FissionContext, node: OnnxNode) -> list[Value]:
    """Per resized axis: nearest = one gather; linear = two gathers and a lerp.

    As onnxruntime does (and the spec does not say), an axis with scale 1 is copied whatever the
    coordinate transform (tf_half_pixel_for_nn with ceil would otherwise shift it by one), and a
    resize that changes no dim is a copy (a scale of 1.3 on a dim of 3 keeps 3 but would shift)."""
    return [_apply(ctx, node.inputs[0], _resize_spec(ctx, node))]


def _simple_rounding(x: np.ndarray) -> np.ndarray:
    """Upsample's nearest: the source index is floor(x / scale) (scales are >= 1)."""
    return np.floor(x)


@fission("Upsample")
def upsample(ctx: FissionContext, node: OnnxNode) -> list[Value]:
    """Deprecated Resize: scales (attribute before opset 9, input after), asymmetric coordinates."""
    x = node.inputs[0]
    mode = node.attr("mode", "nearest")
    if mode not in INTERPOLATION_MODES:
        raise FissionError(f"Upsample mode={mode!r} is not supported (only {', '.join(INTERPOLATION_MODES)})")
    if node.input(1) is not None:
        scales = ctx.require_constant(node.input(1), "Upsample's scales input").reshape(-1)
    else:
        scales = np.asarray(node.attr("scales"), dtype=F32)
    if any(s < 1 for s in scales):
        raise FissionError(f"Upsample scales {scales.tolist()} must be >= 1")
    resized = _axes_from_scales(x, range(x.rank), scales)
    return [_apply(ctx, x, ResizeSpec(mode, _asymmetric, _simple_rounding, tuple(resized)))]
