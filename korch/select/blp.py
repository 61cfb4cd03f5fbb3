"""The binary linear program that picks the cheapest set of kernels, exactly.

One 0/1 variable x_k per option (a candidate kernel on one backend) with measured cost c_k:

    minimize   sum_k c_k x_k
    subject to avail(t) >= 1      for every graph output t
               avail(t) >= x_k    for every option k and every input t of k
    where      avail(t) = 1 if t is a graph input (or constant), else sum_{k : t in outputs(k)} x_k

A primitive may be computed by several chosen kernels (recomputation), and a kernel may have several
outputs.

Cycle cuts. The constraints above do not make a choice orderable, even over convex options: with
a = relu(x), b = sigmoid(x), c = a + b, d = a * b, the kernels {relu, add} (reads b, writes a and c)
and {sigmoid, mul} (reads a, writes b and d) satisfy every constraint and each waits on the other.
A choice S is legal iff some order runs each option after all its inputs are free or made; running
whatever is ready only makes more values ready, so a greedy pass decides it, and what it leaves
stuck (U) all waits on values only stuck options make. After each solve that returns an illegal
choice, cuts are added and the problem solved again: for a subset C of U where each v in C waits on
a value t_v all of whose producers in S lie in C, and J the options outside C that produce some t_v,

               sum_{k in C} x_k - sum_{j in J} x_j <= |C| - 1.

S violates it (no j in J is chosen). It removes no legal choice: in a legal choice holding all of C,
the first v of C to run finds t_v made earlier, by an option outside C, so one of J is chosen. (The
plain no-good sum_{k in C} x_k <= |C| - 1 is not valid: {relu, add} and {sigmoid, mul} become legal
with a third kernel {sigmoid} beside them, and that may be the optimum.) Since the cuts remove only
illegal choices, the last solve's bound is a bound on the best legal choice. One round cuts every
disjoint such C (smallest first), so independent cycles cost one re-solve, not one each. Real graphs
rarely need a cut: none on the seven zoo instances of benchmarks/solvers.py, nor on candy and
yolox-nano with random costs.

Boundary costs. A kernel's profile is its time alone; in a plan every tensor one chosen kernel reads
from another also costs something (korch/profile/boundaries.py, calibrated per machine). With
`boundary(producer_engine, consumer_engine, value)` given, option k of engine B pays, for each input t
no graph input provides, boundary(B, B, t) in its own cost, and, for each other engine A that some
option producing t runs on, the difference d = boundary(A, B, t) - boundary(B, B, t) > 0 through a
continuous w in [0, 1] with

               w >= x_k + sum_{j produces t, engine(j) = A} x_j - 1,      cost d * w

so a tensor crossing engines costs what the calibration says only when both ends are chosen.

With `start(engine)` given, every option also pays its engine's kernel start (what a kernel costs to
start inside a plan beyond its profile, calibrated with the boundaries) in its own cost: a plan of n
kernels pays n starts.

Crossing cuts. Those rows alone let the LP relaxation dodge the crossings: with x_k = 1/2 and t's
producers at 1/2, every w may be 0. But a chosen k reads t from some chosen producer, and where none
of t's producers on k's own engine (or an engine it reads from at no extra cost) is chosen, that
producer runs on an engine A with a w of its own, and that w is 1. So, for each consumer k and input
t with crossing variables W(k, t),

               sum_{w in W(k, t)} w >= x_k - sum_{j produces t, engine(j) has no w in W(k, t)} x_j

is valid: it removes no integral choice, and raises the relaxation's bound. Measured on the twelve
solves of two cold candy optimizes at 2 threads that took 0.5 s or more (6,776 options, 34,634
constraints, 15,548-15,569 cuts; benchmarks/blp_crossing_cuts.py, BENCHMARKS.md): the LP bound rose
in every one, five of them now integral; of the three that took 4-6.4 s, two took 2.0 s, the third
6.5 s as before; the others 0.5-1.1 s, as before or less; every one to the same optimum. A tighter
bound also ends guided profiling sooner (its rounds stop once the bound reaches the fastest whole model).

Cover cuts. Every primitive that some graph output depends on is computed by at least one chosen
kernel in every feasible plan (a kernel computes its primitives from its inputs alone, so the chain
of kernels behind an output contains all of that output's ancestors). So

               sum_{k : p in nodes(k)} x_k >= 1   for every required primitive p

is valid: it removes no integer solution, but it removes the fractional ones that make the plain
relaxation weak. Measured on candy-mini (1,082 options): the relaxation's bound rises from 71 to
304.5 µs (the optimum), and HiGHS proves optimality in 0.05 s instead of stopping at a 62% gap
after 30 s.

Solving. With the cover cuts the LP relaxation is nearly integral, so each solve starts there (dual
simplex). An integral LP optimum is the optimum. Otherwise, with LP bound L and reduced costs r_k, a
choice holding option k costs at least L + r_k, so once some choice of cost U is known, every option
with r_k > U - L can be left out without losing any choice cheaper than U (reduced-cost fixing). The
MILP is solved over the options with r_k <= delta, first delta = 0 (the LP's support lies there); its
optimum U is a choice of the whole problem, and if every option left out has r_k > U - L it is the
optimum, else one more solve with delta = U - L proves it. Measured on the five instances of a yolov4
optimize (10,280 options, 764k nonzeros; benchmarks/blp_instances.py): HiGHS's MILP over every
option took 2.7-7.0 s each, nearly all of it presolve and root heuristics over the whole matrix,
with the optimum found at the root; this takes 0.8-1.9 s. The LP (0.5 s) is integral on three of
the five; on the other two the MILP keeps 778 and 4,172 options. A formulation solved again and again
(guided profiling's SplitProblem) keeps that LP in HiGHS (_WarmLP, shared with its relaxations) and
starts each solve from the last one's basis: on yolov4's guided problem (27,342 options, 132,571
constraints; benchmarks/blp_warm.py, BENCHMARKS.md), an integral LP's exact solve took 0.13-0.15 s
instead of 1.51-1.90 s from scratch, after a relaxation at the same costs (as a guided round runs
one). With cycle cuts the matrix differs, and the LP is built from scratch.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np

from korch.errors import ExitCode, KorchError

# scipy (0.45 s to import) is imported where a problem is built or solved: a warm optimize that gets
# its remembered whole-model plan back never solves.
if TYPE_CHECKING:
    from scipy import sparse

log = logging.getLogger("korch.select")

# A proven-optimal bound this close (relative) to the cost is the cost: float rounding, not a gap.
_ROUNDING = 1e-12
# Default solver time limit; on a timeout the best feasible selection is returned with its gap.
DEFAULT_TIME_LIMIT_S = 60.0
COST_SCALE = 1e6
# Each round of cycle cuts removes at least the choice it was made from, and real graphs need none
# (module doc); this many means a problem the cuts do not suit, reported rather than looped on.
MAX_CUT_ROUNDS = 100


class SelectionError(KorchError):
    """No set of options computes the outputs (every kernel for some value was rejected), no choice
    could be ordered, or the solver failed. The message names the value or the options; the pipeline
    reports rejected primitives before solving (coverage.py), with their ONNX nodes and reasons."""

    exit_code = ExitCode.VERIFY


@dataclass(frozen=True)
class Option:
    key: str                          # identifies the (candidate, backend) pair
    inputs: frozenset[str]            # values it reads that are not constants
    outputs: frozenset[str]           # values it writes for others to read
    cost: float                       # measured time (any unit, the same for all)
    nodes: frozenset[int] = frozenset()   # the primitives it computes (for the cover cuts)
    engine: str = ""                      # the backend that runs it (for boundary costs)


@dataclass(frozen=True)
class Selection:
    chosen: tuple[Option, ...]
    cost: float
    lower_bound: float                # proven bound: cost - lower_bound is the absolute gap
    seconds: float
    optimal: bool
    boundary_s: float = 0.0           # the part of `cost` that is kernel-boundary costs (crossings and kernel starts)
    cycle_cuts: int = 0               # cuts added because a choice could not be ordered (module doc)
    resolves: int = 0                 # solves after the first, each after a round of cycle cuts
    proof: str = ""                   # how the last solve proved its optimum, or why it did not

    @property
    def gap(self) -> float:
        return 0.0 if self.cost <= 0 else max(0.0, (self.cost - self.lower_bound) / self.cost)


@dataclass(frozen=True)
class SolveStats:
    """Every BLP solve of one optimize run (guided profiling's and measured selection's), cycle-cut
    re-solves and formulating inside each solve's seconds: how many, their total and the slowest,
    and how many the solver did not prove optimal within its time limit."""

    solves: int = 0
    seconds: float = 0.0
    slowest_s: float = 0.0
    unproven: int = 0


class SolveTally:
    """Adds up the solves it is handed (`solve(..., tally=)`, `Formulation.solve(..., tally=)`)."""

    def __init__(self) -> None:
        self.stats = SolveStats()

    def add(self, selection: Selection) -> None:
        s = self.stats
        self.stats = SolveStats(s.solves + 1, s.seconds + selection.seconds, max(s.slowest_s, selection.seconds),
                                s.unproven + (not selection.optimal))


@dataclass(frozen=True)
class _CycleCut:
    """sum_{k in members} x_k - sum_{j in suppliers} x_j <= len(members) - 1 (module doc)."""

    members: tuple[int, ...]
    suppliers: tuple[int, ...]


def _producers(options: Sequence[Option]) -> dict[str, list[int]]:
    producers: dict[str, list[int]] = {}
    for k, opt in enumerate(options):
        for t in opt.outputs:
            producers.setdefault(t, []).append(k)
    return producers


def _problem(options: Sequence[Option], free: set[str], outputs: Iterable[str],
             required: Iterable[int] = ()) -> tuple[sparse.csr_array, np.ndarray]:
    from scipy import sparse

    producers = _producers(options)
    rows, cols, vals, lower = [], [], [], []

    def row(value: str, consumer: int | None) -> None:
        r = len(lower)
        makers = producers.get(value)
        if not makers:
            who = f"option {options[consumer].key}" if consumer is not None else "the graph outputs"
            raise SelectionError(f"value {value!r}, needed by {who}, is produced by no option")
        for k in makers:
            rows.append(r), cols.append(k), vals.append(1.0)
        if consumer is None:
            lower.append(1.0)
        else:
            rows.append(r), cols.append(consumer), vals.append(-1.0)
            lower.append(0.0)

    for t in dict.fromkeys(outputs):
        if t not in free:
            row(t, None)
    for k, opt in enumerate(options):
        for t in sorted(opt.inputs - free):
            row(t, k)
    covering: dict[int, list[int]] = {}
    for k, opt in enumerate(options):
        for p in opt.nodes:
            covering.setdefault(p, []).append(k)
    for p in sorted(set(required)):
        if p not in covering:
            raise SelectionError(f"primitive {p} is computed by no option")
        r = len(lower)
        for k in covering[p]:
            rows.append(r), cols.append(k), vals.append(1.0)
        lower.append(1.0)
    matrix = sparse.csr_array((vals, (rows, cols)), shape=(len(lower), len(options)))
    return matrix, np.array(lower)


def _with_cuts(matrix: sparse.csr_array, lower: np.ndarray,
               cuts: Sequence[_CycleCut]) -> tuple[sparse.csr_array, np.ndarray]:
    """The constraints plus each cut, written as -sum(members) + sum(suppliers) >= 1 - |members|."""
    from scipy import sparse

    if not cuts:
        return matrix, lower
    rows, cols, vals = [], [], []
    for r, cut in enumerate(cuts):
        for k in cut.members:
            rows.append(r), cols.append(k), vals.append(-1.0)
        for j in cut.suppliers:
            rows.append(r), cols.append(j), vals.append(1.0)
    extra = sparse.csr_array((vals, (rows, cols)), shape=(len(cuts), matrix.shape[1]))
    return sparse.vstack([matrix, extra], format="csr"), np.concatenate(
        [lower, [1.0 - len(cut.members) for cut in cuts]])


def _stuck(options: Sequence[Option], chosen: Sequence[int], free: set[str]) -> tuple[list[int], set[str]]:
    """The chosen options no order can run, and the values the others make (with the free ones).

    Running whatever is ready only makes more values ready, so this greedy pass runs every option
    that some order could run: the choice is legal iff nothing is left stuck."""
    ready = set(free)
    waiting = {k: set(options[k].inputs) - ready for k in chosen}
    readers: dict[str, list[int]] = {}
    for k, missing in waiting.items():
        for t in missing:
            readers.setdefault(t, []).append(k)
    runnable = [k for k, missing in waiting.items() if not missing]
    while runnable:
        for t in options[runnable.pop()].outputs - ready:
            ready.add(t)
            for r in readers.get(t, ()):
                waiting[r].discard(t)
                if not waiting[r]:
                    runnable.append(r)
    return [k for k in chosen if waiting[k]], ready


def _cycle_cuts(options: Sequence[Option], producers: Mapping[str, Sequence[int]], chosen: Sequence[int],
                stuck: Sequence[int], ready: set[str]) -> list[_CycleCut]:
    """The cuts of the module doc for an illegal choice: C ranges over disjoint closed sets of stuck
    options, smallest first."""
    in_choice = set(chosen)

    def makers(t: str) -> list[int]:      # all stuck: a value a running option made would be ready
        return [j for j in producers.get(t, ()) if j in in_choice]

    # each stuck option waits on the missing input with the fewest chosen producers: small closures
    waits_on = {u: min(sorted(options[u].inputs - ready), key=lambda t: len(makers(t))) for u in stuck}

    def closure(u: int) -> frozenset[int]:
        members, todo = {u}, [u]
        while todo:
            for j in makers(waits_on[todo.pop()]):
                if j not in members:
                    members.add(j)
                    todo.append(j)
        return frozenset(members)

    cuts, taken = [], set()
    for members in sorted({closure(u) for u in stuck}, key=lambda m: (len(m), sorted(m))):
        if taken.isdisjoint(members):
            taken |= members
            suppliers = {j for v in members for j in producers.get(waits_on[v], ())} - members
            cuts.append(_CycleCut(tuple(sorted(members)), tuple(sorted(suppliers))))
    return cuts


# (producer engine, consumer engine, value name) -> seconds
BoundaryCost = Callable[[str, str, str], float]
StartCost = Callable[[str], float]
# Differences smaller than this (seconds) are not worth a variable.
_NEGLIGIBLE_S = 1e-7


@dataclass(frozen=True)
class _Crossings:
    """Boundary terms: each option's same-engine cost, and one continuous variable per (consumer option,
    input, other producer engine) with its cost and the producers it watches; and per (consumer, input)
    with such variables, a crossing cut (module doc): the variables, and the producers none watches."""

    own: np.ndarray                                       # seconds added to each option's cost
    cost: list[float]
    consumer: list[int]
    producers: list[list[int]]
    cuts: list[tuple[int, list[int], list[int]]] = field(default_factory=list)   # (consumer, variables, others)


def _crossings(options: Sequence[Option], free: set[str], boundary: BoundaryCost | None,
               start: StartCost | None = None) -> _Crossings:
    own = np.zeros(len(options))
    crossings = _Crossings(own, [], [], [])
    if start is not None:
        starts = {e: start(e) for e in {o.engine for o in options}}
        own += np.array([starts[o.engine] for o in options])
    if boundary is None:
        return crossings
    producers: dict[str, dict[str, list[int]]] = {}
    for j, opt in enumerate(options):
        for t in opt.outputs:
            producers.setdefault(t, {}).setdefault(opt.engine, []).append(j)
    # one price per (producer engine, consumer engine, tensor): thousands of options share each
    # (yolox-nano's 9,580 split-plan options: pricing took 1.2 s a solve asked per option, 0.15 s
    # asked once: benchmarks/boundary_pricing.py)
    priced: dict[tuple[str, str, str], float] = {}

    def price(producer: str, consumer: str, t: str) -> float:
        cost = priced.get((producer, consumer, t))
        if cost is None:
            cost = priced[(producer, consumer, t)] = boundary(producer, consumer, t)
        return cost

    for k, opt in enumerate(options):
        for t in sorted(opt.inputs - free):
            same = price(opt.engine, opt.engine, t)
            own[k] += same
            watched, others = [], []
            for engine, makers in sorted(producers.get(t, {}).items()):
                extra = price(engine, opt.engine, t) - same
                if engine != opt.engine and extra > _NEGLIGIBLE_S:
                    watched.append(len(crossings.cost))
                    crossings.cost.append(extra)
                    crossings.consumer.append(k)
                    crossings.producers.append(makers)
                else:
                    others += makers
            if watched:
                crossings.cuts.append((k, watched, others))
    return crossings


def usable(options: Sequence[Option], free: set[str]) -> list[Option]:
    """The options that can run in some plan: every input is free or made by another usable option.
    (An option whose input no accepted kernel produces, e.g. because every kernel computing it was
    rejected, could never run; dropping it leaves the optimum unchanged.)"""
    kept = list(options)
    while True:
        made = free | {t for o in kept for t in o.outputs}
        still = [o for o in kept if o.inputs <= made]
        if len(still) == len(kept):
            return kept
        kept = still


def formulate(options: Sequence[Option], graph_inputs: Iterable[str], graph_outputs: Iterable[str],
              required: Iterable[int] = (), boundary: BoundaryCost | None = None,
              start: StartCost | None = None) -> Formulation | None:
    """The BLP of `solve` over `options`, built once (None if no option is needed): a loop that
    solves it many times at other costs (guided profiling) prices it per solve instead of building
    it again (yolox-nano: 0.36 s a build, 22 rounds). Raises SelectionError if an output cannot be
    computed."""
    from scipy import sparse

    free = set(graph_inputs)
    graph_outputs = list(graph_outputs)
    kept = usable(options, free)
    if len(kept) < len(options):
        log.info("BLP: %d options dropped: an input of each is produced by no usable option",
                 len(options) - len(kept))
        made = free | {t for o in kept for t in o.outputs}
        for t in graph_outputs:
            if t not in made:
                missing = sorted({i for o in options if t in o.outputs for i in o.inputs - made})
                raise SelectionError(f"graph output {t!r} cannot be computed: the options that compute it need "
                                     f"{missing[:5]}, which no usable option produces")
    options = kept
    matrix, lower = _problem(options, free, graph_outputs, required)    # raises if an output has no producer
    if not options:
        return None
    crossings = _crossings(options, free, boundary, start)
    n, m = len(options), len(crossings.cost)
    if m:
        rows, cols, vals = [], [], []
        for i, (k, makers) in enumerate(zip(crossings.consumer, crossings.producers)):
            rows += [i, i] + [i] * len(makers)
            cols += [n + i, k] + makers
            vals += [1.0, -1.0] + [-1.0] * len(makers)
        for i, (k, watched, others) in enumerate(crossings.cuts, start=m):
            rows += [i] * (len(watched) + 1 + len(others))
            cols += [n + w for w in watched] + [k] + others
            vals += [1.0] * len(watched) + [-1.0] + [1.0] * len(others)
        links = sparse.csr_array((vals, (rows, cols)), shape=(m + len(crossings.cuts), n + m))
        matrix = sparse.vstack([sparse.hstack([matrix, sparse.csr_array((matrix.shape[0], m))]), links]).tocsr()
        lower = np.concatenate([lower, -np.ones(m), np.zeros(len(crossings.cuts))])
    integrality = np.concatenate([np.ones(n), np.zeros(m)])
    return Formulation(tuple(options), frozenset(free), crossings, integrality, matrix, lower)


@dataclass(frozen=True)
class Relaxation:
    """An optimum of `solve`'s LP relaxation (no cycle cuts): the options with a positive value in it
    (the ones an exact solve leans on) and its cost, a lower bound on the cost `solve` finds (seconds,
    boundary costs included)."""

    support: tuple[Option, ...]
    bound_s: float
    # With a budget (Formulation.relax's `discounts`): what one more discounted option would lower the
    # bound by, at most (the budget row's dual, seconds). Each option then prices at
    # min(cost, cost - discount + theta_s), and the bound is that pricing's optimum less budget * theta_s.
    theta_s: float = 0.0


@dataclass(frozen=True)
class Formulation:
    """`solve`'s BLP as arrays: min cost.x subject to matrix x >= lower, 0 <= x <= upper, x integral
    where `integrality` says. Columns: the usable options, then one per crossing (module doc,
    "Boundary costs"). Each solve prices it: by the options' own costs, or by `costs` (option key ->
    seconds), which leaves out (upper bound 0) every option it does not name."""

    options: tuple[Option, ...]
    free: frozenset[str]
    crossings: _Crossings
    integrality: np.ndarray
    matrix: sparse.csr_array
    lower: np.ndarray

    def priced(self, costs: Mapping[str, float] | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Each option's cost (seconds), the objective (scaled to microseconds, so the solver's absolute
        tolerances mean little) and each column's upper bound."""
        upper = np.ones(len(self.integrality))
        if costs is None:
            own = np.array([o.cost for o in self.options])
        else:
            own = np.array([costs.get(o.key, 0.0) for o in self.options])
            upper[:len(own)] = [o.key in costs for o in self.options]
        objective = np.concatenate([own + self.crossings.own, self.crossings.cost]) * COST_SCALE
        return own, objective, upper

    def relax(self, costs: Mapping[str, float] | None = None, time_limit: float = DEFAULT_TIME_LIMIT_S,
              discounts: Mapping[str, float] | None = None, budget: int = 0) -> Relaxation | None:
        """`solve`'s LP relaxation at these costs (no cycle cuts), in a fraction of its time (guided profiling
        measures what it leans on); None if the LP was not solved (time limit, numerical trouble), raises
        if nothing is feasible. Each solve starts from the last one's optimum (_WarmLP).

        `discounts` (option key -> seconds) with a `budget`: a budget of uncertainty. Up to `budget` of
        the chosen options may cost their discount less, the rest cost `costs`: the bound is the least
        cost of any selection when its `budget` largest discounts are taken. (Each option's column has
        a discounted twin y_k, counted wherever it is, at its cost less its discount, and sum y_k <=
        budget: one row more. A row y_k <= x_k per option instead made bert-base's guided replay solve
        1.5x longer.)"""
        own, objective, upper = self.priced(costs)
        n = len(own)
        off = {k: d for k, d in (discounts or {}).items() if d > 0} if budget > 0 else {}
        twins = None
        if off:
            twins, lp = self._budgeted(budget, off)
            priced_twins = objective[twins] - np.array([off.get(self.options[k].key, 0.0) for k in twins]) * COST_SCALE
            objective = np.concatenate([objective, priced_twins])
            upper = np.concatenate([upper, [float(upper[k] > 0 and self.options[k].key in off) for k in twins]])
            solved = lp.solve(objective, upper, time_limit)
        else:
            solved = self._lp.solve(objective, upper, time_limit)
        if solved is None:
            return None
        x, value, duals = solved.x, solved.value, solved.row_dual
        chosen = x[:n].copy()
        if twins is not None:                 # an option is chosen as itself or as its discounted twin
            chosen[twins] += x[len(self.integrality):]
        support = [k for k, v in enumerate(chosen) if v > _INTEGRAL]
        theta = abs(float(duals[-1])) / COST_SCALE if twins is not None else 0.0
        return Relaxation(self._chosen(support, own, costs), value / COST_SCALE, theta)

    @cached_property
    def _lp(self) -> _WarmLP:
        return _WarmLP(self.matrix, self.lower)

    @cached_property
    def _budgeted_lps(self) -> dict[int, tuple[np.ndarray, _WarmLP]]:
        return {}

    def _budgeted(self, budget: int, discounted: Iterable[str]) -> tuple[np.ndarray, _WarmLP]:
        """The LP relaxation with a budget of uncertainty (`relax`): columns x, the crossings, then a
        discounted twin y of each option that may be discounted; rows the BLP's (an option counted as
        x + y), and -sum y >= -budget (last). Built once per budget, with twins for the options
        discounted then (guided profiling's pending pairs, which only shrink), and again if another
        option is discounted later. Returns the twinned options' columns and the LP."""
        from scipy import sparse

        index = {o.key: k for k, o in enumerate(self.options)}
        want = {index[key] for key in discounted if key in index}
        lps = self._budgeted_lps
        if budget not in lps or not want <= set(lps[budget][0].tolist()):
            twins = np.array(sorted(want | (set(lps[budget][0].tolist()) if budget in lps else set())), dtype=int)
            width = self.matrix.shape[1]
            rows = sparse.vstack([
                sparse.hstack([self.matrix, self.matrix[:, twins]]),
                sparse.hstack([sparse.csr_array((1, width)), sparse.csr_array(-np.ones((1, len(twins))))]),
            ]).tocsr()
            lps[budget] = (twins, _WarmLP(rows, np.concatenate([self.lower, [-float(budget)]])))
        return lps[budget]

    def solve(self, costs: Mapping[str, float] | None = None, time_limit: float = DEFAULT_TIME_LIMIT_S,
              began: float | None = None, tally: SolveTally | None = None) -> Selection:
        """`solve` at these costs; `began`: when the time limit started (default: now); `tally`: where
        the solve is counted."""
        began = time.perf_counter() if began is None else began
        options, free, crossings = self.options, set(self.free), self.crossings
        own, objective, upper = self.priced(costs)
        n, m = len(options), len(crossings.cost)
        producers = _producers(options)
        cuts: list[_CycleCut] = []
        resolves = 0
        while True:
            remaining = time_limit - (time.perf_counter() - began)
            # without cuts the LP is the relaxation's own, warm from the last solve at other costs
            result = _exact(objective, self.integrality, *_with_cuts(self.matrix, self.lower, cuts), upper,
                            max(remaining, 0.0), None if cuts else self._lp)
            chosen = [k for k in range(n) if result.x[k] > 0.5]
            stuck, ready = _stuck(options, chosen, free)
            if not stuck:
                break
            if resolves == MAX_CUT_ROUNDS or time.perf_counter() - began >= time_limit:
                raise SelectionError(f"no selection that can be ordered was found after {len(cuts)} cycle cuts in "
                                     f"{time.perf_counter() - began:.1f} s: options "
                                     f"{[options[k].key for k in stuck][:5]} wait on each other's outputs")
            new = _cycle_cuts(options, producers, chosen, stuck, ready)
            cuts += new
            resolves += 1
            log.info("BLP: the choice cannot be ordered (%d options wait on each other, e.g. %s); %d cycle cut(s), "
                     "solving again", len(stuck), ", ".join(options[k].key for k in new[0].members), len(new))
        seconds = time.perf_counter() - began
        picked = self._chosen(chosen, own, costs)
        boundary_s = float(sum(crossings.own[k] for k in chosen)) + _crossing_cost(crossings, set(chosen))
        total = float(sum(own[k] for k in chosen)) + boundary_s
        bound = total if not np.isfinite(result.bound) else result.bound / COST_SCALE
        optimal = result.optimal
        if optimal and total - bound <= _ROUNDING * total:
            bound = total    # the bound came back through COST_SCALE and another summation order: same optimum
        log.info("BLP: %d options, %d constraints, %d boundary variables, chose %d, cost %.4g (boundaries %.4g), "
                 "%s (%s), %d cycle cuts in %d re-solves, in %.3f s", n if costs is None else int(upper[:n].sum()),
                 len(self.lower) + len(cuts), m, len(picked), total, boundary_s,
                 "optimal" if optimal else "not proven optimal", result.how, len(cuts), resolves, seconds)
        selection = Selection(picked, total, min(bound, total), seconds, optimal, boundary_s, len(cuts), resolves,
                              result.how)
        if tally is not None:
            tally.add(selection)
        return selection

    def _chosen(self, columns: Sequence[int], own: np.ndarray,
                costs: Mapping[str, float] | None) -> tuple[Option, ...]:
        """The options of `columns`, each at the cost it was solved at."""
        if costs is None:
            return tuple(self.options[k] for k in columns)
        return tuple(replace(self.options[k], cost=float(own[k])) for k in columns)


