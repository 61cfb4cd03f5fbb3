"""The korch pipeline, one named stage per step. Stages beyond fission arrive with orchestration."""

from __future__ import annotations

import hashlib
import logging
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import onnx

from korch.backends import CompileOptions, get_backend
from korch.candidates import CandidateLimits, enumerate_candidates
from korch.errors import ModelLoadError, VerificationError
from korch.frontend import fission_graph, load_model
from korch.ir.graph import Graph
from korch.plan import ORIGINAL_MODEL, Plan, Step, order_steps
from korch.profile.database import ProfileDB, Record, Status, machine_fingerprint
from korch.profile.profiler import PROFILE_MIN_SECONDS, PROFILE_REPEATS, PROFILE_WARMUP, Progress, profile
from korch.profile.prune import worth_profiling
from korch.profile.timing import measure
from korch.runtime import Session, compile_plan
from korch.select import Option, solve
from korch.verify import VerifyReport, diff_outputs, random_feeds, run_onnxruntime, verify_graph

log = logging.getLogger("korch.pipeline")


@dataclass(frozen=True)
class FissionResult:
    model: onnx.ModelProto          # the checked, shape-fixed ONNX model
    graph: Graph                    # its primitive graph
    load_seconds: float
    fission_seconds: float
    verify: VerifyReport | None = None


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
                verify: bool = False, seed: int = 0) -> FissionResult:
    t0 = time.perf_counter()
    model = load_model(resolve_model(source), input_shapes)
    t1 = time.perf_counter()
    graph = fission_graph(model)
    t2 = time.perf_counter()
    report = verify_graph(model, graph, seed=seed) if verify else None
    return FissionResult(model, graph, t1 - t0, t2 - t1, report)


# ---------------------------------------------------------------------------------------------
# orchestration: fission -> candidates -> profile -> select -> plan -> check

# Inductor compiles cost ~1.3 s each: this many unique candidates keeps a cold optimize in minutes.
DEFAULT_INDUCTOR_BUDGET = 120
# A plan is saved only if it agrees with onnxruntime within this error relative to output scale.
PLAN_RTOL = 1e-4


@dataclass(frozen=True)
class OptimizeSettings:
    threads: int = 1
    backends: tuple[str, ...] = ("onnxruntime", "inductor")
    limits: CandidateLimits = CandidateLimits()
    inductor_budget: int = DEFAULT_INDUCTOR_BUDGET
    whole_model: bool = True          # offer onnxruntime the whole original model as one candidate
    seed: int = 0
    solver_time_limit_s: float = 60.0


def _whole_model_option(model: onnx.ModelProto, graph: Graph, settings: OptimizeSettings, db: ProfileDB,
                        machine: str) -> tuple[Option, Record]:
    """onnxruntime running the original model: korch's plan can never be worse than this."""
    backend = get_backend("onnxruntime")
    key = "model:" + hashlib.sha256(model.SerializeToString()).hexdigest()
    record = db.get(key, backend.name, backend.version, settings.threads, machine)
    if record is None:
        kernel = backend.compile_model(model, graph.inputs, graph.outputs, CompileOptions(settings.threads))
        feeds = [random_feeds(graph, settings.seed)[n] for n in graph.inputs]
        t = measure(lambda: kernel.run(feeds), warmup=PROFILE_WARMUP, repeats=PROFILE_REPEATS,
                    min_seconds=PROFILE_MIN_SECONDS)
        record = Record.ok(key, backend.name, backend.version, settings.threads, machine, t)
        db.put(record)
    return Option(f"onnxruntime@{ORIGINAL_MODEL}", frozenset(graph.inputs), frozenset(graph.outputs),
                  record.median_s, frozenset(range(len(graph.nodes)))), record


def optimize_graph(model: onnx.ModelProto, graph: Graph, db: ProfileDB, settings: OptimizeSettings,
                   progress: Progress | None = None) -> tuple[Plan, dict[str, float | int | str]]:
    from korch import __version__

    machine = machine_fingerprint()
    stats: dict[str, float | int | str] = {"primitives": len(graph.nodes)}
    t0 = time.perf_counter()
    candidates = enumerate_candidates(graph, settings.limits)
    stats.update(candidates=len(candidates), unique_candidates=len({c.key for c in candidates}),
                 candidates_seconds=time.perf_counter() - t0)

    t0 = time.perf_counter()
    records: dict[tuple[str, str], Record] = {}
    measured = stored = 0
    for name in settings.backends:
        pool = (worth_profiling(graph, candidates, settings.inductor_budget) if name == "inductor" else candidates)
        got, new = profile(graph, pool, [name], db, settings.threads, machine, settings.seed, progress)
        measured += new
        stored += len(got) - new
        records.update(got)
    options: list[Option] = []
    steps: dict[str, Step] = {}
    for c in candidates:
        for name in settings.backends:
            r = records.get((c.key, name))
            if r is not None and r.status == Status.OK:
                opt = Option(f"{name}@{','.join(map(str, c.nodes))}", frozenset(c.inputs), frozenset(c.outputs),
                             r.median_s, frozenset(c.nodes))
                options.append(opt)
                steps[opt.key] = Step(name, c.nodes, c.inputs, c.outputs, c.key, r.median_s)
    if settings.whole_model and "onnxruntime" in settings.backends:
        opt, rec = _whole_model_option(model, graph, settings, db, machine)
        options.append(opt)
        steps[opt.key] = Step("onnxruntime", (), graph.inputs, graph.outputs, rec.candidate_key, rec.median_s,
                                     ORIGINAL_MODEL)
        stats["onnxruntime_whole_model_ms"] = rec.median_s * 1e3
    stats.update(profiled_new=measured, profiled_cached=stored, profile_seconds=time.perf_counter() - t0)

    selection = solve(options, graph.inputs, graph.outputs, required=range(len(graph.nodes)),
                      time_limit=settings.solver_time_limit_s)
    chosen = order_steps((steps[o.key] for o in selection.chosen), graph.inputs)
    stats.update(kernels=len(chosen), predicted_ms=selection.cost * 1e3, solve_seconds=selection.seconds,
                 gap=selection.gap, optimal=int(selection.optimal))
    uses_original = any(s.region == ORIGINAL_MODEL for s in chosen)
    plan = Plan(graph, chosen, settings.threads, machine, __version__, model if uses_original else None, stats)
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
    plan, stats = optimize_graph(fissioned.model, fissioned.graph, db, settings, progress)
    t0 = time.perf_counter()
    session, report = check_plan(plan, fissioned.model, settings.seed + 1)
    stats.update(fission_seconds=fissioned.fission_seconds, load_seconds=fissioned.load_seconds,
                 compile_check_seconds=time.perf_counter() - t0, max_rel_error=report.max_rel,
                 optimize_seconds=time.perf_counter() - start)
    if not report.ok:
        raise VerificationError(f"the optimized plan disagrees with onnxruntime: {report.summary()}")
    plan = Plan(plan.graph, plan.steps, plan.threads, plan.machine, plan.korch_version, plan.original, stats)
    return plan, session, stats
