"""The korch pipeline as a recipe: fission -> candidates -> profile -> measured selection -> check."""

from __future__ import annotations

import functools
import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import onnx

from korch.backends import get_backend
from korch.candidates import Candidate, enumerate_candidates, opaque_regions, region_candidates
from korch.candidates.regions import balanced_tiling, whole_model_region
from korch.candidates.store import decode as decode_candidates
from korch.candidates.store import encode as encode_candidates
from korch.candidates.store import set_key
from korch.costmodel.features import FEATURES_VERSION, features_by_key
from korch.errors import ModelLoadError, UnsupportedError, VerificationError
from korch.frontend import load_model
from korch.frontend.fission.driver import OpaqueNode, fission_model
from korch.frontend.onnx_import import read_model
from korch.frontend.prepared import Prepared, PreparedEntry
from korch.frontend.regions import OnnxSource, share_weights
from korch.frontend.rewrite_check import checked_rewrites
from korch.frontend.rewrites import rewrite_model
from korch.heap import peak_rss_mib
from korch.ir.graph import Graph
from korch.ir.ops import PrimClass
from korch.plan import Plan, Step
from korch.plan.buckets import Bucket, BucketedPlan, declared
from korch.plan.store import keep_compiled, keep_kernels
from korch.profile import link
from korch.profile.boundaries import Boundaries
from korch.profile.database import ProfileDB, machine_fingerprint
from korch.profile.guided import (
    GuideStats,
    Refills,
    candidate_option,
    guided_profile,
    load_refills,
    profile_last,
    profiled_last,
)
from korch.profile.profiler import ProfileOutcome, Progress, accepted
from korch.profile.prune import worth_profiling
from korch.profile.reference_values import ReferenceValues
from korch.runtime import Session, compile_plan
from korch.select import Option, SolveStats, SolveTally
from korch.select.coverage import require_cover
from korch.select.measured import SelectionStats, measured_selection
from korch.settings import AccuracyPolicy, OptimizeSettings
from korch.shapes import bucket_shapes, model_inputs
from korch.verify import (
    PlanCheck,
    PlanChecker,
    VerifyReport,
    random_feeds,
    verify_graph,
)

log = logging.getLogger("korch.pipeline")


@dataclass(frozen=True)
class FissionResult:
    model: onnx.ModelProto          # the checked, shape-fixed ONNX model
    graph: Graph                    # its primitive graph
    load_seconds: float
    fission_seconds: float
    verify: VerifyReport | None = None
    value_map: Mapping[str, str] | None = None   # ONNX value name -> primitive-graph value name
    opaque: tuple[OpaqueNode, ...] = ()           # ONNX nodes kept whole: only an ONNX engine runs them
    rewrites: tuple[str, ...] = ()                # what frontend/rewrites.py changed, in words
    original: onnx.ModelProto | None = None       # the model before those rewrites (None: none applied)


def resolve_model(spec: str | os.PathLike | onnx.ModelProto,
                  cache_dir: str | os.PathLike | None = None) -> str | os.PathLike | onnx.ModelProto:
    """A ModelProto, an existing file, or the name of a zoo model: built on the spot, or with a
    cache_dir exported once into it and read back from there. A directory is never a model: a zoo
    model's name is that model even where the working directory holds a directory of that name (a
    plan written by `-o yolov4`, say)."""
    if isinstance(spec, onnx.ModelProto) or (Path(spec).exists() and not Path(spec).is_dir()):
        return spec
    if cache_dir is not None:           # a cached export is found without importing the zoo (and torch)
        from korch.zoo.files import exported_path

        cached = exported_path(str(spec), cache_dir)
        if cached.is_file():
            return cached
    from korch import zoo

    names = [m.name for m in zoo.list_models()]
    if str(spec) in names:
        if cache_dir is not None:
            try:
                return zoo.cached_export(str(spec), cache_dir)
            except OSError as e:
                log.warning("cannot cache the exported zoo model under %s (%s); building it in memory", cache_dir, e)
        log.info("building zoo model %s", spec)
        return zoo.to_model_proto(str(spec))
    what = "a directory, not an ONNX file" if Path(spec).is_dir() else "no such file"
    raise ModelLoadError(f"{spec}: {what}, and not a zoo model (zoo: {', '.join(names)})")