class _WarmLP:
    """min cost.x subject to matrix x >= lower, 0 <= x <= upper, solved again and again at other costs
    and upper bounds, each solve starting from the last one's optimal basis (HiGHS's dual simplex
    through highspy; scipy's linprog builds and solves from scratch each time). Replayed guided loops
    (benchmarks/guided_replay.py): yolox-nano's 22 relaxations took 0.74 s instead of 5.1,
    segformer-b0's 40 took 2.8 s instead of 15.5, to the same optima."""

    def __init__(self, matrix: sparse.csr_array, lower: np.ndarray) -> None:
        import highspy

        # The bindings' class: highspy.Highs, setting up its Python callbacks, prints a banner on stdout.
        self._highs = highs = highspy._Highs()
        highs.setOptionValue("output_flag", False)
        highs.setOptionValue("solver", "simplex")
        # The dual simplex (a changed cost leaves the basis dual feasible), in HiGHS's parallel variant
        # (SIP), which takes the same pivots: yolov4's guided relaxations took 0.64-0.70x the time
        # (benchmarks/guided_relax.py, BENCHMARKS.md), and its threads are idle once a solve returns.
        highs.setOptionValue("simplex_strategy", 2)
        csc = matrix.tocsc()
        n = csc.shape[1]
        lp = highspy.HighsLp()
        lp.num_col_, lp.num_row_ = n, csc.shape[0]
        lp.col_cost_, lp.col_lower_, lp.col_upper_ = np.zeros(n), np.zeros(n), np.ones(n)
        lp.row_lower_, lp.row_upper_ = lower, np.full(len(lower), highspy.kHighsInf)
        lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
        lp.a_matrix_.start_, lp.a_matrix_.index_, lp.a_matrix_.value_ = csc.indptr, csc.indices, csc.data
        highs.passModel(lp)
        self._columns = np.arange(n, dtype=np.int32)
        self._statuses = highspy.HighsModelStatus

    def solve(self, cost: np.ndarray, upper: np.ndarray, time_limit: float) -> _LPOptimum | None:
        """The optimum; None if not solved (time limit, numerical trouble). Raises SelectionError if
        nothing is feasible."""
        highs, n, columns = self._highs, len(self._columns), self._columns
        highs.changeColsCost(n, columns, cost)
        highs.changeColsBounds(n, columns, np.zeros(n), upper)
        # HiGHS 1.x holds its time limit against the instance's run time summed over every run(), not
        # this run's: a yolov4 optimize's guided loop had spent 60 s in this LP after some 60 solves, and
        # every later relaxation stopped at once ("time limit reached"), each round then handing a
        # 60 s MILP the whole problem unfixed, which stopped at its limit too, far from optimal
        highs.setOptionValue("time_limit", highs.getRunTime() + float(max(time_limit, 0.0)))
        highs.run()
        status = highs.getModelStatus()
        if status in (self._statuses.kInfeasible, self._statuses.kUnboundedOrInfeasible):
            raise SelectionError("the solver found no feasible selection: the LP relaxation is infeasible")
        if status != self._statuses.kOptimal:
            log.info("BLP: the LP relaxation was not solved (%s)", highs.modelStatusToString(status))
            return None
        solution = highs.getSolution()
        return _LPOptimum(np.asarray(solution.col_value), float(highs.getInfo().objective_function_value),
                          np.asarray(solution.row_dual), np.asarray(solution.col_dual))


