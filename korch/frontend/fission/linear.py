"""Fission rules: the linear ONNX ops (Conv, ConvTranspose, MatMul, Gemm, Einsum) onto matmul and conv."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from korch.frontend.fission import FissionContext, FissionError, OnnxNode, fission
from korch.ir.graph import Value

AUTO_PADS = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")


# ---- convolution ----------------------------------------------------------------------------

def explicit_pads(node: OnnxNode, nsp: int) -> tuple[int, ...]:
    """The `pads` attribute (begins then ends, default zeros), checked: 2 * nsp non-negative ints."""
    pads = tuple(int(p) for p in node.attr("pads", [0] * 2 * nsp))
    if len(pads) != 2 * nsp or min(pads) < 0:
        raise FissionError(f"{node.op_type} pads {list(pads)} are not {2 * nsp} non-negative ints")
    return pads


@dataclass(frozen=True)
class ConvGeometry:
    """The spatial attributes of a Conv/ConvTranspose node, defaults filled in and checked."""

    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    auto_pad: str
    pads: tuple[int, ...] | None      # None: derived from auto_pad


def _conv_geometry(node: OnnxNode, w: Value) -> ConvGeometry:
    nsp = w.rank - 2
    if nsp < 1:
        raise FissionError(f"{node.op_type} weight of rank {w.rank} has no spatial dims")
    kernel = tuple(int(k) for k in node.attr("kernel_shape", w.shape[2:]))
    if kernel != w.shape[2:]:
        raise FissionError(f"{node.op_type} kernel_shape {list(kernel)} differs from the weight's {list(w.shape[2:])}")
    strides = tuple(int(s) for s in node.attr("strides", [1] * nsp))
    dilations = tuple(int(d) for d in node.attr("dilations", [1] * nsp))
    if len(strides) != nsp or len(dilations) != nsp or min(strides + dilations) < 1:
        raise FissionError(f"{node.op_type} strides {list(strides)} / dilations {list(dilations)} "
                           f"are not {nsp} positive ints")
    auto_pad = node.attr("auto_pad", "NOTSET")
    if auto_pad not in AUTO_PADS:
        raise FissionError(f"{node.op_type} auto_pad {auto_pad!r} is not one of {', '.join(AUTO_PADS)}")
    pads = None
    if auto_pad == "NOTSET":
        pads = explicit_pads(node, nsp)
    elif auto_pad == "VALID":
        pads = (0,) * 2 * nsp
    return ConvGeometry(kernel, strides, dilations, auto_pad, pads)


def split_same_padding(total: Sequence[int], auto_pad: str) -> tuple[int, ...]:
    """ONNX SAME_* padding: split each total in two, the odd element at the end (UPPER) or begin (LOWER)."""
    small = [t // 2 for t in total]
    big = [t - t // 2 for t in total]
    return tuple(small + big) if auto_pad == "SAME_UPPER" else tuple(big + small)


def same_conv_pads(in_sizes: Sequence[int], g: ConvGeometry) -> tuple[int, ...]:
    """Pads that make the output size ceil(in / stride), as ONNX auto_pad=SAME_* defines them."""
    total = []
    for size, k, s, d in zip(in_sizes, g.kernel, g.strides, g.dilations):
        out = -(-size // s)
        total.append(max(0, (out - 1) * s + d * (k - 1) + 1 - size))
    return split_same_padding(total, g.auto_pad)


def _add_channel_bias(ctx: FissionContext, y: Value, bias: Value | None) -> Value:
    """y + bias broadcast over N and the spatial dims (bias reshaped to C x 1 x ... x 1)."""
    if bias is None:
        return y
    if bias.shape != (y.shape[1],):
        raise FissionError(f"bias of shape {bias.shape} does not match {y.shape[1]} output channels")
    return ctx.emit("add", y, ctx.reshape(bias, (y.shape[1],) + (1,) * (y.rank - 2)))


@fission("Conv")
def conv(ctx: FissionContext, node: OnnxNode) -> list[Value]:
    """conv(x, w) with explicit pads (auto_pad resolved here), then `add` of the bias as C x 1 x ... x 1."""
    x, w = node.inputs[0], node.inputs[1]
    g = _conv_geometry(node, w)
    pads = g.pads if g.pads is not None else same_conv_pads(x.shape[2:], g)
    y = ctx.emit("conv", x, w, strides=g.strides, pads=pads, dilations=g.dilations, group=int(node.attr("group", 1)))
    return [_add_channel_bias(ctx, y, node.input(2))]


def _conv_transpose_pads(node: OnnxNode, x: Value, g: ConvGeometry, output_padding: tuple[int, ...]) -> tuple[int, ...]:
    """The pads of a ConvTranspose, derived from output_shape or auto_pad=SAME_* per the ONNX spec.

    The full (uncropped) output of dim i is (in - 1) * stride + d * (k - 1) + 1 + output_padding; a
    target size T gives total padding full - T, split with the odd element at the end for SAME_UPPER
    and at the begin otherwise. SAME_* targets in * stride, and like onnxruntime and ONNX shape
    inference clamps a negative total to 0 (stride > kernel span: the output is then the full size).
    """
    in_sizes = x.shape[2:]
    nsp = len(in_sizes)
    full = [(size - 1) * s + d * (k - 1) + 1 + op
            for size, s, d, k, op in zip(in_sizes, g.strides, g.dilations, g.kernel, output_padding)]
    output_shape = node.attr("output_shape", None)
    if output_shape is not None:
        if len(output_shape) not in (nsp, nsp + 2):
            raise FissionError(f"ConvTranspose output_shape {list(output_shape)} needs {nsp} spatial dims")
        target = [int(d) for d in output_shape][-nsp:]
        total = [f - t for f, t in zip(full, target)]
        if min(total) < 0:
            raise FissionError(f"ConvTranspose output_shape {target} is larger than the full output {full}")
    elif g.auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        total = [max(0, f - size * s) for f, size, s in zip(full, in_sizes, g.strides)]
    else:
        return g.pads
    return split_same_padding(total, "SAME_UPPER" if g.auto_pad == "SAME_UPPER" else "SAME_LOWER")


@fission("ConvTranspose")
def conv_transpose(ctx: FissionContext, node: OnnxNode) -> list[Value]:
    """conv_transpose(x, w) with explicit pads (from output_shape/auto_pad), then `add` of the bias."""
    x, w = node.inputs[0], node.inputs[1]
    g = _conv_geometry(node, w)
    nsp = w.rank - 2
    output_padding = tuple(int(p) for p in node.attr("output_padding", [0] * nsp))
    if len(output_padding) != nsp or min(output_padding) < 0:
        raise FissionError(f"ConvTranspose output_padding {list(output_padding)} is not {nsp} non-negative ints")
    pads = _conv_transpose_pads(node, x, g, output_padding)
    y = ctx.emit("conv_transpose", x, w, strides=g.strides, pads=pads, dilations=g.dilations,
                 group=int(node.attr("group", 1)), output_padding=output_padding)
    return [_add_channel_bias(ctx, y, node.input(2))]


# ---- matrix products ------------------------------------------------------------------------

@fission("MatMul")
def matmul(ctx: FissionContext, node: OnnxNode) -> list[Value]:
    """numpy.matmul: a 1-D operand is reshaped to a row (a) or column (b) matrix and the unit dim dropped after."""
    a, b = node.inputs
    if a.rank == 0 or b.rank == 0:
        raise FissionError("MatMul of a 0-d operand")
    a2 = ctx.reshape(a, (1,) + a.shape) if a.rank == 1 else a
    b2 = ctx.reshape(b, b.shape + (1,)) if b.rank == 1 else b
    y = ctx.emit("matmul", a2, b2)
    shape = y.shape
    if b.rank == 1:
        shape = shape[:-1]
    if a.rank == 1:
        shape = shape[:-2] + shape[-1:] if b.rank > 1 else shape[:-1]
    return [ctx.reshape(y, shape)]


@fission("Gemm")
def gemm(ctx: FissionContext, node: OnnxNode) -> list[Value]:
    """alpha * A' @ B' + beta * C: transpose, matmul, mul (skipped when alpha is 1 or folded into a constant
    operand), add of beta * C (C dropped when absent or beta is 0)."""
    a, b, c = node.inputs[0], node.inputs[1], node.input(2)
    if a.rank != 2 or b.rank != 2:
        raise FissionError(f"Gemm needs 2-D A and B, got {a.shape} and {b.shape}")
    alpha, beta = float(node.attr("alpha", 1.0)), float(node.attr("beta", 1.0))
    a = ctx.transpose(a, (1, 0)) if node.attr("transA", 0) else a
    b = ctx.transpose(b, (1, 0)) if node.attr("transB", 0) else b
    if alpha != 1.0 and ctx.constant_value(b) is not None:
        b, alpha = _scale(ctx, b, alpha), 1.0
    elif alpha != 1.0 and ctx.constant_value(a) is not None:
        a, alpha = _scale(ctx, a, alpha), 1.0
    y = ctx.emit("matmul", a, b)
    if alpha != 1.0:
        y = _scale(ctx, y, alpha)
    if c is not None and beta != 0.0:
        if c.rank > 2:
            raise FissionError(f"Gemm C of shape {c.shape} does not broadcast to {y.shape}")
        y = ctx.emit("add", y, _scale(ctx, c, beta) if beta != 1.0 else c)
    return [y]


def _scale(ctx: FissionContext, x: Value, factor: float) -> Value:
    if not x.dtype.is_float and factor != int(factor):
        raise FissionError(f"Gemm scale {factor} on an integer tensor")
    return ctx.emit("mul", x, ctx.scalar(factor, x.dtype))


# ---- Einsum ---------------------------------------------------------------------------------

def parse_einsum(equation: str, ranks: Sequence[int]) -> tuple[list[str], str]:
    """Operand index strings and the output's (implicit output: indices seen once, sorted)."""
    equation = equation.replace(" ", "")
    if "." in equation:
        raise FissionError(f"Einsum equation {equation!r}: ellipsis is not supported")
    lhs, arrow, out = equation.partition("->")
    terms = lhs.split(",")
    if not arrow:
        letters = "".join(terms)
        out = "".join(sorted(ch for ch in set(letters) if letters.count(ch) == 1))
    if len(terms) != len(ranks) or any(len(t) != r for t, r in zip(terms, ranks)):
        raise FissionError(f"Einsum equation {equation!r} does not match operand ranks {list(ranks)}")
    for term in terms + [out]:
        if not all(ch.isalpha() for ch in term):
            raise FissionError(f"Einsum equation {equation!r}: term {term!r} has a character that is not a letter")
        if len(set(term)) != len(term):
            raise FissionError(f"Einsum equation {equation!r}: term {term!r} repeats an index "
                               "(diagonals are not supported)")
    if set(out) - set("".join(terms)):
        raise FissionError(f"Einsum equation {equation!r}: output indices missing from the operands")
    return terms, out


