"""The binary linear program that picks the cheapest set of kernels, exactly.

One 0/1 variable x_k per option (a candidate kernel on one backend) with measured cost c_k:

    minimize   sum_k c_k x_k
    subject to avail(t) >= 1      for every graph output t
               avail(t) >= x_k    for every option k and every input t of k
    where      avail(t) = 1 if t is a graph input (or constant), else sum_{k : t in outputs(k)} x_k

A primitive may be computed by several chosen kernels (recomputation), and a kernel may have several
outputs. Options are convex sets of a DAG, so any choice that satisfies the constraints can be ordered.

Boundary costs. A kernel's profile is its time alone; in a plan every tensor one chosen kernel reads
from another also costs something (korch/profile/boundaries.py, calibrated per machine). With
`boundary(producer_engine, consumer_engine, value)` given, option k of engine B pays, for each input t
no graph input provides, boundary(B, B, t) in its own cost, and, for each other engine A that some
option producing t runs on, the difference d = boundary(A, B, t) - boundary(B, B, t) > 0 through a
continuous w in [0, 1] with

               w >= x_k + sum_{j produces t, engine(j) = A} x_j - 1,      cost d * w

so a tensor crossing engines costs what the calibration says only when both ends are chosen.

Cover cuts. Every primitive that some graph output depends on is computed by at least one chosen
kernel in every feasible plan (a kernel computes its primitives from its inputs alone, so the chain
of kernels behind an output contains all of that output's ancestors). So

               sum_{k : p in nodes(k)} x_k >= 1   for every required primitive p

is valid: it removes no integer solution, but it removes the fractional ones that make the plain
relaxation weak. Measured on candy-mini (1,082 options): the relaxation's bound rises from 71 to
304.5 µs (the optimum), and HiGHS proves optimality in 0.05 s instead of stopping at a 62% gap
after 30 s.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import sparse
from scipy.optimize import Bounds, LinearConstraint, milp

from korch.errors import ExitCode, KorchError

log = logging.getLogger("korch.select")

# A proven-optimal bound this close (relative) to the cost is the cost: float rounding, not a gap.
_ROUNDING = 1e-12
# Default solver time limit; on a timeout the best feasible selection is returned with its gap.
DEFAULT_TIME_LIMIT_S = 60.0
COST_SCALE = 1e6


class SelectionError(KorchError):
    """No set of options computes the outputs (every kernel for some value was rejected), or the
    solver failed. The message names the value."""

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
    boundary_s: float = 0.0           # the part of `cost` that is kernel-boundary costs

    @property
    def gap(self) -> float:
        return 0.0 if self.cost <= 0 else max(0.0, (self.cost - self.lower_bound) / self.cost)


def _problem(options: Sequence[Option], free: set[str], outputs: Iterable[str],
             required: Iterable[int] = ()) -> tuple[sparse.csr_array, np.ndarray]:
    producers: dict[str, list[int]] = {}
    for k, opt in enumerate(options):
        for t in opt.outputs:
            producers.setdefault(t, []).append(k)
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


# (producer engine, consumer engine, value name) -> seconds
BoundaryCost = Callable[[str, str, str], float]
# Differences smaller than this (seconds) are not worth a variable.
_NEGLIGIBLE_S = 1e-7


@dataclass(frozen=True)
class _Crossings:
    """Boundary terms: each option's same-engine cost, and one continuous variable per (consumer option,
    input, other producer engine) with its cost and the producers it watches."""

    own: np.ndarray                                       # seconds added to each option's cost
    cost: list[float]
    consumer: list[int]
    producers: list[list[int]]


def _crossings(options: Sequence[Option], free: set[str], boundary: BoundaryCost | None) -> _Crossings:
    own = np.zeros(len(options))
    crossings = _Crossings(own, [], [], [])
    if boundary is None:
        return crossings
    producers: dict[str, dict[str, list[int]]] = {}
    for j, opt in enumerate(options):
        for t in opt.outputs:
            producers.setdefault(t, {}).setdefault(opt.engine, []).append(j)
    for k, opt in enumerate(options):
        for t in sorted(opt.inputs - free):
            same = boundary(opt.engine, opt.engine, t)
            own[k] += same
            for engine, makers in sorted(producers.get(t, {}).items()):
                extra = boundary(engine, opt.engine, t) - same
                if engine != opt.engine and extra > _NEGLIGIBLE_S:
                    crossings.cost.append(extra)
                    crossings.consumer.append(k)
                    crossings.producers.append(makers)
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


def solve(options: Sequence[Option], graph_inputs: Iterable[str], graph_outputs: Iterable[str],
          required: Iterable[int] = (), time_limit: float = DEFAULT_TIME_LIMIT_S,
          boundary: BoundaryCost | None = None) -> Selection:
    """Pick the options of least total cost that compute `graph_outputs` from `graph_inputs`.

    `required`: primitives every plan computes (all ancestors of the outputs); they add the cover
    cuts, which need `Option.nodes`. `boundary`: what a tensor costs crossing from a kernel of one
    engine to one of another (module doc); it needs `Option.engine`. The selection's cost includes it.
    """
    start = time.perf_counter()
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
    if not options:
        return Selection((), 0.0, 0.0, time.perf_counter() - start, True)
    matrix, lower = _problem(options, free, graph_outputs, required)
    crossings = _crossings(options, free, boundary)
    n, m = len(options), len(crossings.cost)
    # Costs are seconds (~1e-6); scaled to microseconds so the solver's absolute tolerances mean little.
    cost = np.concatenate([np.array([o.cost for o in options]) + crossings.own, crossings.cost]) * COST_SCALE
    if m:
        rows, cols, vals = [], [], []
        for i, (k, makers) in enumerate(zip(crossings.consumer, crossings.producers)):
            rows += [i, i] + [i] * len(makers)
            cols += [n + i, k] + makers
            vals += [1.0, -1.0] + [-1.0] * len(makers)
        links = sparse.csr_array((vals, (rows, cols)), shape=(m, n + m))
        matrix = sparse.vstack([sparse.hstack([matrix, sparse.csr_array((matrix.shape[0], m))]), links]).tocsr()
        lower = np.concatenate([lower, -np.ones(m)])
    result = milp(cost, integrality=np.concatenate([np.ones(n), np.zeros(m)]), bounds=Bounds(0, 1),
                  constraints=[LinearConstraint(matrix, lower, np.inf)] if len(lower) else [],
                  options={"time_limit": time_limit, "mip_rel_gap": 0.0, "disp": False})
    seconds = time.perf_counter() - start
    if result.x is None:
        raise SelectionError(f"the solver found no feasible selection: {result.message}")
    picked = [k for k in range(n) if result.x[k] > 0.5]
    chosen = tuple(options[k] for k in picked)
    crossing_s = _crossing_cost(crossings, set(picked))
    boundary_s = float(sum(crossings.own[k] for k in picked)) + crossing_s
    total = float(sum(o.cost for o in chosen)) + boundary_s
    dual = getattr(result, "mip_dual_bound", None)
    bound = total if dual is None or not np.isfinite(dual) else float(dual) / COST_SCALE
    optimal = result.status == 0
    if optimal and total - bound <= _ROUNDING * total:
        bound = total    # the bound came back through COST_SCALE and another summation order: same optimum
    log.info("BLP: %d options, %d constraints, %d boundary variables, chose %d, cost %.4g (boundaries %.4g), "
             "%s in %.3f s", n, len(lower), m, len(chosen), total, boundary_s,
             "optimal" if optimal else f"status {result.status}", seconds)
    return Selection(chosen, total, min(bound, total), seconds, optimal, boundary_s)


def _crossing_cost(crossings: _Crossings, picked: set[int]) -> float:
    return float(sum(c for c, k, makers in zip(crossings.cost, crossings.consumer, crossings.producers)
                     if k in picked and any(j in picked for j in makers)))
