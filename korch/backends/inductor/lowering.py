"""Primitive -> torch lowering table for the Inductor backend; each lowering matches the reference kernel.

A lowering takes the input tensors and a `Prim` (attributes and static types) and returns one tensor.
It runs only while Dynamo traces a candidate, so it may branch on static facts freely. A check
(optional, per primitive) returns the reason a primitive cannot be lowered exactly, or None.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from math import prod
from typing import Any

import torch
import torch.nn.functional as F

from korch.ir.graph import Graph, Node
from korch.ir.types import DType

Tensor = torch.Tensor

TORCH_DTYPES: dict[DType, torch.dtype] = {
    DType.FLOAT32: torch.float32,
    DType.FLOAT64: torch.float64,
    DType.FLOAT16: torch.float16,
    DType.INT64: torch.int64,
    DType.INT32: torch.int32,
    DType.INT8: torch.int8,
    DType.UINT8: torch.uint8,
    DType.BOOL: torch.bool,
}

# torch has functional conv / pool / reflect-pad entry points for 1, 2 and 3 spatial dims only.
MAX_TORCH_SPATIAL_DIMS = 3


@dataclass(frozen=True)
class Prim:
    """What a lowering may know about one primitive: attributes and static input/output types."""

    op: str
    attrs: Mapping[str, Any]
    in_shapes: tuple[tuple[int, ...], ...]
    in_dtypes: tuple[DType, ...]
    out_shape: tuple[int, ...]
    out_dtype: DType
    # input index -> value, for float constants of one element: a lowering may pass it to torch as a
    # Python number, which Inductor inlines and specialises on (x ** 3.0 becomes two multiplies)
    scalars: Mapping[int, float] = field(default_factory=dict)

    @staticmethod
    def of(node: Node, graph: Graph) -> Prim:
        ins = [graph.types[i] for i in node.inputs]
        out = graph.types[node.output]
        scalars = {k: float(graph.constants[name].reshape(())) for k, name in enumerate(node.inputs)
                   if name in graph.constants and ins[k].dtype.is_float and graph.constants[name].size == 1}
        return Prim(node.op, dict(node.attrs), tuple(t.shape for t in ins), tuple(t.dtype for t in ins),
                    out.shape, out.dtype, scalars)


Lowering = Callable[[Sequence[Tensor], Prim], Tensor]
Check = Callable[[Prim, Graph, Node], "str | None"]
LOWERINGS: dict[str, Lowering] = {}
CHECKS: dict[str, Check] = {}


def lowering(*names: str) -> Callable[[Lowering], Lowering]:
    def register(fn: Lowering) -> Lowering:
        for name in names:
            if name in LOWERINGS:
                raise RuntimeError(f"inductor lowering {name!r} registered twice")
            LOWERINGS[name] = fn
        return fn
    return register


def check(*names: str) -> Callable[[Check], Check]:
    def register(fn: Check) -> Check:
        for name in names:
            CHECKS[name] = fn
        return fn
    return register


def unsupported_reason(node: Node, graph: Graph) -> str | None:
    """Why `node` cannot be lowered exactly, or None."""
    if node.op not in LOWERINGS:
        return f"{node.op}: no inductor lowering"
    rule = CHECKS.get(node.op)
    reason = rule(Prim.of(node, graph), graph, node) if rule is not None else None
    return f"{node.op} ({node.output}): {reason}" if reason else None


def _unary(name: str, fn: Callable[[Tensor], Tensor]) -> None:
    lowering(name)(lambda xs, p: fn(xs[0]))


def _binary(name: str, fn: Callable[[Tensor, Tensor], Tensor]) -> None:
    lowering(name)(lambda xs, p: fn(xs[0], xs[1]))


# ---- elementwise --------------------------------------------------------------------------

FLOAT_ONLY_UNARY = ("exp", "log", "sqrt", "reciprocal", "tanh", "sigmoid", "erf", "sin", "cos")

_unary("neg", torch.neg)
_unary("abs", torch.abs)
_unary("exp", torch.exp)
_unary("log", torch.log)
_unary("sqrt", torch.sqrt)
_unary("reciprocal", torch.reciprocal)
_unary("tanh", torch.tanh)
_unary("sigmoid", torch.sigmoid)
_unary("erf", torch.erf)
_unary("relu", torch.relu)
_unary("sin", torch.sin)
_unary("cos", torch.cos)
_unary("not", torch.logical_not)
_unary("round", torch.round)          # half to even, like np.round; identity on integers
_unary("floor", torch.floor)
_unary("ceil", torch.ceil)


@check(*FLOAT_ONLY_UNARY)
def _check_float_input(p: Prim, graph: Graph, node: Node) -> str | None:
    # numpy computes these in float64 for integer inputs and casts back; torch would use float32.
    return None if p.in_dtypes[0].is_float else f"{p.in_dtypes[0].value} input (float only)"


@lowering("sign")
def _sign(xs: Sequence[Tensor], p: Prim) -> Tensor:
    x = xs[0]
    if not p.in_dtypes[0].is_float:
        return torch.sign(x)
    return torch.where(torch.isnan(x), x, torch.sign(x))          # np.sign(nan) is nan, torch's is 0


@lowering("cast")
def _cast(xs: Sequence[Tensor], p: Prim) -> Tensor:
    return xs[0].to(TORCH_DTYPES[p.attrs["to"]])


@lowering("pow")
def _pow(xs: Sequence[Tensor], p: Prim) -> Tensor:
    """A one-element float exponent that broadcasting cannot add dims with goes to torch as a Python
    number. As a frozen 0-d tensor Inductor emits a general pow (exp and log per element); as a number
    it specialises: x ** 3.0 is two multiplies (gpt2's GELU, written out by the exporter: its fused
    kernel ran 2.6x faster, benchmarks/inductor_vs_torch_compile.py --kernels)."""
    exponent = p.scalars.get(1)
    if exponent is not None and len(p.in_shapes[1]) <= len(p.in_shapes[0]) and p.in_dtypes[0].is_float:
        return torch.pow(xs[0], exponent)
    return torch.pow(xs[0], xs[1])


@lowering("div")
def _div(xs: Sequence[Tensor], p: Prim) -> Tensor:
    if p.in_dtypes[0].is_float:
        return torch.div(xs[0], xs[1])
    return torch.div(xs[0], xs[1], rounding_mode="trunc")          # C-style, rounds toward zero


_binary("add", torch.add)
_binary("sub", torch.sub)
_binary("mul", torch.mul)
_binary("max", torch.maximum)          # both propagate NaN, like np.maximum
_binary("min", torch.minimum)
_binary("greater", torch.gt)
_binary("less", torch.lt)
_binary("equal", torch.eq)
_binary("and", torch.logical_and)
_binary("or", torch.logical_or)


@lowering("where")
def _where(xs: Sequence[Tensor], p: Prim) -> Tensor:
    return torch.where(xs[0], xs[1], xs[2])


# ---- reduce and broadcast -----------------------------------------------------------------

def _reduction(name: str, fn: Callable[[Tensor, tuple[int, ...], bool], Tensor]) -> None:
    @lowering(name)
    def lower(xs: Sequence[Tensor], p: Prim) -> Tensor:
        axes = tuple(p.attrs["axes"])
        if not axes:
            return xs[0]          # numpy reduces over no axis: identity (torch would reduce all)
        return fn(xs[0], axes, bool(p.attrs["keepdims"]))


def _prod(x: Tensor, axes: tuple[int, ...], keepdims: bool) -> Tensor:
    for axis in reversed(axes):          # torch.prod takes one dim at a time
        x = torch.prod(x, axis, keepdim=keepdims)
    return x


_reduction("reduce_sum", lambda x, axes, keep: torch.sum(x, axes, keepdim=keep))
_reduction("reduce_max", lambda x, axes, keep: torch.amax(x, axes, keepdim=keep))
_reduction("reduce_min", lambda x, axes, keep: torch.amin(x, axes, keepdim=keep))
_reduction("reduce_prod", _prod)

_MAX_POOL = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}
_AVG_POOL = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}


def _windows(x: Tensor, p: Prim) -> Tensor:
    """N x C x out... x k...: the dilated, strided windows over the spatial dims, as a view."""
    kernel, strides, dilations = p.attrs["kernel"], p.attrs["strides"], p.attrs["dilations"]
    nsp = len(kernel)
    for i in range(nsp):
        x = x.unfold(2 + i, dilations[i] * (kernel[i] - 1) + 1, strides[i])
    return x[(Ellipsis,) + tuple(slice(None, None, d) for d in dilations)]


def _window_dims(p: Prim) -> tuple[int, ...]:
    rank = len(p.in_shapes[0]) + len(p.attrs["kernel"])
    return tuple(range(rank - len(p.attrs["kernel"]), rank))


@lowering("window_max")
def _window_max(xs: Sequence[Tensor], p: Prim) -> Tensor:
    nsp = len(p.attrs["kernel"])
    if nsp in _MAX_POOL:
        return _MAX_POOL[nsp](xs[0], p.attrs["kernel"], p.attrs["strides"], 0, p.attrs["dilations"])
    return torch.amax(_windows(xs[0], p), _window_dims(p))


@lowering("window_mean")
def _window_mean(xs: Sequence[Tensor], p: Prim) -> Tensor:
    nsp = len(p.attrs["kernel"])
    if nsp in _AVG_POOL and all(d == 1 for d in p.attrs["dilations"]):
        return _AVG_POOL[nsp](xs[0], p.attrs["kernel"], p.attrs["strides"], 0)
    return torch.mean(_windows(xs[0], p), _window_dims(p))          # avg_pool has no dilation


@check("window_mean")
def _check_window_mean(p: Prim, graph: Graph, node: Node) -> str | None:
    # numpy's integer mean truncates a float quotient; torch.mean rejects integers.
    return None if p.in_dtypes[0].is_float else f"{p.in_dtypes[0].value} input (float only)"


@lowering("expand")
def _expand(xs: Sequence[Tensor], p: Prim) -> Tensor:
    return xs[0].expand(p.attrs["shape"])


# ---- layout -------------------------------------------------------------------------------

@lowering("transpose")
def _transpose(xs: Sequence[Tensor], p: Prim) -> Tensor:
    return xs[0].permute(p.attrs["perm"])


@lowering("reshape")
def _reshape(xs: Sequence[Tensor], p: Prim) -> Tensor:
    return xs[0].reshape(p.attrs["shape"])


@lowering("slice")
def _slice(xs: Sequence[Tensor], p: Prim) -> Tensor:
    """Negative steps: take the same elements with a positive step, then flip (torch has no negative step)."""
    index: list[slice] = []
    flips: list[int] = []
    for dim, (start, step, size) in enumerate(zip(p.attrs["starts"], p.attrs["steps"], p.attrs["sizes"])):
        if size == 0:
            index.append(slice(0, 0))
        elif step > 0:
            index.append(slice(start, start + (size - 1) * step + 1, step))
        else:
            index.append(slice(start + (size - 1) * step, start + 1, -step))
            flips.append(dim)
    y = xs[0][tuple(index)]
    return torch.flip(y, flips) if flips else y


@lowering("concat")
def _concat(xs: Sequence[Tensor], p: Prim) -> Tensor:
    return torch.cat(list(xs), p.attrs["axis"])


def _padded_tail(p: Prim) -> int:
    """How many trailing dims a reflect/edge pad must cover: from the first padded axis to the end."""
    rank = len(p.in_shapes[0])
    pads = p.attrs["pads"]
    padded = [i for i in range(rank) if pads[i] or pads[rank + i]]
    return rank - padded[0] if padded else 0


def _torch_pads(begins: Sequence[int], ends: Sequence[int]) -> list[int]:
    """ONNX-order begins/ends of the trailing dims -> F.pad order (last dim first)."""
    return [v for b, e in zip(reversed(begins), reversed(ends)) for v in (b, e)]


def _pad_value(value: float, dtype: DType) -> float | int | bool:
    """The pad value as numpy casts it to `dtype`, in plain Python (lowerings run under Dynamo)."""
    if dtype.is_float:
        return float(value)
    if dtype == DType.BOOL:
        return bool(value)
    return int(value)          # truncates toward zero, as numpy's float -> int cast


@lowering("pad")
def _pad(xs: Sequence[Tensor], p: Prim) -> Tensor:
    x, pads, mode = xs[0], p.attrs["pads"], p.attrs["mode"]
    rank = len(p.in_shapes[0])
    if mode == "constant":
        value = _pad_value(p.attrs["value"], p.in_dtypes[0])
        return F.pad(x, _torch_pads(pads[:rank], pads[rank:]), mode="constant", value=value)
    if mode == "edge":
        return _edge_pad(x, pads, rank)
    tail = _padded_tail(p)
    if tail == 0:
        return x
    # torch pads the last 1-3 dims of a tensor with one batch dim: fold the leading dims into one.
    shape = p.in_shapes[0]
    folded = x.reshape((prod(shape[:rank - tail]),) + shape[rank - tail:])
    y = F.pad(folded, _torch_pads(pads[rank - tail:rank], pads[2 * rank - tail:]), mode="reflect")
    return y.reshape(p.out_shape)


def _edge_pad(x: Tensor, pads: Sequence[int], rank: int) -> Tensor:
    """An edge pad as each padded axis's first and last slices, repeated, concatenated around it.
    Not F.pad's replicate mode: Inductor (torch 2.13) fails to compile it after a pixel-shuffle view
    (reshape, permute, reshape; what DepthToSpace fissions to) with "AssertionError: vr must not be
    None", and so did clamped indices; concatenation compiles (tests/backends/test_inductor.py)."""
    for axis in range(rank):
        begin, end = pads[axis], pads[rank + axis]
        if begin or end:
            first = x.narrow(axis, 0, 1).expand(*[begin if a == axis else -1 for a in range(rank)])
            last = x.narrow(axis, x.shape[axis] - 1, 1).expand(*[end if a == axis else -1 for a in range(rank)])
            x = torch.cat([first, x, last], axis)
    return x