def _sum_out(ctx: FissionContext, x: Value, term: str, keep: str) -> tuple[Value, str]:
    """reduce_sum over the indices of `term` not in `keep`."""
    axes = tuple(i for i, ch in enumerate(term) if ch not in keep)
    if not axes:
        return x, term
    return ctx.emit("reduce_sum", x, axes=axes, keepdims=False), "".join(ch for ch in term if ch in keep)


def _arrange(ctx: FissionContext, x: Value, term: str, order: str, shape: Sequence[int]) -> Value:
    """Transpose x (indexed by `term`) to index order `order`, then reshape to `shape`."""
    return ctx.reshape(ctx.transpose(x, [term.index(ch) for ch in order]), shape)


def _broadcast_to_output(ctx: FissionContext, x: Value, term: str, out: str) -> Value:
    """x laid out in the output's index order, with unit dims for the output indices it lacks
    (leading ones left to broadcasting)."""
    present = [ch for ch in out if ch in term]
    if not present:
        return x
    x = ctx.transpose(x, [term.index(ch) for ch in present])
    shape = tuple(x.shape[present.index(ch)] if ch in term else 1 for ch in out[out.index(present[0]):])
    return ctx.reshape(x, shape)


@dataclass(frozen=True)
class MatmulPlan:
    """A two-operand Einsum as one matmul: each operand's index order and matrix shape, and the
    index order of the matmul's result (batch, left free, right free)."""

    left_term: str
    left_order: str
    left_shape: tuple[int, ...]
    right_term: str
    right_order: str
    right_shape: tuple[int, ...]
    natural: str
    cost: int          # transposes and reshapes it needs


