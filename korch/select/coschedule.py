"""Co-scheduling: which kernels of a chosen plan run side by side, and on how many threads each.

A kernel tuned for the whole machine is not always best run on all of it: on this project's VM an
onnxruntime 3x3 conv of 32 channels at 20x20 ran in 47 us on one thread and 53 us on two, one of 128
channels at 40x40 1.86x faster on two (benchmarks/lane_pair.py, BENCHMARKS.md). So after selection each step is
timed in the plan at the plan's threads ("wide") and, where its engine can run in a lane, at half of
them ("narrow"), and a schedule is built from those costs (`build_schedule`, a list schedule over
the step DAG in fork-join stages):

- a stage runs one step alone, on whichever of its two thread counts is faster;
- or two lanes side by side, each a chain of steps on half the threads, when the longer lane plus
  the measured cost of a fork and join (waking a lane worker and waiting for it: 30-90 us on this
  VM) is shorter than running the same steps alone.

The schedule is a prediction from costs taken one step at a time; lanes also share memory
bandwidth and caches. So it is kept only if the whole plan, scheduled, measures faster than the
plan run one step after another on all threads, side by side in the same process (`coschedule`).
The sequential plan is always the other candidate, so scheduling never makes a plan slower than
measured noise allows.
"""

from __future__ import annotations

import logging
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from korch.backends import Kernel, get_backend
from korch.backends.placement import pinned, placement
from korch.plan import Plan, Step
from korch.plan.schedule import Lane, Schedule, narrow_threads
from korch.profile.timing import side_by_side
from korch.runtime import Session
from korch.runtime.lanes import LanePool
from korch.settings import ScheduleSettings

log = logging.getLogger("korch.select")


@dataclass(frozen=True)
class StepCosts:
    """Each step's time in the plan on all threads, and on half of them (None: its engine cannot run
    in a lane); and what one fork and join of two lanes costs."""

    wide_s: tuple[float, ...]
    narrow_s: tuple[float | None, ...]
    fork_s: float


@dataclass(frozen=True)
class ScheduleStats:
    """What co-scheduling did for the kept split plan, for the summary, the report and `explain`."""

    kept: bool                            # the plan runs with its schedule (else one step after another)
    why: str
    stages: int = 0
    concurrent_steps: int = 0             # steps that ran beside another lane
    narrow_steps: int = 0                 # steps on fewer threads than the plan's
    fork_us: float = 0.0                  # measured cost of one fork and join
    predicted_sequential_ms: float = 0.0  # the steps' in-plan times, summed
    predicted_ms: float = 0.0             # the schedule's, from the same costs
    sequential_ms: float | None = None    # side by side: medians and p10-p90
    sequential_p10_ms: float | None = None
    sequential_p90_ms: float | None = None
    scheduled_ms: float | None = None
    scheduled_p10_ms: float | None = None
    scheduled_p90_ms: float | None = None
    # Per plan step, its in-plan time on all threads and on a lane's (None: its engine runs in no lane),
    # in ms: what the schedule was built from, and what `korch explain` and the report show.
    step_ms: tuple[tuple[float, float | None], ...] = ()


def build_schedule(plan: Plan, costs: StepCosts, ready_pairs: int = 4) -> tuple[Schedule, float] | None:
    """A fork-join list schedule of `plan` under `costs` and its predicted seconds; None if it would
    run every step alone on all threads, as the plan does without one.

    Stage by stage over the steps whose inputs are made (in plan order): each pair of the first
    `ready_pairs` lane-capable ready steps seeds two lanes, grown greedily (each lane with the first
    step, in plan order, whose inputs its own lane or an earlier stage makes) while a step costs no
    more inside the stage than alone after it; the pair that saves the most, if any saves, is the stage,
    else the first ready step runs alone."""
    n, threads = len(plan.steps), plan.threads
    narrow = narrow_threads(threads)
    if n < 1 or narrow < 1:
        return None
    makers = {v: k for k, st in enumerate(plan.steps) for v in st.outputs}
    deps = [frozenset(makers[v] for v in st.inputs if v in makers) for st in plan.steps]
    alone = [min(w, nw) if nw is not None else w for w, nw in zip(costs.wide_s, costs.narrow_s)]
    remaining = list(range(n))
    done: set[int] = set()
    stages: list[tuple[Lane, ...]] = []
    total = 0.0
    while remaining:
        ready = [k for k in remaining if deps[k] <= done]
        seeds = [k for k in ready if costs.narrow_s[k] is not None][:ready_pairs]
        best: tuple[float, list[list[int]], float] | None = None
        for i, a in enumerate(seeds):
            for b in seeds[i + 1:]:
                lanes, span = _grow([[a], [b]], remaining, done, deps, costs, alone)
                saved = sum(alone[k] for lane in lanes for k in lane) - span - costs.fork_s
                if saved > 0 and (best is None or saved > best[0]):
                    best = (saved, lanes, span)
        if best is not None:
            _, lanes, span = best
            stages.append(tuple(Lane(tuple(lane), narrow) for lane in lanes))
            taken = {k for lane in lanes for k in lane}
            total += span + costs.fork_s
        else:
            k = ready[0]
            on_narrow = costs.narrow_s[k] is not None and alone[k] < costs.wide_s[k]
            stages.append((Lane((k,), narrow if on_narrow else threads),))
            taken = {k}
            total += alone[k]
        done |= taken
        remaining = [k for k in remaining if k not in taken]
    schedule = Schedule(tuple(stages))
    if schedule.lanes == 1 and all(lane.threads == threads for stage in stages for lane in stage):
        return None
    return schedule, total


