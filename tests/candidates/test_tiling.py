"""The regions Inductor compiles: the whole model, then an even tiling of it by regions."""

from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np
import onnx
from onnx import helper, numpy_helper

from korch.candidates import RegionLimits, region_candidates
from korch.candidates.regions import balanced_tiling
from korch.pipeline import enumerate_all, inductor_regions, run_fission
from korch.settings import OptimizeSettings


def _chain(blocks: int, seed: int) -> onnx.ModelProto:
    """`blocks` residual blocks y = x + relu(x * s): one tensor is live between blocks (a cut), two inside."""
    rng = np.random.default_rng(seed)
    nodes, inits, x = [], [], "x"
    for b in range(blocks):
        inits.append(numpy_helper.from_array(rng.uniform(0.5, 1.5, (1, 8)).astype(np.float32), f"s{b}"))
        nodes += [helper.make_node("Mul", [x, f"s{b}"], [f"m{b}"], name=f"mul{b}"),
                  helper.make_node("Relu", [f"m{b}"], [f"r{b}"], name=f"relu{b}"),
                  helper.make_node("Add", [x, f"r{b}"], [f"y{b}"], name=f"add{b}")]
        x = f"y{b}"
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [4, 8])],
                              [helper.make_tensor_value_info(x, onnx.TensorProto.FLOAT, [4, 8])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


def _span(c) -> tuple[int, int]:
    return c.nodes[0], c.nodes[-1] + 1


def test_a_tiling_covers_the_graph_end_to_end_with_its_largest_piece_as_small_as_the_regions_allow() -> None:
    graph = run_fission(_chain(11, 0)).graph
    n = len(graph.nodes)
    regions = region_candidates(graph, RegionLimits())
    spans = {_span(c) for c in regions}
    for pieces in (2, 3, 4):
        tiling = balanced_tiling(regions, pieces)
        assert len(tiling) == pieces
        bounds = [_span(c) for c in tiling]
        assert bounds[0][0] == 0 and bounds[-1][1] == n
        assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:]))
        # against every tiling of `pieces` regions, by brute force
        best = min(max(e - s for s, e in tiles) for tiles in itertools.permutations(spans, pieces)
                   if tiles[0][0] == 0 and tiles[-1][1] == n and all(a[1] == b[0] for a, b in zip(tiles, tiles[1:])))
        assert max(e - s for s, e in bounds) == best
        assert best < n


def test_no_tiling_when_the_regions_cannot_tile() -> None:
    graph = run_fission(_chain(3, 1)).graph
    whole = [c for c in region_candidates(graph, RegionLimits()) if c.size == len(graph.nodes)]
    assert balanced_tiling(whole, 2) == ()
    assert balanced_tiling(whole, 1) == tuple(whole)
    assert balanced_tiling(whole, 0) == ()


def test_inductor_compiles_the_whole_model_then_a_tiling_then_the_largest_regions() -> None:
    graph = run_fission(_chain(11, 2)).graph
    settings = OptimizeSettings()
    cands = enumerate_all(graph, settings)
    n = len(graph.nodes)

    def regions(budget: int) -> list[tuple[int, int]]:
        return [_span(c) for c in inductor_regions(cands, replace(settings, profile=replace(
            settings.profile, inductor_region_budget=budget)))]

    assert regions(0) == []
    assert regions(1) == [(0, n)]
    largest_other = max((_span(c) for c in cands.regions if c.size < n), key=lambda s: s[1] - s[0])
    assert regions(2)[0] == (0, n) and regions(2)[1][1] - regions(2)[1][0] == largest_other[1] - largest_other[0]
    four = regions(4)
    assert four[0] == (0, n) and len(four) == 4
    assert [_span(c) for c in balanced_tiling(cands.regions, 3)] == four[1:]
    # the tiling's pieces are much smaller than the near-whole regions a largest-first choice takes
    assert max(e - s for s, e in four[1:]) <= n // 2
