"""A model's candidates, kept from one optimize to the next.

Enumerating candidates is a pure function of the primitive graph's structure, the candidate and
region limits and korch's own code; on a warm optimize it was the largest stage left (yolov4
rewritten: 2,790 primitives, 18,250 candidates and 4,547 regions in 1.4 s of a 5.4 s run). The
profile database keeps each graph's set under `set_key` and a warm run reads it back (~0.2 s).

What is stored is checked as it is read back: every node index inside the graph, every value one of
the graph's, every candidate's inputs and outputs as `boundary` would make them for a sample of
them. A set that fails is not trusted: the caller enumerates again and stores the set afresh.
"""

from __future__ import annotations

import hashlib
import json
import random
import zlib
from collections.abc import Sequence

from korch.candidates.candidate import Candidate, boundary
from korch.ir.graph import Graph
from korch.version import code_version

# Candidates whose boundary is computed again when a stored set is read: catches a set stored for
# another graph that happens to fit its indices and names, for ~5 ms.
CHECKED_ON_READ = 64


def set_key(graph: Graph, limits: object, regions: object) -> str:
    """What a graph's candidates depend on: korch's code, the limits (their repr), and the graph's
    structure: each node's op, attributes, inputs and output with its type, the inputs' and outputs'
    names, and the constants (their digests: scalar ones enter candidate keys by value)."""
    h = hashlib.sha256(f"{code_version()}|{limits!r}|{regions!r}|".encode())
    h.update(f"{graph.inputs}|{graph.outputs}|".encode())
    for name in graph.inputs:
        h.update(f"{name}:{graph.types[name]}|".encode())
    for node in graph.nodes:
        h.update(f"{node.signature}{node.inputs}{node.output}:{graph.types[node.output]}|".encode())
    h.update(graph.constants_digest().encode())
    return h.hexdigest()


def encode(small: Sequence[Candidate], regions: Sequence[Candidate]) -> bytes:
    """Both lists, compressed: keys and value names written once each and referred to by index."""
    keys: dict[str, int] = {}
    values: dict[str, int] = {}

    def row(c: Candidate) -> list[object]:
        return [list(c.nodes), [values.setdefault(v, len(values)) for v in c.inputs],
                [values.setdefault(v, len(values)) for v in c.outputs], keys.setdefault(c.key, len(keys)),
                list(c.onnx_nodes)]
    rows = {"small": [row(c) for c in small], "regions": [row(c) for c in regions]}
    doc = {"keys": list(keys), "values": list(values), **rows}
    return zlib.compress(json.dumps(doc, separators=(",", ":")).encode(), 1)


def decode(blob: bytes, graph: Graph) -> tuple[tuple[Candidate, ...], tuple[Candidate, ...]] | None:
    """The two lists `encode` wrote, or None if `blob` is not such a set for `graph`."""
    try:
        doc = json.loads(zlib.decompress(blob))
        keys, values = doc["keys"], doc["values"]
        if not all(isinstance(k, str) for k in keys) or not all(v in graph.types for v in values):
            return None
        n = len(graph.nodes)

        def candidate(row: list) -> Candidate:
            nodes, inputs, outputs, key, onnx_nodes = row
            if not nodes or min(nodes) < 0 or max(nodes) >= n:
                raise ValueError("a node index outside the graph")
            if min((*inputs, *outputs, key)) < 0:
                raise ValueError("a negative index")          # (Python would read it from the end)
            return Candidate(tuple(nodes), tuple(values[i] for i in inputs), tuple(values[i] for i in outputs),
                             keys[key], tuple(onnx_nodes))
        small = tuple(candidate(r) for r in doc["small"])
        regions = tuple(candidate(r) for r in doc["regions"])
    except (zlib.error, ValueError, KeyError, TypeError, IndexError):
        return None
    both = small + regions
    sample = random.Random(len(both)).sample(both, min(CHECKED_ON_READ, len(both)))
    if any(boundary(graph, c.nodes) != (c.inputs, c.outputs) for c in sample):
        return None
    return small, regions
