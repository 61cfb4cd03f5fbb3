"""The BLP: exact choices on small problems checked against brute force, recomputation, choices
that cannot be ordered (cycle cuts), errors."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np
import pytest

from korch.backends.reference import evaluate
from korch.candidates import Candidate, CandidateLimits, enumerate_candidates
from korch.ir.graph import Graph, GraphBuilder
from korch.ir.types import DType, TensorType
from korch.plan import PlanError, Step, order_steps
from korch.select import Option, Selection, SelectionError, SolveStats, SolveTally, solve


def _feasible(chosen: list[Option], inputs: set[str], outputs: list[str]) -> bool:
    avail = set(inputs) | {t for o in chosen for t in o.outputs}
    return all(t in avail for t in outputs) and all(o.inputs <= avail for o in chosen)


def _legal(chosen: list[Option], inputs: set[str], outputs: list[str]) -> bool:
    """Some order runs every chosen option after its inputs exist, and the outputs are made."""
    ready, left = set(inputs), list(chosen)
    while runnable := [o for o in left if o.inputs <= ready]:
        for o in runnable:
            ready |= o.outputs
            left.remove(o)
    return not left and set(outputs) <= ready


def _best(options: list[Option], ok, inputs: set[str], outputs: list[str]) -> tuple[float, set[str]]:
    """Brute force: the least cost over subsets that `ok` accepts, and the keys of the cheapest."""
    cost, keys = min((sum(o.cost for o in c), sorted(o.key for o in c)) for r in range(len(options) + 1)
                     for c in itertools.combinations(options, r) if ok(list(c), inputs, outputs))
    return cost, set(keys)


def _option(c: Candidate, cost: float) -> Option:
    return Option(str(list(c.nodes)), frozenset(c.inputs), frozenset(c.outputs), cost, frozenset(c.nodes))


def _diamond(copies: int = 1) -> Graph:
    """a = relu(x), b = sigmoid(x), c = a + b, d = a * b; outputs c and d (each copy its own)."""
    b = GraphBuilder("diamond", fold=lambda node, args: evaluate(node, args))
    x = b.add_input("x", TensorType((4, 8), DType.FLOAT32))
    outputs = []
    for k in range(copies):
        relu, sigmoid = b.emit("relu", [x]), b.emit("sigmoid", [x])
        outputs += [(f"c{k}", b.emit("add", [relu, sigmoid])), (f"d{k}", b.emit("mul", [relu, sigmoid]))]
    return b.build(outputs)


def _cheap_pairs(graph: Graph, c: Candidate) -> float:
    """{relu, add} and {sigmoid, mul} cost 1; every other kernel 2 + its size."""
    ops = sorted(graph.nodes[i].op for i in c.nodes)
    return 1.0 if ops in (["add", "relu"], ["mul", "sigmoid"]) else 2.0 + c.size


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
    # Not convex sets of a graph: an option may even write the value it reads. The optimum is over
    # choices some order can run.
    best, _ = _best(options, _legal, {"v0"}, ["v5"])
    sel = solve(options, {"v0"}, ["v5"])
    assert sel.optimal
    assert sel.cost == pytest.approx(best)
    assert _legal(list(sel.chosen), {"v0"}, ["v5"])


def test_unproducible_value_is_named() -> None:
    with pytest.raises(SelectionError, match="'m'"):
        solve([Option("k", frozenset({"m"}), frozenset({"y"}), 1.0)], {"x"}, ["y"])


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


def test_options_that_can_never_run_are_dropped_not_fatal() -> None:
    """When every kernel that computes a value was rejected (e.g. for accuracy), options reading that
    value can never run: they are dropped, transitively, and the rest still solves; with nothing
    left for an output, the error names it."""
    whole = Option("whole", frozenset({"x"}), frozenset({"y"}), 5.0)
    reads_m = Option("m->n", frozenset({"m"}), frozenset({"n"}), 0.1)       # nothing makes m
    reads_n = Option("n->y", frozenset({"n"}), frozenset({"y"}), 0.1)       # n only comes from m->n
    sel = solve([whole, reads_m, reads_n], {"x"}, ["y"])
    assert [o.key for o in sel.chosen] == ["whole"] and sel.optimal
    with pytest.raises(SelectionError, match="'y'"):
        solve([reads_m, reads_n], {"x"}, ["y"])


def test_kernels_that_wait_on_each_other_are_cut_and_the_legal_optimum_found() -> None:
    """{relu, add} reads sigmoid's value and {sigmoid, mul} reads relu's: cheap, convex, connected,
    and together the unique optimum of the plain BLP, which no order can run. The solver must
    return the best choice that can run: the pair plus {sigmoid} (or {relu}) recomputing one value,
    cost 5; the plain no-good cut (never both) would lose that and return 6 (the whole graph)."""
    graph = _diamond()
    ops = [n.op for n in graph.nodes]
    pair = {(ops.index("relu"), ops.index("add")), (ops.index("sigmoid"), ops.index("mul"))}
    options = [_option(c, _cheap_pairs(graph, c)) for c in enumerate_candidates(graph, CandidateLimits())]
    inputs, outputs = set(graph.inputs), list(graph.outputs)
    plain_cost, plain_keys = _best(options, _feasible, inputs, outputs)
    assert plain_keys == {str(list(n)) for n in pair} and plain_cost == 2.0
    assert _best(options, _legal, inputs, outputs)[0] == 5.0

    sel = solve(options, graph.inputs, graph.outputs, required=range(len(graph.nodes)))
    assert sel.cost == pytest.approx(5.0) and sel.optimal and sel.gap == 0
    assert sel.cycle_cuts >= 1 and sel.resolves >= 1
    assert _legal(list(sel.chosen), inputs, outputs)
    steps = [Step("onnxruntime", tuple(sorted(o.nodes)), tuple(o.inputs), tuple(o.outputs), o.key, o.cost)
             for o in sel.chosen]
    assert len(order_steps(steps, graph.inputs)) == 3


def test_a_tally_counts_each_solve_once_with_its_re_solves_inside() -> None:
    """A solve that needed cycle cuts counts once, its re-solves in its seconds; the slowest is the
    largest of the solves, and a selection the solver did not prove optimal is counted apart."""
    graph = _diamond()
    options = [_option(c, _cheap_pairs(graph, c)) for c in enumerate_candidates(graph, CandidateLimits())]
    tally = SolveTally()
    cut = solve(options, graph.inputs, graph.outputs, required=range(len(graph.nodes)), tally=tally)
    plain = solve(options, graph.inputs, graph.outputs, tally=tally)
    assert cut.resolves >= 1 and tally.stats.solves == 2 and tally.stats.unproven == 0
    assert tally.stats.seconds == pytest.approx(cut.seconds + plain.seconds)
    assert tally.stats.slowest_s == max(cut.seconds, plain.seconds)
    tally.add(Selection((), 1.0, 0.5, 9.0, False))
    assert tally.stats == SolveStats(3, pytest.approx(cut.seconds + plain.seconds + 9.0), 9.0, 1)


def test_independent_cycles_are_cut_in_one_round() -> None:
    """Forty diamonds, each choosing its cheap pair: one cut each, all added before one re-solve."""
    graph = _diamond(copies=40)
    options = [_option(c, _cheap_pairs(graph, c)) for c in enumerate_candidates(graph, CandidateLimits())]
    sel = solve(options, graph.inputs, graph.outputs, required=range(len(graph.nodes)))
    assert sel.optimal and sel.cost == pytest.approx(40 * 5.0)
    assert sel.cycle_cuts == 40 and sel.resolves == 1
    assert _legal(list(sel.chosen), set(graph.inputs), list(graph.outputs))


def test_ordering_steps_that_wait_on_each_other_names_the_cycle() -> None:
    graph = _diamond()
    ops = [n.op for n in graph.nodes]
    first, second = (ops.index("relu"), ops.index("add")), (ops.index("sigmoid"), ops.index("mul"))
    by_nodes = {c.nodes: c for c in enumerate_candidates(graph, CandidateLimits())}
    steps = [Step("onnxruntime", n, by_nodes[n].inputs, by_nodes[n].outputs, str(n), 1.0) for n in (first, second)]
    with pytest.raises(PlanError, match="cycle") as e:
        order_steps(steps, graph.inputs)
    for n in (first, second):
        assert f"onnxruntime kernel of primitives [{n[0]}, {n[1]}]" in str(e.value)
    with pytest.raises(PlanError, match="never produced"):
        order_steps(steps[:1], graph.inputs)


def _random_graph(rng: np.random.Generator, size: int) -> Graph:
    """Elementwise primitives wired at random (mostly binary, so values are shared), every other one an output."""
    b = GraphBuilder("random", fold=lambda node, args: evaluate(node, args))
    values = [b.add_input("x", TensorType((2, 3), DType.FLOAT32))]
    for _ in range(size):
        if len(values) > 1 and rng.random() < 0.8:
            i, j = rng.choice(len(values), size=2, replace=False)
            values.append(b.emit(str(rng.choice(["add", "mul", "max"])), [values[i], values[j]]))
        else:
            source = values[int(rng.integers(len(values)))]
            values.append(b.emit(str(rng.choice(["relu", "sigmoid", "tanh"])), [source]))
    return b.build([(f"y{k}", v) for k, v in enumerate(values[1:]) if k % 2 == 1 or v is values[-1]])


def test_matches_brute_force_over_legal_choices_on_random_graphs() -> None:
    """Random DAGs, random convex candidates (favouring the tangled ones: several outputs, reading
    values other kernels make) and random costs: the solver's cost is the least over choices that can
    run, found by brute force. Some instances need cycle cuts, and on some the plain BLP's optimum
    is strictly cheaper than any legal choice (checked, so the test keeps exercising the cuts)."""
    cuts, plain_wrong = 0, 0
    for seed in range(30):
        rng = np.random.default_rng(seed)
        graph = _random_graph(rng, 6)
        candidates = enumerate_candidates(graph, CandidateLimits())
        multi = [c for c in candidates if c.size > 1]
        tangled = [c for c in multi if len(c.outputs) > 1 and set(c.inputs) - set(graph.inputs)]
        pool = tangled if len(tangled) >= 4 else multi
        picked = [pool[int(i)] for i in rng.choice(len(pool), size=min(8, len(pool)), replace=False)]
        options = [_option(c, float(rng.uniform(2, 3))) for c in candidates if c.size == 1]   # a legal plan exists
        options += [_option(c, float(rng.uniform(0.3, 0.8) * c.size)) for c in picked]
        inputs, outputs = set(graph.inputs), list(graph.outputs)
        best, _ = _best(options, _legal, inputs, outputs)
        sel = solve(options, graph.inputs, graph.outputs, required=range(len(graph.nodes)))
        assert sel.optimal and sel.cost == pytest.approx(best), seed
        assert sel.lower_bound <= best + 1e-9
        assert _legal(list(sel.chosen), inputs, outputs), seed
        cuts += sel.cycle_cuts
        plain_wrong += _best(options, _feasible, inputs, outputs)[0] < best - 1e-9
    assert cuts > 0 and plain_wrong > 0


def test_fractional_relaxation_is_solved_by_reduced_cost_fixing() -> None:
    """Three pairs covering three outputs: the LP takes half of each pair (1.5), the optimum is a pair
    and a single (1.85), found only after the single (reduced cost 0.35) is let back in. The costly
    kernel covering all three stays fixed out, and the bound is proven."""
    pairs = [Option(a + b, frozenset({"x"}), frozenset({f"y{a}", f"y{b}"}), 1.0) for a, b in ("ab", "bc", "ac")]
    singles = [Option(a, frozenset({"x"}), frozenset({f"y{a}"}), c) for a, c in (("a", 0.9), ("b", 0.9), ("c", 0.85))]
    whole = Option("abc", frozenset({"x"}), frozenset({"ya", "yb", "yc"}), 5.0)
    sel = solve([*pairs, *singles, whole], {"x"}, ["ya", "yb", "yc"])
    assert {o.key for o in sel.chosen} == {"ab", "c"}
    assert sel.optimal and sel.cost == pytest.approx(1.85) and sel.lower_bound == pytest.approx(1.85)
    assert "reduced-cost fixing" in sel.proof


def test_matches_brute_force_when_the_relaxation_is_fractional() -> None:
    """Random covers of six outputs by pairs and triples, with singles beside them: the solver's cost
    is brute force's, whether the LP was integral or reduced-cost fixing had to finish the job (both
    occur, checked, so the test keeps exercising the fixing)."""
    outs = [f"y{i}" for i in range(6)]
    fixed = 0
    for seed in range(40):
        rng = np.random.default_rng(seed)
        options = [Option(f"o{k}", frozenset({"x"}), frozenset(rng.choice(outs, size=int(rng.integers(2, 4)),
                                                                          replace=False)), float(rng.uniform(1, 2)))
                   for k in range(10)]
        options += [Option(f"s{y}", frozenset({"x"}), frozenset({y}), float(rng.uniform(0.6, 1.2))) for y in outs]
        best = min(sum(o.cost for o in c) for r in range(1, len(outs) + 1)
                   for c in itertools.combinations(options, r) if set().union(*(o.outputs for o in c)) >= set(outs))
        sel = solve(options, {"x"}, outs)
        assert sel.optimal and sel.cost == pytest.approx(best), seed
        assert sel.lower_bound <= best + 1e-9
        fixed += "reduced-cost fixing" in sel.proof
    assert 0 < fixed < 40


def test_a_formulation_priced_again_solves_as_a_fresh_problem() -> None:
    """One formulation over every option, priced per solve (other costs, some options left out), finds
    what solving the remaining options from scratch finds: the same cost, bound and LP relaxation,
    boundary and start costs included, on random graphs where cycle cuts and reduced-cost fixing occur."""
    from korch.select.blp import formulate

    def boundary(producer: str, consumer: str, value: str) -> float:
        return 0.05 if producer == consumer else 0.4

    def start(engine: str) -> float:
        return {"a": 0.1, "b": 0.2}[engine]

    fixed = 0
    for seed in range(25):
        rng = np.random.default_rng(seed)
        graph = _random_graph(rng, 6)
        required = range(len(graph.nodes))
        options = [Option(f"{e}{list(c.nodes)}", frozenset(c.inputs), frozenset(c.outputs), 0.0, frozenset(c.nodes), e)
                   for c in enumerate_candidates(graph, CandidateLimits()) for e in "ab"]
        problem = formulate(options, graph.inputs, graph.outputs, required, boundary, start)
        for _ in range(3):
            costs = {o.key: float(rng.uniform(0.3, 1.0) * len(o.nodes) ** rng.uniform(0.3, 1.0)) for o in options
                     if len(o.nodes) == 1 or rng.random() < 0.6}       # the singles keep a plan possible
            fresh = [Option(o.key, o.inputs, o.outputs, costs[o.key], o.nodes, o.engine) for o in options
                     if o.key in costs]
            want = solve(fresh, graph.inputs, graph.outputs, required, boundary=boundary, start=start)
            got = problem.solve(costs)
            assert got.optimal and got.cost == pytest.approx(want.cost), seed
            assert got.lower_bound == pytest.approx(want.lower_bound)
            assert all(o.key in costs and o.cost == costs[o.key] for o in got.chosen)
            assert _legal(list(got.chosen), set(graph.inputs), list(graph.outputs))
            lp_want = formulate(fresh, graph.inputs, graph.outputs, required, boundary, start).relax()
            assert problem.relax(costs).bound_s == pytest.approx(lp_want.bound_s), seed
            fixed += "reduced-cost fixing" in got.proof
    assert fixed > 0


def test_the_exact_solve_starts_from_the_formulations_warm_lp_and_finds_what_the_lp_from_scratch_finds(
        monkeypatch) -> None:
    """Formulation.solve's LP (no cycle cuts yet) is the formulation's own HiGHS LP, warm from the
    last solve at other costs, not one built from scratch per solve; on random graphs, priced again
    and again, it reaches the optimum the LP from scratch (scipy's linprog) reaches, through
    reduced-cost fixing too."""
    from korch.select import blp
    from korch.select.blp import formulate

    calls = []
    real = blp._WarmLP.solve

    def counted(self, cost, upper, time_limit):
        calls.append(len(cost))
        return real(self, cost, upper, time_limit)

    monkeypatch.setattr(blp._WarmLP, "solve", counted)
    fixed = 0
    for seed in range(20):
        rng = np.random.default_rng(100 + seed)
        graph = _random_graph(rng, 6)
        options = [Option(f"{e}{list(c.nodes)}", frozenset(c.inputs), frozenset(c.outputs), 0.0, frozenset(c.nodes), e)
                   for c in enumerate_candidates(graph, CandidateLimits()) for e in "ab"]
        problem = formulate(options, graph.inputs, graph.outputs, range(len(graph.nodes)),
                            lambda p, c, v: 0.05 if p == c else 0.4, None)
        for _ in range(3):
            costs = {o.key: float(rng.uniform(0.3, 1.0) * len(o.nodes) ** rng.uniform(0.3, 1.0)) for o in options
                     if len(o.nodes) == 1 or rng.random() < 0.6}
            before = len(calls)
            got = problem.solve(costs)
            if got.cycle_cuts == 0:
                assert len(calls) == before + 1, seed          # the warm LP, once
            _, objective, upper = problem.priced(costs)
            cold = blp._exact(objective, problem.integrality, problem.matrix, problem.lower, upper, 60.0, None)
            assert cold.optimal
            assert got.cost * blp.COST_SCALE == pytest.approx(float(objective @ cold.x)), seed
            fixed += "reduced-cost fixing" in got.proof
    assert fixed > 0

def test_a_formulation_priced_without_any_producer_of_an_output_is_infeasible() -> None:
    """Leaving out every option that makes an output is no plan: both the relaxation and the exact
    solve say so, and the formulation still solves at costs that allow one afterwards."""
    from korch.select.blp import formulate

    options = [Option("a", frozenset({"x"}), frozenset({"y"}), 1.0),
               Option("b", frozenset({"x"}), frozenset({"y"}), 2.0),
               Option("c", frozenset({"y"}), frozenset({"z"}), 1.0)]
    problem = formulate(options, {"x"}, ["z"])
    for priced in (problem.relax, problem.solve):
        with pytest.raises(SelectionError, match="no feasible selection"):
            priced({"c": 1.0})
    assert problem.relax({"b": 0.5, "c": 1.0}).bound_s == pytest.approx(1.5)
    assert [o.key for o in problem.solve({"a": 3.0, "b": 0.5, "c": 1.0}).chosen] == ["b", "c"]


def _chain_options(rng: np.random.Generator, length: int) -> list[Option]:
    """Every span of a chain x -> v1 -> ... -> v{length} as an option with a random cost."""
    values = ["x"] + [f"v{i}" for i in range(1, length + 1)]
    return [Option(f"{a}-{b}", frozenset({values[a]}), frozenset({values[b]}), float(rng.uniform(0.5, 3) * (b - a)))
            for a in range(length) for b in range(a + 1, length + 1)]


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("budget", [1, 2, 5])
def test_a_budget_of_uncertainty_bounds_every_selection_less_its_largest_discounts(seed: int, budget: int) -> None:
    """relax with `discounts` and a `budget`: a lower bound on every selection's cost less its `budget`
    largest discounts (brute force; a relaxation: a mix of selections can spread the budget over more
    discounts, so not that least cost itself), above the bound with every discount taken and below
    the one with none, and the same bound from its dual: each option priced at min(cost, cost -
    discount + theta), less budget * theta."""
    from korch.select.blp import formulate

    rng = np.random.default_rng(seed)
    options = _chain_options(rng, 5)
    discounts = {o.key: float(rng.uniform(0, 0.8)) * o.cost for o in options if rng.random() < 0.7}
    problem = formulate(options, {"x"}, ["v5"])
    costs = {o.key: o.cost for o in options}

    def robust(chosen: Sequence[Option]) -> float:
        off = sorted((discounts.get(o.key, 0.0) for o in chosen), reverse=True)
        return sum(o.cost for o in chosen) - sum(off[:budget])

    want = min(robust(c) for r in range(1, 6) for c in itertools.combinations(options, r)
               if _feasible(list(c), {"x"}, ["v5"]))
    got = problem.relax(costs, discounts=discounts, budget=budget)
    assert got.bound_s <= want + 1e-9
    theta = got.theta_s
    priced = {k: min(c, c - discounts.get(k, 0.0) + theta) for k, c in costs.items()}
    assert problem.relax(priced).bound_s - budget * theta == pytest.approx(got.bound_s, rel=1e-6)
    # no discount, or none taken: the plain relaxation; every discount taken: the discounted costs
    assert problem.relax(costs, discounts={}, budget=budget).bound_s == pytest.approx(problem.relax(costs).bound_s)
    everything = problem.relax(costs, discounts=discounts, budget=100).bound_s
    assert everything == pytest.approx(problem.relax({k: c - discounts.get(k, 0.0) for k, c in costs.items()}).bound_s)
    assert everything * (1 - 1e-9) <= got.bound_s <= problem.relax(costs).bound_s * (1 + 1e-9)    # (rounding)


def test_a_warm_lp_gets_its_time_limit_on_every_solve_not_summed_over_them() -> None:
    """HiGHS 1.x compares its time limit with the run time of every run() of an instance together. The
    guided loop solves one relaxation per round on one instance; once those summed to the limit (a
    yolov4 optimize, after some 60 solves), every solve stopped at once. A limit well above one solve's time,
    but below the solves' sum, must still solve."""
    from scipy import sparse

    from korch.select.blp import _WarmLP

    rng = np.random.default_rng(0)
    rows, cols = 300, 600
    matrix = sparse.random(rows, cols, density=0.02, random_state=1, format="csr", data_rvs=lambda n: np.ones(n))
    matrix = sparse.csr_array(sparse.vstack([matrix, sparse.csr_matrix(np.eye(cols)[:rows])]))   # every row coverable
    lp = _WarmLP(matrix, np.ones(matrix.shape[0]))
    upper = np.ones(cols)
    # Solve until the sum is large (0.5 s, some hundreds of solves of ~1.5 ms each), so that half of it
    # is far above what one solve takes even on a loaded CI machine (40 solves summed to 60 ms there,
    # and one solve with a 30 ms limit was stopped once).
    solves = 0
    while lp._highs.getRunTime() < 0.5 and solves < 5000:
        assert lp.solve(rng.uniform(0.1, 1.0, cols), upper, time_limit=60.0) is not None
        solves += 1
    summed = lp._highs.getRunTime()
    assert summed >= 0.5, f"{solves} solves summed to {summed:.3f} s"
    assert lp.solve(rng.uniform(0.1, 1.0, cols), upper, time_limit=summed / 2) is not None


def test_crossing_cuts_close_the_relaxation_where_it_splits_a_crossing_and_keep_the_optimum() -> None:
    """x -> t (primitive 0) -> y (primitive 1). Computing t on engine A and y on engine B crosses
    engines (cost 1); B computes both at 2.5. The plain rows let the LP take every option at 1/2 and
    pay no crossing (2.25); the crossing cut (module doc) makes b's crossing as chosen as b itself.
    The BLP's optimum is B's whole (2.5) with or without the cut."""
    from scipy.optimize import linprog

    from korch.select.blp import COST_SCALE, formulate

    options = [Option("a", frozenset({"x"}), frozenset({"t"}), 1.0, frozenset({0}), "A"),
               Option("a2", frozenset({"x"}), frozenset({"t"}), 1.6, frozenset({0}), "B"),
               Option("b", frozenset({"t"}), frozenset({"y"}), 1.0, frozenset({1}), "B"),
               Option("c", frozenset({"x"}), frozenset({"y"}), 2.5, frozenset({0, 1}), "B")]

    def boundary(producer: str, consumer: str, value: str) -> float:
        return 0.0 if producer == consumer else 1.0
    problem = formulate(options, ["x"], ["y"], [0, 1], boundary)
    assert len(problem.crossings.cuts) == 1
    n = len(problem.integrality)
    continuous = problem.integrality == 0
    cut_rows = [r for r in range(problem.matrix.shape[0]) if problem.lower[r] == 0
                and continuous[problem.matrix[[r], :].indices].any()]
    plain = np.setdiff1d(np.arange(problem.matrix.shape[0]), cut_rows)
    _, objective, upper = problem.priced(None)

    def relaxed(rows: np.ndarray) -> float:
        lp = linprog(objective, A_ub=-problem.matrix[rows], b_ub=-problem.lower[rows], bounds=[(0, u) for u in upper],
                     method="highs")
        return lp.fun / COST_SCALE
    assert relaxed(plain) == pytest.approx(2.25) and len(plain) == problem.matrix.shape[0] - 1
    assert relaxed(np.arange(problem.matrix.shape[0])) == pytest.approx(2.5)
    chosen = solve(options, ["x"], ["y"], [0, 1], boundary=boundary)
    assert [o.key for o in chosen.chosen] == ["c"] and chosen.cost == pytest.approx(2.5) and chosen.optimal
    assert n == len(options) + 1                                   # one crossing variable: b reading t from a
