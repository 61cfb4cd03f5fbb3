"""The options the BLP weighed against a plan's kernels, with their costs and why each lost.

Candidates are enumerated again on the plan's graph (enumeration is deterministic, so these are the
candidates of optimize time under the default limits; regions, i.e. ranges of whole ONNX nodes, only
if the plan's summary says optimize offered some) and looked up in the profile database on
every registered backend, for the plan's thread count and machine.

The comparison is the honest local one: an alternative is set against the chosen kernels that
compute any of its primitives. When those kernels compute exactly its primitives the comparison is
exact ("costlier by X ms"); when they compute more, the alternative is costlier even though it does
less, or cheaper alone but leaves primitives that would need other kernels (the BLP's optimum says
that costs more in total).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import Enum

from korch.candidates import Candidate, CandidateLimits, enumerate_candidates
from korch.profile.database import ProfileDB, Record, Status
from korch.report.facts import PlanFacts

log = logging.getLogger("korch.report")

# Costs closer than this are a tie (timer resolution of the profiler is far coarser).
TIE_S = 1e-9
NO_DB_REASON = "no profile database"
MISSING_REASON = ("no record in the profile database (not profiled: guided profiling found no plan it could join at its "
                  "predicted cost, or outside the backend's budget, or another version)")


class Outcome(str, Enum):
    CHOSEN = "chosen"
    TIE = "tie"
    COSTLIER = "costlier"          # loses on cost against the chosen kernels over the same primitives
    NEEDS_MORE = "needs-more"      # cheaper alone, but leaves primitives of the chosen kernels uncovered
    REJECTED = "rejected"          # the backend could not compile it or it gave wrong results
    UNMEASURED = "unmeasured"


@dataclass(frozen=True)
class Rival:
    """One candidate on one backend, set against the plan kernels that compute its primitives."""

    candidate: Candidate
    backend: str
    cost_s: float | None
    outcome: Outcome
    reason: str                    # the verdict in words
    covering: tuple[int, ...]      # indices of the chosen kernels that compute any of its primitives
    covering_s: float
    extra_nodes: int               # primitives those kernels compute beyond the candidate's
    margin_s: float | None = None  # how much more the plan would cost with it (as far as the verdict knows)


_ORDER = {o: k for k, o in enumerate(Outcome)}


class ProfileIndex:
    """Candidates of the plan graph and their profile records, indexed by primitive."""

    def __init__(self, facts: PlanFacts, db: ProfileDB | None, backends: Sequence[str] | None = None,
                 limits: CandidateLimits = CandidateLimits()) -> None:
        self.facts = facts
        self.has_db = db is not None
        t0 = time.perf_counter()
        self.candidates = enumerate_candidates(facts.graph, limits) + _regions(facts)
        self.by_node: list[list[Candidate]] = [[] for _ in facts.graph.nodes]
        for c in self.candidates:
            for i in c.nodes:
                self.by_node[i].append(c)
        self.best: dict[tuple[int, ...], float] = {}
        self.backends = tuple(backends) if backends is not None else _default_backends(facts)
        self.records: dict[tuple[str, str], Record] = {}
        self.notes: list[str] = []
        if db is not None:
            keys = list(dict.fromkeys(c.key for c in self.candidates))
            for name in self.backends:
                version = _backend_version(name)
                if version is None:
                    continue
                found = db.get_many(keys, name, version, facts.plan.threads, facts.plan.machine)
                for key, record in found.items():
                    self.records[(key, name)] = record
                if not found and any(k.backend == name for k in facts.kernels):
                    self.notes.append(f"no profile records for {version} with {facts.plan.threads} thread(s) on "
                                      f"this plan's machine: the plan was probably optimized with another {name} "
                                      "version, so its rivals cannot be shown")
        for note in self.notes:
            log.warning("%s", note)
        for c in self.candidates:
            costs = [r.median_s for b in self.backends if (r := self.records.get((c.key, b))) is not None
                     and r.median_s is not None]
            if costs:
                self.best[c.nodes] = min(costs)
        self._judged: dict[tuple[tuple[int, ...], str, str], Rival] = {}
        known = {(c.key, c.nodes) for c in self.candidates}
        strangers = [k.id for k in facts.kernels if (k.step.key, k.nodes) not in known]
        if strangers:
            log.warning("kernels %s are not among the candidates enumerated now (other limits at optimize time?)",
                        ", ".join(strangers[:5]))
        log.info("alternatives: %d candidates, %d profile records on %s (%.2f s)", len(self.candidates),
                 len(self.records), ", ".join(self.backends), time.perf_counter() - t0)

    def containing(self, nodes: Iterable[int]) -> list[Candidate]:
        seen: dict[tuple[int, ...], Candidate] = {}
        for i in nodes:
            for c in self.by_node[i]:
                seen.setdefault(c.nodes, c)
        return list(seen.values())

    def cover_cost(self, nodes: set[int]) -> float | None:
        """The cheapest measured way to compute `nodes` with one kernel per connected part, if each part is a
        candidate; None otherwise."""
        total = 0.0
        for part in _connected_parts(self.facts, nodes):
            cost = self.best.get(part)
            if cost is None:
                return None
            total += cost
        return total

    def rivals(self, nodes: Iterable[int]) -> list[Rival]:
        """Every (candidate, backend) containing any of `nodes`, best first: chosen, then by cost delta."""
        found = [self.judge(c, b) for c in self.containing(nodes) for b in self.backends]
        return sorted(found, key=lambda r: (_ORDER[r.outcome], r.margin_s if r.margin_s is not None else 0.0,
                                            r.candidate.nodes, r.backend))

    def judge(self, candidate: Candidate, backend: str) -> Rival:
        ident = (candidate.nodes, candidate.key, backend)
        if ident not in self._judged:
            self._judged[ident] = self._judge(candidate, backend)
        return self._judged[ident]

    def _judge(self, candidate: Candidate, backend: str) -> Rival:
        facts = self.facts
        covering = tuple(sorted({k for i in candidate.nodes for k in facts.kernels_of[i]}))
        covering_s = sum(facts.kernels[k].cost_s for k in covering)
        covered = {i for k in covering for i in facts.kernels[k].nodes}
        extra = len(covered - set(candidate.nodes))
        record = self.records.get((candidate.key, backend))
        same = [k for k in covering if facts.kernels[k].backend == backend and facts.kernels[k].nodes == candidate.nodes
                and facts.kernels[k].step.key == candidate.key]
        if same:
            return Rival(candidate, backend, facts.kernels[same[0]].cost_s, Outcome.CHOSEN, "chosen", covering,
                         covering_s, extra)
        if record is None:
            reason = MISSING_REASON if self.has_db else NO_DB_REASON
            return Rival(candidate, backend, None, Outcome.UNMEASURED, reason, covering, covering_s, extra)
        if record.status is Status.REJECTED:
            return Rival(candidate, backend, None, Outcome.REJECTED, f"rejected: {record.reason}", covering,
                         covering_s, extra)
        tolerance = facts.plan.summary.get("kernel_tolerance")
        if record.error is not None and tolerance is not None and record.error > tolerance:
            return Rival(candidate, backend, record.median_s, Outcome.REJECTED,
                         f"rejected: relative error {record.error:.2e} against the reference exceeds this plan's "
                         f"tolerance {tolerance:.2e}", covering, covering_s, extra)
        assert record.median_s is not None
        rest = covered - set(candidate.nodes)
        rest_s = self.cover_cost(rest) if rest else 0.0
        outcome, reason, margin = _verdict(record.median_s, covering_s, extra, rest_s,
                                           [facts.kernels[k].id for k in covering], _why_not_cheaper(facts))
        return Rival(candidate, backend, record.median_s, outcome, reason, covering, covering_s, extra, margin)


def _why_not_cheaper(facts: PlanFacts) -> str:
    """Why the plan does not use a kernel that its profile says is cheaper, in this plan's terms.
    The solver's optimality gap is cited only when there is one."""
    summary = facts.plan.summary
    gap = summary.get("gap") or 0.0
    if gap > 0:
        return f"within the solver's optimality gap ({gap:.1%})"
    kept = summary.get("kept")
    if kept and kept != "split":
        return f"the plan is {kept}'s whole model, kept because it ran fastest end to end ({summary.get('why', '')})"
    priced = []
    if summary.get("in_plan_costs"):
        priced.append("kernels it timed in a plan at their time there, the others at their profile plus the start "
                      "cost the timed ones showed")
    if (summary.get("boundary_ms") or 0.0) > 0:
        priced.append("every tensor that crosses between kernels and every kernel's start (boundary costs "
                      "calibrated on this machine)")
    if priced:
        return f"the selection prices {' and '.join(priced)}, and with those it costs more in a plan"
    return "the plan was kept by its measured end-to-end time, not by the sum of profiles alone"


