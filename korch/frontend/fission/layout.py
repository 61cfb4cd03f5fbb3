"""Fission rules: data-movement ops (transpose, reshape, slicing, concat, pad, gather, broadcast).

Every rule here emits layout primitives only (plus `expand` for broadcasts); shape-like inputs
(shapes, axes, starts/ends, pads, repeats) must be constants.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from korch.frontend.fission import FissionContext, FissionError, OnnxNode, fission, normalize_axis
from korch.ir.graph import Value
from korch.ir.ops import PAD_MODES, broadcast_shapes
from korch.ir.types import DType

# Opset where Squeeze/Unsqueeze axes and Split's split moved from an attribute to an input.
AXES_AS_INPUT_OPSET = 13
# Opset where Split gained the num_outputs attribute (uneven last chunk allowed).
SPLIT_NUM_OUTPUTS_OPSET = 18
# Opset where Pad's pads and constant_value moved from attributes to inputs.
PAD_INPUTS_OPSET = 11


def _ints(array: np.ndarray) -> list[int]:
    return [int(v) for v in np.asarray(array).reshape(-1)]


def _optional_ints(ctx: FissionContext, value: Value | None, what: str) -> list[int] | None:
    """The ints of an optional constant input; None when it is omitted."""
    return None if value is None else _ints(ctx.require_constant(value, what))


def _axes_attr_or_input(ctx: FissionContext, node: OnnxNode, index: int) -> list[int] | None:
    """`axes` from the attribute before opset 13, from input `index` from 13 on; None when absent."""
    if node.opset < AXES_AS_INPUT_OPSET:
        axes = node.attr("axes", None)
        return None if axes is None else list(axes)
    return _optional_ints(ctx, node.input(index), f"{node.op_type}'s axes input")


def slice_axis(ctx: FissionContext, x: Value, axis: int, start: int, size: int, step: int = 1) -> Value:
    """`x` restricted to `size` positions from `start` by `step` along `axis` (no-op when that is all of it)."""
    if start == 0 and step == 1 and size == x.shape[axis]:
        return x
    starts, steps, sizes = [0] * x.rank, [1] * x.rank, list(x.shape)
    starts[axis], steps[axis], sizes[axis] = start, step, size
    return ctx.emit("slice", x, starts=tuple(starts), steps=tuple(steps), sizes=tuple(sizes))


@fission("Transpose")
def transpose(ctx: FissionContext, node: OnnxNode) -> list[Value]:
    x = node.inputs[0]
    perm = node.attr("perm", None)
    return [ctx.transpose(x, range(x.rank - 1, -1, -1) if perm is None else perm)]


@fission("Reshape")
def reshape(ctx: FissionContext, node: OnnxNode) -> list[Value]:
    """0 copies the input dim (unless allowzero=1), one -1 is inferred from the element count."""
    x = node.inputs[0]
    shape = _ints(ctx.require_constant(node.inputs[1], "Reshape's shape input"))
    if not node.attr("allowzero", 0):
        shape = [x.shape[i] if d == 0 else d for i, d in enumerate(shape)]
    if shape.count(-1) > 1:
        raise FissionError(f"Reshape's shape {shape} has more than one -1")
    if -1 in shape:
        known = int(np.prod([d for d in shape if d != -1], dtype=np.int64))
        shape[shape.index(-1)] = x.type.size // known if known else 0
    return [ctx.reshape(x, shape)]


@fission("Flatten")
def flatten(ctx: FissionContext, node: OnnxNode) -> list[Value]:
    x = node.inputs[0]
    axis = node.attr("axis", 1)
    axis = axis if axis == x.rank else normalize_axis(axis, x.rank)
    outer = int(np.prod(x.shape[:axis], dtype=np.int64))
    return [ctx.reshape(x, (outer, int(np.prod(x.shape[axis:], dtype=np.int64))))]


@fission("Squeeze")
def squeeze(ctx: FissionContext, node: OnnxNode) -> list[Value]:
    """A reshape dropping the given size-1 axes (all size-1 axes when none are given)."""
    x = node.inputs[0]
    axes = _axes_attr_or_input(ctx, node, 1)
    drop = {i for i, d in enumerate(x.shape) if d == 1} if axes is None else {normalize_axis(a, x.rank) for a in axes}
    if any(x.shape[a] != 1 for a in drop):
        raise FissionError(f"Squeeze axes {sorted(drop)} include a dim that is not 1 in shape {x.shape}")
    return [ctx.reshape(x, [d for i, d in enumerate(x.shape) if i not in drop])]


@fission("Unsqueeze")
def unsqueeze(ctx: FissionContext, node: OnnxNode) -> list[Value]:
    """A reshape inserting size-1 axes; axes index the output."""
    x = node.inputs[0]
    axes = _axes_attr_or_input(ctx, node, 1)
    if axes is None:
        raise FissionError("Unsqueeze needs axes")
    rank = x.rank + len(axes)
    new = {normalize_axis(a, rank) for a in axes}
    dims = iter(x.shape)
    return [ctx.reshape(x, [1 if i in new else next(dims) for i in range(rank)])]


def _slice_range(start: int, end: int, step: int, dim: int) -> tuple[int, int]:
    """ONNX Slice clamping for one axis: (first index, number of elements)."""
    if start < 0:
        start += dim
    if end < 0:
        end += dim
    if step > 0:
        start, end = min(max(start, 0), dim), min(max(end, 0), dim)
        size = max(0, -(-(end - start) // step))
    else:
        start, end = min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)
        size = max(0, -(-(start - end) // -step))
    return (start, size) if size else (0, 0)


@fission("Slice")
def slice_(ctx: FissionContext, node: OnnxNode) -> list[Value]:
    """One `slice` primitive (none for a full-range slice), from ONNX's clamped starts/ends/steps."""
    x = node.inputs[0]
    starts = _ints(ctx.require_constant(node.input(1), "Slice's starts input"))
    ends = _ints(ctx.require_constant(node.input(2), "Slice's ends input"))
    axes = _optional_ints(ctx, node.input(3), "Slice's axes input") or list(range(len(starts)))
    steps = _optional_ints(ctx, node.input(4), "Slice's steps input") or [1] * len(starts)
    first, step_of, size_of = [0] * x.rank, [1] * x.rank, list(x.shape)
    for start, end, axis, step in zip(starts, ends, axes, steps, strict=True):
        if step == 0:
            raise FissionError("Slice step 0 is invalid")
        axis = normalize_axis(axis, x.rank)
        first[axis], size_of[axis] = _slice_range(start, end, step, x.shape[axis])
        step_of[axis] = step if size_of[axis] else 1
    if first == [0] * x.rank and step_of == [1] * x.rank and size_of == list(x.shape):
        return [x]
    return [ctx.emit("slice", x, starts=tuple(first), steps=tuple(step_of), sizes=tuple(size_of))]


