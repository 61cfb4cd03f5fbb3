"""Measured selection's split solve over a backend whose boundaries are not calibrated yet (they cost
nothing until then, a lower bound: korch/profile/boundaries.py Boundaries): a plan that uses it is
solved again once it is calibrated, unless it costs more than the bar even with them free."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from korch.candidates import enumerate_candidates
from korch.candidates.enumerate import CandidateLimits
from korch.plan import Step
from korch.profile.guided import candidate_option
from korch.select.blp import SolveTally, solve
from korch.select.measured import _Context
from tests.backends.graphs import conv_bias_relu


class _Lazy:
    """Boundaries as the selection sees them: backend b's boundaries cost `per_boundary` once ensured."""

    def __init__(self, per_boundary: float) -> None:
        self.per_boundary, self.engines, self.asked = per_boundary, {"a"}, []

    def calibrated(self, engine: str) -> bool:
        return engine in self.engines

    def ensure(self, engines) -> bool:
        self.asked.append(sorted(engines))
        new = set(engines) - self.engines
        self.engines |= new
        return bool(new)

    def cost(self, producer: str, consumer: str, t) -> float:
        return self.per_boundary if "b" in (producer, consumer) and "b" in self.engines else 1e-4

    def start(self, engine: str) -> float:
        return self.per_boundary if engine == "b" and "b" in self.engines else 0.0


def _context(per_boundary: float):
    """A conv-bias-relu graph's small candidates on backends a (each at 1 ms per primitive) and b (at a
    tenth of that): with b's boundaries free, b's kernels win."""
    graph = conv_bias_relu(np.random.default_rng(0))
    cands = [c for c in enumerate_candidates(graph, CandidateLimits()) if c.size < len(graph.nodes)]
    options, steps = [], {}
    for backend, per_primitive in (("a", 1e-3), ("b", 1e-4)):
        for c in cands:
            o = candidate_option(c, backend, per_primitive * c.size, len(options))
            options.append(o)
            steps[o.key] = Step(backend, c.nodes, c.inputs, c.outputs, c.key, o.cost)
    lazy = _Lazy(per_boundary)
    ctx = SimpleNamespace(graph=graph, steps=steps, boundaries=lazy,
                          settings=SimpleNamespace(selection=SimpleNamespace(solver_time_limit_s=30.0)),
                          boundary_cost=lambda p, c, v: lazy.cost(p, c, None), tally=SolveTally())
    return ctx, options


def _backends(ctx, selection) -> set[str]:
    return {ctx.steps[o.key].backend for o in selection.chosen}


def test_a_plan_using_an_uncalibrated_backend_is_solved_again_at_its_calibrated_costs() -> None:
    ctx, options = _context(per_boundary=1.0)
    got = _Context.solve(ctx, options)
    assert ctx.boundaries.asked[0] == ["b"]                  # the free solve chose b's kernels
    assert _backends(ctx, got) == {"a"}                      # at a second per boundary, b's never pay
    again = solve(options, ctx.graph.inputs, ctx.graph.outputs, required=range(len(ctx.graph.nodes)),
                  boundary=ctx.boundary_cost, start=ctx.boundaries.start)
    assert got.cost == pytest.approx(again.cost, rel=1e-9)   # the optimum at the calibrated costs
    assert ctx.tally.stats.solves == 2 and got.seconds == pytest.approx(ctx.tally.stats.seconds)   # both counted


def test_no_calibration_where_even_the_free_plan_is_beyond_the_bar() -> None:
    ctx, options = _context(per_boundary=1.0)
    free = _Context.solve(ctx, options, bar=1e-9)
    assert ctx.boundaries.asked == [] and _backends(ctx, free) == {"b"}
    ctx, options = _context(per_boundary=1e-6)               # cheap once calibrated: b is still chosen
    got = _Context.solve(ctx, options, bar=10.0)
    assert ctx.boundaries.asked == [["b"], []]               # calibrated once, then nothing new
    assert _backends(ctx, got) == {"b"}


def test_the_selection_key_leaves_out_the_engines_calibrated_when_first_needed() -> None:
    """A cold run may calibrate Inductor (profiled last) in its profiling, where a warm run, whose
    profiling is remembered, does not: the selection key must be the same for both, or the warm run
    selects again (a warm vit-b16 took 36 s). The lines of the engines profiled first stay in it."""
    from korch.profile.boundaries import BLOCKED, KERNEL_START, BoundaryModel, Line
    from korch.select.measured import selection_problem_key
    from korch.settings import OptimizeSettings

    settings = OptimizeSettings(threads=2, backends=("onnxruntime", "inductor", "openvino"))
    first = {("onnxruntime", "openvino", BLOCKED): Line(2e-5, 1e-10),
             ("onnxruntime", "onnxruntime", KERNEL_START): Line(3e-5, 0.0)}
    late = {("inductor", "onnxruntime", BLOCKED): Line(9e-5, 1e-10),
            ("inductor", "inductor", KERNEL_START): Line(1e-4, 0.0)}
    ctx, options = _context(per_boundary=1.0)

    def key(lines) -> str:
        return selection_problem_key(options, ctx.steps, settings, "m", BoundaryModel(lines))
    assert key(first) == key({**first, **late})
    assert key(first) != key({**first, ("onnxruntime", "openvino", BLOCKED): Line(4e-5, 1e-10)})
