"""Regions: candidates made of whole ONNX nodes, for engines that do best on large pieces.

An engine such as onnxruntime fuses and re-lays-out data inside what it is given (blocked conv
layouts, its own attention and normalization fusions); cutting its work into small kernels pays a
layout conversion and a dispatch at every boundary. So it is also offered regions: ranges of
consecutive ONNX nodes, which are convex because primitives are kept in ONNX topological order and
an interval of a topological order is convex.

Ranges are built at several scales on two grids: the graph's single-tensor cut points (where only
one computed tensor is live, e.g. between residual blocks), and inside long blocks, ONNX-node
boundaries. The whole graph is always a region, and so is every opaque ONNX node alone (only an
ONNX engine runs it, so without that region a plan could not cover it).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from korch.candidates.candidate import Candidate, boundary
from korch.candidates.key import structural_key
from korch.errors import UnsupportedError
from korch.ir.graph import Graph
from korch.ir.ops import PrimClass

log = logging.getLogger("korch.candidates")

REGION_KEY_PREFIX = "region:"


@dataclass(frozen=True)
class RegionLimits:
    # Unions of up to this many consecutive blocks (plus doubling unions up to the whole graph).
    max_blocks: int = 4
    # Inside a block longer than this many ONNX nodes, offer sub-ranges of doubling length.
    split_block_nodes: int = 8


def onnx_spans(graph: Graph) -> list[tuple[int, int]] | None:
    """[start, end) primitive ranges of consecutive ONNX nodes, or None if an ONNX node's primitives
    are not contiguous (then no region can be formed)."""
    spans: list[tuple[int, int]] = []
    seen: set[str] = set()
    for k, node in enumerate(graph.nodes):
        if spans and graph.nodes[spans[-1][0]].origin == node.origin:
            spans[-1] = (spans[-1][0], k + 1)
            continue
        if node.origin in seen:
            return None
        seen.add(node.origin)
        spans.append((k, k + 1))
    return spans


def cut_positions(graph: Graph) -> set[int]:
    """Positions p (between node p-1 and p) where at most one computed tensor is live across."""
    n = len(graph.nodes)
    index = graph.positions
    last = {k: k for k in range(n)}
    for k, node in enumerate(graph.nodes):
        for v in node.inputs:
            if v in index:
                last[index[v]] = max(last[index[v]], k)
    for out in graph.outputs:
        if out in index:
            last[index[out]] = n
    live = [0] * (n + 2)
    for producer, consumer in last.items():
        live[producer + 1] += 1
        live[consumer + 1] -= 1
    cuts, running = set(), 0
    for p in range(1, n):
        running += live[p]
        if running <= 1:
            cuts.add(p)
    return cuts


def _ranges(spans: list[tuple[int, int]], cuts: set[int], limits: RegionLimits) -> set[tuple[int, int]]:
    bounds = [0] + [s for s, _ in spans[1:] if s in cuts] + [spans[-1][1]]
    blocks = list(zip(bounds, bounds[1:]))
    ranges: set[tuple[int, int]] = {(bounds[0], bounds[-1])}
    for i in range(len(blocks)):
        for j in range(i, min(len(blocks), i + limits.max_blocks)):
            ranges.add((blocks[i][0], blocks[j][1]))
    width = 2 * limits.max_blocks
    while width < len(blocks):
        for i in range(0, len(blocks), width // 2):
            ranges.add((blocks[i][0], blocks[min(len(blocks), i + width) - 1][1]))
        width *= 2
    starts = [s for s, _ in spans]
    for lo, hi in blocks:
        inner = [s for s in starts if lo <= s < hi] + [hi]
        length = 2
        while length < len(inner) - 1:
            for i in range(0, len(inner) - 1, max(1, length // 2)):
                ranges.add((inner[i], inner[min(len(inner) - 1, i + length)]))
            length *= 2
    ranges.update((s, e) for s, e in spans if e - s > 1)
    return ranges


def _opaque_spans(graph: Graph, spans: list[tuple[int, int]]) -> set[tuple[int, int]]:
    return {(s, e) for s, e in spans if graph.nodes[s].klass == PrimClass.OPAQUE}


def _spans(graph: Graph) -> list[tuple[int, int]] | None:
    spans = onnx_spans(graph)
    if spans is None and any(n.klass == PrimClass.OPAQUE for n in graph.nodes):
        raise UnsupportedError(f"graph {graph.name!r}: the primitives of an ONNX node are not contiguous, so no "
                               "region can hold its opaque nodes (ONNX node names must be unique; load_model "
                               "makes them so)")
    return spans


def _region(graph: Graph, start: int, end: int) -> Candidate:
    nodes = tuple(range(start, end))
    inputs, outputs = boundary(graph, nodes)
    key = REGION_KEY_PREFIX + structural_key(graph, [graph.nodes[i] for i in nodes], inputs, outputs)
    origins = tuple(dict.fromkeys(graph.nodes[i].origin for i in nodes))
    return Candidate(nodes, inputs, outputs, key, origins)


def region_candidates(graph: Graph, limits: RegionLimits = RegionLimits()) -> tuple[Candidate, ...]:
    spans = _spans(graph)
    if not spans:
        return ()
    ranges = _ranges(spans, cut_positions(graph), limits) | _opaque_spans(graph, spans)
    regions = tuple(_region(graph, start, end) for start, end in sorted(ranges))
    log.info("regions: %d (from %d ONNX-node spans)", len(regions), len(spans))
    return regions


def whole_model_region(graph: Graph) -> Candidate:
    """The whole graph as one region (a whole-model kernel on every backend: `region_candidates`
    includes it among the others)."""
    return _region(graph, 0, len(graph.nodes))


def opaque_regions(graph: Graph) -> tuple[Candidate, ...]:
    """Only the regions that hold one opaque ONNX node each: what a plan needs when it is otherwise
    made of small candidates."""
    spans = _spans(graph)
    return tuple(_region(graph, s, e) for s, e in sorted(_opaque_spans(graph, spans or [])))


def balanced_tiling(regions: Sequence[Candidate], pieces: int) -> tuple[Candidate, ...]:
    """`pieces` regions that tile the graph end to end (each starts where the one before ends), of
    sizes as even as the regions allow (the largest as small as it can be); () if no such tiling.

    A backend that can compile only a few regions (Inductor: up to a minute each) gets most from a
    tiling: with the whole model beside it, a split plan can give any one piece to it and the rest to
    the other engines. The largest regions are instead the whole model and its near-whole suffixes
    (yolox-nano: 96%, 90% and 89% of it; segformer-b0: 98%, 77%, 77%), 3.5-3.75 times the model's
    primitives to compile, which leave a split plan only a small prefix to give to another engine."""
    spans = {(c.nodes[0], c.nodes[-1] + 1): c for c in regions}          # a region is a range of primitives
    if pieces < 1 or not spans:
        return ()
    end = max(e for _, e in spans)
    starting: dict[int, list[tuple[int, int]]] = {}
    for s, e in sorted(spans):
        starting.setdefault(s, []).append((s, e))
    # best[p]: (largest piece so far, the pieces) over tilings of [0, p) by j pieces, for j = 1..pieces
    best: dict[int, tuple[int, tuple[tuple[int, int], ...]]] = {0: (0, ())}
    for _ in range(pieces):
        step: dict[int, tuple[int, tuple[tuple[int, int], ...]]] = {}
        for p, (largest, path) in best.items():
            for s, e in starting.get(p, ()):
                option = (max(largest, e - s), (*path, (s, e)))
                if e not in step or option < step[e]:
                    step[e] = option
        best = step
    if end not in best:
        return ()
    return tuple(spans[span] for span in best[end][1])