def _verdict(cost_s: float, covering_s: float, extra: int, rest_s: float | None,
             kernel_ids: list[str], why_not_cheaper: str = "") -> tuple[Outcome, str, float]:
    margin_s = cost_s + (rest_s or 0.0) - covering_s
    outcome, reason = _verdict_text(cost_s, covering_s, extra, rest_s, kernel_ids, why_not_cheaper)
    return outcome, reason, margin_s


def _verdict_text(cost_s: float, covering_s: float, extra: int, rest_s: float | None,
                  kernel_ids: list[str], why_not_cheaper: str = "") -> tuple[Outcome, str]:
    """Compare with the chosen kernels; when they compute more, add the best cover of the remainder."""
    ids = "+".join(kernel_ids)
    if extra and rest_s is not None:
        delta_ms = (cost_s + rest_s - covering_s) * 1e3
        if delta_ms * 1e-3 > TIE_S:
            return Outcome.COSTLIER, (f"costlier by {delta_ms:.4f} ms: with the best kernels for the other {extra} "
                                      f"primitives of {ids} it takes {(cost_s + rest_s) * 1e3:.4f} ms, "
                                      f"{ids} take {covering_s * 1e3:.4f} ms")
        if delta_ms * 1e-3 >= -TIE_S:
            return Outcome.TIE, f"with the best kernels for the other {extra} primitives of {ids} it costs the same"
        return Outcome.TIE, (f"{-delta_ms:.4f} ms cheaper with the best kernels for the other {extra} primitives "
                             f"of {ids}, by profiles; {why_not_cheaper}")
    delta_ms = (cost_s - covering_s) * 1e3
    if extra == 0:
        if abs(delta_ms) * 1e-3 <= TIE_S:
            return Outcome.TIE, f"same cost as {ids} on the same primitives (a tie the solver broke)"
        if delta_ms > 0:
            return Outcome.COSTLIER, f"costlier by {delta_ms:.4f} ms than {ids} on the same primitives"
        return Outcome.TIE, (f"{-delta_ms:.4f} ms cheaper than {ids} on the same primitives, by profiles; "
                             f"{why_not_cheaper}")
    if delta_ms >= 0:
        return Outcome.COSTLIER, (f"costlier by {delta_ms:.4f} ms than {ids}, "
                                  f"which also compute{'s' if len(kernel_ids) == 1 else ''} {extra} more primitives")
    return Outcome.NEEDS_MORE, (f"{-delta_ms:.4f} ms cheaper alone than {ids}, but those also compute {extra} "
                                "primitives it does not, which no single measured kernel per part covers; "
                                "the BLP found covering them otherwise costs more in total")


