"""The primitive operator set: each primitive's class, arity, attributes and shape/dtype rule.

What a primitive computes is defined by the reference backend (korch.backends.reference);
this module only says what it accepts and what type it produces.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

import numpy as np

from korch.ir.types import UNKNOWN_DIM, DType, TensorType


class PrimClass(Enum):
    ELEMENTWISE = "elementwise"
    REDUCE = "reduce"          # reductions, window reductions and explicit broadcast
    LAYOUT = "layout"          # data movement, no arithmetic
    LINEAR = "linear"          # matmul and convolution: the compute-bound class
    OPAQUE = "opaque"          # an ONNX node korch has no rule for; only an ONNX engine runs it


class IRError(ValueError):
    """A primitive was given inputs or attributes it does not accept."""


InferFn = Callable[[Sequence[TensorType], Mapping[str, Any]], TensorType]


@dataclass(frozen=True)
class OpSpec:
    name: str
    klass: PrimClass
    arity: int | None          # None: any number of inputs from min_inputs on (concat, opaque)
    attrs: frozenset[str]      # exactly these attributes are required
    infer: InferFn
    min_inputs: int = 1


OPS: dict[str, OpSpec] = {}


def register_op(name: str, klass: PrimClass, arity: int | None, attrs: Sequence[str], infer: InferFn,
                min_inputs: int = 1) -> None:
    if name in OPS:
        raise RuntimeError(f"primitive {name!r} registered twice")
    OPS[name] = OpSpec(name, klass, arity, frozenset(attrs), infer, min_inputs)


def op_spec(name: str) -> OpSpec:
    if name not in OPS:
        raise IRError(f"unknown primitive {name!r}")
    return OPS[name]


def infer_type(op: str, inputs: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    spec = op_spec(op)
    if spec.arity is not None and len(inputs) != spec.arity:
        raise IRError(f"{op} takes {spec.arity} inputs, got {len(inputs)}")
    if spec.arity is None and len(inputs) < spec.min_inputs:
        raise IRError(f"{op} needs at least {spec.min_inputs} input(s)")
    if set(attrs) != spec.attrs:
        raise IRError(f"{op} takes attributes {sorted(spec.attrs)}, got {sorted(attrs)}")
    return spec.infer(inputs, attrs)


# ---------------------------------------------------------------------------------------------
# helpers

def broadcast_shapes(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    try:
        return tuple(int(d) for d in np.broadcast_shapes(*shapes))
    except ValueError:
        raise IRError(f"shapes {' and '.join(map(str, shapes))} do not broadcast") from None


def _same_dtype(op: str, types: Sequence[TensorType]) -> DType:
    dtypes = {t.dtype for t in types}
    if len(dtypes) != 1:
        raise IRError(f"{op} needs inputs of one dtype, got {', '.join(sorted(d.value for d in dtypes))}")
    return types[0].dtype


def _check_axes(op: str, axes: tuple[int, ...], rank: int) -> None:
    if list(axes) != sorted(set(axes)) or any(not 0 <= a < rank for a in axes):
        raise IRError(f"{op}: axes {axes} must be sorted, unique and in [0, {rank})")


# ---------------------------------------------------------------------------------------------
# elementwise

UNARY_OPS = ("neg", "abs", "exp", "log", "sqrt", "reciprocal", "tanh", "sigmoid", "erf", "relu",
             "floor", "ceil", "round", "sign", "sin", "cos")
ARITH_OPS = ("add", "sub", "mul", "div", "pow", "max", "min")
COMPARE_OPS = ("greater", "less", "equal")
LOGIC_OPS = ("and", "or")


def _unary(inputs: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    return inputs[0]


def _arith(inputs: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    dtype = _same_dtype("arithmetic", inputs)
    return TensorType(broadcast_shapes(*(t.shape for t in inputs)), dtype)


def _compare(inputs: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    _same_dtype("comparison", inputs)
    return TensorType(broadcast_shapes(*(t.shape for t in inputs)), DType.BOOL)


def _logic(inputs: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    if any(t.dtype != DType.BOOL for t in inputs):
        raise IRError("logical ops take bool inputs")
    return TensorType(broadcast_shapes(*(t.shape for t in inputs)), DType.BOOL)


def _cast(inputs: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    return TensorType(inputs[0].shape, attrs["to"])


def _where(inputs: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    cond, x, y = inputs
    if cond.dtype != DType.BOOL:
        raise IRError("where: condition must be bool")
    dtype = _same_dtype("where", (x, y))
    return TensorType(broadcast_shapes(cond.shape, x.shape, y.shape), dtype)


for _name in UNARY_OPS:
    register_op(_name, PrimClass.ELEMENTWISE, 1, (), _unary)
register_op("not", PrimClass.ELEMENTWISE, 1, (), _logic)
register_op("cast", PrimClass.ELEMENTWISE, 1, ("to",), _cast)
for _name in ARITH_OPS:
    register_op(_name, PrimClass.ELEMENTWISE, 2, (), _arith)
for _name in COMPARE_OPS:
    register_op(_name, PrimClass.ELEMENTWISE, 2, (), _compare)
for _name in LOGIC_OPS:
    register_op(_name, PrimClass.ELEMENTWISE, 2, (), _logic)
register_op("where", PrimClass.ELEMENTWISE, 3, (), _where)


# ---------------------------------------------------------------------------------------------
# reduce and broadcast

REDUCE_OPS = ("reduce_sum", "reduce_max", "reduce_min", "reduce_prod")
WINDOW_OPS = ("window_max", "window_mean")


def _reduce(inputs: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    (x,) = inputs
    axes = attrs["axes"]
    _check_axes("reduce", axes, x.rank)
    if attrs["keepdims"]:
        shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
    else:
        shape = tuple(d for i, d in enumerate(x.shape) if i not in axes)
    return TensorType(shape, x.dtype)


def window_output_size(size: int, kernel: int, stride: int, dilation: int) -> int:
    span = dilation * (kernel - 1) + 1
    if size < span:
        raise IRError(f"window of span {span} does not fit in a dimension of size {size}")
    return (size - span) // stride + 1


def _window(inputs: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    """Sliding-window reduction over the trailing spatial dims of an N x C x ... tensor, no padding."""
    (x,) = inputs
    kernel, strides, dilations = attrs["kernel"], attrs["strides"], attrs["dilations"]
    nsp = x.rank - 2
    if nsp < 1 or not len(kernel) == len(strides) == len(dilations) == nsp:
        raise IRError(f"window reduction: kernel/strides/dilations must have {nsp} entries for rank {x.rank}")
    spatial = tuple(window_output_size(*a) for a in zip(x.shape[2:], kernel, strides, dilations))
    return TensorType(x.shape[:2] + spatial, x.dtype)


def _expand(inputs: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    (x,) = inputs
    shape = attrs["shape"]
    if broadcast_shapes(x.shape, shape) != shape:
        raise IRError(f"expand: {x.shape} does not broadcast to {shape}")
    return TensorType(shape, x.dtype)


for _name in REDUCE_OPS:
    register_op(_name, PrimClass.REDUCE, 1, ("axes", "keepdims"), _reduce)
for _name in WINDOW_OPS:
    register_op(_name, PrimClass.REDUCE, 1, ("kernel", "strides", "dilations"), _window)
register_op("expand", PrimClass.REDUCE, 1, ("shape",), _expand)


# ---------------------------------------------------------------------------------------------
# layout

PAD_MODES = ("constant", "reflect", "edge")


def _transpose(inputs: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    (x,) = inputs
    perm = attrs["perm"]
    if sorted(perm) != list(range(x.rank)):
        raise IRError(f"transpose: perm {perm} is not a permutation of rank {x.rank}")
    return TensorType(tuple(x.shape[p] for p in perm), x.dtype)


def _reshape(inputs: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    (x,) = inputs
    shape = attrs["shape"]
    if not x.is_static and shape == x.shape:
        return x           # a copy of a value of data-dependent shape (an output copy, see GraphBuilder.build)
    if not x.is_static or any(d < 0 for d in shape) or int(np.prod(shape, dtype=np.int64)) != x.size:
        raise IRError(f"reshape: cannot reshape {x.shape} to {shape}")
    return TensorType(shape, x.dtype)


def _slice(inputs: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    """out[i0, i1, ...] = x[starts[0] + i0*steps[0], ...] with out.shape == sizes."""
    (x,) = inputs
    starts, steps, sizes = attrs["starts"], attrs["steps"], attrs["sizes"]
    if not len(starts) == len(steps) == len(sizes) == x.rank:
        raise IRError(f"slice: starts/steps/sizes must have {x.rank} entries")
    for dim, start, step, size in zip(x.shape, starts, steps, sizes):
        last = start + (size - 1) * step
        if step == 0 or size < 0 or (size > 0 and not (0 <= start < dim and 0 <= last < dim)):
            raise IRError(f"slice: start {start}, step {step}, size {size} out of range for dim {dim}")
    return TensorType(tuple(sizes), x.dtype)


def _concat(inputs: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    axis = attrs["axis"]
    first = inputs[0]
    dtype = _same_dtype("concat", inputs)
    if not 0 <= axis < first.rank:
        raise IRError(f"concat: axis {axis} out of range for rank {first.rank}")
    for t in inputs:
        if t.rank != first.rank or any(a != b for i, (a, b) in enumerate(zip(t.shape, first.shape)) if i != axis):
            raise IRError(f"concat: shapes {first.shape} and {t.shape} differ off axis {axis}")
    shape = list(first.shape)
    shape[axis] = sum(t.shape[axis] for t in inputs)
    return TensorType(tuple(shape), dtype)


def _pad(inputs: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    """pads = (begin_0, ..., begin_{r-1}, end_0, ..., end_{r-1}), all >= 0 (ONNX order)."""
    (x,) = inputs
    pads, mode = attrs["pads"], attrs["mode"]
    if len(pads) != 2 * x.rank or any(p < 0 for p in pads):
        raise IRError(f"pad: pads {pads} must be {2 * x.rank} non-negative ints")
    if mode not in PAD_MODES:
        raise IRError(f"pad: mode {mode!r} not in {PAD_MODES}")
    if mode == "reflect" and any(p >= d for d, p in zip(x.shape * 2, pads) if p):
        raise IRError(f"pad: reflect pads {pads} too large for shape {x.shape}")
    return TensorType(tuple(d + b + e for d, b, e in zip(x.shape, pads[: x.rank], pads[x.rank:])), x.dtype)


def _gather(inputs: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    data, indices = inputs
    axis = attrs["axis"]
    if not 0 <= axis < data.rank:
        raise IRError(f"gather: axis {axis} out of range for rank {data.rank}")
    if indices.dtype not in (DType.INT64, DType.INT32):
        raise IRError(f"gather: indices must be int64 or int32, got {indices.dtype.value}")
    return TensorType(data.shape[:axis] + indices.shape + data.shape[axis + 1:], data.dtype)


register_op("transpose", PrimClass.LAYOUT, 1, ("perm",), _transpose)
register_op("reshape", PrimClass.LAYOUT, 1, ("shape",), _reshape)
register_op("slice", PrimClass.LAYOUT, 1, ("starts", "steps", "sizes"), _slice)
register_op("concat", PrimClass.LAYOUT, None, ("axis",), _concat)
register_op("pad", PrimClass.LAYOUT, 1, ("pads", "mode", "value"), _pad)
register_op("gather", PrimClass.LAYOUT, 2, ("axis",), _gather)


# ---------------------------------------------------------------------------------------------
# linear

def _matmul(inputs: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    a, b = inputs
    dtype = _same_dtype("matmul", inputs)
    if a.rank < 2 or b.rank < 2 or a.shape[-1] != b.shape[-2]:
        raise IRError(f"matmul: shapes {a.shape} and {b.shape} do not multiply")
    batch = broadcast_shapes(a.shape[:-2], b.shape[:-2])
    return TensorType(batch + (a.shape[-2], b.shape[-1]), dtype)


def _conv_common(op: str, x: TensorType, w: TensorType, attrs: Mapping[str, Any]) -> int:
    nsp = x.rank - 2
    if nsp < 1 or w.rank != x.rank:
        raise IRError(f"{op}: input {x.shape} and weight {w.shape} ranks do not match")
    if not len(attrs["strides"]) == len(attrs["dilations"]) == nsp or len(attrs["pads"]) != 2 * nsp:
        raise IRError(f"{op}: strides/dilations need {nsp} entries and pads {2 * nsp}")
    if attrs["group"] < 1 or any(p < 0 for p in attrs["pads"]):
        raise IRError(f"{op}: bad group {attrs['group']} or negative pads {attrs['pads']}")
    return nsp


def _conv(inputs: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    """x: N x C x spatial, w: M x C/group x kernel; pads as in ONNX (begins then ends)."""
    x, w = inputs
    dtype = _same_dtype("conv", inputs)
    nsp = _conv_common("conv", x, w, attrs)
    group = attrs["group"]
    if x.shape[1] != w.shape[1] * group or w.shape[0] % group:
        raise IRError(f"conv: input {x.shape}, weight {w.shape} and group {group} do not agree")
    pads = attrs["pads"]
    spatial = tuple(
        window_output_size(x.shape[2 + i] + pads[i] + pads[nsp + i], w.shape[2 + i], attrs["strides"][i], attrs["dilations"][i])
        for i in range(nsp)
    )
    return TensorType((x.shape[0], w.shape[0]) + spatial, dtype)


def _conv_transpose(inputs: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    """x: N x C x spatial, w: C x M/group x kernel; output = (in-1)*s - pads + d*(k-1) + output_padding + 1."""
    x, w = inputs
    dtype = _same_dtype("conv_transpose", inputs)
    nsp = _conv_common("conv_transpose", x, w, attrs)
    group, pads, out_pad = attrs["group"], attrs["pads"], attrs["output_padding"]
    if x.shape[1] != w.shape[0] or w.shape[0] % group or len(out_pad) != nsp:
        raise IRError(f"conv_transpose: input {x.shape}, weight {w.shape} and group {group} do not agree")
    spatial = tuple(
        (x.shape[2 + i] - 1) * attrs["strides"][i] - pads[i] - pads[nsp + i]
        + attrs["dilations"][i] * (w.shape[2 + i] - 1) + out_pad[i] + 1
        for i in range(nsp)
    )
    if any(d < 1 for d in spatial):
        raise IRError(f"conv_transpose: empty output {spatial}")
    return TensorType((x.shape[0], w.shape[1] * group) + spatial, dtype)


register_op("matmul", PrimClass.LINEAR, 2, (), _matmul)
register_op("conv", PrimClass.LINEAR, 2, ("strides", "pads", "dilations", "group"), _conv)
register_op("conv_transpose", PrimClass.LINEAR, 2,
            ("strides", "pads", "dilations", "group", "output_padding"), _conv_transpose)


# ---------------------------------------------------------------------------------------------
# opaque: one output of an ONNX node korch cannot fission (korch/ir/opaque.py builds the attributes)

OPAQUE_ATTRS = ("op_type", "domain", "index", "opsets", "node", "shape", "dtype")


def _opaque(inputs: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    """The output type comes from ONNX shape inference; unknown dims are UNKNOWN_DIM."""
    shape, dtype = attrs["shape"], attrs["dtype"]
    if not isinstance(dtype, DType) or any(not isinstance(d, int) or d < UNKNOWN_DIM for d in shape):
        raise IRError(f"opaque {attrs['op_type']}: bad output type {shape} {dtype}")
    if attrs["index"] < 0:
        raise IRError(f"opaque {attrs['op_type']}: negative output index {attrs['index']}")
    return TensorType(tuple(shape), dtype)


register_op("opaque", PrimClass.OPAQUE, None, OPAQUE_ATTRS, _opaque, min_inputs=0)
