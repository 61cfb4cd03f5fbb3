"""Which candidates are worth profiling on an expensive backend: a heuristic, free to tune.

Compiling a candidate with Inductor costs about a second, so it sees only the candidates where
fusion can pay most: those that keep the most intermediate bytes out of memory, and every linear
primitive alone (its matmul/conv provider may beat another backend's). Legality is not decided here.
"""

from __future__ import annotations

from collections.abc import Sequence

from korch.candidates import Candidate
from korch.ir.graph import Graph
from korch.ir.ops import PrimClass


def saved_bytes(graph: Graph, candidate: Candidate) -> int:
    """Bytes a fused kernel does not write and read back: its internal (non-output) tensors, twice."""
    outputs = set(candidate.outputs)
    total = 0
    for i in candidate.nodes:
        out = graph.nodes[i].output
        if out not in outputs:
            total += 2 * graph.types[out].nbytes
    return total


def worth_profiling(graph: Graph, candidates: Sequence[Candidate], budget: int) -> list[Candidate]:
    """At most `budget` unique keys: linear primitives alone first, then by bytes saved (ties: order)."""
    unique: dict[str, Candidate] = {}
    for c in candidates:
        unique.setdefault(c.key, c)
    linear_alone = [c for c in unique.values() if c.size == 1 and graph.nodes[c.nodes[0]].klass == PrimClass.LINEAR]
    fused = sorted((c for c in unique.values() if c.size > 1), key=lambda c: -saved_bytes(graph, c))
    chosen = {c.key for c in (linear_alone + [c for c in fused if saved_bytes(graph, c) > 0])[:budget]}
    return [c for c in candidates if c.key in chosen]
