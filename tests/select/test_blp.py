"""The BLP: exact choices on small problems checked against brute force, recomputation, errors."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from korch.select import Option, SelectionError, solve


def _feasible(chosen: list[Option], inputs: set[str], outputs: list[str]) -> bool:
    avail = set(inputs) | {t for o in chosen for t in o.outputs}
    return all(t in avail for t in outputs) and all(o.inputs <= avail for o in chosen)


def test_fused_kernel_wins_when_cheaper_and_loses_when_not() -> None:
    # chain x -> a -> b -> y
    a = Option("a", frozenset({"x"}), frozenset({"a"}), 1.0)
    b = Option("b", frozenset({"a"}), frozenset({"b"}), 1.0)
    y = Option("y", frozenset({"b"}), frozenset({"y"}), 1.0)
    fused = Option("ab y", frozenset({"x"}), frozenset({"y"}), 2.5)
    sel = solve([a, b, y, fused], {"x"}, ["y"])
    assert [o.key for o in sel.chosen] == ["ab y"] and sel.optimal and sel.gap == 0
    slow = Option("ab y", frozenset({"x"}), frozenset({"y"}), 3.5)
    assert {o.key for o in solve([a, b, y, slow], {"x"}, ["y"]).chosen} == {"a", "b", "y"}


def test_recomputation_is_allowed() -> None:
    # x -> s; s feeds both outputs. Two fused kernels each recompute s; cheaper than materializing it.
    s = Option("s", frozenset({"x"}), frozenset({"s"}), 2.0)
    p = Option("p", frozenset({"s"}), frozenset({"p"}), 2.0)
    q = Option("q", frozenset({"s"}), frozenset({"q"}), 2.0)
    sp = Option("sp", frozenset({"x"}), frozenset({"p"}), 2.5)
    sq = Option("sq", frozenset({"x"}), frozenset({"q"}), 2.5)
    sel = solve([s, p, q, sp, sq], {"x"}, ["p", "q"])
    assert {o.key for o in sel.chosen} == {"sp", "sq"}
    assert sel.cost == pytest.approx(5.0)


@pytest.mark.parametrize("seed", range(20))
def test_matches_brute_force_on_random_problems(seed: int) -> None:
    rng = np.random.default_rng(seed)
    values = [f"v{i}" for i in range(6)]        # v0 is the graph input; a value depends on lower-numbered ones
    options = []
    for k in range(10):
        out = int(rng.integers(1, 6))
        ins = {values[int(i)] for i in rng.integers(0, out, size=int(rng.integers(1, 3)))}
        outs = {values[out]} | ({values[out - 1]} if out > 1 and rng.random() < 0.3 else set())
        options.append(Option(f"o{k}", frozenset(ins), frozenset(outs), float(rng.uniform(0.5, 3))))
    for v in values[1:]:       # make sure every value has some producer
        options.append(Option(f"base-{v}", frozenset({values[int(v[1:]) - 1]}), frozenset({v}), 2.0))
    best = min((sum(o.cost for o in c), c) for r in range(len(options) + 1)
               for c in itertools.combinations(options, r) if _feasible(list(c), {"v0"}, ["v5"]))
    sel = solve(options, {"v0"}, ["v5"])
    assert sel.optimal
    assert sel.cost == pytest.approx(best[0])
    assert _feasible(list(sel.chosen), {"v0"}, ["v5"])


def test_unproducible_value_is_named() -> None:
    with pytest.raises(SelectionError, match="'m'"):
        solve([Option("k", frozenset({"m"}), frozenset({"y"}), 1.0)], {"x"}, ["y"])


def test_an_option_whose_input_nothing_writes_is_never_chosen() -> None:
    # "chained" reads h2, which nothing writes, so "tail", reading chained's h, can never run either;
    # both are cheap, and only "whole" computes y from x (a region-only backend leaves such holes).
    head = Option("head", frozenset({"x"}), frozenset({"m"}), 1.0)
    chained = Option("chained", frozenset({"h2"}), frozenset({"h"}), 0.1)
    tail = Option("tail", frozenset({"h"}), frozenset({"y"}), 0.1)
    whole = Option("whole", frozenset({"x"}), frozenset({"y"}), 5.0)
    sel = solve([head, chained, tail, whole], {"x"}, ["y"])
    assert [o.key for o in sel.chosen] == ["whole"] and sel.optimal


@pytest.mark.parametrize("seed", range(5))
def test_cover_cuts_keep_the_optimum_on_a_real_graph(seed: int) -> None:
    """On enumerated candidates of a real graph with random costs, the cover cuts change the bound,
    never the optimum."""
    from korch.candidates import CandidateLimits, enumerate_candidates
    from tests.candidates.test_enumerate import _two_blocks

    graph = _two_blocks()
    rng = np.random.default_rng(seed)
    options = [Option(str(c.nodes), frozenset(c.inputs), frozenset(c.outputs),
                      float(c.size * rng.uniform(0.3, 1.0)), frozenset(c.nodes))
               for c in enumerate_candidates(graph, CandidateLimits(max_nodes=4))]
    plain = solve(options, graph.inputs, graph.outputs)
    cut = solve(options, graph.inputs, graph.outputs, required=range(len(graph.nodes)))
    assert plain.optimal and cut.optimal
    assert cut.cost == pytest.approx(plain.cost)
    assert _feasible(list(cut.chosen), set(graph.inputs), list(graph.outputs))