def _plan_matmul(tl: str, tr: str, out: str, sizes: dict[str, int], contract: str) -> MatmulPlan:
    """The layout with `tl` as the left operand and the contracted indices in the order `contract`."""
    batch = "".join(ch for ch in out if ch in tl and ch in tr)
    free_l = "".join(ch for ch in out if ch in tl and ch not in tr)
    free_r = "".join(ch for ch in out if ch in tr and ch not in tl)

    def dims(indices: str) -> tuple[int, ...]:
        return tuple(sizes[ch] for ch in indices)

    def size(indices: str) -> int:
        return int(np.prod(dims(indices), dtype=np.int64))

    k, n = size(contract), size(free_r)
    if not batch and free_l:
        # No shared batch: the left operand's leading free dims act as matmul batch dims against a 2-D right.
        left_shape, right_shape = dims(free_l) + (k,), (k, n)
        result = dims(free_l) + (n,)
    else:
        left_shape, right_shape = dims(batch) + (size(free_l), k), dims(batch) + (k, n)
        result = dims(batch) + (size(free_l), n)
    natural = batch + free_l + free_r
    left_order, right_order = batch + free_l + contract, batch + contract + free_r
    cost = sum((left_order != tl, left_shape != dims(tl), right_order != tr, right_shape != dims(tr),
                result != dims(natural), natural != out))
    return MatmulPlan(tl, left_order, left_shape, tr, right_order, right_shape, natural, cost)


