"""A layered drawing of the primitive graph (top to bottom), computed in Python for the HTML report.

Sugiyama-style, kept small: longest-path layers; long edges broken by dummy points, one per layer
crossed; barycenter sweeps to order each layer (fewer crossings); then x positions that follow the
neighbours as closely as the minimum spacing allows (pool-adjacent-violators, exact for squared
distance). Graph inputs, weights (non-scalar constants, one box per use, drawn just above the
primitive that reads them) and graph outputs are boxes too; scalar constants are left out.
"""

from __future__ import annotations

from dataclasses import dataclass

from korch.ir.graph import Graph
from korch.ir.ops import PrimClass

LAYER_GAP = 58.0          # vertical distance between layers, room for the edges to bend
NODE_HEIGHT = 24.0
WEIGHT_SIZE = 10.0
NODE_GAP = 14.0           # horizontal space between neighbouring boxes
DUMMY_GAP = 6.0           # a long edge passing through a layer takes this much room
CHAR_WIDTH = 6.6          # monospace label width per character at the report's font size
MAX_LABEL = 18            # input/output names longer than this are cut in the drawing
ORDER_SWEEPS = 8          # barycenter sweeps (down and up); more rarely removes more crossings
PLACE_SWEEPS = 8


@dataclass(frozen=True)
class Box:
    id: str
    kind: str                 # "prim", "input", "weight", "output"
    label: str
    x: float                  # centre
    y: float
    w: float
    h: float
    ref: int | str            # primitive index, or the value name


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    value: str
    points: tuple[tuple[float, float], ...]


@dataclass(frozen=True)
class Layout:
    boxes: tuple[Box, ...]
    edges: tuple[Edge, ...]
    width: float
    height: float


@dataclass
class _Item:
    id: str
    kind: str
    label: str
    ref: int | str
    layer: int
    w: float
    h: float


def _items(graph: Graph) -> tuple[list[_Item], list[tuple[str, str, str]]]:
    """Boxes with layers, and edges (source id, target id, value) between them."""
    items: list[_Item] = []
    edges: list[tuple[str, str, str]] = []
    where: dict[str, tuple[str, int]] = {}           # value -> (box id, layer) of its producer
    for name in graph.inputs:
        items.append(_Item(f"in:{name}", "input", _cut(name), name, 0, _text_width(_cut(name)), NODE_HEIGHT))
        where[name] = (items[-1].id, 0)
    for k, node in enumerate(graph.nodes):
        sources = [where[v] for v in dict.fromkeys(node.inputs) if v in where]
        layer = 1 + max((layer for _, layer in sources), default=0)
        box = f"p{k}"
        label = _cut(node.attrs["op_type"]) if node.klass == PrimClass.OPAQUE else node.op   # the ONNX op it keeps
        items.append(_Item(box, "prim", label, k, layer, max(_text_width(label), 44.0), NODE_HEIGHT))
        where[node.output] = (box, layer)
        for v in dict.fromkeys(node.inputs):
            if v in where:
                edges.append((where[v][0], box, v))
            elif v in graph.constants and graph.constants[v].size > 1:
                weight = f"w:{v}:{k}"
                items.append(_Item(weight, "weight", "", v, layer - 1, WEIGHT_SIZE, WEIGHT_SIZE))
                edges.append((weight, box, v))
    for name in graph.outputs:
        if name in where:
            source, layer = where[name]
            items.append(_Item(f"out:{name}", "output", _cut(name), name, layer + 1, _text_width(_cut(name)),
                               NODE_HEIGHT))
            edges.append((source, items[-1].id, name))
    return items, edges


def _cut(name: str) -> str:
    return name if len(name) <= MAX_LABEL else name[:MAX_LABEL - 1] + "…"


def _text_width(text: str) -> float:
    return len(text) * CHAR_WIDTH + 16.0


