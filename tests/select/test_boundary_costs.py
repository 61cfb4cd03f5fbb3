"""Boundary costs in the BLP: a tensor crossing engines costs what the calibration says, only when both
its producer and its consumer are chosen; the optimum is checked against brute force."""

from __future__ import annotations

import itertools
import random

import pytest

from korch.select import Option, solve


def _chain(costs: dict[str, tuple[float, float]]) -> list[Option]:
    """x -> a -> y, each step on engine E or F at the given costs: a@E, a@F, y@E, y@F."""
    options = []
    for engine in ("E", "F"):
        options.append(Option(f"a@{engine}", frozenset({"x"}), frozenset({"a"}), costs["a"][engine == "F"],
                              engine=engine))
        options.append(Option(f"y@{engine}", frozenset({"a"}), frozenset({"y"}), costs["y"][engine == "F"],
                              engine=engine))
    return options


def test_a_crossing_is_priced_only_when_both_ends_are_chosen() -> None:
    # Mixed engines are cheapest by profiles (a on E, y on F: 2.0) but the crossing costs 1.5;
    # staying on E costs 1.0 + 2.0 = 3.0 < 3.5, staying on F 3.0 + 1.0 = 4.0.
    options = _chain({"a": (1.0, 3.0), "y": (2.0, 1.0)})

    def crossing(producer: str, consumer: str, value: str) -> float:
        return 0.0 if producer == consumer else 1.5

    assert {o.key for o in solve(options, {"x"}, ["y"]).chosen} == {"a@E", "y@F"}
    sel = solve(options, {"x"}, ["y"], boundary=crossing)
    assert {o.key for o in sel.chosen} == {"a@E", "y@E"}
    assert sel.cost == pytest.approx(3.0) and sel.boundary_s == 0.0 and sel.optimal
    cheap = solve(options, {"x"}, ["y"], boundary=lambda p, c, v: 0.0 if p == c else 0.5)
    assert {o.key for o in cheap.chosen} == {"a@E", "y@F"}
    assert cheap.cost == pytest.approx(2.5) and cheap.boundary_s == pytest.approx(0.5)


def test_every_chosen_kernel_pays_its_engines_start() -> None:
    """Two kernels on E (1.0 each) beat one fused kernel (2.2) by profiles. With E's kernel start at
    0.15 they cost 2.3 against the fused kernel's 2.35 and still win; at 0.3 they cost 2.6 against
    2.5 and the fused kernel is chosen. The starts are in the cost and
    in boundary_s, once per chosen kernel, by its engine (F's kernels start free here)."""
    options = _chain({"a": (1.0, 9.0), "y": (1.0, 9.0)})
    fused = Option("ay@E", frozenset({"x"}), frozenset({"y"}), 2.2, engine="E")
    small = solve([*options, fused], {"x"}, ["y"], start=lambda e: 0.15 if e == "E" else 0.0)
    assert {o.key for o in small.chosen} == {"a@E", "y@E"}
    assert small.cost == pytest.approx(2.3) and small.boundary_s == pytest.approx(0.3)
    large = solve([*options, fused], {"x"}, ["y"], start=lambda e: 0.3 if e == "E" else 0.0)
    assert {o.key for o in large.chosen} == {"ay@E"}
    assert large.cost == pytest.approx(2.5) and large.boundary_s == pytest.approx(0.3)
    cheap_f = solve(_chain({"a": (1.0, 1.2), "y": (1.0, 1.2)}), {"x"}, ["y"],
                    start=lambda e: 0.3 if e == "E" else 0.0)
    assert {o.key for o in cheap_f.chosen} == {"a@F", "y@F"} and cheap_f.cost == pytest.approx(2.4)


def test_same_engine_boundaries_count_once_per_tensor_read() -> None:
    options = _chain({"a": (1.0, 9.0), "y": (1.0, 9.0)})
    fused = Option("ay@E", frozenset({"x"}), frozenset({"y"}), 2.2, engine="E")
    sel = solve([*options, fused], {"x"}, ["y"], boundary=lambda p, c, v: 0.3)
    assert [o.key for o in sel.chosen] == ["ay@E"] and sel.cost == pytest.approx(2.2)
    sel = solve([*options, fused], {"x"}, ["y"], boundary=lambda p, c, v: 0.1)
    assert {o.key for o in sel.chosen} == {"a@E", "y@E"} and sel.cost == pytest.approx(2.1)
    assert sel.boundary_s == pytest.approx(0.1)


def _plan_cost(chosen: list[Option], free: set[str], boundary) -> float:
    makers: dict[str, set[str]] = {}
    for o in chosen:
        for t in o.outputs:
            makers.setdefault(t, set()).add(o.engine)
    total = sum(o.cost for o in chosen)
    for o in chosen:
        for t in o.inputs - free:
            same = boundary(o.engine, o.engine, t)
            total += same + sum(max(0.0, boundary(e, o.engine, t) - same) for e in makers[t] if e != o.engine)
    return total


@pytest.mark.parametrize("seed", range(25))
def test_priced_optimum_matches_brute_force_on_random_chains(seed: int) -> None:
    """Random layered graphs (a diamond per layer), each value computable by single-step options on
    two engines and by fused two-step options; random crossing costs per value."""
    rng = random.Random(seed)
    values = ["x", "a", "b", "c", "d"]            # a = f(x), b = g(x), c = h(a, b), d = k(c)
    deps = {"a": {"x"}, "b": {"x"}, "c": {"a", "b"}, "d": {"c"}}
    options = []
    for v, ins in deps.items():
        for engine in ("E", "F"):
            options.append(Option(f"{v}@{engine}", frozenset(ins), frozenset({v}), rng.uniform(0.5, 2.0),
                                  engine=engine))
    for engine in ("E", "F"):
        options.append(Option(f"cd@{engine}", frozenset({"a", "b"}), frozenset({"d"}), rng.uniform(1.0, 3.0),
                              engine=engine))
        options.append(Option(f"abc@{engine}", frozenset({"x"}), frozenset({"c"}), rng.uniform(1.5, 5.0),
                              engine=engine))
    price = {v: (rng.uniform(0, 0.3), rng.uniform(0, 2.0)) for v in values}

    def boundary(producer: str, consumer: str, value: str) -> float:
        same, cross = price[value]
        return same if producer == consumer else same + cross

    best = None
    for n in range(1, len(options) + 1):
        for subset in itertools.combinations(options, n):
            made = {"x"} | {t for o in subset for t in o.outputs}
            if "d" in made and all(o.inputs <= made for o in subset):
                cost = _plan_cost(list(subset), {"x"}, boundary)
                best = cost if best is None else min(best, cost)
    sel = solve(options, {"x"}, ["d"], boundary=boundary)
    assert sel.optimal
    assert sel.cost == pytest.approx(best, rel=1e-6)
    assert sel.cost == pytest.approx(_plan_cost(list(sel.chosen), {"x"}, boundary), rel=1e-9)


def test_no_options_for_an_output_is_an_error_not_an_empty_plan() -> None:
    from korch.select import SelectionError

    with pytest.raises(SelectionError, match="produced by no option"):
        solve([], {"x"}, ["y"], boundary=lambda p, c, v: 0.0)
    assert solve([], {"x"}, ["x"]).chosen == ()
