"""What a cost model sees of a candidate kernel: a fixed vector of numbers computed from its primitives.

Everything here comes from the primitive graph alone (shapes, ops, constants' sizes), so a
candidate's features are a function of its structural key and are stored once per key in the profile
database, beside the model(s) it was seen in. Change FEATURE_NAMES or how one is computed, and bump
FEATURES_VERSION: stored vectors of another version are not read.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from korch.candidates import Candidate
from korch.ir.graph import Graph, Node
from korch.ir.ops import PrimClass

FEATURES_VERSION = 4

# A copy moves whole vectors only in contiguous runs of at least this many elements (16 fp32 = one
# 64-byte cache line and one AVX-512 register); shorter runs cost per element, not per byte.
SHORT_RUN = 16

# Ops counted one by one: those whose speed differs most from others of their class.
_COUNTED_OPS = ("conv", "conv_transpose", "matmul", "transpose", "reshape", "slice", "concat", "pad", "gather",
                "expand", "reduce_sum", "reduce_max", "window_max", "window_mean", "cast", "where")
# Unary maps that cost a polynomial or a table, not one instruction.
_TRANSCENDENTAL = frozenset(("exp", "log", "tanh", "sigmoid", "erf", "sin", "cos", "pow", "sqrt", "reciprocal", "div"))

FEATURE_NAMES: tuple[str, ...] = (
    "nodes", *(f"class_{k.value}" for k in PrimClass), *(f"op_{op}" for op in _COUNTED_OPS), "transcendental",
    "flops", "linear_flops", "elementwise_flops",
    "bytes_in", "bytes_weights", "bytes_out", "bytes_internal", "largest_tensor_bytes",
    "inputs", "outputs", "max_reduction", "max_linear_k", "max_output_elements", "region", "onnx_nodes",
    # how engines pick a convolution's or matmul's algorithm: depthwise, kernel window, stride, shapes
    "conv_depthwise", "max_group", "max_kernel_elements", "max_stride", "max_linear_m", "max_linear_n",
    # vectorisation: a small innermost dimension wastes vector lanes; rank adds index arithmetic
    "min_inner_dim", "max_rank",
    # 3: elements layout ops move in contiguous runs shorter than SHORT_RUN (transposes of the innermost
    # axis, strided slices, concats of narrow rows); linear flops with each output channel count (a
    # conv's output channels, a matmul's n) rounded up to a multiple of 8 and of 16 fp32 lanes, which
    # is what an engine vectorising over output channels (oneDNN's blocked layouts) computes
    "short_run_elements", "linear_flops_lanes8", "linear_flops_lanes16",
    # 4: the bytes each primitive reads and writes, summed apart for the linear ones (convolutions and
    # matmuls: activations, weights, output) and for the rest (a reshape is a view and moves nothing).
    # An engine that runs primitives one by one pays each its own roofline, so a kernel of a conv and
    # a relu costs the conv's arithmetic plus the relu's traffic, not the larger of the two summed.
    "linear_node_bytes", "other_node_bytes",
)
FEATURE_INDEX = {name: k for k, name in enumerate(FEATURE_NAMES)}


@dataclass(frozen=True)
class Features:
    """One candidate's feature vector, in FEATURE_NAMES order."""

    values: tuple[float, ...]

    def __post_init__(self) -> None:
        if len(self.values) != len(FEATURE_NAMES):
            raise ValueError(f"a feature vector has {len(FEATURE_NAMES)} entries, got {len(self.values)}")

    def __getitem__(self, name: str) -> float:
        return self.values[FEATURE_INDEX[name]]

    def as_dict(self) -> dict[str, float]:
        return dict(zip(FEATURE_NAMES, self.values))


def _bytes(graph: Graph, value: str) -> int:
    t = graph.types[value]
    return t.nbytes if t.is_static else 0


def _elements(graph: Graph, value: str) -> int:
    t = graph.types[value]
    return t.size if t.is_static else 0