def run_fission(source: str | os.PathLike | onnx.ModelProto, input_shapes: Mapping[str, Sequence[int]] | None = None,
                verify: bool = False, seed: int = 0, accuracy: AccuracyPolicy = AccuracyPolicy(),
                cache_dir: str | os.PathLike | None = None, strict: bool = False,
                rewrite: bool = False, db: ProfileDB | None = None) -> FissionResult:
    """`strict`: refuse nodes korch cannot fission instead of keeping them whole (opaque). `rewrite`:
    apply frontend/rewrites.py's algebraic rewrites first, checked against the model as given on a
    random input under `accuracy` (`rewrite_checked`); the result keeps the model as given in
    `original`. `verify` compares the primitive graph with onnxruntime within `accuracy.rtol`. `db`:
    where a passed check is remembered, so the same model is not checked again (rewrite_check_key)."""
    t0 = time.perf_counter()
    resolved = resolve_model(source, cache_dir)
    model = load_model(resolved, input_shapes)
    # the model's file, read by onnxruntime in the rewrite check as it is (not where shapes were fixed)
    given = resolved if isinstance(resolved, (str, os.PathLike)) and not input_shapes else None
    original, rewrites = None, ()
    if rewrite:
        rewritten, rewrites = rewrite_model(model)
        if rewrites:
            original, model = model, rewritten
    t1 = time.perf_counter()
    fissioned = fission_model(model, strict)
    if original is not None:
        checked, rewrites = checked_rewrites(original, model, rewrites, random_feeds(fissioned.graph, seed), accuracy,
                                             strict, given, db, seed, fissioned)
        if checked is not model:
            model = checked
            fissioned = fission_model(model, strict)
        if not rewrites:
            original = None
    t2 = time.perf_counter()
    report = verify_graph(model, fissioned.graph, seed=seed, rtol=accuracy.rtol) if verify else None
    return FissionResult(model, fissioned.graph, t1 - t0, t2 - t1, report, fissioned.value_map, fissioned.opaque,
                         rewrites, original)


def prepare_model(resolved: str | os.PathLike | onnx.ModelProto, input_shapes: Mapping[str, Sequence[int]] | None,
                  settings: OptimizeSettings, cache_dir: Path, db: ProfileDB | None = None) -> Prepared:
    """The model as an optimize takes it (run_fission, then its weights held once: share_weights); a
    model file's is stored in `cache_dir` and read back by the next run that asks the same of the same
    bytes (frontend/prepared.py)."""
    t0 = time.perf_counter()
    entry = None
    if isinstance(resolved, (str, os.PathLike)):
        try:
            entry = PreparedEntry(cache_dir, resolved, input_shapes, settings.strict, settings.rewrites, settings.seed,
                                  settings.accuracy, settings.kept_kernel_days * 86400)
        except OSError:                 # an unreadable file: loading it names the problem
            entry = None
        if entry is not None and (found := entry.load()) is not None:
            log.info("fission: %d primitives, as an earlier run left them (%s)", len(found.graph.nodes), entry.directory)
            return replace(found, load_seconds=time.perf_counter() - t0)
    fissioned = run_fission(resolved, input_shapes, cache_dir=cache_dir, strict=settings.strict,
                            rewrite=settings.rewrites, seed=settings.seed, accuracy=settings.accuracy, db=db)
    source = share_weights(OnnxSource(fissioned.model, dict(fissioned.value_map or {})), fissioned.graph)
    prepared = Prepared(source, fissioned.graph, fissioned.opaque, fissioned.rewrites, fissioned.original is not None,
                        time.perf_counter() - t0 - fissioned.fission_seconds, fissioned.fission_seconds)
    if entry is not None:
        t1 = time.perf_counter()
        entry.store(prepared)
        prepared = replace(prepared, fission_seconds=prepared.fission_seconds + time.perf_counter() - t1)
    return prepared


