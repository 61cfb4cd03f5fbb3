"""In-plan costs at the profiles' speed: a round's in-plan times are divided by how much slower than
its profile a probe (a whole model) ran alone in that round, or without one the plan's own kernels,
so a machine-wide slowdown is not read as the plan's cost, while a kernel's own surprise in the plan
is kept, and so is a profile that read low. And the two session calls that
timing needs: each step's inputs as the plan gives them, and each step timed alone on them."""

from __future__ import annotations

import math
import random
import time

import numpy as np
import pytest

from korch.backends.reference import run_graph
from korch.profile.boundaries import KERNEL_START, BoundaryModel, Line
from korch.profile.timing import CacheSweep
from korch.runtime import Session
from korch.select.measured import InPlanTimes
from korch.verify import random_feeds

from .test_coschedule import branchy_graph, kernels_for, per_node_plan


def test_a_slow_round_is_divided_out_and_a_kernels_own_surprise_is_kept() -> None:
    profiled = (0.010, 0.030)
    # in the plan, step 0 takes 1.5x its alone time (the plan's doing); step 1 what it takes alone
    quiet = {"in_plan": (0.015, 0.030), "alone": (0.010, 0.030)}
    slow = {"in_plan": (0.030, 0.060), "alone": (0.020, 0.060)}           # the machine at half speed
    times = InPlanTimes((quiet["in_plan"], slow["in_plan"], quiet["in_plan"]),
                        (quiet["alone"], slow["alone"], quiet["alone"]), profiled)
    assert times.slowdowns() == pytest.approx([1.0, 2.0, 1.0])
    assert times.slowdown() == pytest.approx(1.0)
    assert times.step_seconds() == pytest.approx([0.015, 0.030])
    all_slow = InPlanTimes((slow["in_plan"],) * 3, (slow["alone"],) * 3, profiled)
    assert all_slow.as_timed_s() == pytest.approx(0.090)
    assert all_slow.step_seconds() == pytest.approx([0.015, 0.030])   # as if timed at the profiles' speed


def test_with_a_probe_the_machine_is_read_from_it_and_lucky_profiles_are_not_given_back() -> None:
    # both kernels run alone at 1.4x their profiles while the probe runs at its own: their profiles
    # read low (the solver chose them for it), the machine did not slow down
    profiled = (0.010, 0.030)
    lucky = InPlanTimes(((0.014, 0.042),) * 3, ((0.014, 0.042),) * 3, profiled, (0.100, 0.101, 0.099), 0.100)
    assert lucky.slowdowns() == pytest.approx([1.0, 1.01, 0.99])
    assert lucky.step_seconds() == pytest.approx([0.014, 0.042], rel=0.011)
    assert lucky.kernel_slowdown() == pytest.approx(1.4, rel=0.011)
    assert InPlanTimes(((0.014, 0.042),), ((0.014, 0.042),), profiled).step_seconds() == pytest.approx(profiled)
    # the machine at half speed: the probe says so, and it is divided out as before
    slow = InPlanTimes(((0.028, 0.084),), ((0.028, 0.084),), profiled, (0.200,), 0.100)
    assert slow.slowdown() == pytest.approx(2.0) and slow.step_seconds() == pytest.approx([0.014, 0.042])
    assert slow.kernel_slowdown() == pytest.approx(1.4)
    # the probe's own profile off: read 100x its time (it runs at 0.01x it), or half its time; its
    # reading is held between the kernels' slowdown over luck_max and the kernels' slowdown
    off = InPlanTimes(((0.014, 0.042),), ((0.014, 0.042),), profiled, (0.100,), 10.0, luck_max=2.0)
    assert off.slowdown() == pytest.approx(0.7) and off.kernel_slowdown() == pytest.approx(2.0)
    low = InPlanTimes(((0.014, 0.042),), ((0.014, 0.042),), profiled, (0.100,), 0.050)
    assert low.slowdown() == pytest.approx(1.4) and low.step_seconds() == pytest.approx(profiled)


