"""The Candidate type and the standalone subgraph a backend compiles for it."""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

from korch.ir.graph import Graph


@dataclass(frozen=True)
class Candidate:
    """A convex set of primitives (indices into graph.nodes, in topological order).

    `inputs` are the non-constant values it reads from outside, in first-use order; `outputs` the
    values it computes that something outside needs (another primitive or a graph output).
    """

    nodes: tuple[int, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    key: str
    # For a region (whole ONNX nodes): their names, so an engine can run the original nodes.
    onnx_nodes: tuple[str, ...] = ()

    @property
    def size(self) -> int:
        return len(self.nodes)


def boundary(graph: Graph, nodes: tuple[int, ...]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The external non-constant inputs and the needed outputs of a node set."""
    inside = {graph.nodes[i].output for i in nodes}
    inputs: dict[str, None] = {}
    for i in nodes:
        for v in graph.nodes[i].inputs:
            if v not in inside and v not in graph.constants:
                inputs.setdefault(v)
    graph_outputs = set(graph.outputs)
    members = set(nodes)
    index = graph.positions          # (built once per graph: rebuilt per candidate, it was half of enumeration)
    outputs = []
    for i in nodes:
        out = graph.nodes[i].output
        users = graph.consumers.get(out, ())
        if out in graph_outputs or any(index[u.output] not in members for u in users):
            outputs.append(out)
    return tuple(inputs), tuple(outputs)


def extract_subgraph(graph: Graph, candidate: Candidate) -> Graph:
    """The candidate as a standalone graph: its inputs as graph inputs, its constants, its outputs."""
    nodes = tuple(graph.nodes[i] for i in candidate.nodes)
    used = {v for n in nodes for v in n.inputs}
    # Read only the constants the nodes use: a loaded plan reads each from its file on first use.
    constants = {k: graph.constants[k] for k in graph.constants if k in used}
    names = set(candidate.inputs) | set(constants) | {n.output for n in nodes}
    types = {k: graph.types[k] for k in names}
    return Graph(f"{graph.name}:{candidate.key[:12]}", candidate.inputs, candidate.outputs, nodes,
                 MappingProxyType(types), MappingProxyType(constants))