@dataclass(frozen=True)
class _LPOptimum:
    x: np.ndarray
    value: float
    row_dual: np.ndarray
    col_dual: np.ndarray          # reduced costs: >= 0 at a column's lower bound, <= 0 at its upper


def solve(options: Sequence[Option], graph_inputs: Iterable[str], graph_outputs: Iterable[str],
          required: Iterable[int] = (), time_limit: float = DEFAULT_TIME_LIMIT_S,
          boundary: BoundaryCost | None = None, start: StartCost | None = None,
          tally: SolveTally | None = None) -> Selection:
    """Pick the options of least total cost that compute `graph_outputs` from `graph_inputs`, in
    some order (cycle cuts, module doc).

    `required`: primitives every plan computes (all ancestors of the outputs); they add the cover
    cuts, which need `Option.nodes`. `time_limit` covers every solve, re-solves after cuts included.
    `boundary`: what a tensor costs crossing from a kernel of one engine to one of another (module
    doc); it needs `Option.engine`. `start`: what a kernel of an engine costs to start in a plan
    (module doc). The selection's cost includes both, as its `boundary_s`. `tally`: where the solve
    is counted (SolveTally).
    """
    began = time.perf_counter()
    problem = formulate(options, graph_inputs, graph_outputs, required, boundary, start)
    if problem is None:
        return Selection((), 0.0, 0.0, time.perf_counter() - began, True)
    return problem.solve(time_limit=time_limit, began=began, tally=tally)