# ---------------------------------------------------------------------------------------------
# orchestration: fission -> candidates -> profile -> measured selection -> check


@dataclass(frozen=True)
class OptimizeStats:
    """What one optimize run did: counts, the kept plan's times, the check, and each stage's seconds.
    Saved flat in the plan's summary (`summary()`), which the report and `korch diff` read."""

    primitives: int
    opaque_nodes: int                 # ONNX nodes kept whole (no fission rule): only an ONNX engine runs them
    rewrites: tuple[str, ...]         # algebraic rewrites applied before fission (frontend/rewrites.py), in words
    fission_remembered: bool          # the model as fissioned read back from an earlier run (frontend/prepared.py)
    candidates: int
    regions: int
    unique_candidates: int
    profiled_new: int
    profiled_cached: int
    profiled_again: int               # timed again: the machine ran slow when they were first timed (profile/speed.py)
    compiled_ahead: int               # compiled ahead in worker processes, then loaded to be timed (profile/ahead.py)
    machine_slowest: float | None     # the machine's slowest speed reading while profiling over its fastest
    profile_link_ns: tuple[float, float] | None   # nearest and farthest core link read while profiling (profile/link.py)
    whole_model_link_ns: dict[str, tuple[float, ...]]   # backend -> the link read around its whole model's last profile here
    guide: GuideStats                 # guided profiling: which backends, solves, pairs never compiled
    kernel_tolerance: float           # kernels were accepted within this error of the reference
    fp32_error: float | None          # onnxruntime's own error on the model, which set that tolerance
    selection: SelectionStats
    max_rel_error: float              # the final check against onnxruntime
    check_tolerance: float            # the tolerance of the output that came closest to its own
    check_worst: str                  # that output, its errors and tolerance, in words (verify.PlanCheck.worst)
    check_inputs: int
    check_remembered: bool            # the plan passed this check on these weights in an earlier run (not run again)
    load_seconds: float               # reading the model, and building and exporting a zoo model not yet cached
    fission_seconds: float
    candidates_seconds: float
    profile_seconds: float
    profile_phase_seconds: Mapping[str, float]   # reference, and compile/check/timing per backend
    calibrate_seconds: float          # measuring this machine's kernel-boundary costs (once per machine)
    select_seconds: float             # measured selection: solving, compiling and timing plans
    check_seconds: float
    optimize_seconds: float
    # stage -> this process's peak RSS by its end (MiB; heap.peak_rss_mib): the first stage at the
    # largest figure set the optimize's peak (compile workers' own memory not included)
    peak_mib: Mapping[str, float] = field(default_factory=dict)
    solves: SolveStats = SolveStats()    # every BLP solve of the run (guided profiling's and selection's)

    def summary(self) -> dict[str, object]:
        flat = asdict(self)
        selection = flat.pop("selection")
        guide = flat.pop("guide")
        flat.update({"guided_backends": list(guide["backends"]), "guide_rounds": guide["rounds"],
                     "guide_skipped": guide["skipped"], "guide_stable": guide["stable"]})
        selection["selection_rounds"] = selection.pop("rounds")
        selection["selection_remembered"] = selection.pop("remembered")
        return {**flat, **selection}


@dataclass(frozen=True)
class CandidateSet:
    small: tuple[Candidate, ...]
    regions: tuple[Candidate, ...]
    seconds: float

    @property
    def all(self) -> tuple[Candidate, ...]:
        return self.small + self.regions


