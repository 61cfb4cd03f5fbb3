"""Co-scheduling: schedules are legal, built from costs as the module says, and run a plan to the same
outputs as one step after another (on the same kernels), on random graphs with parallel branches."""

from __future__ import annotations

import os
import random
import threading

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from korch import __version__
from korch.backends import CompileOptions, get_backend
from korch.candidates.candidate import boundary
from korch.ir.graph import Graph, GraphBuilder
from korch.ir.types import DType, TensorType
from korch.plan import Plan, PlanError, Step, load_plan, save_plan
from korch.plan.schedule import Lane, Schedule, ScheduleError, sequential
from korch.profile.database import machine_fingerprint
from korch.runtime import KernelRunError, Session
from korch.runtime.lanes import LanePool
from korch.select.coschedule import StepCosts, build_schedule

WIDTH = 8


def branchy_graph(rng: random.Random, branches: int, depth: int) -> Graph:
    """x -> `branches` chains of `depth` elementwise primitives (each with its own weight) -> summed."""
    b = GraphBuilder("branchy")
    x = b.add_input("x", TensorType((4, WIDTH), DType.FLOAT32))
    ends = []
    for j in range(branches):
        v = x
        for k in range(depth):
            op = rng.choice(["mul", "add", "tanh", "relu"])
            if op in ("mul", "add"):
                w = b.add_constant(np.asarray(np.random.default_rng(rng.randrange(1 << 30)).uniform(0.5, 1.5, (1, WIDTH)),
                                              np.float32))
                v = b.emit(op, [v, w], origin=f"b{j}_{k}")
            else:
                v = b.emit(op, [v], origin=f"b{j}_{k}")
        ends.append(v)
    total = ends[0]
    for k, e in enumerate(ends[1:]):
        total = b.emit("add", [total, e], origin=f"sum{k}")
    return b.build([("y", total)])


def per_node_plan(graph: Graph, threads: int, schedule: Schedule | None = None) -> Plan:
    steps = []
    for i in range(len(graph.nodes)):
        inputs, outputs = boundary(graph, (i,))
        steps.append(Step("onnxruntime", (i,), inputs, outputs, f"k{i}", 1e-5))
    return Plan(graph, tuple(steps), threads, machine_fingerprint(), __version__, schedule=schedule)


def kernels_for(plan: Plan) -> list:
    from korch.runtime.session import compile_step

    return [compile_step(plan, st, t) for st, t in zip(plan.steps, plan.step_threads())]


def branch_costs(plan: Plan, narrow: float = 1.0, fork: float = 0.1) -> StepCosts:
    n = len(plan.steps)
    return StepCosts((1.0,) * n, (narrow,) * n, fork)


# --- the schedule itself ---------------------------------------------------------------------------

def test_sequential_schedule_and_checks_name_the_step() -> None:
    plan = per_node_plan(branchy_graph(random.Random(1), 2, 2), 2)
    plan.check_schedule(sequential(len(plan.steps), 2))
    # steps: b0_0, b0_1, b1_0, b1_1, sum0 (graph order)
    plan.check_schedule(Schedule(((Lane((0, 1), 1), Lane((2, 3), 1)), (Lane((4,), 2),))))
    with pytest.raises(ScheduleError, match="step 5 .*reads"):
        plan.check_schedule(Schedule(((Lane((0, 1), 1), Lane((2, 3, 4), 1)),)))
    with pytest.raises(ScheduleError, match="step 4 .*reads"):   # b1_1 in the other lane from b1_0
        plan.check_schedule(Schedule(((Lane((0, 3), 1), Lane((2, 1), 1)), (Lane((4,), 2),))))
    with pytest.raises(ScheduleError, match="scheduled twice"):
        plan.check_schedule(Schedule(((Lane((0, 1), 1), Lane((1, 2, 3), 1)), (Lane((4,), 2),))))
    with pytest.raises(ScheduleError, match="never scheduled"):
        plan.check_schedule(Schedule(((Lane((0, 1, 2, 3), 2),),)))
    with pytest.raises(ScheduleError, match="threads"):
        plan.check_schedule(Schedule(((Lane((0, 1), 2), Lane((2, 3), 1)), (Lane((4,), 2),))))


