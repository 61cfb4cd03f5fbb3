"""Measured selection: the plan kept is the fastest executable, timed, not the lowest sum of profiles.

The BLP is exact over profiled kernel costs plus the boundary costs calibrated on this machine
(korch/profile/boundaries.py: what a tensor costs crossing from one kernel to the next, by bytes,
engine pair and layout), but profiles taken one kernel at a time on a noisy machine can still order
close contenders wrongly. So:

1. The best *split* plan (two or more kernels) is solved for with the boundary costs, compiled, and
   run with each kernel timed in place. A profile times a kernel alone, back to back on the same
   inputs: its weights stay in cache and its thread pool awake, and of thousands of candidates timed
   once on a noisy machine, the solver favours those whose one timing was lucky (efficientvit-b1:
   the chosen kernels profiled at 3.7 ms, took 5.4 ms timed alone again and 7.1 ms in the plan).
   So each kernel's time in the plan, less the boundary costs the BLP charges it, replaces its
   profile, and the BLP is solved again, until it chooses only kernels already timed in a plan
   (in-plan times are taken at the speed the machine had when the kernels were profiled: each
   round is divided by how much slower than its profile the cheapest whole model then ran alone,
   not the plan's own kernels, whose profiles the solver chose for reading low; InPlanTimes)
   (`refine_rounds` at most). A kernel starts in a plan with what the kernels before it evicted
   (efficientvit-b1 on the AMD host: small kernels 0.2-0.6 ms over their profile, about 0.3 ms a
   kernel, where the calibrated chains of identical kernels read 10-50 us). The BLP charges every
   kernel its engine's calibrated kernel start (korch/profile/boundaries.py); a kernel not yet timed
   in a plan is priced as the kernels timed in plans so far ran against their profiles (both net
   of what the BLP charges them): a factor on its profile (its luck) and a start cost (_Context.
   untimed_cost), so that each round's solve does not turn to other untimed kernels only because
   their profiles read as low as the last plan's did. The last
   plan is timed end to end; its prediction (in-plan costs + boundaries) is kept beside its measured
   time.
2. Each engine's *whole-model* kernel (one engine running everything) that could beat it joins a
   side-by-side comparison, interleaved like `korch bench`, with the split plan. They meet two at a
   time: the split plan (the first champion) against the cheapest whole model by profile, the winner
   against the next, and so on; each duel's loser is dropped before the next contender compiles, so
   no more than two compiled plans hold their weights at once (all of them alive together took
   bert-base's optimize to 6.4 GB). A split plan must win each of its duels by
   `multi_kernel_margin`; otherwise the last duel's winner, a whole-model kernel, is the plan.
   At 2 threads and more a duel that ran with the core link far or moving, where profiling read it
   near, is run again (`duel_link_retries`), and its verdict taken from the run nearest the near
   state (`_LINK_RANK`); if no run was near, two whole models both profiled near at the machine's
   speed are judged by those profiles (a plan runs mostly near, and the far state slows engines
   unequally).
   An engine whose whole model profiled beyond `contender_factor` of the rest is not trusted to its
   profile (a slow spell can triple one): it is compiled and timed once more after the champion (a
   whole-model champion that compiles again in seconds is not held meanwhile: the two whole models
   of yolov4 together took the optimize to 4.6 GB), and joins the duels if it is within the factor
   after all (`_second_look`; it is checked only then); not if its engine
   compiles slowly and the cache keeps no compiled kernel of it (Inductor's whole model took 45 s to
   compile again for a look), nor if both profiles were taken in this run at the machine's speed and
   in one core-link state (`_profiles_compare`: nothing was left to slow one of them).
   Before they are timed, the split plan and each contender are checked against onnxruntime on
   fresh random inputs (verify.PlanChecker: the accuracy policy that also judges the final plan).
   A split plan that disagrees is not dropped at once: its errors add up from kernels that each
   passed alone, so the kernels farthest from the reference when fed the reference's own inputs
   (`blame_fraction`) are excluded from split plans and the BLP solved again, up to `check_rounds`
   times (the exclusions are remembered with the outcome). A whole-model contender that disagrees
   is dropped, with the check's words in the reason; if every contender disagrees, the other
   engines' whole-model kernels are tried, cheapest first. Any contender can fail: kernels each
   accepted within the model-wide tolerance can add up past what one output allows, and an
   engine's whole model can miss it (OpenVINO's on yolov4 on an AVX2 host, found by
   the final check after a 20-minute optimize). Such a plan must cost a fallback, not the run.
3. What was kept and why is recorded in words ("the best split plan measured 45.6 ms side by side with
   onnxruntime's whole model 39.0 ms"), and stored in the profile database, so a warm run solves,
   compiles and times once.

A split plan predicted slower than `split_within` times the cheapest whole-model kernel's profile (by
default: slower than it at all) is not compiled: its predicted time is the reason.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TypeVar

from korch.backends import Kernel, get_backend
from korch.errors import VerificationError
from korch.frontend.regions import OnnxSource
from korch.heap import release_freed_heap
from korch.ir.graph import Graph
from korch.plan import Plan, PlanError, Step, order_steps
from korch.plan.plan import step_onnx_nodes
from korch.plan.schedule import Schedule, ScheduleError
from korch.plan.store import stored_kernels
from korch.profile.boundaries import Boundaries, BoundaryModel
from korch.profile.database import ProfileDB, RememberedSelection
from korch.profile.guided import profiled_last
from korch.profile.link import MOVING, UNREAD, StateProbe
from korch.profile.timing import CacheSweep, Timing, measure, median_ratio_decided, paired_ratio, side_by_side
from korch.runtime import Session, compile_plan
from korch.runtime.session import compile_step
from korch.select.blp import Option, Selection, SelectionError, SolveTally, solve
from korch.select.coschedule import ScheduleStats, coschedule
from korch.settings import OptimizeSettings, SelectionSettings
from korch.verify import PlanCheck, PlanChecker, diff_outputs, random_feeds

log = logging.getLogger("korch.select")

T = TypeVar("T")

# Changes when the way a selection problem is decided changes, so remembered outcomes of an older
# procedure are not replayed.
PROCEDURE = "measured-selection-v18-duel-near-profiles"
SPLIT = "split"
# In-plan costs are keyed "candidate key|backend"; this entry holds the start cost of a kernel not
# yet timed in a plan (_Context.costed), beyond its engine's calibrated kernel start, stored with them
# so that a warm run solves as the cold one.
START = "start|"
# ... and this one the factor on its profile (_Context.untimed_cost): the solver chose kernels whose
# profiles read low, so one not yet timed in a plan is expected to run above its profile in proportion.
FACTOR = "factor|"
# Entries "excluded|<backend>|<primitive indices>" (at inf) name the (engine, primitives) pairs a cold run
# excluded from split plans (_Context.exclude), so that a warm run excludes exactly what it did: a
# kernel's cost key alone (inf) would also exclude its structural twins over other primitives.
EXCLUDED = "excluded|"


@dataclass(frozen=True)
class Duel:
    """One side-by-side meeting of two contenders (SPLIT or an engine): their medians and who won.
    `ratio` is second's time over first's, round by round (timing.paired_ratio), which decides; the
    medians are what a reader compares."""

    first: str
    second: str
    first_s: float                        # each one's median, side by side (or its estimate, untimed)
    second_s: float
    winner: str
    timed: bool = True                    # False: side-by-side comparison off, profiles decided
    ratio: float | None = None            # second over first, the median of the rounds' ratios
    state: str | None = None              # the core-link state it ran in (link.StateProbe.around; None: no probe)
    tries: int = 1                        # side-by-side comparisons run (SelectionSettings.duel_link_retries)
    # True: two whole models whose side-by-side comparison never ran with the core link near, decided by
    # their profiles, both taken near at the machine's speed (`ratio` is then the profiles'; `_duel`)
    profiled: bool = False

    @property
    def loser(self) -> str:
        return self.second if self.winner == self.first else self.first

    def of(self, name: str) -> tuple[float, str, float]:
        """`name`'s median, its rival, and the rival's median."""
        if name == self.first:
            return self.first_s, self.second, self.second_s
        return self.second_s, self.first, self.first_s

    def ratio_of(self, name: str) -> float:
        """`name`'s time over its rival's: round by round when timed, else of the two figures."""
        r = self.ratio if self.ratio is not None else self.second_s / self.first_s
        return r if name == self.second else 1.0 / r


@dataclass(frozen=True)
class SelectionStats:
    """What measured selection did, for the summary, the report and `explain`."""

    kernels: int
    predicted_ms: float                   # the kept plan's kernel profiles plus its boundary costs
    measured_ms: float                    # the kept plan, timed end to end
    gap: float                            # the solver's proven relative gap for the kept plan
    optimal: bool
    boundary_ms: float                    # the part of predicted_ms that is boundary costs
    rounds: int                           # split plans compiled and run (solves with in-plan costs)
    remembered: bool                      # replayed from an earlier run's outcome
    solve_seconds: float
    kept: str                             # SPLIT, or the engine whose whole-model kernel is the plan
    why: str                              # the reason, in words
    split_kernels: int | None = None      # the best split plan, if there was one
    split_predicted_ms: float | None = None
    split_measured_ms: float | None = None
    whole_model_ms: Mapping[str, float] = field(default_factory=dict)    # profiled, per engine
    side_by_side_ms: Mapping[str, float] = field(default_factory=dict)   # SPLIT and engines: last duel's median
    in_plan_costs: int = 0                # kernels whose profile was replaced by their time in a plan
    cycle_cuts: int = 0                   # the kept plan's solve: cuts against plans that cannot be ordered
    resolves: int = 0                     # ... and the re-solves they took
    inaccurate: Mapping[str, str] = field(default_factory=dict)   # dropped by the check: SPLIT or engine -> why
    # kernels excluded from split plans because a plan of them failed the check (module doc, step 1b)
    excluded: tuple[str, ...] = ()
    duels: tuple[Duel, ...] = ()          # the side-by-side meetings, in order (module doc, step 2)
    schedule: ScheduleStats | None = None  # co-scheduling of the best split plan (select/coschedule.py)
    # a model selected before, its selection not replayed: what differed from that problem (why_not_replayed)
    not_replayed: str = ""


@dataclass(frozen=True)
class Selected:
    plan: Plan
    session: Session | None               # None: a remembered plan, already checked, was not compiled
    stats: SelectionStats
    check: PlanCheck | None = None        # the kept plan's accuracy check, when selection ran one (or remembered it)
    problem: str = ""                     # selection_problem_key: where the kept plan's check is remembered
    check_remembered: bool = False        # `check` is the one this plan passed on these weights in an earlier run


@dataclass(frozen=True)
class InPlanTimes:
    """A split plan's steps timed round by round (seconds, [round][step]): inside a run of the plan,
    and alone right after it, as the profiler timed it (Session.alone_times); and, each round, a
    probe: a whole-model kernel timed alone the same way (`probe`, with its own profile
    `probe_profiled`).

    A kernel's time in the plan differs from its profile by what the plan does to it (its inputs
    arrive from another kernel, another engine's pool still spins), by how fast the machine runs at
    the time, and by luck: of thousands of candidates each timed once on a noisy machine, the solver
    chooses those whose one timing read low. The machine's speed is not the plan's: cold,
    segformer-b0's first split plan measured 496 ms in the plan, every kernel about 1.5x its profile,
    and the same plan 312 ms a few minutes later (a VM's neighbours, not the plan). So each round's
    in-plan times are divided by that round's `slowdowns()`: how much slower than its profile the
    probe ran alone in that round. The probe is a whole model, profiled until its median is pinned
    and not chosen for a low reading: the plan's own kernels, profiled again the same way, ran
    1.19-1.91x their profiles relative to the whole models (benchmarks/winners_curse.py,
    BENCHMARKS.md), so dividing by their own slowdown (as before) gave back the lucky profiles it
    should have corrected. Without a probe (`probe` empty), the kernels' own slowdown is used.

    The probe is only as good as its own profile, which can be off too (yolox-nano's onnxruntime
    whole model profiled at 20.6 ms in a cache where it ran 12-16 ms). So its reading is held
    between the kernels' own slowdown (luck only makes kernels slower than their profiles) and that
    over `luck_max`, the most luck the kernels are credited with."""

    in_plan: tuple[tuple[float, ...], ...]
    alone: tuple[tuple[float, ...], ...]
    profiled: tuple[float, ...]           # each step's profile
    probe: tuple[float, ...] = ()         # per round: the probe alone
    probe_profiled: float = 0.0           # the probe's profile
    luck_max: float = SelectionSettings.luck_max

    def kernel_slowdowns(self) -> list[float]:
        """Per round, the median of the steps' alone times over their profiles, each step weighted by
        its profile (so microsecond kernels' timer noise does not decide, nor one kernel whose profile
        was itself taken in a slow minute)."""
        return [_weighted_median([(a / p, p) for a, p in zip(r, self.profiled) if a > 0 and p > 0]) for r in self.alone]

    def slowdowns(self) -> list[float]:
        """Per round, how much slower than when the kernels were profiled the machine ran: the probe's
        time alone over its profile (else `kernel_slowdowns`); 1.0 where it ran as fast."""
        kernels = self.kernel_slowdowns()
        if not (self.probe and self.probe_profiled > 0):
            return kernels
        return [min(max(t / self.probe_profiled, k / self.luck_max), k) if t > 0 else k
                for t, k in zip(self.probe, kernels)]

    def slowdown(self) -> float:
        return statistics.median(self.slowdowns())

    def kernel_slowdown(self) -> float:
        """The steps alone over their profiles, over the machine's slowdown: how far their profiles
        were from what they take (1.0: as profiled)."""
        return statistics.median(k / m for k, m in zip(self.kernel_slowdowns(), self.slowdowns()))

    def step_seconds(self) -> list[float]:
        """Each step's median over rounds of its in-plan time divided by the round's slowdown."""
        rounds = list(zip(self.in_plan, self.slowdowns()))
        return [statistics.median(times[k] / slow for times, slow in rounds) for k in range(len(self.profiled))]

    def as_timed_s(self) -> float:
        """The steps' in-plan medians, summed, as timed (not corrected for the machine's speed)."""
        return sum(statistics.median(times[k] for times in self.in_plan) for k in range(len(self.profiled)))


def _weighted_median(pairs: Sequence[tuple[float, float]]) -> float:
    """The value at which the (value, weight) pairs' cumulative weight reaches half (1.0 if none)."""
    if not pairs:
        return 1.0
    ordered = sorted(pairs)
    half, running = sum(w for _, w in ordered) / 2, 0.0
    for value, weight in ordered:
        running += weight
        if running >= half:
            return value
    return ordered[-1][0]