def enumerate_all(graph: Graph, settings: OptimizeSettings, db: ProfileDB | None = None) -> CandidateSet:
    """Small candidates, and regions of whole ONNX nodes (at least one per opaque node: only an
    ONNX engine runs those, as their original node); with `settings.whole_models`, the whole model
    alone. With `db`, a graph's candidates are read back from an earlier run where it stored them
    (candidates/store.py), and stored where it did not."""
    t0 = time.perf_counter()
    require_onnx_engine(graph, settings.backends)
    if settings.whole_models:
        return CandidateSet((), (whole_model_region(graph),), time.perf_counter() - t0)
    key = set_key(graph, settings.limits, settings.regions) if db is not None else None
    if key is not None and (blob := db.candidate_set(key)) is not None:
        if (stored := decode_candidates(blob, graph)) is not None:
            small, regions = stored
            log.info("candidates: %d primitives -> %d candidates and %d regions, as an earlier run enumerated them",
                     len(graph.nodes), len(small), len(regions))
            return CandidateSet(small, regions, time.perf_counter() - t0)
        log.warning("candidates: the set stored for this graph in %s does not fit it; enumerating them again",
                    db.path)
    small = enumerate_candidates(graph, settings.limits)
    regions = region_candidates(graph, settings.regions) if settings.regions is not None else opaque_regions(graph)
    if key is not None:
        db.put_candidate_set(key, encode_candidates(small, regions))
    return CandidateSet(tuple(small), tuple(regions), time.perf_counter() - t0)


def require_onnx_engine(graph: Graph, backends: Sequence[str]) -> None:
    """Opaque nodes run only in an engine that takes ONNX: refuse, naming them, if none is chosen."""
    opaque = dict.fromkeys(f"{n.origin} ({n.attrs['op_type']})" for n in graph.nodes if n.klass == PrimClass.OPAQUE)
    if opaque and not any(get_backend(b).accepts_onnx for b in backends):
        raise UnsupportedError(f"{len(opaque)} ONNX node(s) korch keeps whole run only in an ONNX engine "
                               f"(onnxruntime or openvino), which is not among the backends {list(backends)}: "
                               + ", ".join(opaque))


def profile_pools(graph: Graph, cands: CandidateSet, settings: OptimizeSettings) -> dict[str, list[Candidate]]:
    """The candidates each backend is profiled on: everything, except where compiles are expensive
    (Inductor: a budget) or an engine is at its best on large pieces (OpenVINO: regions only)."""
    pools = {}
    for name in settings.backends:
        if name == "inductor":         # (profiled last unless guided: see optimize)
            pools[name] = worth_profiling(graph, cands.small, settings.profile.inductor_budget) + \
                inductor_regions(cands, settings)
        elif name == "openvino":
            pools[name] = list(cands.regions)
        else:
            pools[name] = list(cands.all)
    return pools


def inductor_regions(cands: CandidateSet, settings: OptimizeSettings) -> list[Candidate]:
    """The regions Inductor compiles, at most `inductor_region_budget`: the whole model, then the
    most even tiling of the model by 2 to budget - 1 regions (regions.balanced_tiling: the largest
    piece as small as it can be, then as few pieces as give that); without one, the largest regions.

    The four largest regions were the whole model and near-whole suffixes, 3.5-3.75 times the model's
    primitives to compile; the whole model and a tiling are twice them. Cold, Inductor's compiles
    ahead took 53-54 s instead of 73-75 s on segformer-b0, 34 s instead of 43 s on yolox-nano
    (BENCHMARKS.md). segformer-b0 has no single-tensor cut in its decoder, so no tiling's largest
    piece is under 76% of it: its tiles are 0-23%, 23-24% and 24-100%."""
    budget = settings.profile.inductor_region_budget
    largest = sorted(cands.regions, key=lambda c: -c.size)
    tilings = [t for pieces in range(2, budget) if (t := balanced_tiling(cands.regions, pieces))]
    if tilings:
        return largest[:1] + list(min(tilings, key=lambda t: (max(c.size for c in t), len(t))))
    return largest[:budget]


def model_label(source: str | os.PathLike | onnx.ModelProto) -> str:
    """What the profile database calls a model whose kernels it saw: a zoo name, a file's stem, a graph's name."""
    if isinstance(source, onnx.ModelProto):
        return source.graph.name or "model"
    return Path(source).stem if Path(source).exists() else str(source)