@check("pad")
def _check_pad(p: Prim, graph: Graph, node: Node) -> str | None:
    if p.attrs["mode"] == "reflect" and _padded_tail(p) > MAX_TORCH_SPATIAL_DIMS:
        return (f"{p.attrs['mode']} pad spans the last {_padded_tail(p)} dims; "
                f"torch pads at most {MAX_TORCH_SPATIAL_DIMS} in that mode")
    return None


@lowering("gather")
def _gather(xs: Sequence[Tensor], p: Prim) -> Tensor:
    data, indices = xs
    axis = p.attrs["axis"]
    indices = indices.to(torch.int64)
    # np.take counts negative indices from the end. For constant indices freezing folds this away.
    indices = torch.where(indices < 0, indices + p.in_shapes[0][axis], indices)
    return torch.index_select(data, axis, indices.reshape(-1)).reshape(p.out_shape)


@check("gather")
def _check_gather(p: Prim, graph: Graph, node: Node) -> str | None:
    indices = graph.constants.get(node.inputs[1])
    dim = p.in_shapes[0][p.attrs["axis"]]
    if indices is not None and indices.size and (indices.min() < -dim or indices.max() >= dim):
        return f"constant indices out of range [{-dim}, {dim})"
    return None


# ---- linear -------------------------------------------------------------------------------

_CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
_CONV_TRANSPOSE = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}


@lowering("matmul")
def _matmul(xs: Sequence[Tensor], p: Prim) -> Tensor:
    return torch.matmul(xs[0], xs[1])


def attention(xs: Sequence[Tensor], p: Prim) -> Tensor:
    """softmax(q @ kt * scale [+ mask, or -inf where masked_out]) @ v as torch's fused attention (not
    a primitive: a chain of them that attention.find_attention matched). The fused CPU kernel takes
    4-D tensors: a 3-D chain gets a leading dim of 1 and loses it again. It also wants each operand's
    rows contiguous (else torch falls back to the unfused math): k is kt transposed, which has them
    where kt is itself a transposed view (an exported model's heads), and is copied where not (kt
    given as it is stored)."""
    q, kt, v = xs[:3]
    mask = xs[3] if len(xs) > 3 else None
    if mask is not None and p.attrs["masked_out"]:
        mask = torch.logical_not(mask)          # a bool mask given to torch says which scores are kept
    flat = q.dim() == 3
    if flat:
        q, kt, v = q.unsqueeze(0), kt.unsqueeze(0), v.unsqueeze(0)
    q, k, v = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, kt.transpose(-2, -1), v))
    y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=p.attrs["scale"])
    return y.squeeze(0) if flat else y