def _split_sizes(ctx: FissionContext, node: OnnxNode, dim: int) -> list[int]:
    if node.opset < AXES_AS_INPUT_OPSET:
        split = node.attr("split", None)
    else:
        split = _optional_ints(ctx, node.input(1), "Split's split input")
    if split is not None:
        if sum(split) != dim or len(split) != node.num_outputs:
            raise FissionError(f"Split sizes {list(split)} do not cover a dim of {dim} in {node.num_outputs} outputs")
        return list(split)
    parts = node.num_outputs
    if node.opset >= SPLIT_NUM_OUTPUTS_OPSET and node.attr("num_outputs", None) is not None:
        parts = node.attr("num_outputs")
        chunk = -(-dim // parts)
        if chunk * (parts - 1) >= dim:
            raise FissionError(f"Split of a dim of {dim} into num_outputs={parts} leaves an output empty")
        return [chunk] * (parts - 1) + [dim - chunk * (parts - 1)]
    if dim % parts:
        raise FissionError(f"Split of a dim of {dim} into {parts} equal outputs is uneven")
    return [dim // parts] * parts


@fission("Split")
def split(ctx: FissionContext, node: OnnxNode) -> list[Value]:
    """One `slice` per output along the axis."""
    x = node.inputs[0]
    axis = normalize_axis(node.attr("axis", 0), x.rank)
    outputs, offset = [], 0
    for size in _split_sizes(ctx, node, x.shape[axis]):
        outputs.append(slice_axis(ctx, x, axis, offset, size))
        offset += size
    return outputs


@fission("Concat")
def concat(ctx: FissionContext, node: OnnxNode) -> list[Value]:
    inputs = [v for v in node.inputs if v is not None]
    axis = normalize_axis(node.attr("axis"), inputs[0].rank)
    parts = [v for v in inputs if v.shape[axis] > 0] or inputs[:1]
    return [parts[0] if len(parts) == 1 else ctx.emit("concat", *parts, axis=axis)]


def _pad_args(ctx: FissionContext, node: OnnxNode, rank: int) -> tuple[list[int], float | int | bool]:
    """Full ONNX-order pads (begins then ends, one per axis) and the constant fill value."""
    if node.opset < PAD_INPUTS_OPSET:
        return list(node.attr("pads")), node.attr("value", 0.0)
    pads = _ints(ctx.require_constant(node.input(1), "Pad's pads input"))
    fill = ctx.require_constant(node.input(2), "Pad's constant_value input") if node.input(2) is not None else None
    value = 0 if fill is None or fill.size == 0 else fill.reshape(-1)[0].item()
    axes = _optional_ints(ctx, node.input(3), "Pad's axes input")
    if axes is None:
        return pads, value
    axes = [normalize_axis(a, rank) for a in axes]
    full = [0] * (2 * rank)
    for k, axis in enumerate(axes):
        full[axis], full[rank + axis] = pads[k], pads[len(axes) + k]
    return full, value


@fission("Pad")
def pad(ctx: FissionContext, node: OnnxNode) -> list[Value]:
    """Negative pads crop first (one `slice`), the positive ones become one `pad` primitive."""
    x = node.inputs[0]
    mode = node.attr("mode", "constant")
    if mode not in PAD_MODES:
        raise FissionError(f"Pad mode={mode!r} is not supported (only {', '.join(PAD_MODES)})")
    pads, value = _pad_args(ctx, node, x.rank)
    if len(pads) != 2 * x.rank:
        raise FissionError(f"Pad needs {2 * x.rank} pads for rank {x.rank}, got {pads}")
    begins, ends = pads[: x.rank], pads[x.rank:]
    if any(p < 0 for p in pads):
        starts = tuple(max(-b, 0) for b in begins)
        sizes = tuple(d - max(-b, 0) - max(-e, 0) for d, b, e in zip(x.shape, begins, ends))
        x = ctx.emit("slice", x, starts=starts, steps=(1,) * x.rank, sizes=sizes)
    grow = tuple(max(p, 0) for p in pads)
    if not any(grow):
        return [x]
    fill = float(value) if x.dtype.is_float else bool(value) if x.dtype == DType.BOOL else int(value)
    return [ctx.emit("pad", x, pads=grow, mode=mode, value=fill)]


_DEPTH_TO_SPACE_MODES = ("DCR", "CRD")


@fission("DepthToSpace")
def depth_to_space(ctx: FissionContext, node: OnnxNode) -> list[Value]:
    """reshape to split C into (b, b, C') (DCR) or (C', b, b) (CRD), transpose the blocks next to H and W, reshape."""
    x = node.inputs[0]
    b, mode = node.attr("blocksize"), node.attr("mode", "DCR")
    if mode not in _DEPTH_TO_SPACE_MODES:
        raise FissionError(f"DepthToSpace mode={mode!r} is not supported (only DCR, CRD)")
    n, c, h, w = x.shape
    if mode == "DCR":
        y = ctx.reshape(x, (n, b, b, c // (b * b), h, w))
        y = ctx.transpose(y, (0, 3, 4, 1, 5, 2))
    else:
        y = ctx.reshape(x, (n, c // (b * b), b, b, h, w))
        y = ctx.transpose(y, (0, 1, 4, 2, 5, 3))
    return [ctx.reshape(y, (n, c // (b * b), h * b, w * b))]


@fission("SpaceToDepth")
def space_to_depth(ctx: FissionContext, node: OnnxNode) -> list[Value]:
    """reshape H, W into (H/b, b) and (W/b, b), transpose the blocks in front of C, reshape."""
    x = node.inputs[0]
    b = node.attr("blocksize")
    n, c, h, w = x.shape
    y = ctx.reshape(x, (n, c, h // b, b, w // b, b))
    y = ctx.transpose(y, (0, 3, 5, 1, 2, 4))
    return [ctx.reshape(y, (n, c * b * b, h // b, w // b))]


@fission("Gather")
def gather(ctx: FissionContext, node: OnnxNode) -> list[Value]:
    """One `gather`; constant indices are range-checked and made non-negative int64 (a 0-d index drops the axis)."""
    data, indices = node.inputs
    axis = normalize_axis(node.attr("axis", 0), data.rank)
    constant = ctx.constant_value(indices)
    if constant is not None:
        dim = data.shape[axis]
        if constant.size and (constant.min() < -dim or constant.max() >= dim):
            raise FissionError(f"Gather indices {_ints(constant)} are out of range for a dim of {dim}")
        indices = ctx.const(np.where(constant < 0, constant + dim, constant).astype(np.int64))
    return [ctx.emit("gather", data, indices, axis=axis)]


@fission("Expand")
def expand(ctx: FissionContext, node: OnnxNode) -> list[Value]:
    """One `expand` to the bidirectional broadcast of the input shape and the shape input."""
    x = node.inputs[0]
    shape = tuple(_ints(ctx.require_constant(node.inputs[1], "Expand's shape input")))
    out = broadcast_shapes(x.shape, shape)
    return [x if out == x.shape else ctx.emit("expand", x, shape=out)]


def _tile_shapes(shape: Sequence[int], repeats: Sequence[int]) -> tuple[list[int], list[int]]:
    """(interleaved, expanded): a size-1 axis before each repeated dim > 1, broadcast to the repeat count."""
    interleaved: list[int] = []
    expanded: list[int] = []
    for d, r in zip(shape, repeats, strict=True):
        if r == 1:
            interleaved.append(d)
            expanded.append(d)
        elif d == 1:
            interleaved.append(1)
            expanded.append(r)
        else:
            interleaved += [1, d]
            expanded += [r, d]
    return interleaved, expanded


@fission("Tile")
def tile(ctx: FissionContext, node: OnnxNode) -> list[Value]:
    """reshape to interleave a size-1 axis before each repeated dim, expand it to the repeats, reshape."""
    x = node.inputs[0]
    repeats = _ints(ctx.require_constant(node.inputs[1], "Tile's repeats input"))
    if len(repeats) != x.rank or any(r < 0 for r in repeats):
        raise FissionError(f"Tile repeats {repeats} must be {x.rank} non-negative ints")
    interleaved, expanded = _tile_shapes(x.shape, repeats)
    if interleaved == expanded:
        return [x]
    y = ctx.emit("expand", ctx.reshape(x, interleaved), shape=tuple(expanded))
    return [ctx.reshape(y, [d * r for d, r in zip(x.shape, repeats)])]