@dataclass
class _Probe:
    """A whole-model kernel compiled once to read the machine's speed while split plans are timed
    (InPlanTimes), then handed to the comparison as that engine's contender."""

    backend: str
    plan: Plan
    session: Session
    args: list
    profiled_s: float


@dataclass(frozen=True)
class _Timed:
    """A compiled plan and how long it took (None: not compiled, only predicted)."""

    plan: Plan
    session: Session | None
    predicted_s: float
    measured_s: float | None
    selection: Selection


def selection_problem_key(options: Sequence[Option], steps: Mapping[str, Step], settings: OptimizeSettings,
                          machine: str, boundaries: BoundaryModel | Boundaries | None = None) -> str:
    """Identifies a selection problem: every option's candidate, backend, primitives and profiled
    cost, the boundary costs, with threads, machine, procedure and the accuracy policy (which drops
    contenders). Equal keys mean the solver sees the same problem."""
    return problem_key(selection_problem(options, steps, settings, machine, boundaries))


def selection_problem(options: Sequence[Option], steps: Mapping[str, Step], settings: OptimizeSettings,
                      machine: str, boundaries: BoundaryModel | Boundaries | None = None) -> dict[str, list[str]]:
    """What `selection_problem_key` hashes, as text: "head" (korch's version, the procedure, threads,
    machine and the settings that decide), "lines" (the boundary costs) and "rows" (one per option:
    candidate|backend|primitives|cost). Stored with the selection, so that a run that does not replay
    the last selection of its model can say what changed (`why_not_replayed`)."""
    from korch import __version__

    s, a, sch = settings.selection, settings.accuracy, settings.schedule
    head = (f"{__version__}|{PROCEDURE}|{settings.threads}|{machine}|"
            f"{s.multi_kernel_margin}|{s.contender_factor}|{s.split_within}|{s.look_repeats}|{s.refine_rounds}|{s.check_rounds}|"
            f"{s.blame_fraction}|"
            f"{a.rtol}|{a.fp32_factor}|{a.check_inputs}|{settings.seed}|"
            f"{sch.enabled}|{sch.margin}|{sch.ready_pairs}")
    lines: list[str] = []
    if boundaries is not None:
        # Those of the engines calibrated before every selection, the ones profiled first. An engine
        # profiled last (Inductor) is calibrated when a solve first needs it, in a cold run's profiling
        # or selection, and read back by a warm run's selection only where its solve needs it: its lines
        # in the key made a warm vit-b16 select again for 36 s (Boundaries).
        late = set(profiled_last(settings))
        lines = [repr(kv) for kv in sorted((k, v) for k, v in boundaries.lines.items() if not late & set(k[:2]))]
    rows = sorted(f"{steps[o.key].key}|{steps[o.key].backend}|{sorted(o.nodes)}|{o.cost!r}" for o in options)
    return {"head": [head], "lines": lines, "rows": rows}


def problem_key(problem: Mapping[str, Sequence[str]]) -> str:
    """The selection problem's key (selection_problem_key) from its text (selection_problem)."""
    h = hashlib.sha256()
    for part in ("head", "lines", "rows"):
        h.update(f"|{part}|".encode() + "\n".join(problem[part]).encode())
    return h.hexdigest()


def why_not_replayed(before: Mapping[str, Sequence[str]], now: Mapping[str, Sequence[str]]) -> str:
    """What differs between the last selection problem of a model (`before`) and this one (`now`), in
    words: the settings or versions, boundary costs, options gone or new, options whose cost moved."""
    said = []
    if list(before.get("head", ())) != list(now["head"]):
        said.append("korch's version, the selection procedure, the machine or the settings differ")
    lines = set(now["lines"]) ^ set(before.get("lines", ()))
    if lines:
        said.append(f"{len(lines)} boundary-cost line(s) differ, e.g. {sorted(lines)[0]}")

    def costs(rows: Sequence[str]) -> dict[str, float]:
        out = {}
        for row in rows:
            option, _, cost = row.rpartition("|")
            try:
                out[option] = float(cost)
            except ValueError:
                continue
        return out
    old, new = costs(before.get("rows", ())), costs(now["rows"])
    gone, added = sorted(set(old) - set(new)), sorted(set(new) - set(old))
    moved = sorted((k for k in set(old) & set(new) if old[k] != new[k]), key=lambda k: -abs(new[k] - old[k]))

    def named(option: str) -> str:
        key, backend = option.split("|")[:2]
        return f"{key[:12]} on {backend}"
    if gone:
        said.append(f"{len(gone)} option(s) gone, e.g. {named(gone[0])}")
    if added:
        said.append(f"{len(added)} option(s) new, e.g. {named(added[0])}")
    if moved:
        k = moved[0]
        said.append(f"{len(moved)} option(s) at another cost, e.g. {named(k)} {_ms(old[k])} -> {_ms(new[k])}")
    return "; ".join(said) or "nothing differs that the key holds"