@lowering("conv")
def _conv(xs: Sequence[Tensor], p: Prim) -> Tensor:
    """Asymmetric pads: the symmetric part goes to the conv, the rest to an explicit zero pad first."""
    x, w = xs
    pads = p.attrs["pads"]
    nsp = len(pads) // 2
    symmetric = [min(pads[i], pads[nsp + i]) for i in range(nsp)]
    extra_begin = [pads[i] - symmetric[i] for i in range(nsp)]
    extra_end = [pads[nsp + i] - symmetric[i] for i in range(nsp)]
    if any(extra_begin) or any(extra_end):
        x = F.pad(x, _torch_pads(extra_begin, extra_end))
    return _CONV[nsp](x, w, None, p.attrs["strides"], symmetric, p.attrs["dilations"], p.attrs["group"])


@lowering("conv_transpose")
def _conv_transpose(xs: Sequence[Tensor], p: Prim) -> Tensor:
    """torch crops `padding` from both ends of the full output (length L; output_padding adds zeros past
    L). It gets the largest symmetric crop that removes no needed value; a pad with negative begins
    and ends of either sign does the rest, so torch's output_padding < stride rule never applies."""
    x, w = xs
    pads, out_pad = p.attrs["pads"], p.attrs["output_padding"]
    nsp = len(pads) // 2
    crop = [max(0, min(pads[i], pads[nsp + i] - out_pad[i])) for i in range(nsp)]
    y = _CONV_TRANSPOSE[nsp](x, w, None, p.attrs["strides"], crop, 0, p.attrs["group"], p.attrs["dilations"])
    begin = [crop[i] - pads[i] for i in range(nsp)]          # <= 0: crop the rest of the begin pad
    end = [out_pad[i] - pads[nsp + i] + crop[i] for i in range(nsp)]          # < 0 crops, > 0 adds zeros
    if any(begin) or any(end):
        y = F.pad(y, _torch_pads(begin, end))
    return y


@check("conv", "conv_transpose")
def _check_conv(p: Prim, graph: Graph, node: Node) -> str | None:
    nsp = len(p.in_shapes[0]) - 2
    if nsp > MAX_TORCH_SPATIAL_DIMS:
        return f"{nsp} spatial dims; torch convolves at most {MAX_TORCH_SPATIAL_DIMS}"
    if not p.in_dtypes[0].is_float:
        return f"{p.in_dtypes[0].value} input (torch convolution is float only)"
    return None
