"""The Candidate type and the standalone subgraph a backend compiles for it."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np

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


class _ConstantsOf(Mapping[str, np.ndarray]):
    """Some of a graph's constants, each read from the graph's own mapping when asked for."""

    def __init__(self, constants: Mapping[str, np.ndarray], names: Iterable[str]) -> None:
        self._constants = constants
        self._names = tuple(names)

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in self._names:
            raise KeyError(name)
        return self._constants[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


def extract_subgraph(graph: Graph, candidate: Candidate, read_constants: bool = True) -> Graph:
    """The candidate as a standalone graph: its inputs as graph inputs, its constants, its outputs.
    `read_constants=False`: the constants are read from `graph` when asked for, not now (a saved
    kernel reads each once while it loads, and keeps only some)."""
    nodes = tuple(graph.nodes[i] for i in candidate.nodes)
    used = {v for n in nodes for v in n.inputs}
    # Read only the constants the nodes use: a loaded plan reads each from its file on first use.
    names = [k for k in graph.constants if k in used]
    constants = {k: graph.constants[k] for k in names} if read_constants else _ConstantsOf(graph.constants, names)
    values = set(candidate.inputs) | set(names) | {n.output for n in nodes}
    types = {k: graph.types[k] for k in values}
    return Graph(f"{graph.name}:{candidate.key[:12]}", candidate.inputs, candidate.outputs, nodes,
                 MappingProxyType(types), MappingProxyType(constants) if read_constants else constants)