class _Context:
    """The fixed parts of one selection problem."""

    def __init__(self, graph: Graph, options: Sequence[Option], steps: Mapping[str, Step],
                 source: OnnxSource | None, settings: OptimizeSettings, machine: str,
                 boundaries: BoundaryModel | Boundaries, checker: PlanChecker | None,
                 store: tuple[Path, str] | None = None, whole_states: Mapping[str, str | None] | None = None,
                 links: StateProbe | None = None, tally: SolveTally | None = None) -> None:
        from korch import __version__

        self.graph, self.steps, self.source, self.settings = graph, steps, source, settings
        self.checker = checker
        self.boundaries = boundaries
        self.store = store          # (cache dir, weights digest): where compiled kernels are kept (plan/store.py)
        # backend -> the machine's state while its whole model was profiled (ProfileOutcome.whole_state)
        self.whole_states = dict(whole_states or {})
        self.links = links          # the core-link state of a look's timings (None: not read)
        self.tally = tally          # where the BLP solves are counted (None: nowhere)
        self.machine, self.version = machine, __version__
        everything = frozenset(range(len(graph.nodes)))
        self.whole: dict[str, Option] = {}
        for o in options:
            if o.nodes == everything:
                backend = steps[o.key].backend
                if backend not in self.whole or o.cost < self.whole[backend].cost:
                    self.whole[backend] = o
        whole_keys = {o.key for o in options if o.nodes == everything}
        self.split_options = [o for o in options if o.key not in whole_keys]
        self.feeds = random_feeds(graph, settings.seed + 2)
        self._kernels: dict[Step, Kernel] = {}     # the last compiled split plan's
        # kernels no split plan may use (a plan of them failed the check): by cost key (so structural
        # twins go too) -> why, and by (backend, primitives) (so another candidate of the same
        # primitives on the same engine, such as their region, goes too)
        self.excluded: dict[str, str] = {}
        self.excluded_nodes: set[tuple[str, frozenset[int]]] = set()
        self._probe: _Probe | None = None
        self._probe_tried = False

    def around(self, timing: Callable[[], T]) -> tuple[T, str | None]:
        """`timing()`, and the core-link state it ran in (link.StateProbe.around; None: no probe)."""
        return (timing(), None) if self.links is None else self.links.around(timing)

    def stored(self, plan: Plan) -> Plan:
        """`plan` with the kernels the cache keeps compiled (profiling keeps each engine's whole model
        there, and every kernel slow to compile), so compiling it loads them instead."""
        return plan if self.store is None else stored_kernels(plan, *self.store)

    def quick_to_compile(self, backend: str) -> bool:
        """Whether `backend`'s whole model compiles in seconds: its engine does not compile slowly, or
        the cache keeps it compiled (Inductor's took 45 s to compile again for a second look)."""
        if not get_backend(backend).compiles_ahead:
            return True
        plan = self.stored(self.whole_model(backend)[0])
        return all(step in plan.artifacts for step in plan.steps)

    def probe(self) -> _Probe | None:
        """The cheapest whole-model kernel of an engine that compiles it quickly, compiled at the first
        call: InPlanTimes reads the machine's speed from it. None if there is none or it fails to compile."""
        if not self._probe_tried:
            self._probe_tried = True
            quick = [b for b in self.whole if self.quick_to_compile(b)]
            if quick:
                backend = min(quick, key=lambda b: (self.whole[b].cost, b))
                plan = self.stored(self.whole_model(backend)[0])
                try:
                    session = compile_plan(plan)
                except Exception as e:  # noqa: BLE001  (it compiled when profiled; without it, the kernels' own speed)
                    log.warning("%s does not compile again (%s): split plans are timed without a probe", _who(backend), e)
                    return None
                self._probe = _Probe(backend, plan, session, session.step_inputs(self.feeds), self.whole[backend].cost)
        return self._probe

    def at_profiles_speed(self, session: Session, seconds: float) -> tuple[float, float, str] | None:
        """A plan's time as it would run at the speed the machine had when the kernels were profiled:
        the plan and the probe side by side (`paired_rounds` rounds), the median over rounds
        of the plan's time over the probe's, times the probe's profile. Returns it, the machine's
        slowdown that implies (`seconds`, the plan's own timing, over it), and the probe's engine;
        None without a probe or with side-by-side timing off (`duel_rounds` 0). Paired round by round,
        so a slow spell slows both sides alike (a probe timed apart from the plan read 1.45x where the
        plan's kernels had read 1.10x a moment before)."""
        s = self.settings.selection
        probe = self.probe() if s.duel_rounds > 0 and s.paired_rounds > 0 else None
        if probe is None or probe.profiled_s <= 0:
            return None
        fns = {"plan": lambda: session.run(None, self.feeds), "probe": lambda: probe.session.run(None, self.feeds)}
        timings = side_by_side(fns, s.paired_rounds, 0.5 * (seconds + probe.profiled_s), warmup=1,
                               round_s=s.duel_round_seconds)
        at_profiles = probe.profiled_s / paired_ratio(timings["plan"], timings["probe"])
        return at_profiles, seconds / at_profiles, probe.backend

    def take_probe(self) -> _Probe | None:
        """The probe, if one was compiled, handed over once: this context keeps it no longer."""
        probe, self._probe = self._probe, None
        return probe

    def cost_key(self, step: Step) -> str:
        """Names a (candidate, backend) pair across runs (Option.key numbers options within one run)."""
        return f"{step.key}|{step.backend}"

    def costed(self, costs: Mapping[str, float]) -> list[Option]:
        """The split options, each with its in-plan cost where `costs` has one, else its profile times
        the factor plus the start cost `costs` holds (FACTOR, START)."""
        start, factor = costs.get(START, 0.0), costs.get(FACTOR, 1.0)
        out = []
        for o in self.split_options:
            c = costs.get(self.cost_key(self.steps[o.key]))
            if self.is_excluded(o) or c == math.inf:      # (a remembered exclusion is stored as inf)
                continue
            if c is None:
                out.append(replace(o, cost=max(o.cost * factor + start, 0.0)) if start or factor != 1.0 else o)
            else:
                out.append(replace(o, cost=c))
        return out

    def untimed_cost(self, costs: Mapping[str, float]) -> dict[str, float]:
        """What a kernel not yet timed in a plan is expected to cost, from the kernels `costs` has an
        in-plan cost for (each once, at its latest): FACTOR x its profile + START, fitted to them by
        the median slope over pairs of them (each pair weighted by how far apart their profiles are)
        and the median of what remains. The factor is luck (profiles the solver chose read low in
        proportion: yolox-nano's chosen kernels ran 1.54x theirs); the start is what the kernels
        before one evicted (0.2-0.6 ms on efficientvit-b1's small kernels). Kernels of equal profiles
        cannot tell the two apart: then the factor is 1.0.

        Neither goes below what an untimed kernel's profile says: a factor under 1.0 or a negative
        start would price small untimed kernels under their profiles, at zero where the fit
        extrapolates (two kernels of 6-7 ms fitted 2.0x - 4.9 ms), and the next solve would turn to
        dozens of them (efficientvit-b1: 45 kernels predicted at 10 ms that took 19 in the plan). A
        negative start is taken as no start, and the factor is then their median ratio (weighted by
        profile). 1.0 and 0.0 if none was timed."""
        profiles = {self.cost_key(self.steps[o.key]): o.cost for o in self.split_options}
        timed = [(profiles[key], c) for key, c in costs.items() if key in profiles and math.isfinite(c) and profiles[key] > 0]
        if not timed:
            return {FACTOR: 1.0, START: 0.0}
        slopes = [((c1 - c2) / (p1 - p2), abs(p1 - p2)) for (p1, c1), (p2, c2) in itertools.combinations(timed, 2)
                  if p1 != p2]
        factor = max(_weighted_median(slopes), 1.0) if slopes else 1.0
        start = statistics.median(c - factor * p for p, c in timed)
        if start < 0:
            factor, start = max(_weighted_median([(c / p, p) for p, c in timed]), 1.0), 0.0
        return {FACTOR: factor, START: start}

    def is_excluded(self, option: Option) -> bool:
        step = self.steps[option.key]
        return self.cost_key(step) in self.excluded or (step.backend, option.nodes) in self.excluded_nodes

    def exclude(self, step: Step, why: str) -> None:
        self.excluded[self.cost_key(step)] = why
        self.excluded_nodes.add((step.backend, frozenset(step.nodes)))

    def excluded_costs(self) -> dict[str, float]:
        """The exclusions as entries of remembered costs: each excluded cost key at inf, and each excluded
        (engine, primitives) pair under EXCLUDED; `restore_exclusions` reads them back."""
        out = {key: math.inf for key in self.excluded}
        out.update({f"{EXCLUDED}{backend}|{','.join(map(str, sorted(nodes)))}": math.inf
                    for backend, nodes in self.excluded_nodes})
        return out

    def restore_exclusions(self, costs: Mapping[str, float]) -> None:
        """Exclude the (engine, primitives) pairs remembered `costs` name (excluded_costs); their cost
        keys at inf are excluded by `costed`."""
        for key in costs:
            if key.startswith(EXCLUDED):
                backend, _, nodes = key[len(EXCLUDED):].rpartition("|")
                self.excluded_nodes.add((backend, frozenset(int(n) for n in nodes.split(",") if n)))

    def blame(self, plan: Plan) -> list[tuple[Step, float]]:
        """The steps of a compiled split plan farthest from the reference when fed the reference's own
        values (each one's error alone, not what it inherits): those within `blame_fraction` of the
        worst, with their errors, worst first."""
        from korch.backends.reference import run_graph

        wanted = {v for st in plan.steps for v in st.inputs + st.outputs}
        exact = run_graph(self.graph, self.feeds, also=wanted)
        errors = []
        for step in plan.steps:
            outputs = self._kernels[step].run([exact[i] for i in step.inputs])
            diffs = diff_outputs(dict(zip(step.outputs, outputs)), {o: exact[o] for o in step.outputs})
            errors.append(max((d.rel for d in diffs), default=0.0))
        bar = self.settings.selection.blame_fraction * max(errors, default=0.0)
        return sorted(((st, e) for st, e in zip(plan.steps, errors) if e >= bar), key=lambda se: -se[1])

    @property
    def kernels(self) -> Mapping[Step, Kernel]:
        """The last compiled split plan's kernels, by step."""
        return self._kernels

    def drop_kernels(self) -> None:
        """Forget the last split plan's kernels (it lost, or failed the check: its weights can go)."""
        self._kernels = {}

    def compile(self, plan: Plan) -> Session:
        """The plan's session, reusing kernels of the previous split plan compiled here. (By step, not
        by cost key: candidates of equal structure share a key and a profile, not their weights.)"""
        wanted = set(plan.steps)
        # the previous plan's other kernels go before any new one compiles (with the caller's
        # session of that plan: see _best_split), so two plans' weights are never in memory at once
        self._kernels = {step: k for step, k in self._kernels.items() if step in wanted}
        stored = self.stored(plan)          # kernels profiling kept compiled are loaded
        for step in plan.steps:
            if step not in self._kernels:
                self._kernels[step] = self._load_or_compile(stored, plan, step)
        return Session(plan, [self._kernels[step] for step in plan.steps])

    @staticmethod
    def _load_or_compile(stored: Plan, plan: Plan, step: Step) -> Kernel:
        """The step's kernel, loaded if the store keeps it (`stored`: the plan with its kept kernels),
        compiled if it does not or it fails to load."""
        if step in stored.artifacts:
            try:
                return compile_step(stored, step)
            except PlanError as e:
                log.warning("a kept kernel does not load (%s); compiling it again", e)
        return compile_step(plan, step)

    def in_plan_times(self, plan: Plan, session: Session) -> InPlanTimes:
        """The plan's steps timed `refine_runs` rounds, each round a run of the plan with every step
        timed, then every step alone as the profiler timed it, then the probe alone (InPlanTimes)."""
        s = self.settings.selection
        probe = self.probe()
        for _ in range(s.plan_warmup):
            session.run(None, self.feeds)
            if probe is not None:
                probe.session.run(None, self.feeds)
        args = session.step_inputs(self.feeds)
        sweep = CacheSweep() if self.settings.profile.cold_cache else None
        in_plan, alone, speed = [], [], []
        for _ in range(s.refine_runs):
            in_plan.append(tuple(session.step_times(self.feeds)))
            alone.append(tuple(session.alone_times(args, sweep)))
            if probe is not None:
                speed.append(probe.session.alone_times(probe.args, sweep)[0])
        return InPlanTimes(tuple(in_plan), tuple(alone), tuple(st.cost_s for st in plan.steps), tuple(speed),
                           probe.profiled_s if probe is not None else 0.0, s.luck_max)

    def in_plan_costs(self, plan: Plan, times: InPlanTimes) -> dict[str, float]:
        """Each kernel's time in the plan at the speed the machine had when it was profiled
        (InPlanTimes.step_seconds), less the boundary costs the BLP charges it: its engine's kernel
        start and its inputs from the plan's other kernels (so a re-solve over these costs predicts
        this plan's time). Steps whose
        candidates are structural twins (gpt2-small's layers) share one cost key and one cost in the
        BLP: their mean, so the twins' costs sum to what they took."""
        maker: dict[str, str] = {}
        by_key: dict[str, list[float]] = {}
        for step, seconds in zip(plan.steps, times.step_seconds()):
            charged = self.boundaries.start(step.backend) + sum(
                self.boundary_cost(maker[t], step.backend, t) for t in step.inputs if t in maker)
            by_key.setdefault(self.cost_key(step), []).append(max(seconds - charged, 0.0))
            maker.update((t, step.backend) for t in step.outputs)
        return {key: statistics.fmean(values) for key, values in by_key.items()}

    def boundary_cost(self, producer: str, consumer: str, value: str) -> float:
        return self.boundaries.cost(producer, consumer, self.graph.types[value])

    def solve(self, options: Sequence[Option], bar: float | None = None) -> Selection:
        """The best split plan over `options`. One that uses a backend whose boundaries are not
        calibrated yet (they cost nothing until then: a lower bound, profile/boundaries.py Boundaries)
        is solved again once they are, unless it costs more than `bar` even so (then so would any)."""
        seconds = 0.0
        while True:
            selection = solve(options, self.graph.inputs, self.graph.outputs, required=range(len(self.graph.nodes)),
                              time_limit=self.settings.selection.solver_time_limit_s, boundary=self.boundary_cost,
                              start=self.boundaries.start, tally=self.tally)
            seconds += selection.seconds
            if bar is not None and selection.cost > bar:
                break
            free = sorted({b for b in (self.steps[o.key].backend for o in selection.chosen)
                           if not self.boundaries.calibrated(b)})
            if not self.boundaries.ensure(free):
                break
            log.info("best split plan: %d kernels predicted at %.3f ms with %s's boundaries free; calibrated "
                     "them, solving again", len(selection.chosen), selection.cost * 1e3, ", ".join(free))
        return replace(selection, seconds=seconds)

    def uncalibrated(self, plan: Plan) -> list[str]:
        """The plan's backends whose boundaries were not calibrated (costed at nothing)."""
        return sorted({st.backend for st in plan.steps if not self.boundaries.calibrated(st.backend)})

    def plan(self, selection: Selection) -> tuple[Plan, float]:
        """The selection as an ordered plan, and its predicted time (profiles plus boundary costs)."""
        chosen = order_steps((self.steps[o.key] for o in selection.chosen), self.graph.inputs)
        uses_onnx = any(st.onnx_nodes for st in chosen)
        plan = Plan(self.graph, chosen, self.settings.threads, self.machine, self.version,
                    self.source if uses_onnx else None)
        return plan, selection.cost

    def time(self, session: Session, repeats: int | None = None) -> float:
        """The plan's median time back to back; with `repeats`, after one warm-up call, that many calls
        and no minimum duration (a second look's coarse question)."""
        s = self.settings.selection
        warmup, calls, min_seconds = (s.plan_warmup, s.plan_repeats, s.plan_min_seconds) if repeats is None \
            else (1, repeats, 0.0)
        return measure(lambda: session.run(None, self.feeds), warmup=warmup, repeats=calls,
                       min_seconds=min_seconds).median_s

    def check(self, plan: Plan, session: Session) -> PlanCheck | None:
        """The plan against onnxruntime on the checker's inputs (None: no checker, nothing checked)."""
        if self.checker is None:
            return None
        return self.checker(lambda feeds: dict(zip(plan.graph.outputs, session.run(None, feeds))))

    def whole_model(self, backend: str) -> tuple[Plan, Selection]:
        o = self.whole[backend]
        selection = Selection((o,), o.cost, o.cost, 0.0, True)
        plan, _ = self.plan(selection)
        return plan, selection