def test_a_saved_schedule_loads_back_and_an_edited_one_is_refused(tmp_path) -> None:
    graph = branchy_graph(random.Random(2), 2, 2)
    schedule = Schedule(((Lane((0, 1), 1), Lane((2, 3), 1)), (Lane((4,), 2),)))
    path = save_plan(per_node_plan(graph, 2, schedule), tmp_path / "plan")
    loaded = load_plan(path, __version__, machine_fingerprint())
    assert loaded.schedule == schedule and loaded.step_threads() == (1, 1, 1, 1, 2)
    import json

    meta = json.loads((path / "plan.json").read_text())
    meta["schedule"][0][1]["steps"] = [2, 3, 4]
    (path / "plan.json").write_text(json.dumps(meta))
    with pytest.raises(PlanError, match="plan.json"):          # the manifest names the edited file
        load_plan(path, __version__, machine_fingerprint())


# --- building a schedule from costs ------------------------------------------------------------------

def test_two_branches_that_scale_badly_run_side_by_side() -> None:
    plan = per_node_plan(branchy_graph(random.Random(3), 2, 3), 2)
    built = build_schedule(plan, branch_costs(plan, narrow=1.0, fork=0.1))
    assert built is not None
    schedule, predicted = built
    plan.check_schedule(schedule)
    assert schedule.stages[0] == (Lane((0, 1, 2), 1), Lane((3, 4, 5), 1))
    assert predicted == pytest.approx(3.0 + 0.1 + 1.0)       # the longer lane, a fork, the sum alone


def test_kernels_that_scale_perfectly_stay_sequential() -> None:
    plan = per_node_plan(branchy_graph(random.Random(4), 3, 2), 2)
    assert build_schedule(plan, branch_costs(plan, narrow=2.0, fork=0.01)) is None


def test_a_fork_dearer_than_what_lanes_save_is_not_taken() -> None:
    plan = per_node_plan(branchy_graph(random.Random(5), 2, 1), 2)
    # side by side: 1.5 + fork; alone: each step on its better thread count, 1.0 + 1.0
    assert build_schedule(plan, branch_costs(plan, narrow=1.5, fork=0.6)) is None
    built = build_schedule(plan, branch_costs(plan, narrow=1.5, fork=0.4))
    assert built is not None and built[0].concurrent_steps == 2


def test_a_step_faster_on_fewer_threads_runs_on_fewer_even_alone() -> None:
    plan = per_node_plan(branchy_graph(random.Random(6), 1, 3), 2)      # one chain: nothing side by side
    built = build_schedule(plan, StepCosts((1.0, 1.0, 1.0), (0.5, 2.0, 0.5), 0.1))
    assert built is not None
    schedule, predicted = built
    assert schedule.concurrent_steps == 0 and plan.step_threads() == (2, 2, 2)
    assert schedule.step_threads(3) == (1, 2, 1) and predicted == pytest.approx(2.0)


def test_a_step_whose_engine_cannot_run_in_a_lane_runs_alone_on_all_threads() -> None:
    plan = per_node_plan(branchy_graph(random.Random(7), 2, 1), 2)
    built = build_schedule(plan, StepCosts((1.0, 1.0, 1.0), (1.0, None, 1.0), 0.1))
    assert built is None


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 4), st.integers(1, 4), st.integers(0, 1 << 30))
def test_built_schedules_are_legal_and_never_predicted_slower(branches: int, depth: int, seed: int) -> None:
    rng = random.Random(seed)
    plan = per_node_plan(branchy_graph(rng, branches, depth), 2)
    n = len(plan.steps)
    costs = StepCosts(tuple(rng.uniform(0.1, 2) for _ in range(n)),
                      tuple(rng.choice([None, rng.uniform(0.1, 4)]) for _ in range(n)), rng.uniform(0, 0.5))
    built = build_schedule(plan, costs)
    if built is None:
        return
    schedule, predicted = built
    plan.check_schedule(schedule)
    assert predicted <= sum(costs.wide_s) + 1e-12


# --- running one ---------------------------------------------------------------------------------------

needs_two_cpus = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="lanes are pinned to two CPUs")