@fission("Einsum")
def einsum(ctx: FissionContext, node: OnnxNode) -> list[Value]:
    """Matmul-like Einsum: reduce_sum of indices private to one operand, then transpose + reshape each
    operand to batch x M x K and batch x K x N, one batched matmul, reshape + transpose to the output.
    With nothing to contract it is a broadcast `mul` instead; one operand is reduce_sum + transpose."""
    operands = [v for v in node.inputs if v is not None]
    terms, out = parse_einsum(node.attr("equation"), [v.rank for v in operands])
    sizes: dict[str, int] = {}
    for v, term in zip(operands, terms):
        for ch, d in zip(term, v.shape):
            if sizes.setdefault(ch, d) != d:
                raise FissionError(f"Einsum index {ch!r} has sizes {sizes[ch]} and {d} (broadcasting is not supported)")
    if len(operands) == 1:
        x, term = _sum_out(ctx, operands[0], terms[0], out)
        return [ctx.transpose(x, [term.index(ch) for ch in out])]
    if len(operands) != 2:
        raise FissionError(f"Einsum with {len(operands)} operands is not supported (only 1 or 2)")
    a, ta = _sum_out(ctx, operands[0], terms[0], out + terms[1])
    b, tb = _sum_out(ctx, operands[1], terms[1], out + terms[0])
    contract = "".join(ch for ch in ta if ch in tb and ch not in out)
    if not contract:
        return [ctx.emit("mul", _broadcast_to_output(ctx, a, ta, out), _broadcast_to_output(ctx, b, tb, out))]
    # Either operand may go left, and the contracted indices may follow either operand's order: take
    # the layout needing the fewest transposes and reshapes.
    orders = {contract, "".join(ch for ch in tb if ch in contract)}
    plan = min((_plan_matmul(tl, tr, out, sizes, order) for tl, tr in ((ta, tb), (tb, ta)) for order in sorted(orders)),
               key=lambda p: p.cost)
    left, right = (a, b) if plan.left_term == ta else (b, a)
    left = _arrange(ctx, left, plan.left_term, plan.left_order, plan.left_shape)
    right = _arrange(ctx, right, plan.right_term, plan.right_order, plan.right_shape)
    y = ctx.reshape(ctx.emit("matmul", left, right), [sizes[ch] for ch in plan.natural])
    return [ctx.transpose(y, [plan.natural.index(ch) for ch in out])]