def _grow(lanes: list[list[int]], remaining: Sequence[int], done: set[int], deps: Sequence[frozenset[int]],
          costs: StepCosts, alone: Sequence[float]) -> tuple[list[list[int]], float]:
    """Two seeded lanes, extended while a step costs no more inside the stage than alone after it
    (the most saving first); returns them and the longer lane's time."""
    load = [costs.narrow_s[lane[0]] or 0.0 for lane in lanes]
    taken = {k for lane in lanes for k in lane}
    while True:
        best: tuple[float, int, int] | None = None          # (saving, lane, step)
        for i, lane in enumerate(lanes):
            own = done | set(lane)
            step = next((k for k in remaining if k not in taken and costs.narrow_s[k] is not None
                         and deps[k] <= own), None)
            if step is None:
                continue
            grown = load[:i] + [load[i] + (costs.narrow_s[step] or 0.0)] + load[i + 1:]
            saving = alone[step] - (max(grown) - max(load))
            # (a step that saves nothing yet is still taken: on the shorter lane it makes room for the
            # other's next step, as two equal branches fill a stage only together)
            if saving >= 0 and (best is None or saving > best[0]):
                best = (saving, i, step)
        if best is None:
            return lanes, max(load)
        _, i, step = best
        lanes[i].append(step)
        load[i] += costs.narrow_s[step] or 0.0
        taken.add(step)


def fork_cost(pool: LanePool, calls: int = 200) -> float:
    """The median time of a fork and join of two lanes that do nothing (seconds)."""
    lanes = [_nothing] * pool.lanes
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        pool.run(lanes)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _nothing() -> None:
    return None


def independent_steps(plan: Plan) -> list[bool]:
    """Per step, whether some other step is neither its ancestor nor its descendant (could run beside it)."""
    n = len(plan.steps)
    makers = {v: k for k, st in enumerate(plan.steps) for v in st.outputs}
    ancestors = [0] * n                       # bitsets over steps, in plan (topological) order
    for k, st in enumerate(plan.steps):
        for v in st.inputs:
            if v in makers:
                ancestors[k] |= ancestors[makers[v]] | (1 << makers[v])
    related = [ancestors[k] | (1 << k) for k in range(n)]
    for k in range(n):                        # add descendants: k is an ancestor of j
        for j in range(k + 1, n):
            if ancestors[j] >> k & 1:
                related[k] |= 1 << j
    everyone = (1 << n) - 1
    return [related[k] != everyone for k in range(n)]


def lane_capable(plan: Plan) -> list[bool]:
    return [get_backend(st.backend).runs_in_lanes for st in plan.steps]


def step_medians(session: Session, feeds: Mapping[str, np.ndarray], runs: int, warmup: int = 1) -> list[float]:
    """Each step's median time in the plan over `runs` runs (seconds)."""
    for _ in range(warmup):
        session.run(None, feeds)
    samples = [session.step_times(feeds) for _ in range(runs)]
    return [statistics.median(run[k] for run in samples) for k in range(len(session.plan.steps))]


