"""Candidate enumeration: convexity, limits, determinism, keys shared by identical blocks."""

from __future__ import annotations

import numpy as np

from korch.backends.reference import evaluate, run_graph
from korch.candidates import Candidate, CandidateLimits, enumerate_candidates, extract_subgraph
from korch.ir.check import check_graph
from korch.ir.graph import Graph, GraphBuilder
from korch.ir.ops import PrimClass
from korch.ir.types import DType, TensorType

F32 = DType.FLOAT32


def _two_blocks() -> Graph:
    """Two identical blocks (matmul, bias, sigmoid-gate) with different weights, plus a side branch."""
    rng = np.random.default_rng(0)
    b = GraphBuilder("blocks", fold=lambda n, a: evaluate(n, a))
    h = b.add_input("x", TensorType((4, 8), F32))
    for _ in range(2):
        w = b.add_constant(rng.standard_normal((8, 8)).astype(np.float32))
        bias = b.add_constant(rng.standard_normal(8).astype(np.float32))
        m = b.emit("add", [b.emit("matmul", [h, w]), bias])
        h = b.emit("mul", [m, b.emit("sigmoid", [m])])
    side = b.emit("exp", [h])
    return check_graph(b.build([("y", h), ("z", b.emit("reduce_sum", [side], {"axes": (1,), "keepdims": True}))]))


def _is_convex(graph: Graph, c: Candidate) -> bool:
    """No path leaves the set and re-enters it (checked by brute-force reachability)."""
    inside = {graph.nodes[i].output for i in c.nodes}
    index = {n.output: k for k, n in enumerate(graph.nodes)}
    outside_reached: set[str] = set()
    for node in graph.nodes:            # topological order
        from_inside = any(v in inside for v in node.inputs)
        from_outside_path = any(v in outside_reached for v in node.inputs)
        if node.output in inside:
            if from_outside_path:
                return False
        elif from_inside or from_outside_path:
            outside_reached.add(node.output)
    return all(index[o] >= 0 for o in inside)


def test_candidates_are_convex_within_limits_and_cover_every_primitive() -> None:
    graph = _two_blocks()
    limits = CandidateLimits(max_nodes=4)
    cands = enumerate_candidates(graph, limits)
    assert {c.nodes for c in cands if c.size == 1} == {(i,) for i in range(len(graph.nodes))}
    for c in cands:
        assert _is_convex(graph, c), c.nodes
        assert c.size <= 4
        assert sum(graph.nodes[i].klass == PrimClass.LINEAR for i in c.nodes) <= 1


def test_a_non_convex_set_is_not_a_candidate() -> None:
    graph = _two_blocks()
    ops = [n.op for n in graph.nodes]
    # {add, mul} of block 1 without the sigmoid between them: add -> sigmoid -> mul leaves and re-enters.
    add, sig, mul = ops.index("add"), ops.index("sigmoid"), ops.index("mul")
    nodes = {c.nodes for c in enumerate_candidates(graph)}
    assert (add, mul) not in nodes
    assert (add, sig, mul) in nodes


def test_enumeration_is_deterministic_and_identical_blocks_share_keys() -> None:
    graph = _two_blocks()
    first = enumerate_candidates(graph)
    assert first == enumerate_candidates(graph)
    by_ops: dict[tuple[str, ...], set[str]] = {}
    for c in first:
        if c.size == 4 and graph.nodes[c.nodes[0]].op == "matmul":
            by_ops.setdefault(tuple(graph.nodes[i].op for i in c.nodes), set()).add(c.key)
    block = ("matmul", "add", "sigmoid", "mul")
    assert len(by_ops[block]) == 1, "the two blocks differ only in weights and must share a key"


def test_extracted_subgraph_computes_the_candidates_outputs() -> None:
    graph = _two_blocks()
    rng = np.random.default_rng(4)
    feeds = {"x": rng.standard_normal((4, 8)).astype(np.float32)}
    everything = run_graph(graph, feeds, intermediate=True)
    for c in enumerate_candidates(graph, CandidateLimits(max_nodes=3)):
        sub = check_graph(extract_subgraph(graph, c))
        result = run_graph(sub, {i: everything[i] for i in c.inputs})
        for out in c.outputs:
            np.testing.assert_allclose(result[out], everything[out], rtol=1e-6, atol=1e-6)


def test_enumeration_keeps_exactly_the_sets_that_pass_the_checks() -> None:
    """Brute force over every node subset of size <= 5: enumerated iff why_not_candidate is None."""
    import itertools

    from korch.candidates import why_not_candidate

    graph = _two_blocks()
    limits = CandidateLimits(max_nodes=5, max_sets_per_seed=10_000)
    found = {c.nodes for c in enumerate_candidates(graph, limits)}
    reasons = set()
    for size in range(1, 6):
        for nodes in itertools.combinations(range(len(graph.nodes)), size):
            reason = why_not_candidate(graph, nodes, limits)
            assert (reason is None) == (nodes in found), (nodes, reason)
            if reason:
                reasons.add(reason.split(":")[0].split(" ")[-1])
    assert {"connected", "convex", "kernel)"} <= reasons