def measured_selection(graph: Graph, options: Sequence[Option], steps: Mapping[str, Step],
                       source: OnnxSource | None, settings: OptimizeSettings, machine: str,
                       db: ProfileDB | None = None, boundaries: BoundaryModel | Boundaries | None = None,
                       checker: PlanChecker | None = None, weights: str | None = None,
                       whole_states: Mapping[str, str | None] | None = None,
                       links: StateProbe | None = None, tally: SolveTally | None = None) -> Selected:
    """The fastest plan as measured, of those that pass `checker`: the best split plan or one engine's
    whole model (module doc). `boundaries`: the machine's calibrated boundary costs (None: boundaries
    cost nothing); Boundaries calibrates a backend when a split plan worth compiling first uses it
    (_Context.solve). `checker`: None checks nothing (the caller checks the plan kept). `weights`: the
    digest of the model's constants (Graph.constants_digest); a remembered plan that passed its check
    on the same weights is returned as it is, neither compiled, timed nor checked again. `whole_states`:
    backend -> the machine's state while its whole model was profiled in this run
    (ProfileOutcome.whole_state; None or absent: unknown), which decides `_second_look`s. `links`: reads
    the core-link state a look's timings ran in (None: not read). `tally`: where the BLP solves are
    counted."""
    ctx = _Context(graph, options, steps, source, settings, machine,
                   boundaries if boundaries is not None else BoundaryModel(), checker,
                   (db.path.parent, weights) if db is not None and weights is not None else None, whole_states,
                   links, tally)
    inputs = selection_problem(options, steps, settings, machine, ctx.boundaries)
    problem = problem_key(inputs)
    remembered = db.get_selection(problem) if db is not None else None
    if remembered is not None:
        return replace(_replay(ctx, remembered, weights), problem=problem)
    # (the model: its weights, at these threads on this machine; a warm run that selects again says why)
    model = None if weights is None else f"{weights}|{len(graph.nodes)}|{settings.threads}|{machine}"
    before = db.last_selection_inputs(model) if db is not None and model is not None else None
    not_replayed = "" if before is None else why_not_replayed(before, inputs)
    if not_replayed:
        log.info("selecting again: this model's last selection was of another problem (%s)", not_replayed)
    found = _accurate_split(ctx)
    costs, scheduled = found.costs, found.schedule
    selected = _compare(ctx, found)
    selected = replace(selected, stats=replace(selected.stats, schedule=scheduled, not_replayed=not_replayed))
    if db is not None:
        kept = selected.stats
        remembered_costs = {**costs, **ctx.excluded_costs()}
        db.put_selection(problem, kept.boundary_ms * 1e-3, kept.measured_ms * 1e-3,
                         None if kept.kept == SPLIT else kept.kept, kept.why,
                         remembered_costs if kept.kept == SPLIT else None,
                         _schedule_by_step(selected.plan, kept.schedule) if kept.kept == SPLIT else None,
                         model, inputs if model is not None else None)
    return replace(selected, problem=problem)


