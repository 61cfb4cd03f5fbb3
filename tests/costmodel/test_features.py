"""Candidate features: counted by hand on small graphs; a function of the structural key."""

from __future__ import annotations

import numpy as np

from korch.candidates import Candidate, enumerate_candidates
from korch.candidates.candidate import boundary
from korch.candidates.enumerate import CandidateLimits
from korch.candidates.key import structural_key
from korch.costmodel import FEATURE_NAMES, candidate_features, features_by_key
from korch.ir.check import check_graph
from korch.ir.graph import Graph, GraphBuilder
from korch.ir.types import DType, TensorType
from tests.backends.graphs import conv_bias_relu, mlp_gelu


def candidate(graph: Graph, nodes: tuple[int, ...]) -> Candidate:
    inputs, outputs = boundary(graph, nodes)
    return Candidate(nodes, inputs, outputs, structural_key(graph, [graph.nodes[i] for i in nodes], inputs, outputs))


def test_conv_bias_relu_counted_by_hand() -> None:
    graph = conv_bias_relu(np.random.default_rng(0))           # x 1x3x16x16, w 8x3x3x3, pads 1 -> 1x8x16x16
    f = candidate_features(graph, candidate(graph, (0, 1, 2)))
    out = 8 * 16 * 16
    assert f["nodes"] == 3 and f["class_linear"] == 1 and f["class_elementwise"] == 2 and f["op_conv"] == 1
    assert f["linear_flops"] == 2 * out * 3 * 3 * 3 and f["max_linear_k"] == 27
    assert f["elementwise_flops"] == 2 * out and f["flops"] == f["linear_flops"] + 2 * out
    assert f["bytes_in"] == 3 * 16 * 16 * 4 and f["bytes_out"] == out * 4
    assert f["bytes_weights"] == (8 * 27 + 8) * 4                # weight and bias
    assert f["bytes_internal"] == 2 * out * 4                    # conv and add outputs stay inside
    # each primitive's reads and writes: the conv's input, weight and output; the add's and the relu's
    assert f["linear_node_bytes"] == (3 * 16 * 16 + 8 * 27 + out) * 4
    assert f["other_node_bytes"] == (out + 8 + out) * 4 + (out + out) * 4
    assert f["inputs"] == 1 and f["outputs"] == 1 and f["region"] == 0
    alone = candidate_features(graph, candidate(graph, (0,)))
    assert alone["bytes_internal"] == 0 and alone["bytes_out"] == out * 4 and alone["nodes"] == 1


def test_matmul_and_reduction_sizes() -> None:
    b = GraphBuilder("mm_reduce")
    x = b.add_input("x", TensorType((4, 6, 32), DType.FLOAT32))
    y = b.add_input("y", TensorType((4, 32, 10), DType.FLOAT32))
    mm = b.emit("matmul", [x, y])                                # 4x6x10, k = 32
    s = b.emit("reduce_sum", [mm], {"axes": (2,), "keepdims": False})
    graph = check_graph(b.build([("s", s)]))
    f = candidate_features(graph, candidate(graph, (0, 1)))
    assert f["linear_flops"] == 2 * 4 * 6 * 10 * 32 and f["max_linear_k"] == 32
    assert f["max_reduction"] == 10 and f["op_reduce_sum"] == 1 and f["op_matmul"] == 1
    assert f["bytes_in"] == (4 * 6 * 32 + 4 * 32 * 10) * 4 and f["bytes_weights"] == 0


def test_features_follow_the_key_and_name_every_entry() -> None:
    graph = mlp_gelu(np.random.default_rng(1))
    cands = enumerate_candidates(graph, CandidateLimits())
    by_key = features_by_key(graph, cands)
    assert set(by_key) == {c.key for c in cands}
    for c in cands:
        assert candidate_features(graph, c) == by_key[c.key]
        assert len(by_key[c.key].values) == len(FEATURE_NAMES)
    erf = next(c for c in cands if c.size == 1 and graph.nodes[c.nodes[0]].op == "erf")
    assert by_key[erf.key]["transcendental"] == 1