def test_the_slowdown_is_not_decided_by_one_odd_profile_or_a_microsecond_kernel() -> None:
    # step 1's profile was taken in a slow minute (it runs alone at half its profile), step 3 is a
    # 2 us kernel whose one call took 5x its profile: the machine is at its profiles' speed
    profiled = (0.010, 0.012, 0.011, 0.000002)
    times = InPlanTimes(((0.010, 0.006, 0.011, 0.00001),), ((0.010, 0.006, 0.011, 0.00001),), profiled)
    assert times.slowdown() == pytest.approx(1.0)
    assert times.step_seconds() == pytest.approx([0.010, 0.006, 0.011, 0.00001])


def test_kernels_faster_than_profiled_count_the_same_way_and_empty_profiles_leave_times_alone() -> None:
    fast = InPlanTimes(((0.004, 0.012),), ((0.004, 0.012),), (0.008, 0.024))
    assert fast.slowdown() == pytest.approx(0.5) and fast.step_seconds() == pytest.approx([0.008, 0.024])
    unprofiled = InPlanTimes(((0.004,),), ((0.003,),), (0.0,))
    assert unprofiled.slowdowns() == [1.0] and unprofiled.step_seconds() == pytest.approx([0.004])


def test_step_inputs_are_the_plans_values_and_alone_times_call_each_step_once() -> None:
    graph = branchy_graph(random.Random(7), 3, 2)
    plan = per_node_plan(graph, 1)
    session = Session(plan, kernels_for(plan))
    feeds = random_feeds(graph, 11)
    inputs = session.step_inputs(feeds)
    wanted = {v for st in plan.steps for v in st.inputs}
    exact = run_graph(graph, feeds, also=wanted)
    assert len(inputs) == len(plan.steps)
    for step, args in zip(plan.steps, inputs):
        assert len(args) == len(step.inputs)
        for name, value in zip(step.inputs, args):
            np.testing.assert_allclose(value, exact[name], rtol=1e-5, atol=1e-6)
    before = []
    times = session.alone_times(inputs, lambda: before.append(1))
    assert len(times) == len(plan.steps) and all(t > 0 for t in times) and len(before) == len(plan.steps)
    for args in inputs:                       # copies: a later run does not change them
        for a in args:
            a[...] = np.nan
    again = dict(zip(graph.outputs, session.run(None, feeds)))
    np.testing.assert_allclose(again[graph.outputs[0]], exact[graph.outputs[0]], rtol=1e-5, atol=1e-6)
    assert len(session.alone_times(session.step_inputs(feeds), CacheSweep(1 << 16))) == len(plan.steps)


def test_without_a_sweep_alone_times_time_each_kernels_second_call_in_a_row() -> None:
    """As the profiler times kernels by default: back to back, so the first call is not the one timed."""
    from dataclasses import dataclass

    @dataclass
    class Counted:
        calls: int = 0

        def run(self, args):
            self.calls += 1
            time.sleep(0.02 if self.calls % 2 else 0.0)      # odd calls (a first call) are slow
            return [args[0]]

    graph = branchy_graph(random.Random(7), 3, 2)
    plan = per_node_plan(graph, 1)
    kernels = [Counted() for _ in plan.steps]
    session = Session(plan, kernels)
    inputs = [[np.zeros(1, np.float32)] for _ in plan.steps]
    times = session.alone_times(inputs)
    assert [k.calls for k in kernels] == [2] * len(plan.steps) and max(times) < 0.015
    swept = session.alone_times(inputs, lambda: None)
    assert [k.calls for k in kernels] == [3] * len(plan.steps) and min(swept) >= 0.02