def _step_name(step: Step) -> str:
    """Names a step of a plan across runs: its engine and primitives (kernels may overlap, not repeat)."""
    return f"{step.backend}|{','.join(map(str, step.nodes))}"


def _schedule_by_step(plan: Plan, stats: ScheduleStats | None) -> dict[str, object] | None:
    """The plan's schedule as RememberedSelection.schedule stores it: the steps by `_step_name` in plan
    order, the stages' lanes as indices into that list, and each step's wide and narrow ms."""
    if plan.schedule is None:
        return None
    return {"steps": [_step_name(st) for st in plan.steps],
            "stages": plan.schedule.to_json(),
            "step_ms": [list(ms) for ms in stats.step_ms] if stats is not None else []}


def _remembered_schedule(plan: Plan, remembered: object) -> tuple[Plan, tuple[tuple[float, float | None], ...]]:
    """`plan` with the schedule remembered for it (RememberedSelection.schedule), and the steps' wide and
    narrow ms it was built from; the plan as it is if there is none, or it no longer fits the steps."""
    if remembered is None:
        return plan, ()
    index = {_step_name(st): k for k, st in enumerate(plan.steps)}
    try:
        order = [index[str(name)] for name in remembered["steps"]]  # type: ignore[index]
        schedule = Schedule.from_json(remembered["stages"]).renumbered(order)  # type: ignore[index]
        plan.check_schedule(schedule)
        step_ms = [(0.0, None)] * len(plan.steps)
        for k, (wide, narrow) in zip(order, remembered.get("step_ms") or []):  # type: ignore[union-attr]
            step_ms[k] = (float(wide), None if narrow is None else float(narrow))
    except (KeyError, IndexError, TypeError, ValueError, AttributeError, ScheduleError) as e:
        log.warning("the remembered schedule does not fit the plan (%s); it runs one step after another", e)
        return plan, ()
    return replace(plan, schedule=schedule), tuple(step_ms) if remembered.get("step_ms") else ()  # type: ignore[union-attr]


@dataclass(frozen=True)
class _Checked:
    """The accuracy check of the last split plan (None: not checked), and, when a split plan failed it,
    the words that say so."""

    check: PlanCheck | None = None
    failure: str | None = None


@dataclass
class _Found:
    """The best split plan found (None: none), the plans compiled, the solver's seconds, the in-plan
    costs of its last solve, and its check. `_compare` takes the split plan out, so that the plan's
    kernels go as soon as it loses a duel."""

    split: _Timed | None
    rounds: int
    solve_s: float
    costs: dict[str, float]
    checked: _Checked
    schedule: ScheduleStats | None = None


def _schedule(ctx: _Context, split: _Timed, check: PlanCheck | None) -> tuple[_Timed, PlanCheck | None, ScheduleStats]:
    """The checked split plan with the schedule that measures fastest (select/coschedule.py), checked
    again if it has one (its kernels on fewer threads may round differently); the plan as it was if
    that check fails."""
    assert split.session is not None
    plan, session, stats = coschedule(split.plan, split.session, ctx.kernels, compile_step, ctx.feeds,
                                      ctx.settings.schedule, ctx.settings.selection.duel_rounds)
    if plan.schedule is None:
        return split, check, stats
    scheduled_check = ctx.check(plan, session)
    if scheduled_check is not None and not scheduled_check.ok:
        log.warning("the scheduled split plan disagrees with onnxruntime (%s); it runs one step after another",
                    scheduled_check.summary())
        return split, check, replace(stats, kept=False, why=f"not kept: {scheduled_check.worst()}")
    ctx.drop_kernels()          # the scheduled session holds the kernels it runs; the others' weights go
    return replace(split, plan=plan, session=session, measured_s=ctx.time(session)), scheduled_check, stats


def _accurate_split(ctx: _Context) -> _Found:
    """`_best_split`, checked (module doc, step 1b): while its plan fails the check, up to
    `check_rounds` times, the kernels farthest from the reference are excluded and the BLP solved again."""
    s = ctx.settings.selection
    rounds, solve_s, costs = 0, 0.0, {}
    failure = None
    for attempt in range(1 + s.check_rounds):
        split = None                           # a failed plan's session goes before the next compiles
        split, r, t, costs = _best_split(ctx, costs)
        rounds, solve_s = rounds + r, solve_s + t
        if split is None or split.session is None:
            return _Found(split, rounds, solve_s, costs, _Checked(None, failure))
        check = ctx.check(split.plan, split.session)
        if check is None or check.ok:
            split, check, scheduled = _schedule(ctx, split, check)
            return _Found(split, rounds, solve_s, costs, _Checked(check, None), scheduled)
        failure = f"the best split plan ({_kernels(split.plan)}), {check.worst()}"
        log.warning("the best split plan (%d kernels) disagrees with onnxruntime (%s)", len(split.plan.steps),
                    check.summary())
        if attempt == s.check_rounds:
            break
        blamed = ctx.blame(split.plan)
        said = []
        for step, error in blamed:
            nodes = step_onnx_nodes(ctx.graph, step)
            shown = ", ".join(nodes[:3]) + (", ..." if len(nodes) > 3 else "")
            said.append(f"the {step.backend} kernel of [{shown}] ({error:.2e} from the reference on exact inputs)")
            ctx.exclude(step, said[-1])
        log.warning("excluding %d kernel(s) and solving again: %s", len(blamed), "; ".join(said))
    return _Found(split, rounds, solve_s, costs, _Checked(check, failure))


def _best_split(ctx: _Context, known: Mapping[str, float]) -> tuple[_Timed | None, int, float, dict[str, float]]:
    """The best split plan under in-plan (else profiled) and boundary costs (module doc, step 1),
    compiled and timed unless its prediction rules it out; None if there is none. `known`: in-plan
    costs from earlier plans. Returns it, the plans compiled, the solver's seconds, and the in-plan
    costs its last solve used."""
    s = ctx.settings.selection
    cheapest_whole = min((o.cost for o in ctx.whole.values()), default=None)
    costs: dict[str, float] = dict(known)
    solve_s = 0.0
    bar = None if cheapest_whole is None else s.split_within * cheapest_whole
    for round_ in range(1 + s.refine_rounds):
        used = dict(costs)
        try:
            selection = ctx.solve(ctx.costed(used), bar)
        except SelectionError as e:
            log.info("no split plan: %s", e)
            return None, round_, solve_s, {}
        solve_s += selection.seconds
        plan, predicted = ctx.plan(selection)
        if bar is not None and predicted > bar:
            free = ctx.uncalibrated(plan)
            log.info("best split plan: %d kernels predicted at %.3f ms%s (%.3f ms of it boundaries%s), beyond %.2fx "
                     "the cheapest whole-model kernel (%.3f ms); not compiled", len(plan.steps), predicted * 1e3,
                     " or more" if free else "", selection.boundary_s * 1e3,
                     f"; {', '.join(free)}'s not calibrated, counted as free" if free else "", s.split_within,
                     cheapest_whole * 1e3)
            return _Timed(plan, None, predicted, None, selection), round_, solve_s, used
        session = None                         # the last plan's session goes before this one compiles
        session = ctx.compile(plan)
        fresh = sum(ctx.cost_key(st) not in used for st in plan.steps)
        if fresh and round_ < s.refine_rounds:
            times = ctx.in_plan_times(plan, session)
            costs.update(ctx.in_plan_costs(plan, times))
            costs.update(ctx.untimed_cost(costs))
            probe = ctx.probe()
            log.info("split plan %d: %d kernels (%d not yet timed in a plan), predicted %.3f ms, %.3f ms in the plan "
                     "at the profiles' speed (%.3f ms as timed; the machine at %.2fx %s; its kernels alone at %.2fx "
                     "their profiles beyond that); a kernel not yet timed in a plan now costs %.2fx its profile %+.3f ms",
                     round_ + 1, len(plan.steps), fresh, predicted * 1e3,
                     (sum(costs[ctx.cost_key(st)] for st in plan.steps) + selection.boundary_s) * 1e3,
                     times.as_timed_s() * 1e3, times.slowdown(),
                     f"by {_who(probe.backend)}" if probe is not None else "by its kernels (no probe)",
                     times.kernel_slowdown(), costs[FACTOR], costs[START] * 1e3)
            continue
        measured = ctx.time(session)
        paired = ctx.at_profiles_speed(session, measured)
        log.info("split plan: %d kernels (%d costed by profile alone), predicted %.3f ms (%.3f ms boundaries), "
                 "measured %.3f ms%s", len(plan.steps), fresh, predicted * 1e3, selection.boundary_s * 1e3,
                 measured * 1e3, "" if paired is None else f" ({paired[0] * 1e3:.3f} ms at the profiles' speed: "
                 f"the machine at {paired[1]:.2f}x, side by side with {_who(paired[2])})")
        return _Timed(plan, session, predicted, measured, selection), round_ + 1, solve_s, used
    raise AssertionError("unreachable: the last round always returns")