def remember_features(db: ProfileDB, label: str, graph: Graph, pools: Mapping[str, Sequence[Candidate]]) -> None:
    """Each profiled candidate's features and the model it was seen in, for the cost models. A key's
    features are a function of the key: only keys without stored ones are computed (a warm segformer-b0
    spent 1.6 s recomputing 4,095)."""
    cands = [c for candidates in pools.values() for c in candidates]
    known = db.keys_with_features((c.key for c in cands), FEATURES_VERSION)
    fresh = features_by_key(graph, [c for c in cands if c.key not in known])
    db.put_features(label, FEATURES_VERSION, {k: f.values for k, f in fresh.items()}, seen=known)


def candidate_universe(cands: CandidateSet, settings: OptimizeSettings) -> dict[str, list[Candidate]]:
    """Every candidate each backend could run, without budgets: what guided profiling chooses from
    (OpenVINO still sees regions only: it is at its best on large pieces)."""
    return {name: list(cands.regions if name == "openvino" else cands.all) for name in settings.backends}


def build_options(graph: Graph, cands: CandidateSet, profiled: ProfileOutcome,
                  settings: OptimizeSettings, refills: Refills | None = None) -> tuple[list[Option], dict[str, Step]]:
    """One BLP option per (candidate, backend) whose kernel was accepted, and the plan step it becomes:
    a split kernel at its cost inside a plan where `refills` are known (guided.Refills.price), a
    whole model at its profile (it runs alone)."""
    options: list[Option] = []
    steps: dict[str, Step] = {}
    whole = len(graph.nodes)
    for c in cands.all:
        for name in settings.backends:
            r = profiled.records.get((c.key, name))
            if r is None or not accepted(r, profiled.tolerance):
                continue
            assert r.median_s is not None
            cost = r.median_s if refills is None or c.size == whole else refills.price((c.key, name), r.median_s)
            opt = candidate_option(c, name, cost, len(options))
            options.append(opt)
            onnx_nodes = c.onnx_nodes if get_backend(name).accepts_onnx else ()
            steps[opt.key] = Step(name, c.nodes, c.inputs, c.outputs, c.key, r.median_s, onnx_nodes)
    return options, steps


def small_kernel_backends(cands: CandidateSet, profiled: ProfileOutcome) -> set[str]:
    """The backends with an accepted kernel of a small candidate (not a region): every backend profiled
    first, and one profiled last where a round of profile_last measured its fused kernels, having
    calibrated it first."""
    small = {c.key for c in cands.small}
    return {name for (key, name), r in profiled.records.items() if key in small and accepted(r, profiled.tolerance)}


def plan_checker(graph: Graph, source: OnnxSource, settings: OptimizeSettings,
                 original: onnx.ModelProto | Path | Callable[[], onnx.ModelProto] | None = None) -> PlanChecker:
    """Checks plans against onnxruntime on `check_inputs` fresh random inputs, per output, under the
    accuracy policy (korch/settings.py): onnxruntime running the model as the user gave it (`original`,
    its file, or a function that loads it, where rewrites changed it), not as korch rewrote it."""
    policy = settings.accuracy
    seeds = [settings.seed + 1 + k * 1000 for k in range(policy.check_inputs)]
    if original is not None:
        return PlanChecker(graph, original, seeds, policy.rtol, policy.tolerance)
    return PlanChecker(graph, source.model, seeds, policy.rtol, policy.tolerance, source.arrays)


def check_plan(plan: Plan, session: Session, checker: PlanChecker) -> PlanCheck:
    return checker(lambda feeds: dict(zip(plan.graph.outputs, session.run(None, feeds))))