def coschedule(plan: Plan, session: Session, kernels: Mapping[Step, Kernel],
               compile_step: Callable[[Plan, Step, int], Kernel], feeds: Mapping[str, np.ndarray],
               settings: ScheduleSettings, duel_rounds: int) -> tuple[Plan, Session, ScheduleStats]:
    """`plan` (run by `session`, its kernels `kernels` by step) with the schedule that measures fastest:
    its own steps one after another, or a schedule built from the steps' in-plan costs (module doc).
    Returns the plan kept, its session, and what was measured."""
    threads = plan.threads
    if not settings.enabled or narrow_threads(threads) < 1 or len(plan.steps) < 2:
        why = "off" if not settings.enabled else "one thread" if threads < 2 else "one kernel"
        return plan, session, ScheduleStats(False, f"not scheduled: {why}")
    if not any(lane_capable(plan)):
        return plan, session, ScheduleStats(False, "not scheduled: no kernel's engine runs in a lane")
    costs, narrow_kernels = step_costs(plan, session, kernels, compile_step, feeds, settings)
    measured = ScheduleStats(False, "no schedule beats running the steps one after another on all threads, by "
                                    "their in-plan times", fork_us=costs.fork_s * 1e6,
                             predicted_sequential_ms=sum(costs.wide_s) * 1e3,
                             step_ms=tuple((w * 1e3, None if n is None else n * 1e3)
                                           for w, n in zip(costs.wide_s, costs.narrow_s)))
    built = build_schedule(plan, costs, settings.ready_pairs)
    if built is None:
        return plan, session, measured
    schedule, predicted = built
    scheduled_plan = replace(plan, schedule=schedule)
    step_threads = scheduled_plan.step_threads()
    scheduled = Session(scheduled_plan, [narrow_kernels[st] if t < threads else kernels[st]
                                         for st, t in zip(plan.steps, step_threads)])
    del narrow_kernels                    # (those the schedule does not run go with this frame)
    t = side_by_side({"sequential": lambda: session.run(None, feeds),
                      "scheduled": lambda: scheduled.run(None, feeds)}, duel_rounds, sum(costs.wide_s), warmup=1)
    seq, sch = t["sequential"], t["scheduled"]
    kept = sch.median_s <= settings.margin * seq.median_s
    narrow = sum(1 for x in step_threads if x < threads)
    said = f"scheduled {_ms(sch.median_s)} against {_ms(seq.median_s)} one step after another, side by side"
    why = (f"{schedule.concurrent_steps} kernel(s) side by side, {narrow} on {narrow_threads(threads)} thread(s): "
           f"{said}" if kept else f"not kept ({100 * (1 - settings.margin):.0f}% faster needed): {said}")
    stats = replace(
        measured, kept=kept, why=why, stages=len(schedule.stages), concurrent_steps=schedule.concurrent_steps,
        narrow_steps=narrow, predicted_ms=predicted * 1e3, sequential_ms=seq.median_s * 1e3,
        sequential_p10_ms=seq.p10_s * 1e3, sequential_p90_ms=seq.p90_s * 1e3, scheduled_ms=sch.median_s * 1e3,
        scheduled_p10_ms=sch.p10_s * 1e3, scheduled_p90_ms=sch.p90_s * 1e3)
    log.info("schedule: %s", stats.why)
    if kept:
        return scheduled_plan, scheduled, stats
    return plan, session, stats


def step_costs(plan: Plan, session: Session, kernels: Mapping[Step, Kernel],
               compile_step: Callable[[Plan, Step, int], Kernel], feeds: Mapping[str, np.ndarray],
               settings: ScheduleSettings) -> tuple[StepCosts, dict[Step, Kernel]]:
    """Each step's in-plan time on all threads and, where a lane could help it (its engine runs in
    lanes, and another step could run beside it or it is small), on a lane's threads; the fork cost;
    and the narrow kernels compiled for that (each is one more compile and copy of its weights)."""
    threads, narrow = plan.threads, narrow_threads(plan.threads)
    wide_s = step_medians(session, feeds, settings.step_runs)
    independent = independent_steps(plan)
    helped = [ok and (independent[k] or wide_s[k] < settings.small_step_s) for k, ok in enumerate(lane_capable(plan))]
    narrow_kernels = {st: compile_step(plan, st, narrow) for st, ok in zip(plan.steps, helped) if ok}
    narrow_s: list[float | None] = [None] * len(plan.steps)
    if narrow_kernels:
        all_narrow = replace(plan, schedule=Schedule(tuple(
            (Lane((k,), narrow if ok else threads),) for k, ok in enumerate(helped))))
        timed = step_medians(Session(all_narrow, [narrow_kernels.get(st) or kernels[st] for st in plan.steps]),
                             feeds, settings.step_runs)
        narrow_s = [t if ok else None for t, ok in zip(timed, helped)]
    where = placement(threads)
    pool = LanePool(2, where.workers if where is not None else ())
    with pinned(where.caller if where is not None else None):       # as a plan's caller runs
        fork_s = fork_cost(pool)
    pool.close()
    return StepCosts(tuple(wide_s), tuple(narrow_s), fork_s), narrow_kernels


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f} ms"