def layout_graph(graph: Graph) -> Layout:
    items, edge_list = _items(graph)
    n_layers = 1 + max((it.layer for it in items), default=0)
    layers: list[list[int]] = [[] for _ in range(n_layers)]
    width: list[float] = []
    for k, it in enumerate(items):
        layers[it.layer].append(k)
        width.append(it.w)
    index = {it.id: k for k, it in enumerate(items)}
    up: list[list[int]] = [[] for _ in items]        # neighbours one layer above
    down: list[list[int]] = [[] for _ in items]
    chains: list[list[int]] = []
    for source, target, _ in edge_list:
        a, b = index[source], index[target]
        chain = [a]
        for layer in range(items[a].layer + 1, items[b].layer):
            width.append(0.0)
            up.append([])
            down.append([])
            layers[layer].append(len(width) - 1)
            chain.append(len(width) - 1)
        chain.append(b)
        for u, v in zip(chain, chain[1:]):
            down[u].append(v)
            up[v].append(u)
        chains.append(chain)
    _order(layers, up, down)
    x = _place(layers, up, down, width)
    y = [0.0] * len(width)
    for layer, members in enumerate(layers):
        for v in members:
            y[v] = 20.0 + NODE_HEIGHT / 2 + layer * LAYER_GAP
    left = min((x[v] - width[v] / 2 for v in range(len(width))), default=0.0) - 20.0
    boxes = tuple(Box(it.id, it.kind, it.label, x[k] - left, y[k], it.w, it.h, it.ref) for k, it in enumerate(items))
    edges = []
    for (source, target, value), chain in zip(edge_list, chains):
        a, b = chain[0], chain[-1]
        points = [(x[a] - left, y[a] + items[a].h / 2)] + [(x[v] - left, y[v]) for v in chain[1:-1]]
        points.append((x[b] - left, y[b] - items[b].h / 2))
        edges.append(Edge(source, target, value, tuple(points)))
    right = max((x[v] + width[v] / 2 for v in range(len(width))), default=0.0) - left + 20.0
    return Layout(boxes, tuple(edges), right, 40.0 + NODE_HEIGHT + (n_layers - 1) * LAYER_GAP)


def _order(layers: list[list[int]], up: list[list[int]], down: list[list[int]]) -> None:
    """Reorder each layer in place by the mean position of its neighbours, sweeping down then up."""
    pos = [0.0] * len(up)
    for members in layers:
        for k, v in enumerate(members):
            pos[v] = k
    for sweep in range(ORDER_SWEEPS):
        going_down = sweep % 2 == 0
        sequence = layers[1:] if going_down else layers[-2::-1]
        for members in sequence:
            def key(v: int) -> float:
                near = up[v] if going_down else down[v]
                return sum(pos[u] for u in near) / len(near) if near else pos[v]

            members.sort(key=key)
            for k, v in enumerate(members):
                pos[v] = k


def _place(layers: list[list[int]], up: list[list[int]], down: list[list[int]], width: list[float]) -> list[float]:
    x = [0.0] * len(width)
    for members in layers:
        _pack(members, [0.0] * len(members), width, x)
    for sweep in range(PLACE_SWEEPS):
        going_down = sweep % 2 == 0
        for members in (layers if going_down else layers[::-1]):
            desired = []
            for v in members:
                near = (up[v] if going_down else down[v]) or (down[v] if going_down else up[v])
                desired.append(sum(x[u] for u in near) / len(near) if near else x[v])
            _pack(members, desired, width, x)
    return x


def _gap(width: list[float], a: int, b: int) -> float:
    if width[a] == 0.0 or width[b] == 0.0:
        return (width[a] + width[b]) / 2 + DUMMY_GAP
    return (width[a] + width[b]) / 2 + NODE_GAP


def _pack(members: list[int], desired: list[float], width: list[float], x: list[float]) -> None:
    """Positions closest (least squares) to `desired` keeping order and spacing: pool adjacent violators."""
    offsets = [0.0]
    for a, b in zip(members, members[1:]):
        offsets.append(offsets[-1] + _gap(width, a, b))
    blocks: list[list[float]] = []                  # [sum, count] of shifted targets per block
    for d, off in zip(desired, offsets):
        blocks.append([d - off, 1.0])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            total, count = blocks.pop()
            blocks[-1][0] += total
            blocks[-1][1] += count
    k = 0
    for total, count in blocks:
        for _ in range(int(count)):
            x[members[k]] = total / count + offsets[k]
            k += 1