def _timed_in_plan(costs: Mapping[str, float]) -> int:
    """How many kernels' profiles in-plan costs replaced (not START or FACTOR, exclusions or other infinities)."""
    return sum(key not in (START, FACTOR) and math.isfinite(c) for key, c in costs.items())


def _contenders(ctx: _Context, split: _Timed | None) -> list[str]:
    """Engines whose whole-model kernel could be the plan: the cheapest, and any whose profile is within
    contender_factor of the faster of the split plan's measured time and the cheapest whole model's
    profile. (The split plan's one timing can read slow: yolox-nano's read 47.7 ms against 25 once,
    which made Inductor's whole model at 44.4 ms a contender, compiled again for 45 s to lose.)"""
    if not ctx.whole:
        return []
    cheapest = min(ctx.whole, key=lambda b: ctx.whole[b].cost)
    bar = ctx.whole[cheapest].cost
    if split is not None and split.measured_s is not None:
        bar = min(bar, split.measured_s)
    factor = ctx.settings.selection.contender_factor
    return sorted((b for b, o in ctx.whole.items() if b == cheapest or o.cost <= factor * bar),
                  key=lambda b: (ctx.whole[b].cost, b))


def _second_look(ctx: _Context, bar: float, champion: _Contender, other: _Contender,
                 bar_state: str | None = None) -> bool:
    """Whether a whole model profiled beyond `contender_factor` of the rest joins the duels: it is
    timed again after the champion (`bar`: its time just before), both alone, and joins if within the
    factor of it. A profile taken while something else loaded the machine reads slow (yolox-nano:
    onnxruntime's whole model profiled at 79 ms against its 25), and without this look the model it
    belongs to never met the split plan it beat.

    The two timings are seconds apart, and the host may move the vCPUs between them: where the other's
    timing ran in one core-link state and the champion's did not (`bar_state`, from ctx.around), a
    whole-model champion profiled in the other's state is held to that profile instead. (yolov4 at
    4f974b9, the link not read around looks then: OpenVINO's whole model, profiled at 238 ms with the
    link near, timed 282 ms as the bar, 1.19x, about what the far state costs it, then Inductor's
    351 ms, 0.98x its profile taken near, joined a duel it lost at 1.56x, 14 s.)"""
    factor, repeats = ctx.settings.selection.contender_factor, ctx.settings.selection.look_repeats
    seconds, state = ctx.around(lambda: ctx.time(other.session, repeats))
    reference, against = bar, f"beside {_who(champion.name)} at {_ms(bar)}"
    if state is not None or bar_state is not None:
        against += f" (the core link {state} / {bar_state})"
    if state is not None and state != bar_state and champion.name != SPLIT and \
            ctx.whole_states.get(champion.name) == state:
        reference = champion.estimate_s
        against = (f"with the core link {state}, against {_who(champion.name)}'s profile in that state, "
                   f"{_ms(reference)} (timed at {_ms(bar)} with the link {bar_state})")
    joins = seconds <= factor * reference
    log.info("%s, profiled at %s, timed again at %s %s: %s", _who(other.name),
             _ms(other.estimate_s), _ms(seconds), against,
             "compared side by side" if joins else f"beyond {factor:.2f}x, not compared")
    if not joins:
        other.session = None  # type: ignore[assignment]   # its weights go now
        release_freed_heap()
    return joins


def _profiles_compare(ctx: _Context, backend: str) -> str | None:
    """Why `backend`'s whole model, beyond `contender_factor` of the cheapest whole model's profile, needs
    no second look (None: it does). A look guards against a profile the machine slowed; where both
    profiles were taken in this run at the machine's speed and in one core-link state, nothing is left
    to slow one of them. (yolov4: the looks at onnxruntime's and Inductor's whole models, profiled at
    2.6x and 1.7x OpenVINO's, took 26 s of a cold optimize, and loading Inductor's beside OpenVINO's
    was the optimize's memory peak, 4.5 GB.)"""
    cheapest = min(ctx.whole, key=lambda b: ctx.whole[b].cost)
    state = ctx.whole_states.get(backend)
    ratio = ctx.whole[backend].cost / ctx.whole[cheapest].cost
    if state is None or state != ctx.whole_states.get(cheapest) or \
            ratio <= ctx.settings.selection.contender_factor:
        return None
    where = "on one thread" if state == "one thread" else f"with the core link {state}"
    return (f"{_who(backend)}, profiled at {_ms(ctx.whole[backend].cost)}, {ratio:.2f}x {_who(cheapest)} "
            f"profiled in the same state ({where}, at the machine's speed)")


@dataclass
class _Contender:
    """A compiled, checked plan in the comparison: SPLIT or one engine's whole model (not yet checked
    while `_second_look` times it)."""

    name: str
    plan: Plan
    selection: Selection
    session: Session
    check: PlanCheck | None
    estimate_s: float                     # predicted: profiles (and boundary costs) decide when duels are off


def _duel(ctx: _Context, champion: _Contender, challenger: _Contender) -> Duel:
    """The two side by side, interleaved like `korch bench` (or, with comparison off, by their
    estimates). A split plan beats an engine only by `multi_kernel_margin`, an engine's whole model
    the champion whole model (cheaper by profile) only by `switch_margin`. The verdict is the
    median of the rounds' ratios, since both sides of one round share the machine's drift: between
    two identical contenders (benchmarks/duel_noise.py, 124 duels of 15 rounds) the medians called
    a 2% win in 28 duels, the rounds' ratios in 18."""
    s = ctx.settings.selection
    a, b = champion, challenger
    if b.name == SPLIT:
        def wins(b_over_a: float) -> bool:
            return b_over_a <= s.multi_kernel_margin
    elif a.name == SPLIT:
        def wins(b_over_a: float) -> bool:
            return 1.0 / b_over_a > s.multi_kernel_margin
    else:
        def wins(b_over_a: float) -> bool:
            return b_over_a <= s.switch_margin   # the champion, the cheaper by profile, keeps its place on noise
    state: str | None = None
    tries = 0
    if s.duel_rounds > 0:
        fns = {c.name: (lambda sess=c.session: sess.run(None, ctx.feeds)) for c in (a, b)}
        one = 0.5 * (a.estimate_s + b.estimate_s)

        def compare() -> dict[str, Timing]:
            # Rounds stop once the verdict is settled: segformer-b0's three duels took 39 s of 15 rounds each.
            return side_by_side(fns, s.duel_rounds, one, warmup=1, round_s=s.duel_round_seconds,
                                decided=median_ratio_decided(a.name, b.name, s.duel_rounds, wins))
        timings, state = ctx.around(compare)
        tries = 1
        # (only where profiling read the link: a probe that reads nothing says "unread" of every duel)
        while ctx.links is not None and ctx.links.nearest is not None and state != "near" \
                and tries <= s.duel_link_retries:
            log.info("side by side: %s against %s ran with the core link %s: comparing them again", _who(a.name),
                     _who(b.name), state)
            again, again_state = ctx.around(compare)
            tries += 1
            if _LINK_RANK[again_state] < _LINK_RANK[state]:
                timings, state = again, again_state
        t = {k: v.median_s for k, v in timings.items()}
        b_over_a = paired_ratio(timings[a.name], timings[b.name])
        ratio: float | None = b_over_a
        profiled = ctx.links is not None and ctx.links.nearest is not None and state != "near" and \
            all(c.name != SPLIT and ctx.whole_states.get(c.name) == "near" for c in (a, b))
        if profiled:
            # Never near side by side, but both profiled near: the far state slows engines unequally,
            # and a plan runs mostly near. yolox-nano's two whole models, profiled near at 8.36 ms
            # (onnxruntime) and 9.04 ms (OpenVINO), met twice far, 15.9 against 12.9 ms, and OpenVINO's
            # was kept; the bench then ran it 10.76 ms against onnxruntime's 10.13 near (25 of its 30
            # rounds), 0.93x (BENCHMARKS.md, 2026-12-06).
            b_over_a = ratio = b.estimate_s / a.estimate_s
    else:
        t = {a.name: a.estimate_s, b.name: b.estimate_s}
        b_over_a, ratio, profiled = t[b.name] / t[a.name], None, False
    b_wins = wins(b_over_a)
    return Duel(a.name, b.name, t[a.name], t[b.name], b.name if b_wins else a.name, s.duel_rounds > 0, ratio,
                state, tries, profiled)