def _crossing_cost(crossings: _Crossings, picked: set[int]) -> float:
    return float(sum(c for c, k, makers in zip(crossings.cost, crossings.consumer, crossings.producers)
                     if k in picked and any(j in picked for j in makers)))


@dataclass(frozen=True)
class _Solved:
    x: np.ndarray
    bound: float           # proven lower bound on the objective (scaled units)
    optimal: bool
    how: str               # for the log: how optimality was proven, or why not


# An LP value this close to 0 or 1 is that integer; a reduced cost this close (relative to the bound)
# to the fixing threshold keeps its option (the solver's dual tolerance, with room to spare).
_INTEGRAL = 1e-6
_RC_SLACK = 1e-6


def _exact(cost: np.ndarray, integrality: np.ndarray, matrix: sparse.csr_array, lower: np.ndarray,
           upper: np.ndarray, time_limit: float, warm: _WarmLP | None = None) -> _Solved:
    """min cost.x subject to matrix x >= lower, 0 <= x <= upper, integral where `integrality` says: the
    LP relaxation, then the MILP over the options reduced-cost fixing leaves (module doc, "Solving").
    `warm`: the same LP kept by HiGHS (_WarmLP), solved from its last basis instead of from scratch.
    Raises if there is no feasible choice."""
    start = time.perf_counter()
    lp = _lp_optimum(cost, matrix, lower, upper, time_limit, warm)
    if isinstance(lp, str):                   # time limit or numerical trouble: HiGHS's MILP on everything
        result = _milp(cost, integrality, matrix, lower, upper, time_limit - (time.perf_counter() - start))
        return _Solved(result.x, _dual(result), result.status == 0, f"LP relaxation: {lp}; MILP")
    binary = integrality > 0
    open_ = upper > 0                         # an option left out (upper bound 0) is never kept
    x = lp.x
    bound = lp.value
    if np.all(np.abs(x[binary] - np.round(x[binary])) <= _INTEGRAL):
        return _Solved(np.where(binary, np.round(x), x), bound, True, "the LP relaxation is integral")
    reduced = np.maximum(lp.col_dual, 0.0)    # what raising a column off its lower bound costs
    slack = _RC_SLACK * max(1.0, abs(bound))
    delta = 0.0
    while True:
        keep = ~binary | ((reduced <= delta + slack) & open_)
        cols = np.flatnonzero(keep)
        remaining = max(time_limit - (time.perf_counter() - start), 0.0)
        result = _milp(cost[cols], integrality[cols], matrix[:, cols], lower, upper[cols], remaining,
                       raise_infeasible=False)
        if result.x is None:
            if keep[open_].all():
                raise SelectionError(f"the solver found no feasible selection: {result.message}")
            delta = np.inf                    # only with cycle cuts: the LP's support need not be a choice
            continue
        full = np.zeros(len(cost))
        full[cols] = result.x
        how = f"MILP over {int(np.sum(keep & binary))} of {int(np.sum(binary))} options after reduced-cost fixing"
        if result.status != 0:                # time limit: a choice, and the LP's bound
            return _Solved(full, bound, False, how + f": {result.message}")
        value = float(result.fun)
        if np.all(reduced[~keep & open_] > value - bound):
            return _Solved(full, min(value, max(bound, _dual(result))), True, how)
        delta = value - bound