@needs_two_cpus
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(2, 4), st.integers(1, 4), st.integers(0, 1 << 30))
def test_a_scheduled_plan_gives_the_sequential_plans_outputs(branches: int, depth: int, seed: int) -> None:
    """Random branchy graphs, onnxruntime kernels: a schedule built from random costs (so lanes of
    every shape occur) runs to the same outputs, bit for bit, as the plan one step after another on
    kernels of the same thread counts; fresh random inputs each run."""
    rng = random.Random(seed)
    graph = branchy_graph(rng, branches, depth)
    plan = per_node_plan(graph, 2)
    n = len(plan.steps)
    built = build_schedule(plan, StepCosts((1.0,) * n, tuple(rng.uniform(0.3, 1.2) for _ in range(n)), 0.05))
    assert built is not None          # two branches of steps at least 0.3 faster side by side
    scheduled = Plan(graph, plan.steps, 2, plan.machine, plan.korch_version, schedule=built[0])
    kernels = kernels_for(scheduled)
    one_by_one = Session(plan, kernels)
    side_by_side = Session(scheduled, kernels)
    feeds_rng = np.random.default_rng(seed)
    for _ in range(3):
        feeds = {"x": feeds_rng.standard_normal((4, WIDTH)).astype(np.float32)}
        (want,), (got,) = one_by_one.run(None, feeds), side_by_side.run(None, feeds)
        assert np.abs(want).max() > 0
        np.testing.assert_array_equal(got, want)
        times = side_by_side.step_times(feeds)
        assert len(times) == n and all(t > 0 for t in times)


class _Boom:
    def __init__(self, kernel, fail: threading.Event) -> None:
        self.kernel, self.fail = kernel, fail

    def run(self, inputs):
        if self.fail.is_set():
            raise RuntimeError("injected failure")
        return self.kernel.run(inputs)


@needs_two_cpus
def test_a_kernel_that_raises_in_a_lane_names_its_step_and_the_next_run_works() -> None:
    graph = branchy_graph(random.Random(8), 2, 2)
    schedule = Schedule(((Lane((0, 1), 1), Lane((2, 3), 1)), (Lane((4,), 2),)))
    plan = per_node_plan(graph, 2, schedule)
    fail = threading.Event()
    kernels = kernels_for(plan)
    kernels[3] = _Boom(kernels[3], fail)       # the second lane's last step: it runs on a worker
    session = Session(plan, kernels)
    feeds = {"x": np.random.default_rng(9).standard_normal((4, WIDTH)).astype(np.float32)}
    (want,) = session.run(None, feeds)
    fail.set()
    with pytest.raises(KernelRunError, match=r"step 4 of 5, the onnxruntime kernel of ONNX nodes \['b1_1'\]"):
        session.run(None, feeds)
    fail.clear()
    for _ in range(2):
        np.testing.assert_array_equal(session.run(None, feeds)[0], want)


def test_lane_workers_stop_when_their_pool_goes() -> None:
    import gc

    gc.collect()
    before = threading.active_count()
    pool = LanePool(3)
    assert threading.active_count() == before + 2
    ran = []
    pool.run([lambda: ran.append(0), lambda: ran.append(1), lambda: ran.append(2)])
    assert sorted(ran) == [0, 1, 2]
    del pool
    import gc

    gc.collect()
    assert threading.active_count() == before


def test_onnxruntime_runs_in_lanes_and_the_other_engines_do_not() -> None:
    assert get_backend("onnxruntime").runs_in_lanes
    assert not get_backend("inductor").runs_in_lanes
    assert CompileOptions().threads == 1


# --- chosen with the plan ------------------------------------------------------------------------------