# Which of two side-by-side comparisons a verdict is taken from: near before moving or unread before far.
# A plan runs mostly with the link near (194 of 240 zoo bench rounds at 2 threads, BENCHMARKS.md,
# 2026-12-05), and the far state slows engines unequally: yolox-nano's selection, run far, timed
# OpenVINO's whole model 12.9 ms against onnxruntime's 15.5 (1.196x) and kept it; the bench timed
# them 10.67 and 9.96 ms (BENCHMARKS.md, 2026-12-06).
_LINK_RANK = {"near": 0, MOVING: 1, UNREAD: 1, "far": 2}      # (StateProbe.around's states)


def _compare(ctx: _Context, found: _Found) -> Selected:
    """The split plan and the contending whole-model kernels meet two at a time, the winner of each
    duel meeting the next contender, so at most two compiled plans are alive at once (a whole model
    holds every weight, some engines twice: all of them together took bert-base's optimize to
    6.4 GB). The loser of each duel is dropped before the next contender is compiled."""
    split, rounds, solve_s, costs, checked = found.split, found.rounds, found.solve_s, found.costs, found.checked
    found.split = None                           # this frame holds the only reference (class doc)
    inaccurate: dict[str, str] = {}
    split_timed = split is not None and split.session is not None
    if split_timed and checked.check is not None and not checked.check.ok:
        split_timed = False
    if checked.failure is not None and not split_timed:
        inaccurate[SPLIT] = checked.failure      # (a split plan that passed after exclusions is not listed)
    champion: _Contender | None = None
    if split_timed:
        assert split is not None and split.session is not None and split.measured_s is not None
        champion = _Contender(SPLIT, split.plan, split.selection, split.session, checked.check, split.predicted_s)
    else:
        if split is not None and split.session is not None:
            split = replace(split, session=None)     # failed the check: not kept alive through the duels
        # No split plan contends: the kernels of the split plans timed in the plan go too (yolov4: the
        # last one's three OpenVINO kernels, held through the look at Inductor's whole model, took the
        # optimize to 4.57 GB)
        ctx.drop_kernels()
        release_freed_heap()
    duels: list[Duel] = []
    tried: set[str] = set()
    admitted = 0
    probe = ctx.take_probe()                     # compiled already, if split plans were timed

    def admit(backend: str, look: bool = False) -> _Contender | None:
        """Compile and check one engine's whole-model kernel (the probe's, if it is that engine's); a
        contender if it passes. With `look`, it is timed beside the champion first (`_second_look`)
        and checked only if it joins: yolov4's looks at Inductor's and onnxruntime's whole models,
        1.5x and 2.4x OpenVINO's, checked both against onnxruntime on three inputs to drop both."""
        nonlocal probe
        tried.add(backend)
        plan, selection = ctx.whole_model(backend)
        if probe is not None and probe.backend == backend:
            plan, session, probe = probe.plan, probe.session, None
        else:
            if probe is not None:                # its weights go before another whole model's come
                probe = None
                release_freed_heap()
            plan = ctx.stored(plan)
            try:
                session = compile_plan(plan)
            except Exception as e:  # it compiled when profiled; a failure now only removes a contender
                log.warning("whole-model kernel on %s does not compile again (%s); not compared", backend, e)
                return None
        if look:
            assert champion is not None and bar_s is not None
            looked = _Contender(backend, plan, selection, session, None, ctx.whole[backend].cost)
            session = None                       # (held by `looked` alone: a look that fails drops it)
            if not _second_look(ctx, bar_s, champion, looked, bar_state):
                return None
            session = looked.session
        check = ctx.check(plan, session)
        if check is not None and not check.ok:
            inaccurate[backend] = f"{backend}'s whole model, {check.worst()}"
            log.warning("%s's whole model disagrees with onnxruntime (%s); not compared", backend, check.summary())
            return None
        return _Contender(backend, plan, selection, session, check, ctx.whole[backend].cost)

    def meet(challenger: _Contender) -> None:
        nonlocal champion, split, admitted
        admitted += 1
        if champion is None:
            champion = challenger
            return
        duel = _duel(ctx, champion, challenger)
        duels.append(duel)
        log.info("side by side: %s %s, %s %s%s%s; %s kept", _who(duel.first), _ms(duel.first_s),
                 _who(duel.second), _ms(duel.second_s),
                 f" (the second {duel.ratio:.3f}x the first by their profiles, both taken with the core link "
                 f"near)" if duel.profiled else
                 f" (the second {duel.ratio:.3f}x the first round by round)" if duel.ratio is not None else "",
                 f", the core link {duel.state}" if ctx.links is not None and duel.timed else "",
                 _who(duel.winner))
        loser, champion = (challenger, champion) if duel.winner == champion.name else (champion, challenger)
        if loser.name == SPLIT and split is not None:
            split = replace(split, session=None)
            ctx.drop_kernels()
        loser.session = None  # type: ignore[assignment]   # the last reference: its weights go now
        del loser
        release_freed_heap()

    for backend in _contenders(ctx, split if split_timed else None):
        if (c := admit(backend)) is not None:
            meet(c)
    bar_s: float | None = None                   # the champion's time, which second looks are held to
    bar_state: str | None = None                 # ... and the core-link state it was timed in
    champion_s: float | None = None              # ... timed as a plan is, where no duel timed it
    if champion is not None and ctx.settings.selection.duel_rounds > 0:
        for backend in sorted(set(ctx.whole) - tried, key=lambda b: ctx.whole[b].cost):
            if not ctx.quick_to_compile(backend):
                log.info("%s, profiled at %s, beyond %.2fx: not timed again (its kernel is not kept compiled, and "
                         "compiling it is slow)", _who(backend), _ms(ctx.whole[backend].cost),
                         ctx.settings.selection.contender_factor)
                continue
            if (why := _profiles_compare(ctx, backend)) is not None:
                log.info("%s: not timed again", why)
                continue
            assert champion is not None
            if bar_s is None:
                # Timed once, before the look: a whole-model champion that compiles again in seconds is
                # dropped while the other loads (yolov4: Inductor's whole model loaded beside
                # OpenVINO's was the optimize's peak, 4.6 GB), and compiled again only for a duel.
                session = champion.session
                if duels:
                    bar_s, bar_state = ctx.around(lambda: ctx.time(session, ctx.settings.selection.look_repeats))
                else:                            # (timed as a plan is: the kept plan's measured time)
                    bar_s, bar_state = ctx.around(lambda: ctx.time(session))
                    champion_s = bar_s
                del session                      # (held here, the champion's weights stayed through the looks)
                if champion.name != SPLIT and ctx.quick_to_compile(champion.name):
                    champion.session = None  # type: ignore[assignment]
                    release_freed_heap()
            if (c := admit(backend, look=True)) is not None:
                if champion.session is None:
                    champion.session = compile_plan(ctx.stored(champion.plan))
                meet(c)
    if not admitted and not split_timed:    # every contender failed: the other engines, cheapest first
        for backend in sorted(set(ctx.whole) - tried, key=lambda b: ctx.whole[b].cost):
            if (c := admit(backend)) is not None:
                meet(c)
                break
    if champion is None:
        if inaccurate:
            raise VerificationError("no plan passes the accuracy check: " + "; ".join(inaccurate.values()))
        raise SelectionError("no plan compiles: neither a split plan nor any engine's whole-model kernel")
    if not duels:
        if champion.name == SPLIT:
            assert split is not None
            return _result(ctx, split.plan, champion.session, split.selection, split.measured_s, SPLIT,
                           _why_split_alone(ctx, split), split, rounds, solve_s, (), _timed_in_plan(costs), inaccurate,
                           champion.check)
        why = _why_whole(ctx, champion.name, split, (), inaccurate)
        return _result(ctx, champion.plan, champion.session, champion.selection, champion_s, champion.name, why,
                       split, rounds, solve_s, (), _timed_in_plan(costs), inaccurate, champion.check)
    last = duels[-1]
    measured = last.of(last.winner)[0] if last.timed else (split.measured_s if champion.name == SPLIT and split else None)
    if champion.name == SPLIT:
        assert split is not None
        why = _why_split(ctx, split, duels)
        return _result(ctx, split.plan, champion.session, split.selection, measured, SPLIT, why, split, rounds,
                       solve_s, duels, _timed_in_plan(costs), inaccurate, champion.check)
    why = _why_whole(ctx, champion.name, split, duels, inaccurate)
    return _result(ctx, champion.plan, champion.session, champion.selection, measured, champion.name, why, split,
                   rounds, solve_s, duels, _timed_in_plan(costs), inaccurate, champion.check)


def _who(name: str) -> str:
    return "the split plan" if name == SPLIT else f"{name}'s whole model"


def _ms(seconds: float) -> str:
    ms = seconds * 1e3
    digits = 0 if ms >= 100 else 1 if ms >= 10 else 2 if ms >= 1 else 3
    return f"{ms:.{digits}f} ms"


def _after_exclusions(ctx: _Context) -> str:
    return f" (after excluding {len(ctx.excluded)} kernel(s) whose errors added up past the check)" \
        if ctx.excluded else ""


def _why_split_alone(ctx: _Context, split: _Timed) -> str:
    return f"the best split plan ({_kernels(split.plan)}) measured {_ms(split.measured_s or 0.0)}; " \
           f"no engine's whole-model kernel was available to compare{_after_exclusions(ctx)}"


