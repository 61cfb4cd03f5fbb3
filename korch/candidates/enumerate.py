"""Deterministic enumeration of candidate kernels: connected, convex primitive sets within limits.

Connected sets are grown from each seed primitive with the ESU scheme (each set is produced once:
only primitives after the seed, extended through neighbours not yet adjacent to the set), bounded by
a per-seed budget. A set is kept when it is convex (no path leaves it and comes back), holds at most
`max_linear` linear primitives and has few enough boundary tensors. Opaque primitives (ONNX nodes
kept whole) are never in a small candidate: only an ONNX engine runs them, as regions of whole ONNX
nodes (regions.py). Every other primitive alone is always a candidate, so with the regions that
hold each opaque node alone a selection always exists.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from korch.candidates.candidate import Candidate, boundary
from korch.candidates.key import structural_key
from korch.ir.graph import Graph
from korch.ir.ops import PrimClass

log = logging.getLogger("korch.candidates")


@dataclass(frozen=True)
class CandidateLimits:
    # Fusing more than ~8 primitives rarely pays on memory-bound chains and multiplies the count.
    max_nodes: int = 8
    # The paper's prototype allowed a linear primitive only alone; one with prologue/epilogue is korch's.
    max_linear: int = 1
    # Boundary tensors: each one is a buffer read or written; many means the set is not a good kernel.
    max_inputs: int = 4
    max_outputs: int = 3
    # Sets explored per seed primitive: bounds the work in dense regions (attention, concat fans).
    max_sets_per_seed: int = 96


def _adjacency(graph: Graph) -> list[list[int]]:
    """Neighbours through data edges, leaving out opaque primitives: growth never reaches them."""
    index = graph.positions
    adj: list[set[int]] = [set() for _ in graph.nodes]
    for k, node in enumerate(graph.nodes):
        for v in node.inputs:
            if v in index and not _is_opaque(graph, k) and not _is_opaque(graph, index[v]):
                adj[k].add(index[v])
                adj[index[v]].add(k)
    return [sorted(a) for a in adj]


def _is_opaque(graph: Graph, k: int) -> bool:
    return graph.nodes[k].klass == PrimClass.OPAQUE


def _reachability(graph: Graph) -> tuple[list[int], list[int]]:
    """Bitsets of descendants and ancestors of every node (each includes the node itself)."""
    index = graph.positions
    n = len(graph.nodes)
    anc = [0] * n
    for k, node in enumerate(graph.nodes):
        bits = 1 << k
        for v in node.inputs:
            if v in index:
                bits |= anc[index[v]]
        anc[k] = bits
    desc = [0] * n
    for k in range(n - 1, -1, -1):
        bits = 1 << k
        for user in graph.consumers.get(graph.nodes[k].output, ()):
            bits |= desc[index[user.output]]
        desc[k] = bits
    return desc, anc


def why_not_candidate(graph: Graph, nodes: tuple[int, ...], limits: CandidateLimits = CandidateLimits()) -> str | None:
    """None if `nodes` is a candidate the enumeration keeps (budget aside), else the reason it is not.

    Legality first (must hold for any kernel), then the limits (tunable)."""
    members = set(nodes)
    opaque = next((graph.nodes[k] for k in nodes if _is_opaque(graph, k)), None)
    if opaque is not None:
        return (f"holds the opaque ONNX node {opaque.origin!r} ({opaque.attrs['op_type']}): only an ONNX engine runs "
                "it, as a region")
    adj = _adjacency(graph)
    seen, stack = {nodes[0]}, [nodes[0]]
    while stack:
        for u in adj[stack.pop()]:
            if u in members and u not in seen:
                seen.add(u)
                stack.append(u)
    if seen != members:
        return "not connected"
    desc, anc = _reachability(graph)
    down = up = 0
    for m in nodes:
        down |= desc[m]
        up |= anc[m]
    between = [k for k in range(len(graph.nodes)) if (down & up) >> k & 1 and k not in members]
    if between:
        return f"not convex: a path leaves the set through {graph.nodes[between[0]].output!r} and comes back"
    n_linear = sum(graph.nodes[i].klass == PrimClass.LINEAR for i in nodes)
    if n_linear > limits.max_linear:
        return f"{n_linear} linear primitives (at most {limits.max_linear} per kernel)"
    if len(nodes) == 1:
        return None
    if len(nodes) > limits.max_nodes:
        return f"{len(nodes)} primitives (limit {limits.max_nodes})"
    inputs, outputs = boundary(graph, tuple(sorted(nodes)))
    if len(inputs) > limits.max_inputs:
        return f"{len(inputs)} input tensors (limit {limits.max_inputs})"
    if len(outputs) > limits.max_outputs:
        return f"{len(outputs)} output tensors (limit {limits.max_outputs})"
    return None


def enumerate_candidates(graph: Graph, limits: CandidateLimits = CandidateLimits()) -> tuple[Candidate, ...]:
    adj = _adjacency(graph)
    desc, anc = _reachability(graph)
    linear = [node.klass == PrimClass.LINEAR for node in graph.nodes]
    found: dict[tuple[int, ...], Candidate] = {}

    def consider(members: tuple[int, ...], mask: int) -> None:
        if len(members) > 1:
            reach_down = reach_up = 0
            for m in members:
                reach_down |= desc[m]
                reach_up |= anc[m]
            if reach_down & reach_up != mask:
                return                                   # not convex
        inputs, outputs = boundary(graph, members)
        if len(members) > 1 and (len(inputs) > limits.max_inputs or len(outputs) > limits.max_outputs):
            return
        nodes = [graph.nodes[i] for i in members]
        found[members] = Candidate(members, inputs, outputs, structural_key(graph, nodes, inputs, outputs))

    for seed in range(len(graph.nodes)):
        if _is_opaque(graph, seed):
            continue
        budget = [limits.max_sets_per_seed]

        def extend(members: list[int], mask: int, neighbourhood: int, extension: list[int], n_linear: int) -> None:
            if budget[0] <= 0:
                return
            budget[0] -= 1
            consider(tuple(sorted(members)), mask)
            if len(members) == limits.max_nodes:
                return
            extension = list(extension)
            while extension:
                w = extension.pop(0)
                if n_linear + linear[w] > limits.max_linear:
                    continue
                fresh = [u for u in adj[w] if u > seed and not (neighbourhood >> u) & 1]
                new_neigh = neighbourhood
                for u in fresh:
                    new_neigh |= 1 << u
                extend(members + [w], mask | (1 << w), new_neigh, extension + fresh, n_linear + linear[w])

        start_neigh = 1 << seed
        for u in adj[seed]:
            start_neigh |= 1 << u
        extend([seed], 1 << seed, start_neigh, [u for u in adj[seed] if u > seed], int(linear[seed]))

    candidates = tuple(found[k] for k in sorted(found))
    log.info("candidates: %d primitives -> %d candidates, %d unique keys",
             len(graph.nodes), len(candidates), len({c.key for c in candidates}))
    return candidates