def optimize(source: str | os.PathLike | onnx.ModelProto, db: ProfileDB, settings: OptimizeSettings = OptimizeSettings(),
             input_shapes: Mapping[str, Sequence[int]] | None = None,
             progress: Progress | None = None, compile_session: bool = True) -> tuple[Plan, Session | None, OptimizeStats]:
    """The whole method: fission, candidates, profiling, measured selection, checked plan.

    Raises VerificationError (and returns no plan) if the plan disagrees with onnxruntime. A warm run
    whose plan passed its check on the same weights before returns that plan without compiling it;
    its session is then None unless `compile_session`.
    """
    start = time.perf_counter()
    machine = machine_fingerprint()
    resolved = resolve_model(source, db.path.parent)       # a zoo model not yet cached is built and exported
    resolve_seconds = time.perf_counter() - start
    prepared = prepare_model(resolved, input_shapes, settings, db.path.parent, db)
    # The model as given, where rewrites changed it, is loaded again when a plan is first checked, not
    # held through profiling and selection (yolov4: 246 MB under the optimize's peaks); a warm run
    # whose plan passed its check before never loads it. A file is read by onnxruntime itself: loaded
    # here, then serialized for onnxruntime, it was most of the first check's 1.9 GB (yolov4: the
    # select stage's peak, 4.2 GB).
    original = None if not prepared.rewritten else \
        Path(resolved) if isinstance(resolved, (str, os.PathLike)) else functools.partial(load_model, resolved, input_shapes)
    peaks = {"fission": peak_rss_mib()}
    graph, onnx_source = prepared.graph, prepared.source
    cands = enumerate_all(graph, settings, db)
    pools = profile_pools(graph, cands, settings)
    universe = candidate_universe(cands, settings)
    remember_features(db, model_label(source), graph, universe)
    peaks["candidates"] = peak_rss_mib()
    # Boundary costs (a one-kernel plan has none), each engine's calibrated once per machine: the engines
    # profiled first now; one profiled last when a round would measure its fused kernels (profile_last),
    # or a split plan worth compiling uses it (measured selection); until then its boundaries are free.
    boundaries = Boundaries(db, settings.threads, machine, settings.calibration, settings.profile.cold_cache, progress)
    last = profiled_last(settings)        # Inductor: what it compiles is solved for over the others' profiles
    first = {n: p for n, p in pools.items() if n not in last}
    if not settings.whole_models:
        boundaries.ensure(first)
    t0, calibrated = time.perf_counter(), boundaries.seconds
    weights = graph.constants_digest()
    kept_for_s = settings.kept_kernel_days * 86400
    keep = keep_compiled(db.path.parent, machine, weights, settings.threads, kept_for_s)

    def boundary(producer: str, consumer: str, value: str) -> float:
        return boundaries.cost(producer, consumer, graph.types[value])
    solves = SolveTally()                 # every BLP solve of the run, guided profiling's and selection's
    with ReferenceValues(graph, settings.seed, db.path.parent) as reference:      # computed once, kept on disk
        profiled, guide = guided_profile(graph, first, universe, db, settings, machine, onnx_source, boundary,
                                         progress, keep, boundaries.start, reference, solves)
        peaks["profile"] = peak_rss_mib()
        profiled = profile_last(graph, {n: inductor_regions(cands, settings) for n in last}, cands.small, profiled,
                                first, db, settings, machine, onnx_source, boundary, progress, keep, boundaries.start,
                                reference, None if settings.whole_models else boundaries.ensure_by_stages, solves)
    profile_seconds = time.perf_counter() - t0 - (boundaries.seconds - calibrated)
    peaks["profile last"] = peak_rss_mib()
    if (nearest := profiled.nearest_link()) is not None:     # what "near" is here, for a bench run all far
        db.put_link(machine, nearest)
    # A backend whose small kernels a cold run's rounds measured had its start calibrated then; a warm
    # run, its profiling remembered, reads it back here (with its pairs, where those were calibrated),
    # so both price the split kernels' refills net of the same starts (Refills) and key the same
    # selection problem. Its pairs wait for a split plan that wants its kernels (measured selection).
    if not settings.whole_models:
        boundaries.ensure_starts(small_kernel_backends(cands, profiled))
    refills = load_refills(graph, profiled.kernels_of(cands.all, settings.backends), db, settings, machine,
                           boundaries.start)
    options, steps = build_options(graph, cands, profiled, settings, refills)
    require_cover(graph, cands.all, options, profiled.records, profiled.tolerance, settings.backends)
    t0, calibrated = time.perf_counter(), boundaries.seconds
    checker = plan_checker(graph, onnx_source, settings, original)
    # (whole models only: a fixed model, empty, that no solve can calibrate)
    priced = boundaries.model if settings.whole_models else boundaries
    selected = measured_selection(graph, options, steps, onnx_source, settings, machine, db, priced, checker,
                                  weights, {b: profiled.whole_state(b, settings.threads) for b in settings.backends},
                                  link.state_probe(db.path.parent / "tools", settings.threads,
                                                   profiled.link[0] if profiled.link else None), solves)
    select_seconds = time.perf_counter() - t0 - (boundaries.seconds - calibrated)
    peaks["select"] = peak_rss_mib()
    calibrate_seconds = boundaries.seconds
    t0 = time.perf_counter()
    check = selected.check or check_plan(selected.plan, selected.session or compile_plan(selected.plan), checker)
    if check.ok and not selected.check_remembered and selected.problem:
        db.remember_check(selected.problem, {"weights": weights, "check": check.to_json()})
    peaks["check"] = peak_rss_mib()
    stats = OptimizeStats(
        primitives=len(graph.nodes), opaque_nodes=len(prepared.opaque),
        rewrites=prepared.rewrites, fission_remembered=prepared.remembered, candidates=len(cands.all), regions=len(cands.regions),
        unique_candidates=len({c.key for c in cands.all}), profiled_new=profiled.measured,
        profiled_cached=profiled.stored, profiled_again=profiled.retimed,
        compiled_ahead=profiled.ahead, machine_slowest=profiled.slowest, profile_link_ns=profiled.link,
        whole_model_link_ns=dict(profiled.whole_links),
        guide=guide, kernel_tolerance=profiled.tolerance, fp32_error=profiled.fp32_error,
        selection=selected.stats, max_rel_error=check.max_rel, check_tolerance=check.tolerance,
        check_worst=check.worst(),
        check_inputs=settings.accuracy.check_inputs, check_remembered=selected.check_remembered,
        load_seconds=resolve_seconds + prepared.load_seconds,
        fission_seconds=prepared.fission_seconds, candidates_seconds=cands.seconds, profile_seconds=profile_seconds,
        profile_phase_seconds=dict(profiled.seconds), calibrate_seconds=calibrate_seconds, select_seconds=select_seconds, check_seconds=time.perf_counter() - t0, optimize_seconds=time.perf_counter() - start,
        peak_mib=peaks, solves=solves.stats)
    if not check.ok:
        raise VerificationError(f"the optimized plan disagrees with onnxruntime: {check.summary()}")
    plan = keep_kernels(selected.plan, selected.session, db.path.parent, weights, kept_for_s)
    session = selected.session if selected.session is not None or not compile_session else compile_plan(plan)
    return replace(plan, summary=stats.summary()), session, stats