def _duel_s(duels: Sequence[Duel]) -> dict[str, float]:
    """Each contender's median in the last timed duel it was in."""
    out: dict[str, float] = {}
    for d in duels:
        if d.timed:
            out[d.first], out[d.second] = d.first_s, d.second_s
    return out


def _why_split(ctx: _Context, split: _Timed, duels: Sequence[Duel]) -> str:
    n = _kernels(split.plan)
    if not any(d.timed for d in duels):
        return (f"the best split plan ({n}) was predicted faster than every whole-model "
                f"kernel's profile (side-by-side comparison off){_after_exclusions(ctx)}")
    won = ", ".join(f"{_ms(mine)} against {rival}'s {_ms(theirs)} ({d.ratio_of(SPLIT):.3f}x its time)"
                    for d, (mine, rival, theirs) in ((d, d.of(SPLIT)) for d in duels))
    return f"the best split plan ({n}) beat every whole model side by side: {won}{_after_exclusions(ctx)}"


def _rounds(duel: Duel) -> str:
    """The loser's time over the winner's round by round, which decided the duel: the medians of a close
    pair can point the other way (gpt2-small on the Intel host: openvino's whole model 120 ms against
    inductor's 126 ms, inductor's kept)."""
    if not duel.timed or duel.ratio is None:
        return ""
    winner = "the split plan" if duel.winner == SPLIT else duel.winner
    if duel.profiled:
        return (f" (side by side with the core link {duel.state}; {duel.ratio_of(duel.loser):.3f}x {winner}'s "
                f"by their profiles, both taken near)")
    return f" ({duel.ratio_of(duel.loser):.3f}x {winner}'s round by round)"


def _why_whole(ctx: _Context, winner: str, split: _Timed | None, duels: Sequence[Duel],
               inaccurate: Mapping[str, str]) -> str:
    s = ctx.settings.selection
    timed = _duel_s(duels)
    others = [f"{d.loser}'s {_ms(timed[d.loser])}{_rounds(d)}" for d in duels if d.loser != SPLIT and d.loser in timed]
    also = f" (other whole models, side by side: {', '.join(others)})" if others else ""
    mine = f"{winner}'s whole model " + (f"{_ms(timed[winner])}" if winner in timed else
                                         f"profiled at {_ms(ctx.whole[winner].cost)}")
    if inaccurate:
        also += "; failed the accuracy check: " + "; ".join(inaccurate.values())
    if SPLIT in inaccurate:
        return f"one engine runs the whole model: {mine}{also}"
    if split is None:
        ps = ctx.settings.profile
        if ctx.settings.whole_models:
            return f"one engine runs the whole model: whole-model kernels only were profiled (whole_models); kept {mine}{also}"
        if ps.guided and set(ps.guided_backends) & set(ctx.settings.backends):
            return (f"one engine runs the whole model: the kernels profiled make no split plan (guided profiling "
                    f"measures kernels only while a split plan could still beat the fastest whole model, its "
                    f"unmeasured kernels at their optimistic costs); kept {mine}{also}")
        return f"one engine runs the whole model: no split plan exists over the profiled kernels; kept {mine}{also}"
    n = _kernels(split.plan)
    if split.measured_s is None:
        free = ctx.uncalibrated(split.plan)
        costs = f"kernel profiles and boundary costs; {', '.join(free)}'s not calibrated, counted as free" if free \
            else "kernel profiles and boundary costs"
        return (f"one engine runs the whole model: the best split plan ({n}) was predicted at "
                f"{_ms(split.predicted_s)}{' or more' if free else ''} ({costs}), {winner}'s whole model "
                f"profiled at {_ms(ctx.whole[winner].cost)}{also}")
    # the duel the split plan lost (it may have won others before it: each reading is noisy)
    met = next((d for d in duels if d.loser == SPLIT and d.timed), None)
    if met is not None:
        mine_s, rival, rival_s = met.of(SPLIT)
        ratio = met.ratio_of(SPLIT)
        margin = "" if ratio > 1.0 else \
            f"; a split plan must run in {s.multi_kernel_margin:.2f}x to pay for its boundaries"
        return (f"one engine runs the whole model: the best split plan ({n}) measured "
                f"{_ms(mine_s)} side by side with {rival}'s whole model {_ms(rival_s)}, {ratio:.3f}x its "
                f"time round by round{margin}; kept {mine}{also}")
    return (f"one engine runs the whole model: the best split plan ({n}) was predicted at "
            f"{_ms(split.predicted_s)} and measured {_ms(split.measured_s)}, {winner}'s whole model profiled "
            f"at {_ms(ctx.whole[winner].cost)} (no side-by-side comparison){also}")


def _kernels(plan: Plan) -> str:
    """"4 kernels: 3 openvino, 1 inductor": what a split plan is made of, engines by kernel count."""
    counts = sorted(plan.kernels_by_backend().items(), key=lambda bk: (-bk[1], bk[0]))
    engines = ", ".join(f"{k} {b}" for b, k in counts)
    return f"{len(plan.steps)} kernels: {engines}"


def _result(ctx: _Context, plan: Plan, session: Session | None, selection: Selection, measured_s: float | None,
            kept: str, why: str, split: _Timed | None, rounds: int, solve_s: float,
            duels: Sequence[Duel], in_plan_costs: int, inaccurate: Mapping[str, str] | None = None,
            check: PlanCheck | None = None, remembered: bool = False) -> Selected:
    if measured_s is None:
        measured_s = ctx.time(session)
    log.info("kept %s: %s", "the split plan" if kept == SPLIT else f"{kept}'s whole model", why)
    stats = SelectionStats(
        kernels=len(plan.steps), predicted_ms=selection.cost * 1e3, measured_ms=measured_s * 1e3,
        gap=selection.gap, optimal=selection.optimal, boundary_ms=selection.boundary_s * 1e3, rounds=rounds,
        remembered=remembered, solve_seconds=solve_s, kept=kept, why=why,
        split_kernels=len(split.plan.steps) if split is not None else None,
        split_predicted_ms=split.predicted_s * 1e3 if split is not None else None,
        split_measured_ms=split.measured_s * 1e3 if split is not None and split.measured_s is not None else None,
        whole_model_ms={b: o.cost * 1e3 for b, o in sorted(ctx.whole.items())},
        side_by_side_ms={k: v * 1e3 for k, v in _duel_s(duels).items()}, duels=tuple(duels), in_plan_costs=in_plan_costs,
        cycle_cuts=selection.cycle_cuts, resolves=selection.resolves, inaccurate=dict(inaccurate or {}),
        excluded=tuple(ctx.excluded.values()))
    return Selected(plan, session, stats, check)


def _replay(ctx: _Context, remembered: RememberedSelection, weights: str | None) -> Selected:
    """A warm run of a problem decided before: solve (or take the engine's whole model) once. The plan
    is the one chosen then; if it passed its check on these weights, that check and the time measured
    then are its own, and it is not compiled (a warm bert-base spent 13 of 26 s compiling its Inductor
    kernel again, and 2.5 s checking it). Otherwise it is compiled and timed, and the caller checks it."""
    why = remembered.reason or "remembered from an earlier run"
    check = _remembered_check(remembered, weights)
    backend = remembered.whole_model_backend
    if backend is not None and backend in ctx.whole:
        plan, selection = ctx.whole_model(backend)
        kept, split, solve_s, step_ms = backend, None, 0.0, ()
    else:
        ctx.restore_exclusions(remembered.costs)
        selection = ctx.solve(ctx.costed(remembered.costs))
        plan, predicted = ctx.plan(selection)
        plan, step_ms = _remembered_schedule(plan, remembered.schedule)
        kept, split, solve_s = SPLIT, _Timed(plan, None, predicted, None, selection), selection.seconds
    in_plan = _timed_in_plan(remembered.costs) if kept == SPLIT else 0
    scheduled = _replayed_schedule_stats(plan, step_ms)
    if check is None:
        result = _result(ctx, plan, compile_plan(plan), selection, None, kept, why, split, 0, solve_s, (), in_plan,
                         remembered=True)
        return replace(result, stats=replace(result.stats, schedule=scheduled))
    result = _result(ctx, plan, None, selection, remembered.measured_s, kept, why, split, 0, solve_s, (), in_plan,
                     check=check, remembered=True)
    return replace(result, stats=replace(result.stats, schedule=scheduled), check_remembered=True)


def _replayed_schedule_stats(plan: Plan, step_ms: tuple[tuple[float, float | None], ...]) -> ScheduleStats | None:
    """What a replayed plan's remembered schedule does (not measured again)."""
    if plan.schedule is None:
        return None
    threads = plan.step_threads()
    return ScheduleStats(True, "remembered from the run that chose the plan", len(plan.schedule.stages),
                         plan.schedule.concurrent_steps, sum(1 for t in threads if t < plan.threads), step_ms=step_ms)


def _remembered_check(remembered: RememberedSelection, weights: str | None) -> PlanCheck | None:
    """The check the remembered plan passed, if it was checked on the same weights (a model of the same
    architecture with other weights is the same selection problem, but may not pass)."""
    checked = remembered.checked
    if weights is None or checked is None or checked.get("weights") != weights:
        return None
    try:
        check = PlanCheck.from_json(checked["check"])
    except (KeyError, TypeError, ValueError):
        return None
    return check if check.ok else None