@needs_two_cpus
def test_optimize_schedules_a_split_plan_keeps_it_across_save_load_and_replays_it_warm(tmp_path) -> None:
    """yolox-mini as onnxruntime kernels of primitives at 2 threads, the split plan always kept and any
    schedule built always kept (margins forced): its tiny kernels run faster on one thread than on two
    (a parked pool's wake-up costs more than they compute), so a schedule is built. The scheduled plan
    matches onnxruntime, saves and loads with its schedule, and a warm run replays it."""
    from dataclasses import replace as with_

    import korch.runtime as runtime
    from korch import zoo
    from korch.pipeline import optimize
    from korch.profile.database import ProfileDB
    from korch.settings import QUICK_CALIBRATION, QUICK_PROFILE, QUICK_SELECTION, OptimizeSettings, ScheduleSettings
    from korch.verify import DEFAULT_RTOL, diff_outputs, random_feeds, run_onnxruntime

    settings_ = OptimizeSettings(threads=2, backends=("onnxruntime",), regions=None, calibration=QUICK_CALIBRATION,
                                 profile=QUICK_PROFILE, selection=with_(QUICK_SELECTION, multi_kernel_margin=100.0),
                                 schedule=ScheduleSettings(step_runs=3, margin=100.0))
    model = zoo.to_model_proto("yolox-mini")
    with ProfileDB(tmp_path / "profiles.sqlite") as db:
        plan, session, stats = optimize(model, db, settings_)
        scheduled = stats.selection.schedule
        assert scheduled is not None and scheduled.kept, scheduled
        assert plan.schedule is not None and scheduled.narrow_steps > 0
        assert scheduled.scheduled_ms is not None and scheduled.sequential_ms is not None
        feeds = random_feeds(plan.graph, seed=5)
        got = dict(zip(plan.graph.outputs, session.run(None, feeds)))
        for diff in diff_outputs(got, run_onnxruntime(model, feeds)):
            assert diff.rel <= DEFAULT_RTOL, diff
        save_plan(plan, tmp_path / "plan")
        loaded = runtime.load(tmp_path / "plan")
        assert loaded.plan.schedule == plan.schedule
        for a, b in zip(loaded.run(None, feeds), session.run(None, feeds)):
            np.testing.assert_array_equal(a, b)
        _explained_and_drawn(tmp_path / "plan")
        again, _, warm = optimize(model, db, settings_)
        assert warm.selection.remembered, warm.selection.not_replayed      # (what changed, if it was not)
        assert again.schedule == plan.schedule
        assert warm.selection.schedule is not None and warm.selection.schedule.concurrent_steps == \
            plan.schedule.concurrent_steps


def _explained_and_drawn(path) -> None:
    """`korch explain --kernel` gives a scheduled kernel's threads, lane and both in-plan times; the
    report's data draws every kernel in its lane, lanes of one stage starting together."""
    from korch.report.data import _schedule
    from korch.report.explain import explain, thread_lines
    from korch.report.facts import load_facts

    facts = load_facts(path)
    schedule = facts.plan.schedule
    stage = next(stage for stage in schedule.stages if len(stage) > 1)
    k = stage[1].steps[0]
    text = explain(facts, None) + "\n" + "\n".join(thread_lines(facts, facts.kernels[k]))
    assert "schedule: " in text and "threads: 1 of 2, lane 2 of 2" in text, text
    assert "on 2 threads" in text and "on 1:" in text, text
    assert f"{facts.kernels[k].id} " in text and "[1t, lane 2/2]" in text, text      # the overview's kernel list
    drawn = _schedule(facts)
    assert drawn is not None and drawn["lanes"] == 2 and len(drawn["slots"]) == len(facts.plan.steps)
    starts = {drawn["slots"][lane.steps[0]][2] for lane in stage}
    assert len(starts) == 1 and all(slot[3] > 0 for slot in drawn["slots"])
    from korch.report.diff import diff_plans, format_diff

    side = schedule.concurrent_steps
    import re

    assert re.search(rf"^  side by side +{side} +{side}$", format_diff(diff_plans(facts, facts)), re.M)


def test_independent_steps_are_those_something_could_run_beside() -> None:
    from korch.select.coschedule import independent_steps

    plan = per_node_plan(branchy_graph(random.Random(10), 2, 2), 2)     # b0_0 b0_1 | b1_0 b1_1 -> sum
    assert independent_steps(plan) == [True, True, True, True, False]
    chain = per_node_plan(branchy_graph(random.Random(11), 1, 3), 2)
    assert independent_steps(chain) == [False, False, False]


@needs_two_cpus
def test_a_scheduled_session_and_its_lane_workers_go_when_it_is_dropped() -> None:
    import gc
    import weakref

    graph = branchy_graph(random.Random(12), 2, 2)
    plan = per_node_plan(graph, 2, Schedule(((Lane((0, 1), 1), Lane((2, 3), 1)), (Lane((4,), 2),))))
    gc.collect()
    before = threading.active_count()
    session = Session(plan, kernels_for(plan))
    assert threading.active_count() == before + 1
    session.run(None, {"x": np.random.default_rng(13).standard_normal((4, WIDTH)).astype(np.float32)})
    gone = weakref.ref(session)
    del session
    gc.collect()
    assert gone() is None and threading.active_count() == before