def _linear(graph: Graph, node: Node) -> tuple[float, int]:
    """(flops, reduction length) of a matmul or convolution: two per multiply-add."""
    out = _elements(graph, node.output)
    w = graph.types[node.inputs[1]].shape
    if node.op == "matmul":
        k = graph.types[node.inputs[0]].shape[-1]
        return 2.0 * out * k, int(k)
    k = int(math.prod(w[1:]))                      # conv: weight M x C/group x kernel, per output element
    if node.op == "conv_transpose":                # weight C x M/group x kernel, per input element
        return 2.0 * _elements(graph, node.inputs[0]) * k, int(w[0] // max(1, node.attrs["group"]) * math.prod(w[2:]))
    return 2.0 * out * k, k


def _linear_shape(graph: Graph, node: Node, counts: dict[str, float]) -> None:
    out = graph.types[node.output].shape
    if node.op == "matmul":
        counts["max_linear_m"] = max(counts["max_linear_m"], out[-2] if len(out) > 1 else 1)
        counts["max_linear_n"] = max(counts["max_linear_n"], out[-1])
        return
    w = graph.types[node.inputs[1]].shape
    group = node.attrs["group"]
    channels = graph.types[node.inputs[0]].shape[1]
    counts["conv_depthwise"] += 1 if group > 1 and group == channels else 0
    counts["max_group"] = max(counts["max_group"], group)
    counts["max_kernel_elements"] = max(counts["max_kernel_elements"], math.prod(w[2:]))
    counts["max_stride"] = max(counts["max_stride"], max(node.attrs["strides"], default=1))
    counts["max_linear_m"] = max(counts["max_linear_m"], math.prod(out[2:]))      # output pixels
    counts["max_linear_n"] = max(counts["max_linear_n"], out[1])                    # output channels


def contiguous_run(graph: Graph, node: Node) -> int:
    """The length of the contiguous runs, in elements, that a layout op copies (its output's size if it
    copies all at once; 0 for a reshape, a view that copies nothing)."""
    out = graph.types[node.output].shape
    if node.op == "reshape":
        return 0
    if node.op == "transpose":
        shape, perm = graph.types[node.inputs[0]].shape, node.attrs["perm"]
        run, axis = 1, len(perm) - 1
        while axis >= 0 and perm[axis] == axis:          # trailing axes left in place stay contiguous
            run *= shape[axis]
            axis -= 1
        return run
    if node.op == "slice":
        shape, steps = graph.types[node.inputs[0]].shape, node.attrs["steps"]
        run, axis = 1, len(shape) - 1
        while axis >= 0 and steps[axis] == 1:
            run *= out[axis]
            if out[axis] != shape[axis]:                 # a partial axis ends the run
                break
            axis -= 1
        return run
    if node.op == "concat":
        return min(math.prod(graph.types[v].shape[node.attrs["axis"]:]) for v in node.inputs)
    if node.op == "pad":
        return graph.types[node.inputs[0]].shape[-1] if out else 1
    if node.op == "gather":
        return math.prod(out[node.attrs["axis"] + len(graph.types[node.inputs[1]].shape):])
    return math.prod(out)


def _lane_padded(flops: float, channels: int, lanes: int) -> float:
    return flops * (-(-channels // lanes) * lanes) / max(1, channels)


def candidate_features(graph: Graph, candidate: Candidate) -> Features:
    counts = dict.fromkeys(FEATURE_NAMES, 0.0)
    outputs = set(candidate.outputs)
    weights: set[str] = set()
    largest = 0
    for i in candidate.nodes:
        node = graph.nodes[i]
        counts[f"class_{node.klass.value}"] += 1
        if node.op in _COUNTED_OPS:
            counts[f"op_{node.op}"] += 1
        if node.op in _TRANSCENDENTAL:
            counts["transcendental"] += 1
        out_elements = _elements(graph, node.output)
        counts["max_output_elements"] = max(counts["max_output_elements"], out_elements)
        largest = max(largest, _bytes(graph, node.output))
        weights.update(v for v in node.inputs if v in graph.constants)
        out_shape = graph.types[node.output].shape
        if out_shape:
            inner = out_shape[-1]
            counts["min_inner_dim"] = inner if counts["min_inner_dim"] == 0 else min(counts["min_inner_dim"], inner)
        counts["max_rank"] = max(counts["max_rank"], len(out_shape))
        if node.op != "reshape":
            moved = sum(_bytes(graph, v) for v in set(node.inputs)) + _bytes(graph, node.output)
            counts["linear_node_bytes" if node.klass is PrimClass.LINEAR else "other_node_bytes"] += moved
        if node.klass is PrimClass.LINEAR:
            flops, k = _linear(graph, node)
            counts["linear_flops"] += flops
            counts["max_linear_k"] = max(counts["max_linear_k"], k)
            _linear_shape(graph, node, counts)
            channels = out_shape[-1] if node.op == "matmul" else out_shape[1]
            counts["linear_flops_lanes8"] += _lane_padded(flops, channels, 8)
            counts["linear_flops_lanes16"] += _lane_padded(flops, channels, 16)
        elif node.klass is PrimClass.LAYOUT:
            if 0 < contiguous_run(graph, node) < SHORT_RUN:
                counts["short_run_elements"] += out_elements
        elif node.klass is PrimClass.ELEMENTWISE:
            counts["elementwise_flops"] += out_elements
        elif node.klass is PrimClass.REDUCE and node.op != "expand":
            n_in = _elements(graph, node.inputs[0])
            counts["elementwise_flops"] += n_in
            counts["max_reduction"] = max(counts["max_reduction"], n_in // max(1, out_elements))
        if node.output not in outputs:
            counts["bytes_internal"] += _bytes(graph, node.output)
    counts["nodes"] = candidate.size
    counts["flops"] = counts["linear_flops"] + counts["elementwise_flops"]
    counts["bytes_in"] = sum(_bytes(graph, v) for v in candidate.inputs)
    counts["bytes_weights"] = sum(_bytes(graph, v) for v in weights)
    counts["bytes_out"] = sum(_bytes(graph, v) for v in candidate.outputs)
    counts["largest_tensor_bytes"] = max(largest, *(_bytes(graph, v) for v in candidate.inputs), 0)
    counts["inputs"] = len(candidate.inputs)
    counts["outputs"] = len(candidate.outputs)
    counts["region"] = 1.0 if candidate.onnx_nodes else 0.0
    counts["onnx_nodes"] = len(candidate.onnx_nodes)
    return Features(tuple(float(counts[name]) for name in FEATURE_NAMES))


def features_by_key(graph: Graph, candidates: Sequence[Candidate]) -> Mapping[str, Features]:
    """One vector per unique key (identical keys have identical features)."""
    out: dict[str, Features] = {}
    for c in candidates:
        if c.key not in out:
            out[c.key] = candidate_features(graph, c)
    return out