def test_structural_twins_share_the_mean_of_their_in_plan_times() -> None:
    """Steps of one cost key (gpt2-small's layers) get one cost, whose sum over the steps is what they took."""
    from dataclasses import replace
    from types import SimpleNamespace

    from korch.select.measured import _Context

    graph = branchy_graph(random.Random(3), 1, 3)
    plan = per_node_plan(graph, 1)
    keys = ["twin", "twin", "solo"]
    plan = replace(plan, steps=tuple(replace(st, key=k) for st, k in zip(plan.steps, keys)))
    fake = SimpleNamespace(cost_key=lambda st: f"{st.key}|{st.backend}", boundary_cost=lambda p, c, v: 0.0,
                           boundaries=BoundaryModel())
    times = InPlanTimes(((0.010, 0.014, 0.005),), ((0.010, 0.014, 0.005),), (0.010, 0.014, 0.005))
    costs = _Context.in_plan_costs(fake, plan, times)
    assert costs == pytest.approx({"twin|onnxruntime": 0.012, "solo|onnxruntime": 0.005})
    assert sum(costs[fake.cost_key(st)] for st in plan.steps) == pytest.approx(0.029)
    # with a calibrated kernel start, each in-plan cost is net of it (the BLP charges it again)
    fake.boundaries = BoundaryModel({("onnxruntime", "onnxruntime", KERNEL_START): Line(0.001, 0.0)})
    assert _Context.in_plan_costs(fake, plan, times) == pytest.approx(
        {"twin|onnxruntime": 0.011, "solo|onnxruntime": 0.004})


def test_kernels_not_yet_timed_in_a_plan_pay_the_start_cost_the_timed_ones_showed() -> None:
    """x -> p0 -> t -> p1 -> y. A and B (one primitive each) were timed in a plan at 0.3 ms over
    their 1 ms profiles. C and D (the same primitives on another engine) profiled at 0.9 ms and were
    never in a plan; AB (both primitives) at 2.05 ms. At their profiles C + D (1.8 ms) would win,
    and the next plan would be two more kernels that start 0.3 ms slower than profiled too; with the
    start cost they are 2.4 ms against AB's 2.35, one kernel, and AB is chosen."""
    from types import SimpleNamespace

    from korch.select.blp import Option, solve
    from korch.select.measured import FACTOR, START, _Context

    def option(name, nodes, cost, engine):
        inputs = {0: {"x"}, 1: {"t"}}[min(nodes)]
        outputs = {"t"} if max(nodes) == 0 else {"y"}
        return Option(name, frozenset(inputs), frozenset(outputs), cost, frozenset(nodes), engine)

    options = [option("A", {0}, 1e-3, "onnxruntime"), option("B", {1}, 1e-3, "onnxruntime"),
               option("C", {0}, 0.9e-3, "openvino"), option("D", {1}, 0.9e-3, "openvino"),
               option("AB", {0, 1}, 2.05e-3, "openvino")]
    steps = {o.key: SimpleNamespace(key=o.key, backend=o.engine) for o in options}
    fake = SimpleNamespace(split_options=options, steps=steps, is_excluded=lambda o: False,
                           cost_key=lambda st: f"{st.key}|{st.backend}")
    in_plan = {"A|onnxruntime": 1.3e-3, "B|onnxruntime": 1.3e-3}
    untimed = _Context.untimed_cost(fake, in_plan)       # equal profiles: no factor can be told apart
    assert untimed[FACTOR] == 1.0 and untimed[START] == pytest.approx(0.3e-3)
    start = untimed[START]
    # each kernel once, at its latest in-plan cost; an excluded one (inf), START and FACTOR do not count
    assert _Context.untimed_cost(fake, {**in_plan, "D|openvino": math.inf, START: 1.0, FACTOR: 3.0}) == \
        pytest.approx(untimed)

    def chosen(costs):
        return sorted(o.key for o in solve(_Context.costed(fake, costs), ["x"], ["y"], required=[0, 1]).chosen)

    assert chosen(in_plan) == ["C", "D"]                      # without the start cost
    assert chosen({**in_plan, START: start}) == ["AB"]
    assert {o.key: o.cost for o in _Context.costed(fake, {**in_plan, START: start})} == pytest.approx(
        {"A": 1.3e-3, "B": 1.3e-3, "C": 1.2e-3, "D": 1.2e-3, "AB": 2.35e-3})


