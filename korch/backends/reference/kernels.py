"""What each primitive computes, in numpy: the living definition of the primitive set."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

Kernel = Callable[[Sequence[np.ndarray], Mapping[str, Any]], np.ndarray]


def _acc(x: np.ndarray) -> np.ndarray:
    """Accumulating primitives (matmul, conv, sums, means) compute float32 in float64 and round once
    (the caller casts back): the reference should be closer to exact than any backend it checks."""
    return x.astype(np.float64) if x.dtype == np.float32 else x
KERNELS: dict[str, Kernel] = {}


def _special() -> Any:
    """scipy.special, imported on first use: with scipy's array-API layer it is ~20 MB of resident
    memory, which a process that only runs a saved plan should not pay."""
    from scipy import special

    return special


def kernel(name: str) -> Callable[[Kernel], Kernel]:
    def register(fn: Kernel) -> Kernel:
        if name in KERNELS:
            raise RuntimeError(f"reference kernel {name!r} registered twice")
        KERNELS[name] = fn
        return fn
    return register


def _unary(name: str, fn: Callable[[np.ndarray], np.ndarray]) -> None:
    kernel(name)(lambda xs, attrs: fn(xs[0]))


def _binary(name: str, fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> None:
    kernel(name)(lambda xs, attrs: fn(xs[0], xs[1]))


# ---- elementwise --------------------------------------------------------------------------

_unary("neg", np.negative)
_unary("abs", np.abs)
_unary("exp", np.exp)
_unary("log", np.log)
_unary("sqrt", np.sqrt)
_unary("reciprocal", np.reciprocal)
_unary("tanh", np.tanh)
_unary("erf", lambda x: _special().erf(x))
_unary("relu", lambda x: np.maximum(x, np.zeros((), x.dtype)))
_unary("floor", np.floor)
_unary("ceil", np.ceil)
_unary("round", np.round)          # half to even, as ONNX Round
_unary("sign", np.sign)
_unary("sin", np.sin)
_unary("cos", np.cos)
_unary("not", np.logical_not)


@kernel("sigmoid")
def _sigmoid(xs: Sequence[np.ndarray], attrs: Mapping[str, Any]) -> np.ndarray:
    return _special().expit(xs[0])


@kernel("cast")
def _cast(xs: Sequence[np.ndarray], attrs: Mapping[str, Any]) -> np.ndarray:
    return xs[0].astype(attrs["to"].numpy)


def _divide(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if np.issubdtype(a.dtype, np.integer):
        return np.trunc(np.true_divide(a, b)).astype(a.dtype)   # C-style: rounds toward zero
    return np.divide(a, b)


_binary("add", np.add)
_binary("sub", np.subtract)
_binary("mul", np.multiply)
_binary("div", _divide)
_binary("pow", np.power)
_binary("max", np.maximum)
_binary("min", np.minimum)
_binary("greater", np.greater)
_binary("less", np.less)
_binary("equal", np.equal)
_binary("and", np.logical_and)
_binary("or", np.logical_or)


@kernel("where")
def _where(xs: Sequence[np.ndarray], attrs: Mapping[str, Any]) -> np.ndarray:
    return np.where(xs[0], xs[1], xs[2])


# ---- reduce and broadcast -----------------------------------------------------------------

def _reduce(name: str, fn: Callable[..., np.ndarray]) -> None:
    kernel(name)(lambda xs, attrs: fn(xs[0], axis=tuple(attrs["axes"]), keepdims=attrs["keepdims"]))


kernel("reduce_sum")(lambda xs, attrs: np.sum(_acc(xs[0]), axis=tuple(attrs["axes"]), keepdims=attrs["keepdims"]))
_reduce("reduce_max", np.max)
_reduce("reduce_min", np.min)
_reduce("reduce_prod", np.prod)


def _windows(x: np.ndarray, attrs: Mapping[str, Any]) -> np.ndarray:
    """View N x C x out... x k... of the windows (dilated, strided) over the spatial dims."""
    kernel_, strides, dilations = attrs["kernel"], attrs["strides"], attrs["dilations"]
    nsp = len(kernel_)
    spans = tuple(d * (k - 1) + 1 for k, d in zip(kernel_, dilations))
    view = sliding_window_view(x, spans, axis=tuple(range(2, 2 + nsp)))
    index = (slice(None), slice(None)) + tuple(slice(None, None, s) for s in strides)
    index += tuple(slice(None, None, d) for d in dilations)
    return view[index]


@kernel("window_max")
def _window_max(xs: Sequence[np.ndarray], attrs: Mapping[str, Any]) -> np.ndarray:
    w = _windows(xs[0], attrs)
    return w.max(axis=tuple(range(w.ndim - len(attrs["kernel"]), w.ndim)))


@kernel("window_mean")
def _window_mean(xs: Sequence[np.ndarray], attrs: Mapping[str, Any]) -> np.ndarray:
    w = _windows(_acc(xs[0]), attrs)
    return w.mean(axis=tuple(range(w.ndim - len(attrs["kernel"]), w.ndim)))


@kernel("expand")
def _expand(xs: Sequence[np.ndarray], attrs: Mapping[str, Any]) -> np.ndarray:
    return np.broadcast_to(xs[0], attrs["shape"])


# ---- layout -------------------------------------------------------------------------------

@kernel("transpose")
def _transpose(xs: Sequence[np.ndarray], attrs: Mapping[str, Any]) -> np.ndarray:
    return np.transpose(xs[0], attrs["perm"])


@kernel("reshape")
def _reshape(xs: Sequence[np.ndarray], attrs: Mapping[str, Any]) -> np.ndarray:
    if any(d < 0 for d in attrs["shape"]):
        return xs[0]            # a copy of a value of data-dependent shape: it keeps its own shape
    return np.reshape(xs[0], attrs["shape"])


@kernel("slice")
def _slice(xs: Sequence[np.ndarray], attrs: Mapping[str, Any]) -> np.ndarray:
    index = []
    for start, step, size in zip(attrs["starts"], attrs["steps"], attrs["sizes"]):
        stop = start + size * step
        index.append(slice(start, stop if stop >= 0 else None, step))
    return xs[0][tuple(index)]


@kernel("concat")
def _concat(xs: Sequence[np.ndarray], attrs: Mapping[str, Any]) -> np.ndarray:
    return np.concatenate(xs, axis=attrs["axis"])


@kernel("pad")
def _pad(xs: Sequence[np.ndarray], attrs: Mapping[str, Any]) -> np.ndarray:
    x, pads = xs[0], attrs["pads"]
    widths = list(zip(pads[: x.ndim], pads[x.ndim:]))
    if attrs["mode"] == "constant":
        return np.pad(x, widths, mode="constant", constant_values=np.array(attrs["value"], x.dtype))
    return np.pad(x, widths, mode=attrs["mode"])


@kernel("gather")
def _gather(xs: Sequence[np.ndarray], attrs: Mapping[str, Any]) -> np.ndarray:
    data, indices = xs
    axis = attrs["axis"]
    if indices.size and (indices.min() < -data.shape[axis] or indices.max() >= data.shape[axis]):
        raise IndexError(f"gather: index out of range [{-data.shape[axis]}, {data.shape[axis]})")
    return np.take(data, indices, axis=axis)


# ---- linear -------------------------------------------------------------------------------

@kernel("matmul")
def _matmul(xs: Sequence[np.ndarray], attrs: Mapping[str, Any]) -> np.ndarray:
    return np.matmul(_acc(xs[0]), _acc(xs[1]))


def _spatial_pad(x: np.ndarray, pads: Sequence[int]) -> np.ndarray:
    nsp = x.ndim - 2
    return np.pad(x, [(0, 0), (0, 0)] + list(zip(pads[:nsp], pads[nsp:])))


@kernel("conv")
def _conv(xs: Sequence[np.ndarray], attrs: Mapping[str, Any]) -> np.ndarray:
    """One product over channels per kernel offset, accumulated: the memory is the output and one
    strided slice of the input at a time. (One einsum over every window at once materialised the
    im2col matrix in float64: ~1 GB for candy's last 9x9 conv at 224x224, the 2.6 GB spike of its
    optimize.)"""
    x, w = _acc(xs[0]), _acc(xs[1])
    group, strides, dilations = attrs["group"], attrs["strides"], attrs["dilations"]
    nsp = x.ndim - 2
    x = _spatial_pad(x, attrs["pads"])
    n, c = x.shape[:2]
    m, kernel_ = w.shape[0], w.shape[2:]
    out_sp = tuple((x.shape[2 + i] - dilations[i] * (kernel_[i] - 1) - 1) // strides[i] + 1 for i in range(nsp))
    xg = x.reshape((n, group, c // group) + x.shape[2:])
    wg = w.reshape((group, m // group, c // group) + kernel_)
    out = np.zeros((n, group, m // group) + out_sp, dtype=np.result_type(x, w))
    whole = (slice(None),) * 3
    for k in np.ndindex(*kernel_):
        window = tuple(slice(k[i] * dilations[i], k[i] * dilations[i] + (out_sp[i] - 1) * strides[i] + 1, strides[i])
                       for i in range(nsp))
        # n g c [o...] x g m c -> n g m [o...]
        out += np.einsum("ngc...,gmc->ngm...", xg[whole + window], wg[whole + k], optimize=True)
    return out.reshape((n, m) + out_sp)


@kernel("conv_transpose")
def _conv_transpose(xs: Sequence[np.ndarray], attrs: Mapping[str, Any]) -> np.ndarray:
    """Scatter form: every input pixel adds its kernel-weighted contribution to the output."""
    x, w = _acc(xs[0]), _acc(xs[1])
    group, strides, dilations, pads = attrs["group"], attrs["strides"], attrs["dilations"], attrs["pads"]
    nsp = x.ndim - 2
    n, c = x.shape[:2]
    cg, mg = c // group, w.shape[1]
    kernel_ = w.shape[2:]
    full = tuple((x.shape[2 + i] - 1) * strides[i] + dilations[i] * (kernel_[i] - 1) + 1 + attrs["output_padding"][i]
                 for i in range(nsp))
    out = np.zeros((n, group, mg) + full, dtype=x.dtype)
    xg = x.reshape((n, group, cg) + x.shape[2:])
    wg = w.reshape((group, cg, mg) + kernel_)
    for k in np.ndindex(*kernel_):
        contrib = np.einsum("ngc...,gcm->ngm...", xg, wg[(slice(None), slice(None), slice(None)) + k])
        index = tuple(slice(k[i] * dilations[i], k[i] * dilations[i] + (x.shape[2 + i] - 1) * strides[i] + 1, strides[i])
                      for i in range(nsp))
        out[(slice(None), slice(None), slice(None)) + index] += contrib
    crop = tuple(slice(pads[i], full[i] - pads[nsp + i]) for i in range(nsp))
    out = out[(slice(None), slice(None), slice(None)) + crop]
    return np.ascontiguousarray(out.reshape((n, group * mg) + out.shape[3:]))