def _lp_optimum(cost: np.ndarray, matrix: sparse.csr_array, lower: np.ndarray, upper: np.ndarray,
                time_limit: float, warm: _WarmLP | None) -> _LPOptimum | str:
    """The LP relaxation's optimum, or why there is none (a time limit, numerical trouble). Raises if it
    is infeasible. `warm`: the formulation's own LP, started from the last solve's basis (a relaxation
    at the same costs, in a guided round) instead of built and solved from scratch."""
    if warm is not None:
        solved = warm.solve(cost, upper, time_limit)
        return "not solved in the warm LP" if solved is None else solved
    from scipy.optimize import linprog

    lp = linprog(cost, A_ub=-matrix, b_ub=-lower, bounds=_bounds(upper), method="highs-ds",
                 options={"time_limit": time_limit})
    if lp.status == 2:
        raise SelectionError(f"the solver found no feasible selection: {lp.message}")
    if lp.status != 0 or lp.x is None:
        return lp.message
    # (A_ub is -matrix: the rows' duals are the negated marginals)
    return _LPOptimum(np.asarray(lp.x), float(lp.fun), -np.asarray(lp.ineqlin.marginals),
                      np.asarray(lp.lower.marginals))


def _bounds(upper: np.ndarray) -> np.ndarray:
    """linprog's bounds: each column in [0, upper]."""
    return np.column_stack([np.zeros_like(upper), upper])


def _dual(result) -> float:
    dual = getattr(result, "mip_dual_bound", None)
    return -np.inf if dual is None or not np.isfinite(dual) else float(dual)


def _milp(cost: np.ndarray, integrality: np.ndarray, matrix: sparse.csr_array, lower: np.ndarray,
          upper: np.ndarray, time_limit: float, raise_infeasible: bool = True):
    """One HiGHS MILP solve of min cost.x subject to matrix x >= lower, 0 <= x <= upper, integral where
    `integrality` says; raises if it finds no choice (unless told not to)."""
    from scipy.optimize import Bounds, LinearConstraint, milp

    result = milp(cost, integrality=integrality, bounds=Bounds(0, upper),
                  constraints=[LinearConstraint(matrix, lower, np.inf)] if len(lower) else [],
                  options={"time_limit": time_limit, "mip_rel_gap": 0.0, "disp": False})
    if result.x is None and raise_infeasible:
        raise SelectionError(f"the solver found no feasible selection: {result.message}")
    return result