def test_kernels_whose_profiles_read_low_make_untimed_ones_cost_their_profile_times_as_much() -> None:
    """Kernels of 1, 4 and 10 ms profiles ran 1.5x them in a plan, plus 0.2 ms each: the solver chose
    them for profiles that read low. A kernel never in a plan is then expected at 1.5x its profile
    plus 0.2 ms, not at its profile plus their median excess (2.2 ms, which a 0.1 ms kernel never
    pays). One odd kernel does not move the fit."""
    from types import SimpleNamespace

    from korch.select.blp import Option
    from korch.select.measured import FACTOR, START, _Context

    profiles = {"a": 1e-3, "b": 4e-3, "c": 10e-3, "d": 0.1e-3, "e": 2e-3}
    options = [Option(k, frozenset(), frozenset(), p, frozenset({n}), "onnxruntime")
               for n, (k, p) in enumerate(profiles.items())]
    steps = {o.key: SimpleNamespace(key=o.key, backend="onnxruntime") for o in options}
    fake = SimpleNamespace(split_options=options, steps=steps, is_excluded=lambda o: False,
                           cost_key=lambda st: f"{st.key}|{st.backend}")
    in_plan = {f"{k}|onnxruntime": 1.5 * profiles[k] + 0.2e-3 for k in "abc"}
    untimed = _Context.untimed_cost(fake, in_plan)
    assert untimed[FACTOR] == pytest.approx(1.5) and untimed[START] == pytest.approx(0.2e-3)
    costed = {o.key: o.cost for o in _Context.costed(fake, {**in_plan, **untimed})}
    assert costed["d"] == pytest.approx(0.35e-3) and costed["e"] == pytest.approx(3.2e-3)
    odd = _Context.untimed_cost(fake, {**in_plan, "e|onnxruntime": 9e-3})   # e ran 4.5x in its plan
    assert odd[FACTOR] == pytest.approx(1.5, rel=0.05)
    # two kernels whose fit extrapolates below zero (2.33x - 3.3 ms): no start, their median ratio
    both = {"b|onnxruntime": 6e-3, "c|onnxruntime": 20e-3}
    two = _Context.untimed_cost(fake, both)
    assert two[START] == 0.0 and two[FACTOR] == pytest.approx(2.0)
    assert min(o.cost for o in _Context.costed(fake, {**both, **two})) == pytest.approx(0.2e-3)     # d
    # kernels that ran faster in a plan than profiled do not make untimed ones cheaper than theirs
    fast = _Context.untimed_cost(fake, {f"{k}|onnxruntime": 0.8 * profiles[k] for k in "abc"})
    assert fast == {FACTOR: 1.0, START: 0.0}


def test_a_warm_run_excludes_exactly_the_kernels_the_cold_run_excluded() -> None:
    """A blamed kernel is excluded by its cost key (its structural twins too) and by its engine and
    primitives (another candidate over them, such as their region, too). Remembered and restored, the
    exclusions leave the same options: R over [0] goes with the blamed A, but R's twin over [1] stays,
    though it shares R's cost key (remembering R's key at inf alone took the twin out as well)."""
    from types import SimpleNamespace

    from korch.select.blp import Option
    from korch.select.measured import _Context, _timed_in_plan

    def option(name, key, nodes):
        return Option(name, frozenset(), frozenset(), 1e-3, frozenset(nodes), "onnxruntime")

    options = [option("A", "a", {0}), option("R0", "r", {0}), option("R1", "r", {1}), option("B", "b", {1})]
    keys = {"A": "a", "R0": "r", "R1": "r", "B": "b"}
    steps = {o.key: SimpleNamespace(key=keys[o.key], backend="onnxruntime", nodes=tuple(o.nodes)) for o in options}

    def context() -> _Context:
        ctx = _Context.__new__(_Context)
        ctx.split_options, ctx.steps, ctx.excluded, ctx.excluded_nodes = options, steps, {}, set()
        return ctx

    cold = context()
    cold.exclude(steps["A"], "blamed")
    assert sorted(o.key for o in cold.costed({})) == ["B", "R1"]
    remembered = {"b|onnxruntime": 1.2e-3, **cold.excluded_costs()}
    warm = context()
    warm.restore_exclusions(remembered)
    assert sorted(o.key for o in warm.costed(remembered)) == ["B", "R1"]
    assert _timed_in_plan(remembered) == 1