def optimize_buckets(source: str | os.PathLike | onnx.ModelProto, db: ProfileDB, settings: OptimizeSettings,
                     shapes: Mapping[str, Sequence[Sequence[int]]], progress: Progress | None = None,
                     on_bucket: Callable[[int, Mapping[str, tuple[int, ...]]], None] | None = None,
                     ) -> tuple[BucketedPlan, list[OptimizeStats]]:
    """`optimize` once per shape bucket (korch/shapes.py) of a model with symbolic dims: one checked
    plan per bucket, and the model as declared, for shapes no bucket fits. Each bucket's compiled
    session is dropped before the next bucket is optimized (`korch.compile` makes them again)."""
    resolved = resolve_model(source, cache_dir=db.path.parent)
    model = resolved if isinstance(resolved, onnx.ModelProto) else read_model(resolved)
    buckets, stats = [], []
    for k, bucket in enumerate(bucket_shapes(model, shapes, model_label(source))):
        if on_bucket is not None:
            on_bucket(k, bucket)
        plan, _, st = optimize(model, db, settings, bucket, progress, compile_session=False)
        buckets.append(Bucket(bucket, plan))
        stats.append(st)
    return BucketedPlan(tuple(buckets), declared(model_inputs(model)), declared(model.graph.output),
                        OnnxSource(model, {})), stats