def _connected_parts(facts: PlanFacts, nodes: set[int]) -> list[tuple[int, ...]]:
    graph, index = facts.graph, facts.node_index
    parent = {i: i for i in nodes}

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i in nodes:
        for v in graph.nodes[i].inputs:
            j = index.get(v)
            if j is not None and j in parent:
                parent[root(i)] = root(j)
    parts: dict[int, list[int]] = {}
    for i in sorted(nodes):
        parts.setdefault(root(i), []).append(i)
    return [tuple(p) for p in parts.values()]


def _regions(facts: PlanFacts) -> tuple[Candidate, ...]:
    if not facts.plan.summary.get("regions"):
        return ()
    try:
        from korch.candidates import region_candidates
    except ImportError:
        return ()
    return tuple(region_candidates(facts.graph))


def _default_backends(facts: PlanFacts) -> tuple[str, ...]:
    from korch.backends import backend_names

    used = [k.backend for k in facts.kernels]
    return tuple(dict.fromkeys(used + [b for b in backend_names() if b != "reference"]))


def _backend_version(name: str) -> str | None:
    """The version profile records of `name` are stored under, timed as `korch optimize` times them."""
    from korch.backends import get_backend
    from korch.profile.profiler import record_version
    from korch.settings import ProfileSettings

    try:
        return record_version(get_backend(name), ProfileSettings())
    except Exception as e:  # an optional backend that cannot start here: its records are simply not shown
        log.info("backend %s unavailable (%s); its profile records are not shown", name, e)
        return None