def test_convolution_shape_features() -> None:
    b = GraphBuilder("depthwise")
    x = b.add_input("x", TensorType((1, 8, 10, 10), DType.FLOAT32))
    w = b.add_constant(np.random.default_rng(2).standard_normal((8, 1, 5, 5)).astype(np.float32))
    y = b.emit("conv", [x, w], {"strides": (2, 2), "pads": (2, 2, 2, 2), "dilations": (1, 1), "group": 8})
    graph = check_graph(b.build([("y", y)]))
    f = candidate_features(graph, candidate(graph, (0,)))
    assert f["conv_depthwise"] == 1 and f["max_group"] == 8 and f["max_kernel_elements"] == 25
    assert f["max_stride"] == 2 and f["max_linear_n"] == 8 and f["max_linear_m"] == 5 * 5
    assert f["linear_flops"] == 2 * 8 * 5 * 5 * 25 and f["min_inner_dim"] == 5 and f["max_rank"] == 4


def test_layout_ops_count_the_elements_they_move_in_short_runs() -> None:
    b = GraphBuilder("layout")
    x = b.add_input("x", TensorType((2, 8, 32, 32), DType.FLOAT32))
    rows = b.emit("transpose", [x], {"perm": (0, 2, 1, 3)})            # rows of 32 stay contiguous
    cols = b.emit("transpose", [x], {"perm": (0, 1, 3, 2)})            # the innermost axis moves: runs of 1
    focus = b.emit("slice", [x], {"starts": (0, 0, 0, 0), "steps": (1, 1, 2, 2), "sizes": (2, 8, 16, 16)})
    half = b.emit("slice", [x], {"starts": (0, 0, 0, 0), "steps": (1, 1, 1, 1), "sizes": (2, 8, 32, 8)})
    flat = b.emit("reshape", [x], {"shape": (2, 8, 1024)})
    graph = check_graph(b.build([("rows", rows), ("cols", cols), ("focus", focus), ("half", half), ("flat", flat)]))
    moved = {k: candidate_features(graph, candidate(graph, (k,)))["short_run_elements"] for k in range(5)}
    assert moved == {0: 0, 1: 2 * 8 * 32 * 32, 2: 2 * 8 * 16 * 16, 3: 2 * 8 * 32 * 8, 4: 0}


def test_linear_flops_with_output_channels_padded_to_whole_vectors() -> None:
    b = GraphBuilder("to_rgb")
    x = b.add_input("x", TensorType((1, 32, 20, 20), DType.FLOAT32))
    w = b.add_constant(np.random.default_rng(3).standard_normal((3, 32, 3, 3)).astype(np.float32))
    y = b.emit("conv", [x, w], {"strides": (1, 1), "pads": (1, 1, 1, 1), "dilations": (1, 1), "group": 1})
    a = b.add_input("a", TensorType((4, 24), DType.FLOAT32))
    v = b.add_constant(np.random.default_rng(4).standard_normal((24, 20)).astype(np.float32))
    mm = b.emit("matmul", [a, v])
    graph = check_graph(b.build([("y", y), ("mm", mm)]))
    conv = candidate_features(graph, candidate(graph, (0,)))
    assert conv["linear_flops"] == 2 * 3 * 20 * 20 * 288
    assert conv["linear_flops_lanes8"] == conv["linear_flops"] * 8 / 3
    assert conv["linear_flops_lanes16"] == conv["linear_flops"] * 16 / 3
    matmul = candidate_features(graph, candidate(graph, (1,)))        # n = 20: 24 and 32 lanes' worth
    assert matmul["linear_flops_lanes8"] == matmul["linear_flops"] * 24 / 20
    assert matmul["linear_flops_lanes16"] == matmul["linear_flops"] * 32 / 20
