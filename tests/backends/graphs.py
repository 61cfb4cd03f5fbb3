"""Small primitive graphs every backend's tests compile: a matmul + GELU block, a conv + bias + relu, a pixel
shuffle with an edge pad."""

from __future__ import annotations

import numpy as np

from korch.ir.check import check_graph
from korch.ir.graph import Graph, GraphBuilder
from korch.ir.types import DType, TensorType

F32 = np.float32


def mlp_gelu(rng: np.random.Generator, preactivation_output: bool = False) -> Graph:
    """matmul with a constant weight, bias add, erf GELU: 0.5 * h * (1 + erf(h / sqrt 2)); optionally
    the pre-activation h as a second output."""
    b = GraphBuilder("mlp_gelu")
    x = b.add_input("x", TensorType((8, 32), DType.FLOAT32))
    h = b.emit("add", [b.emit("matmul", [x, b.add_constant(rng.standard_normal((32, 64)).astype(F32))]),
                       b.add_constant(rng.standard_normal(64).astype(F32))])
    erf = b.emit("erf", [b.emit("mul", [h, b.add_constant(np.array(1 / np.sqrt(2), F32))])])
    one_plus = b.emit("add", [erf, b.add_constant(np.array(1.0, F32))])
    y = b.emit("mul", [b.emit("mul", [h, one_plus]), b.add_constant(np.array(0.5, F32))])
    return check_graph(b.build([("y", y), ("h", h)] if preactivation_output else [("y", y)]))


def conv_bias_relu(rng: np.random.Generator) -> Graph:
    b = GraphBuilder("conv_bias_relu")
    x = b.add_input("x", TensorType((1, 3, 16, 16), DType.FLOAT32))
    w = b.add_constant(rng.standard_normal((8, 3, 3, 3)).astype(F32))
    conv = b.emit("conv", [x, w], {"strides": (1, 1), "pads": (1, 1, 1, 1), "dilations": (1, 1), "group": 1})
    y = b.emit("relu", [b.emit("add", [conv, b.add_constant(rng.standard_normal((1, 8, 1, 1)).astype(F32))])])
    return check_graph(b.build([("y", y)]))


def shuffle_edge_pad(rng: np.random.Generator) -> Graph:
    """A pixel shuffle (DepthToSpace's reshape, transpose, reshape), cropped, relu, then an edge pad
    and a 2x2 conv: the decoder of a sub-pixel rewrite (korch/frontend/rewrites.py), where Inductor's
    own replicate pad fails to compile."""
    b = GraphBuilder("shuffle_edge_pad")
    x = b.add_input("x", TensorType((1, 32, 9, 9), DType.FLOAT32))
    y = b.emit("reshape", [x], {"shape": (1, 2, 2, 8, 9, 9)})
    y = b.emit("transpose", [y], {"perm": (0, 3, 4, 1, 5, 2)})
    y = b.emit("reshape", [y], {"shape": (1, 8, 18, 18)})
    y = b.emit("slice", [y], {"starts": (0, 0, 1, 1), "steps": (1, 1, 1, 1), "sizes": (1, 8, 16, 16)})
    y = b.emit("relu", [y])
    y = b.emit("pad", [y], {"pads": (0, 0, 1, 2, 0, 0, 1, 1), "mode": "edge", "value": 0.0})
    w = b.add_constant(rng.standard_normal((4, 8, 2, 2)).astype(F32))
    conv = b.emit("conv", [y, w], {"strides": (1, 1), "pads": (0, 0, 0, 0), "dilations": (1, 1), "group": 1})
    return check_graph(b.build([("y", conv)]))