def test_sequential_turns_co_scheduling_off_on_the_command_line() -> None:
    from korch.cli import _settings, build_parser

    on = _settings(build_parser().parse_args(["optimize", "m.onnx", "-o", "p", "--threads", "2"]))
    off = _settings(build_parser().parse_args(["optimize", "m.onnx", "-o", "p", "--threads", "2", "--sequential"]))
    assert on.schedule.enabled and not off.schedule.enabled


@needs_two_cpus
@pytest.mark.parametrize("name", ["yolox-mini", "segformer-mini", "efficientvit-mini", "bert-mini"])
def test_mini_zoo_plans_give_the_same_outputs_scheduled_as_one_step_after_another(name: str) -> None:
    """Each mini zoo model as one onnxruntime kernel per ONNX node (its primitives), at 2 threads,
    scheduled from random costs (so its real branches become lanes): the same outputs, bit for bit, as
    the same kernels one after another, on fresh random inputs."""
    from korch import zoo
    from korch.pipeline import run_fission
    from korch.verify import random_feeds

    graph = run_fission(zoo.to_model_proto(name)).graph
    by_origin: dict[str, list[int]] = {}
    for i, node in enumerate(graph.nodes):
        by_origin.setdefault(node.origin, []).append(i)
    steps = []
    for k, nodes in enumerate(by_origin.values()):
        inputs, outputs = boundary(graph, tuple(nodes))
        steps.append(Step("onnxruntime", tuple(nodes), inputs, outputs, f"k{k}", 1e-5))
    from korch.plan import order_steps

    plan = Plan(graph, order_steps(steps, graph.inputs), 2, machine_fingerprint(), __version__)
    rng = random.Random(name)
    n = len(plan.steps)
    built = build_schedule(plan, StepCosts((1.0,) * n, tuple(rng.uniform(0.4, 0.9) for _ in range(n)), 0.05))
    assert built is not None and built[0].concurrent_steps >= 2, name
    scheduled = Plan(graph, plan.steps, 2, plan.machine, plan.korch_version, schedule=built[0])
    kernels = kernels_for(scheduled)
    one_by_one, side_by_side = Session(plan, kernels), Session(scheduled, kernels)
    for seed in (1, 2):
        feeds = random_feeds(graph, seed=seed + rng.randrange(1000))
        for want, got in zip(one_by_one.run(None, feeds), side_by_side.run(None, feeds)):
            np.testing.assert_array_equal(got, want)


def test_callers_on_several_threads_take_turns_at_a_fork() -> None:
    pool = LanePool(2)
    inside = []
    overlap = []

    def lane(tag: str) -> None:
        inside.append(tag)
        if len(inside) > 2:
            overlap.append(list(inside))
        time_sleep(0.002)
        inside.remove(tag)

    def caller(n: int) -> None:
        for _ in range(20):
            pool.run([lambda: lane(f"{n}a"), lambda: lane(f"{n}b")])

    callers = [threading.Thread(target=caller, args=(n,)) for n in range(3)]
    for t in callers:
        t.start()
    for t in callers:
        t.join()
    assert not overlap                 # never more than one stage's two lanes at once
    pool.close()


def time_sleep(seconds: float) -> None:
    import time

    time.sleep(seconds)


@needs_two_cpus
def test_a_schedule_that_does_not_measure_faster_is_not_kept() -> None:
    """margin 0: no schedule can be fast enough, so the plan comes back as it was, with the sequential
    session, and the stats say what was measured and why it was not kept."""
    from korch.runtime.session import compile_step
    from korch.select.coschedule import coschedule
    from korch.settings import ScheduleSettings

    plan = per_node_plan(branchy_graph(random.Random(14), 2, 3), 2)
    kernels = kernels_for(plan)
    session = Session(plan, kernels)
    feeds = {"x": np.random.default_rng(15).standard_normal((4, WIDTH)).astype(np.float32)}
    kept_plan, kept_session, stats = coschedule(plan, session, dict(zip(plan.steps, kernels)), compile_step, feeds,
                                                ScheduleSettings(step_runs=2, margin=0.0), duel_rounds=2)
    assert kept_plan is plan and kept_session is session and not stats.kept
    assert len(stats.step_ms) == len(plan.steps) and all(n is not None for _, n in stats.step_ms)
    assert stats.fork_us > 0
    if stats.sequential_ms is not None:              # a schedule was built and timed
        assert stats.why.startswith("not kept") and stats.scheduled_ms is not None
