"""The korch pipeline, one named stage per step. Stages beyond fission arrive with orchestration."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import onnx

from korch.backends import get_backend
from korch.candidates import Candidate, CandidateLimits, RegionLimits, enumerate_candidates, region_candidates
from korch.errors import ModelLoadError, VerificationError
from korch.frontend import load_model
from korch.frontend.fission.driver import fission_with_value_map
from korch.frontend.regions import OnnxSource
from korch.ir.graph import Graph
from korch.plan import Plan, Step, order_steps
from korch.profile.database import ProfileDB, Record, Status, machine_fingerprint
from korch.profile.profiler import Progress, profile
from korch.profile.prune import worth_profiling
from korch.runtime import Session, compile_plan
from korch.select import Option, solve
from korch.verify import DEFAULT_RTOL, VerifyReport, diff_outputs, random_feeds, run_onnxruntime, verify_graph

log = logging.getLogger("korch.pipeline")


@dataclass(frozen=True)
class FissionResult:
    model: onnx.ModelProto          # the checked, shape-fixed ONNX model
    graph: Graph                    # its primitive graph
    load_seconds: float
    fission_seconds: float
    verify: VerifyReport | None = None
    value_map: Mapping[str, str] | None = None   # ONNX value name -> primitive-graph value name


def resolve_model(spec: str | os.PathLike | onnx.ModelProto) -> str | os.PathLike | onnx.ModelProto:
    """A ModelProto, an existing file, or the name of a zoo model (built on the spot)."""
    if isinstance(spec, onnx.ModelProto) or Path(spec).exists():
        return spec
    from korch import zoo

    names = [m.name for m in zoo.list_models()]
    if str(spec) in names:
        log.info("building zoo model %s", spec)
        return zoo.to_model_proto(str(spec))
    raise ModelLoadError(f"{spec}: no such file, and not a zoo model (zoo: {', '.join(names)})")


def run_fission(source: str | os.PathLike | onnx.ModelProto, input_shapes: Mapping[str, Sequence[int]] | None = None,
                verify: bool = False, seed: int = 0, rtol: float = DEFAULT_RTOL) -> FissionResult:
    t0 = time.perf_counter()
    model = load_model(resolve_model(source), input_shapes)
    t1 = time.perf_counter()
    graph, value_map = fission_with_value_map(model)
    t2 = time.perf_counter()
    report = verify_graph(model, graph, seed=seed, rtol=rtol) if verify else None
    return FissionResult(model, graph, t1 - t0, t2 - t1, report, value_map)


# ---------------------------------------------------------------------------------------------
# orchestration: fission -> candidates -> profile -> select -> plan -> check

# Inductor compiles cost ~1.3 s each: this many unique small candidates keeps a cold optimize in minutes.
DEFAULT_INDUCTOR_BUDGET = 120
# Regions compiled by Inductor are larger (seconds each): the largest few, the whole graph first.
DEFAULT_INDUCTOR_REGION_BUDGET = 12
# A plan is saved only if it agrees with onnxruntime within this error relative to output scale.
PLAN_RTOL = 1e-4


@dataclass(frozen=True)
class OptimizeSettings:
    threads: int = 1
    backends: tuple[str, ...] = ("onnxruntime", "inductor")
    limits: CandidateLimits = CandidateLimits()
    regions: RegionLimits | None = RegionLimits()     # None: small candidates only
    inductor_budget: int = DEFAULT_INDUCTOR_BUDGET
    inductor_region_budget: int = DEFAULT_INDUCTOR_REGION_BUDGET
    seed: int = 0
    solver_time_limit_s: float = 60.0


def _pool(name: str, graph: Graph, small: Sequence[Candidate], regions: Sequence[Candidate],
          settings: OptimizeSettings) -> list[Candidate]:
    """The candidates one backend is profiled on: everything, except where compiles are expensive."""
    if name != "inductor":
        return list(small) + list(regions)
    largest = sorted(regions, key=lambda c: -c.size)[: settings.inductor_region_budget]
    return worth_profiling(graph, small, settings.inductor_budget) + largest


def optimize_graph(fissioned: FissionResult, db: ProfileDB, settings: OptimizeSettings,
                   progress: Progress | None = None) -> tuple[Plan, dict[str, float | int | str]]:
    from korch import __version__

    graph = fissioned.graph
    machine = machine_fingerprint()
    source = OnnxSource(fissioned.model, dict(fissioned.value_map or {}))
    stats: dict[str, float | int | str] = {"primitives": len(graph.nodes)}
    t0 = time.perf_counter()
    small = enumerate_candidates(graph, settings.limits)
    regions = region_candidates(graph, settings.regions) if settings.regions is not None else ()
    candidates = list(small) + list(regions)
    stats.update(candidates=len(candidates), regions=len(regions), unique_candidates=len({c.key for c in candidates}),
                 candidates_seconds=time.perf_counter() - t0)

    t0 = time.perf_counter()
    records: dict[tuple[str, str], Record] = {}
    measured = stored = 0
    for name in settings.backends:
        pool = _pool(name, graph, small, regions, settings)
        got, new = profile(graph, pool, [name], db, settings.threads, machine, settings.seed, progress, source)
        measured += new
        stored += len(got) - new
        records.update(got)
    stats.update(profiled_new=measured, profiled_cached=stored, profile_seconds=time.perf_counter() - t0)

    options: list[Option] = []
    steps: dict[str, Step] = {}
    for c in candidates:
        for name in settings.backends:
            r = records.get((c.key, name))
            if r is None or r.status != Status.OK:
                continue
            opt = Option(f"{name}@{c.nodes[0]}-{c.nodes[-1]}:{len(options)}", frozenset(c.inputs),
                         frozenset(c.outputs), r.median_s, frozenset(c.nodes))
            options.append(opt)
            onnx_nodes = c.onnx_nodes if get_backend(name).accepts_onnx else ()
            steps[opt.key] = Step(name, c.nodes, c.inputs, c.outputs, c.key, r.median_s, onnx_nodes)
            if c.size == len(graph.nodes) and name == "onnxruntime":
                stats["onnxruntime_whole_model_ms"] = r.median_s * 1e3
    selection = solve(options, graph.inputs, graph.outputs, required=range(len(graph.nodes)),
                      time_limit=settings.solver_time_limit_s)
    chosen = order_steps((steps[o.key] for o in selection.chosen), graph.inputs)
    stats.update(kernels=len(chosen), predicted_ms=selection.cost * 1e3, solve_seconds=selection.seconds,
                 gap=selection.gap, optimal=int(selection.optimal))
    uses_onnx = any(s.onnx_nodes for s in chosen)
    plan = Plan(graph, chosen, settings.threads, machine, __version__, source if uses_onnx else None, stats)
    return plan, stats


def check_plan(plan: Plan, model: onnx.ModelProto, seed: int) -> tuple[Session, VerifyReport]:
    """Compile the plan and compare it with onnxruntime on fresh random inputs."""
    session = compile_plan(plan)
    feeds = random_feeds(plan.graph, seed)
    expected = run_onnxruntime(model, feeds)
    actual = dict(zip(plan.graph.outputs, session.run(None, feeds)))
    return session, VerifyReport(seed, diff_outputs(actual, expected), PLAN_RTOL)


def optimize(source: str | os.PathLike | onnx.ModelProto, db: ProfileDB, settings: OptimizeSettings = OptimizeSettings(),
             input_shapes: Mapping[str, Sequence[int]] | None = None,
             progress: Progress | None = None) -> tuple[Plan, Session, dict[str, float | int | str]]:
    """The whole method: fission, candidates, profiling, exact selection, checked plan.

    Raises VerificationError (and returns no plan) if the plan disagrees with onnxruntime.
    """
    start = time.perf_counter()
    fissioned = run_fission(source, input_shapes)
    plan, stats = optimize_graph(fissioned, db, settings, progress)
    t0 = time.perf_counter()
    session, report = check_plan(plan, fissioned.model, settings.seed + 1)
    stats.update(fission_seconds=fissioned.fission_seconds, load_seconds=fissioned.load_seconds,
                 compile_check_seconds=time.perf_counter() - t0, max_rel_error=report.max_rel,
                 optimize_seconds=time.perf_counter() - start)
    if not report.ok:
        raise VerificationError(f"the optimized plan disagrees with onnxruntime: {report.summary()}")
    plan = Plan(plan.graph, plan.steps, plan.threads, plan.machine, plan.korch_version, plan.source, stats)
    return plan, session, stats
