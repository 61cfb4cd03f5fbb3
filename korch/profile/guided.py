"""Profiling guided by the cost models: measure only the kernels that could enter the best split plan.

Profiling every candidate on every backend is what makes a cold optimize take minutes, and what
forced a fixed budget on Inductor. A guided backend (`ProfileSettings.guided_backends`) is profiled
instead by solving over its cost model's predictions (korch/costmodel: a correction learned from
this machine's profiles, or, before it has learned, its roofline prior alone: `guide_by_prior`):

1. The whole-model kernels, and every pair the database already holds, are read or measured first.
2. Each backend's predictions are rescaled to the machine's speed now by its whole model's measured
   / predicted time (`guide_scale_by_whole`); a backend whose whole model was not timed or not
   accepted measures a random sample of `guide_sample` legal unmeasured pairs instead, and takes the
   median of theirs. Every other legal (candidate, backend) pair gets an optimistic cost: its rescaled
   predicted time times `guide_optimism` (< 1), a bound that a kernel's measured time seldom falls below;
   with `guide_spread_sample`, each backend's factor is instead a low quantile of measured / rescaled
   predicted over that many random pairs measured first (`_spread_optimism`), no lower than `guide_optimism`.
   Every unmeasured kernel at its optimistic cost at once prices a plan of many of them far below
   what it could cost, since their errors largely cancel over a plan. With `guide_uncertainty` N (a
   budget of uncertainty, after Bertsimas and Sim), each unmeasured kernel costs what the sample's
   median expects (its expected cost) and at most N of a plan's fall to their optimistic costs
   (blp.Formulation.relax's discounts): a plan-level bound, not a kernel-level one.
3. The BLP (with boundary costs, without the whole-model kernels, as measured selection solves for
   the best split plan) is solved over measured and optimistic costs. The pairs it chooses that are
   not measured yet are measured, and it is solved again. A round first solves the LP relaxation
   alone and measures the unmeasured pairs it leans on; only when it leans on none is the BLP
   solved exactly (replayed over yolox-nano's profiles: 10 s of solves instead of 31, the same
   plan; benchmarks/guided_replay.py --relax both).
4. When a solve chooses only measured kernels, no unmeasured kernel could lower the plan even at its
   optimistic cost: the measured optimum is stable, and the rest is never compiled. So it is when the
   LP relaxation's cost, a lower bound on every split plan, is at least the fastest whole model
   measured times the margin a split plan must win by (SelectionSettings.multi_kernel_margin):
   measured selection would keep that whole model whatever the rest measured (replayed over
   yolox-nano's profiles: 489 kernels measured instead of 649, the same plan; guided_replay.py --bar). The problem is
   remembered as finished, so a warm optimize reads the same records and solves nothing (a cost
   model retrained in between would otherwise ask for other kernels and make warm runs differ).
5. The winner's curse: of a thousand kernels timed once each on a noisy machine, the stable solve
   chose those whose one timing read low. So the kernels of the best split plan over measured costs
   are timed a second time (`guide_confirm_rounds`, `_confirm`), the second timing, which no solve
   chose them for, is their record, and the loop goes on from there (3-4), until a best plan's
   kernels have all been timed twice, its cost cannot beat the whole-model bar, or the rounds are
   spent. Each kernel is timed again once per optimize, and as it runs in that plan: each call after
   a sweep of what the plan's other kernels touch (`guide_confirm_evict`; back to back, a kernel
   keeps its working set in a large last-level cache that the rest of its plan evicts).
6. Every split kernel is priced as it runs in a plan (`Refills`, korch/profile/refill.py): one timed
   after such a sweep at that time, any other at its profile (or predicted time) plus the median
   refill of the nearest kernels of its backend timed both ways. Until the profile database holds
   `guide_refill_sample` of a backend, that many of the random kernels measured first are timed again
   after the sweep each would find in this model's plans (`_sample_refills`); the kernels step 5 times
   again add theirs. Back-to-back profiles priced split plans 5-11% under what they ran at, and the
   loop measured kernels for plans that could not win.

A guided backend chooses from every candidate it could run: Inductor's budget of fused candidates
does not apply to it when it is guided (`ProfileSettings.guided_backends`; not by default, because
its compiles cost seconds each). Other backends, and with `guide_by_prior` off a backend whose model
has not learned yet, are profiled as before: every candidate of their budgeted pool. Legality (can
the backend compile it at all) is asked before predicting, so nothing illegal reaches the solver as
an optimistic option. Every round's kernels read their reference values from one computation kept
on disk (`reference`, profile/reference_values.py), not a reference run of their own.
"""

from __future__ import annotations

import hashlib
import logging
import math
import random
import statistics
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np

from korch.backends import get_backend
from korch.candidates import Candidate, extract_subgraph
from korch.costmodel import CostModel, MachinePeaks, features_by_key, load_or_train
from korch.costmodel.features import FEATURES_VERSION, Features
from korch.costmodel.quality import spread_optimism
from korch.frontend.regions import OnnxSource
from korch.ir.graph import Graph
from korch.ir.ops import PrimClass
from korch.profile import link
from korch.profile.database import ProfileDB, Record, Rejection, Status
from korch.profile.profiler import (
    KeepKernel,
    ProfileOutcome,
    Progress,
    accepted,
    compiled_in_place,
    profile,
    record_version,
)
from korch.profile.prune import best_times, floor_seconds, single_times
from korch.profile.reference_values import ReferenceValues
from korch.profile.refill import RefillModel, RefillSample
from korch.profile.timing import last_level_cache_bytes
from korch.select.blp import (
    DEFAULT_TIME_LIMIT_S,
    Formulation,
    Option,
    Relaxation,
    Selection,
    SelectionError,
    SolveTally,
    StartCost,
    formulate,
)
from korch.settings import OptimizeSettings, ProfileSettings
from korch.version import code_version

log = logging.getLogger("korch.profile")

BoundaryFn = Callable[[str, str, str], float]


@dataclass(frozen=True)
class GuideStats:
    """What guided profiling did: which backends it guided, how many solves, and how many legal
    (candidate, backend) pairs it never measured because no solve wanted them."""

    backends: tuple[str, ...] = ()
    rounds: int = 0
    skipped: int = 0
    stable: bool = True           # the last solve chose only measured kernels (else: the round limit)
    confirmed: int = 0            # kernels of a best split plan timed a second time (the winner's curse)


def candidate_option(cand: Candidate, backend: str, cost: float, index: int) -> Option:
    """A (candidate, backend) pair as a BLP option; `index` keeps keys unique within one problem."""
    return Option(f"{backend}@{cand.nodes[0]}-{cand.nodes[-1]}:{index}", frozenset(cand.inputs),
                  frozenset(cand.outputs), cost, frozenset(cand.nodes), backend)


def guided_profile(graph: Graph, pools: Mapping[str, Sequence[Candidate]],
                   universe: Mapping[str, Sequence[Candidate]], db: ProfileDB, settings: OptimizeSettings,
                   machine: str, source: OnnxSource | None, boundary: BoundaryFn,
                   progress: Progress | None = None, keep: KeepKernel | None = None,
                   start: StartCost | None = None, reference: ReferenceValues | None = None,
                   tally: SolveTally | None = None) -> tuple[ProfileOutcome, GuideStats]:
    """Records for the candidates each backend may use: for a guided backend, chosen from all of
    `universe` by solving (module doc); for any other, every candidate of its budgeted `pools`.
    `tally`: where the BLP solves are counted."""
    ps = settings.profile
    budgeted = pools

    def guiding(retrain: bool) -> dict[str, CostModel]:
        models = {}
        for name in (n for n in budgeted if n in ps.guided_backends) if ps.guided else ():
            model = load_or_train(db, name, machine, settings=settings.cost_model, retrain=retrain)
            if model.booster is not None or ps.guide_by_prior:
                models[name] = model
        return models

    def keyed(models: Mapping[str, CostModel]) -> tuple[dict[str, Sequence[Candidate]], str, bool]:
        guided = {name: (universe[name] if name in models else budgeted[name]) for name in budgeted}
        problem = _problem_key(guided, models, settings, machine)
        return guided, problem, db.guided_done(problem)

    # A finished problem is told by the saved models as they are; they are retrained (where the
    # database outgrew them) only for a problem still to solve: a warm yolov4 spent 0.7 s of its
    # optimize retraining trees it then never asked. (Retraining only adds trees: the guided
    # backends, and so the problem's key, can only grow.)
    models = guiding(retrain=False)
    if models:
        pools, problem, done = keyed(models)
        if not done:
            models = guiding(retrain=True)
            pools, problem, done = keyed(models)
    if not models:
        return _profile(graph, pools, db, settings, machine, source, progress, keep=keep, reference=reference), \
            GuideStats()
    whole = len(graph.nodes)
    first_pools: dict[str, list[Candidate]] = {}
    pending: dict[tuple[str, str], Candidate] = {}
    for name, candidates in pools.items():
        if name not in models:
            first_pools[name] = list(candidates)
            continue
        stored = db.get_many([c.key for c in candidates], name, record_version(get_backend(name), ps),
                             settings.threads, machine)
        first_pools[name] = [c for c in candidates if c.size == whole or c.key in stored]
        for c in candidates:
            if c.size != whole and c.key not in stored:
                pending.setdefault((c.key, name), c)
    refused: dict[tuple[str, str], Record] = {}
    illegal = [] if done else _refuse_illegal(graph, pending, refused, db, settings, machine)
    legal = len(pending)
    # The spread sample (below) is drawn now and timed with the whole models: its small kernels give
    # the speed watch its sentinel before the whole models, which sort last, are timed, so their
    # profiles are read on both sides and timed again if the machine ran slow (a whole model alone
    # in this call had no reading at all), and selection can trust two profiles taken at the
    # machine's speed in one core-link state (korch/select/measured.py `_profiles_compare`).
    spread = _calibration_sample(pending, models, ps.guide_spread_sample, settings.seed + 1) \
        if ps.guide_spread_sample and not done else {}
    drawn = {pair: pending.pop(pair) for pairs in spread.values() for pair in pairs}
    for name, pairs in spread.items():
        first_pools[name] = [*first_pools.get(name, ()), *(drawn[pair] for pair in pairs)]
    outcome = _profile(graph, first_pools, db, settings, machine, source, progress, keep=keep, reference=reference)
    if done:                      # a warm run: what the finished guided profiling measured, nothing more
        log.info("guided profiling of this model finished before: reading its %d records", len(outcome.records))
        return outcome, GuideStats(tuple(sorted(models)), 0, len(pending), True)
    records = {**outcome.records, **refused}
    if not pending:               # every kernel is measured already (a warm run): no solve can ask for more
        return replace(outcome, records=records, measured=outcome.measured + len(illegal)), \
            GuideStats(tuple(sorted(models)), 0, 0, True)
    predicted = _predicted_costs(graph, {**pending, **drawn}, models, settings, db)   # (the sample's: its spread)
    usable = _usable(records, outcome.tolerance)
    got = outcome

    def measure(want: Mapping[str, Sequence[Candidate]], retime: Collection[tuple[str, str]] = (),
                evict: Mapping[tuple[str, str], int] | None = None,
                keep_faster: tuple[str, str] | None = None) -> ProfileOutcome:
        """Profile `want` (`retime`, `evict`: _profile) and take in its records; `keep_faster`, a retimed
        pair, keeps the faster of its two profiles (_faster_kept). Returns what was profiled."""
        nonlocal got
        more = _profile(graph, want, db, settings, machine, source, progress, outcome.fp32_error, keep, reference,
                        retime, evict)
        taken = more if keep_faster is None else _faster_kept(more, records.get(keep_faster), keep_faster, db)
        got = got.merged(taken)
        records.update(taken.records)
        usable.update(_usable(taken.records, outcome.tolerance))
        return more

    def measure_drawn(drawn: Mapping[str, Sequence[tuple[str, str]]]) -> None:
        """Measure random pairs drawn per backend (_calibration_sample), no longer pending."""
        measure({name: [pending.pop(pair) for pair in pairs] for name, pairs in drawn.items() if pairs})

    small = [c for cs in first_pools.values() for c in cs if c.size != whole]
    settled = _settle_wholes(outcome, pools, small, usable, whole, measure, ps, settings.threads)
    scale = _whole_scale(graph, pools, models, usable, settings, db) if ps.guide_scale_by_whole else {}
    unscaled = {name: m for name, m in models.items() if name not in scale}
    sample = _calibration_sample(pending, unscaled, ps.guide_sample, settings.seed)
    measure_drawn(sample)
    scale.update({name: _scale(records, predicted, pairs) for name, pairs in sample.items()})
    log.info("guided profiling: measured/predicted, %s",
             ", ".join(f"{name} {scale[name]:.2f} ({'a random sample' if name in sample else 'its whole model'})"
                       for name in sorted(scale)))
    optimism = dict.fromkeys(models, ps.guide_optimism)
    expectation = dict.fromkeys(models, 1.0)
    if spread:
        optimism = _spread_optimism(usable, predicted, scale, spread, ps.guide_spread_quantile, ps.guide_optimism)
        expectation = _spread_expectation(usable, predicted, scale, spread, ps.guide_optimism)
        ratios = _spread_ratios(usable, predicted, scale, spread)
        log.info("guided profiling: from the spread of %d random kernel(s) per backend, measured / rescaled "
                 "predicted at least (median) %s", ps.guide_spread_sample,
                 ", ".join(f"{name} {optimism[name]:.2f} ({expectation[name]:.2f}; {len(ratios.get(name, ()))} "
                           "accepted)" for name in sorted(optimism)))
    optimistic, expected = _bounds(pending, predicted, scale, optimism, expectation)

    refills = load_refills(graph, pools, db, settings, machine, start)
    if refills is not None:
        sampled = _sample_refills(refills, usable, records, pools, db, measure, ps.guide_refill_sample)
        log.info("guided profiling: split kernels priced as they run in a plan%s: %s",
                 f" ({sampled} kernel(s) timed again after a sweep)" if sampled else "", refills.summary())
    split = SplitProblem(graph, pools, boundary, start, settings.selection.solver_time_limit_s, refills, tally)
    bar = _bar(pools, usable, whole, settings)

    def until_stable(max_rounds: int) -> tuple[int, bool]:
        return solve_until_stable(split, usable, pending, optimistic, measure, max_rounds, ps.guide_batch, bar=bar,
                                  exact_batch_size=ps.guide_batch_exact, expected=expected,
                                  uncertainty=ps.guide_uncertainty, gap=_stop_gap(settings))

    rounds, stable = until_stable(ps.guide_rounds)
    confirmed: set[tuple[str, str]] = set()
    for _ in range(ps.guide_confirm_rounds if stable else 0):
        again = _confirm(graph, split, usable, pools, bar, confirmed, measure, evict_cap(ps))
        if not again:
            break
        more, stable = until_stable(max(ps.guide_rounds - rounds, 1))
        rounds += more
        if not stable:
            break
    # Settled again after the rounds, judged against the link read since: a whole model profiled far
    # before the run had read the link near looked settled then (_unsettled). candy's
    # OpenVINO whole model, profiled at 76.20 ms with the link at 334 / 368 ns before any near reading,
    # set the bar its split kernels, profiled near, beat on paper (65.07 ms predicted); side by side
    # the split plan ran 0.987x it.
    _settle_wholes(got, pools, small, usable, whole, measure, ps, settings.threads, settled)
    if stable:
        db.put_guided_done(problem)
    else:
        log.warning("guided profiling stopped after %d rounds with kernels still unmeasured in the best plan; "
                    "raise ProfileSettings.guide_rounds for an exact answer", rounds)
    log.info("guided profiling: %d of %d legal unmeasured pairs measured in %d round(s); %d never compiled",
             legal - len(pending), legal, rounds, len(pending))
    merged = replace(got, records=records, measured=got.measured + len(illegal))
    return merged, GuideStats(tuple(sorted(models)), rounds, len(pending), stable, len(confirmed))


def _confirm(graph: Graph, split: SplitProblem, usable: dict[tuple[str, str], float],
             pools: Mapping[str, Sequence[Candidate]], bar: float | None, confirmed: set[tuple[str, str]],
             measure: Callable[..., ProfileOutcome | None], evict_cap: int = 0) -> int:
    """Time again, once each, the kernels of the best split plan over measured costs that were timed
    only once (ProfileSettings.guide_confirm_rounds: the winner's curse), their second timing now
    their record; returns how many: none if there is no split plan, or the best cannot run below `bar`
    (then no split plan is kept, whatever its kernels measure again). Each call of a kernel timed
    again follows a sweep of the bytes the plan's other kernels touch, at most `evict_cap`
    (ProfileSettings.guide_confirm_evict): what it finds of its caches inside the plan; its calls
    alternate with calls back to back, the other side of its refill sample."""
    try:
        best = split.solve(usable, {}, {})
    except SelectionError:
        return 0
    if bar is not None and best.cost >= bar:
        return 0
    pairs = [split.pairs[o.key] for o in best.chosen if split.pairs[o.key] not in confirmed]
    if not pairs:
        return 0
    by_pair = {(c.key, name): c for name, candidates in pools.items() for c in candidates}
    want = _wanted(by_pair, pairs)
    before = {pair: usable[pair] for pair in pairs}
    priced = {pair: split.price(pair, usable[pair]) for pair in pairs}
    hot = {pair: before[pair] if split.refills is None else split.refills.hot(pair, before[pair]) for pair in pairs}
    evict = None
    if evict_cap:
        touched = {split.pairs[o.key]: touched_bytes(graph, by_pair[split.pairs[o.key]]) for o in best.chosen}
        total = sum(touched.values())
        evict = {pair: min(evict_cap, total - touched[pair]) for pair in pairs}
    more = measure(want, retime=pairs, evict=evict)
    hot.update(more.hot_beside if more is not None else {})
    confirmed.update(pairs)
    if evict and split.refills is not None:      # (a retime that failed kept its first record: no sample)
        split.refills.add([RefillSample(p[0], p[1], touched[p], evict[p], hot[p], usable[p]) for p in pairs
                           if evict[p] > 0 and usable.get(p, before[p]) != before[p]])
    ratios = sorted(usable[p] / priced[p] for p in pairs if p in usable and priced[p] > 0)
    again = split.solve(usable, {}, {})
    log.info("guided profiling: the best split plan's %d kernel(s) timed again%s, a median %.3fx what they were "
             "priced at (%.3f-%.3f); the plan %.3f -> %.3f ms at its kernels' new times, the best split plan "
             "now %.3f ms", len(pairs),
             f" after sweeps of up to {max(evict.values()) / 2**20:.0f} MiB (what the plan's other kernels touch)"
             if evict else "", statistics.median(ratios) if ratios else math.nan,
             ratios[0] if ratios else math.nan, ratios[-1] if ratios else math.nan, best.cost * 1e3,
             (best.cost + sum(usable.get(p, math.inf) - priced[p] for p in pairs)) * 1e3, again.cost * 1e3)
    return len(pairs)


def _sample_refills(refills: Refills, usable: dict[tuple[str, str], float], records: dict[tuple[str, str], Record],
                    pools: Mapping[str, Sequence[Candidate]], db: ProfileDB,
                    measure: Callable[..., ProfileOutcome | None],
                    size: int) -> int:
    """Until the database holds `size` refill samples of each backend of `refills`, time kernels
    measured already (the random ones measured first) again after the sweep each finds in this
    model's plans, spread over the bytes they touch, in turn with calls back to back, and add them as
    samples; their records stay their back-to-back profiles. Returns how many were timed again."""
    picked: list[tuple[str, str]] = []
    for name in sorted({name for _, name in refills.kernels}):
        need = size - refills.model.count(name)
        have = sorted((refills.kernels[p][0], p) for p in usable
                      if p[1] == name and p in refills.kernels and refills.kernels[p][1] > 0 and p not in refills.in_plan)
        if need <= 0 or not have:
            continue
        if len(have) > need:
            have = [have[round(k * (len(have) - 1) / max(need - 1, 1))] for k in range(need)] if need > 1 else \
                [have[len(have) // 2]]
        picked.extend(dict.fromkeys(p for _, p in have))
    if not picked:
        return 0
    firsts = {p: records[p] for p in picked}
    before = {p: usable[p] for p in picked}
    by_pair = {(c.key, name): c for name, candidates in pools.items() for c in candidates}
    more = measure(_wanted(by_pair, picked), retime=picked, evict={p: refills.kernels[p][1] for p in picked})
    # each kernel's time back to back, taken in turn with its time after the sweep (its profile, taken
    # minutes before, may have seen another state of the machine)
    hot = {**before, **(more.hot_beside if more is not None else {})}
    samples = []
    for p in picked:
        new = records.get(p)
        if new is not None and new.status is Status.OK and new.median_s and new.created_at != firsts[p].created_at:
            samples.append(RefillSample(p[0], p[1], *refills.kernels[p], hot[p], new.median_s))
    db.put_many(list(firsts.values()))           # each kernel's record: its profile back to back
    records.update(firsts)
    usable.update(before)
    refills.add(samples)
    return len(picked)


def _wanted(by_pair: Mapping[tuple[str, str], Candidate], pairs: Iterable[tuple[str, str]]
            ) -> dict[str, list[Candidate]]:
    """Backend -> the candidates of `pairs` ((candidate key, backend)), as `measure` takes them."""
    want: dict[str, list[Candidate]] = {}
    for pair in pairs:
        want.setdefault(pair[1], []).append(by_pair[pair])
    return want


def profiled_last(settings: OptimizeSettings) -> tuple[str, ...]:
    """The backends profiled after all others: those whose compiles are slow (Inductor, compiled
    ahead in worker processes) and that are not guided by a cost model, so that the kernels they
    compile are chosen by solving over the others' profiles (`profile_last`)."""
    ps = settings.profile
    return tuple(name for name in settings.backends
                 if get_backend(name).compiles_ahead and not (ps.guided and name in ps.guided_backends))


def profile_last(graph: Graph, regions: Mapping[str, Sequence[Candidate]], small: Sequence[Candidate],
                 outcome: ProfileOutcome, pools: Mapping[str, Sequence[Candidate]], db: ProfileDB,
                 settings: OptimizeSettings, machine: str, source: OnnxSource | None, boundary: BoundaryFn,
                 progress: Progress | None = None, keep: KeepKernel | None = None,
                 start: StartCost | None = None, reference: ReferenceValues | None = None,
                 calibrate: Callable[[Collection[str]], bool] | None = None,
                 tally: SolveTally | None = None) -> ProfileOutcome:
    """`outcome` (the profiles of the other backends' `pools`) and the profiles of the backends of
    `regions` (name -> the regions it compiles: Inductor's whole model and a tiling), taken after
    them. Where the whole model is compiled in place (too large for a compile worker), it is profiled
    first; if it is beyond `tiles_within` times the fastest whole model of `pools`, the other regions
    are not compiled (ProfileSettings.tiles_within), else they are chosen by solving, as the small
    candidates are (the loop's budget is then `inductor_budget` plus their number). A whole model a
    worker compiles is compiled with its tiling, in the first round that measures anything.

    Their small candidates are chosen by solving, as guided profiling does, with each unmeasured one
    at an estimated floor under any kernel of it (prune.floor_seconds: its linear primitives at their best time
    alone, its tensors in and out moved once at bandwidth; linear primitives not yet timed alone are
    timed first, on the other backends of `pools` that take them). A round takes the fused kernels the
    split-plan BLP (or its LP relaxation) would choose at those floors, and their rivals, up to
    `inductor_batch`. If their backend never ran one of their linear primitives alone, it runs those
    first instead (one compile per key) and the floors rise to its own times (`refine`); else the
    round measures them. Rounds go on until a solve chooses only measured kernels (no other kernel of
    these backends could then lower the plan if the floors held; they are estimates, which cache-
    resident chains beat: prune.py), the LP's bound reaches the fastest whole model, or
    `inductor_budget` kernels were measured. A linear primitive alone is never chosen
    for itself: its floor is the best time measured for it, so it could at most tie. A finished
    problem is remembered, so a warm run measures nothing.

    `calibrate(backends)` (Boundaries.ensure_by_stages): these backends' boundary costs, measured when
    first needed: their kernel starts first, their pairs once a round at the starts still would
    measure one. Until then the rounds solve with their boundaries free, a lower bound that can only
    make a round choose more of their kernels, and a round that would measure one calibrates first
    and solves again (solve_until_stable). Where no round would measure one, they are not calibrated
    here (measured selection may still: korch/select/measured.py). `tally`: where the BLP solves are
    counted.
    """
    if not regions:
        return outcome
    ps = settings.profile
    whole = len(graph.nodes)
    unique = list({c.key: c for c in small}.values())
    first: dict[str, list[Candidate]] = {}
    carry: dict[str, list[Candidate]] = {}        # regions to profile, with the first round's kernels
    for name, own in regions.items():
        stored = db.get_many([c.key for c in (*own, *unique)], name, record_version(get_backend(name), ps),
                             settings.threads, machine)
        first[name] = [c for c in (*own, *unique) if c.key in stored]
        carry[name] = [c for c in own if c.key not in stored]
    got = outcome.merged(_profile(graph, first, db, settings, machine, source, progress, outcome.fp32_error, keep,
                                   reference))
    records = dict(got.records)
    usable = _usable(records, got.tolerance)

    def absorb(want: Mapping[str, Sequence[Candidate]], retime: Collection[tuple[str, str]] = (),
               keep_faster: tuple[str, str] | None = None) -> ProfileOutcome:
        """Profile `want` (`retime`: pairs of it measured again though stored) and take in its records;
        `keep_faster`, a retimed pair, keeps the faster of its two profiles, with that profile's link
        state and refill (_look_again). Returns what was profiled."""
        nonlocal got
        more = _profile(graph, want, db, settings, machine, source, progress, outcome.fp32_error, keep, reference,
                        retime)
        taken = more if keep_faster is None else _faster_kept(more, records.get(keep_faster), keep_faster, db)
        got = got.merged(taken)
        records.update(taken.records)
        usable.update(_usable(taken.records, got.tolerance))
        return more

    # The whole model first, where it is compiled in place anyway (its constants too large for a
    # worker): a backend whose whole model is far behind the others' has its tiling left out, and
    # otherwise its tiles are candidates like the fused ones, compiled only if a solve at their floors
    # chooses them (compiled every run before, they took 14-19 s of the transformers' cold optimizes,
    # and no zoo plan or best split plan held one: BENCHMARKS.md, 2026-12-07). A whole model a worker
    # compiles stays in one batch with its tiling, compiled beside it on the worker it would leave
    # idle: compiled first alone, segformer-b0's took 49 s, then its tiles, which the floors chose,
    # 25 s more with a boundary calibration of 13 s, where the batch took 41 s (the same day).
    # (asked only of a backend with regions still to compile: a warm run that holds them all asked it,
    # and the backend's check of the whole graph imported torch: warm yolox-nano 0.9 -> 5.3 s)
    in_place = {name for name, own in regions.items()
                if carry[name] and any(c.size == whole and compiled_in_place(graph, c, name, ps, source)
                                       for c in own)}
    wholes = {name: [c for c in own if c.size == whole and name in in_place] for name, own in carry.items()}
    everything = {**pools, **{name: list(own) + unique for name, own in regions.items()}}
    problem = hashlib.sha256(f"last|{ps.inductor_budget}|{ps.inductor_batch}|".encode()
                             + _problem_key(everything, {}, settings, machine).encode()).hexdigest()
    solved = db.guided_done(problem)
    # A floor counts a linear primitive never timed alone as free: guided profiling leaves most of them
    # untimed (yolox-nano: floors 11-24x under the kernels they were for). They are cheap to time on
    # the other backends, so the floors get them first, timed with the whole models: being small and
    # quick to compile, one of them is the speed watch's sentinel before the whole models (which sort
    # last) are timed, so their profiles are read at the machine's speed or known not to be.
    best = best_times(unique, records, got.tolerance)
    lone = {c.key for c in unique if _linear_alone(graph, c) and c.key not in best} if not solved else set()
    want = {name: list({c.key: c for c in cs if c.key in lone and (c.key, name) not in records}.values())
            for name, cs in pools.items()}
    if any(wholes.values()) or any(want.values()):
        absorb({name: [*want.get(name, ()), *wholes.get(name, ())] for name in {*want, *wholes}})
        carry = {name: [c for c in own if c not in wholes[name]] for name, own in carry.items()}
    for name in regions:
        compared = usable
        if carry.get(name) and settings.threads > 1 and (other := _other_state(got, name, pools, usable, whole,
                                                                              settings.threads)) is not None:
            o_name, o_cand, states = other
            log.info("%s: its whole model was profiled with the core link %s, %s's %s: timing %s's again to "
                     "compare them in one state", name, states[0], o_name, states[1], o_name)
            compared = {**usable, **_look_again(o_name, o_cand, unique, pools, usable, absorb, ps)}
        if carry.get(name) and (reason := _far_behind(name, regions[name], pools, compared, whole, ps.tiles_within)):
            log.info("%s: %s; its %d other region(s) are not compiled", name, reason, len(carry[name]))
            carry[name] = []
    # the tiles of a whole model profiled in place: chosen by solving (above), so never compiled once
    # the problem is solved (a warm run that compiled them took bert-base's optimize 2 -> 42 s)
    tiles = {name: carry.pop(name) for name in list(carry) if name in in_place}

    def measure(want: Mapping[str, Sequence[Candidate]]) -> None:
        """Profile `want`, and the regions not profiled yet: one batch of compiles ahead, so the small
        kernels fill the workers while the largest region compiles (apart, yolox-nano's 4 regions and
        40 kernels took 73 + 46 s against 99 s together)."""
        absorb({name: [*carry.pop(name, ()), *want.get(name, ())] for name in {*want, *carry}})

    pending: dict[tuple[str, str], Candidate] = {}
    illegal: list[Record] = []
    rounds, stable = 0, True
    if not solved:
        pending = {(c.key, name): c for name in regions for c in unique
                   if (c.key, name) not in records and not _linear_alone(graph, c)} if ps.inductor_budget else {}
        pending.update({(c.key, name): c for name, own in tiles.items() for c in own})
        illegal = _refuse_illegal(graph, pending, records, db, settings, machine)
        tiled = {(c.key, name) for name, own in tiles.items() for c in own} & pending.keys()
        bandwidth = MachinePeaks.measure().bytes_per_s
        alone = {c.nodes[0]: c for c in small if _linear_alone(graph, c)}
        floors: dict[tuple[str, str], float] = {}

        def refloor() -> None:
            """Each pending kernel's floor, from the best times alone and its own backend's."""
            best = best_times(unique, records, got.tolerance)
            single = single_times(small, best)
            own = {name: {i: usable[(c.key, name)] for i, c in alone.items() if (c.key, name) in usable}
                   for name in regions}
            floors.update({(key, name): floor_seconds(graph, c, single, bandwidth, own[name])
                           for (key, name), c in pending.items()})

        def refine(picked: Sequence[tuple[str, str]]) -> int:
            """Before a round measures fused kernels, their backend's own time alone for each of their
            linear primitives it never ran alone (one per key), and the floors again: a fused kernel
            runs each of them through the library it calls for it alone (Inductor's convs ran a median
            1.5x onnxruntime's here, p90 3.3x), so one compile may raise the floors of many. The
            kernels measured."""
            want: dict[str, dict[str, Candidate]] = {}
            for key, name in picked:
                if (key, name) in tiled:     # a region's floor is its tensors' and linear primitives' (below)
                    continue
                for i in pending[(key, name)].nodes:
                    if i in alone and (alone[i].key, name) not in records:
                        want.setdefault(name, {})[alone[i].key] = alone[i]
            if not want:
                return 0
            measure({name: list(cs.values()) for name, cs in want.items()})
            refloor()
            return sum(map(len, want.values()))

        refloor()
        legal = len(pending)
        split = SplitProblem(graph, everything, boundary, start, settings.selection.solver_time_limit_s, tally=tally)
        rounds, stable = solve_until_stable(split, usable, pending, floors, measure, ps.guide_rounds,
                                            ps.inductor_batch, budget=ps.inductor_budget + len(tiled),
                                            bar=_bar(everything, usable, whole, settings), refine=refine,
                                            calibrate=calibrate, gap=_stop_gap(settings),
                                            # (a tile's rivals are the small kernels over its primitives, most
                                            # of the pending ones: vit-b16's round of its 3 tiles took 17 more,
                                            # 12 s, after calibrating Inductor's boundaries, 10 s; the tiles
                                            # alone, compiled every run before, took 14-19 s)
                                            unrivalled=tiled)
        del split      # its formulation and LP go before the regions compile (yolov4: 2.4 -> 3.9 GB while solved)
        db.put_guided_done(problem)
        tiles_left = len(tiled & pending.keys())
        fused, fused_left = legal - len(tiled), len(pending) - tiles_left
        log.info("%s: %d of %d fused candidates and %d of %d other regions measured in %d round(s) of solving at "
                 "their floors (%s)", ", ".join(regions), fused - fused_left, fused, len(tiled) - tiles_left,
                 len(tiled), rounds,
                 "stable at their floors, which are estimates: prune.floor_seconds" if stable
                 else f"the budget of {ps.inductor_budget} spent")
    if any(carry.values()):                  # no round measured anything: the regions alone
        measure({})
    return replace(got, records=records, measured=got.measured + len(illegal))


def _look_again(name: str, cand: Candidate, unique: Sequence[Candidate], pools: Mapping[str, Sequence[Candidate]],
                usable: Mapping[tuple[str, str], float], absorb: Callable[..., ProfileOutcome],
                ps: ProfileSettings) -> dict[tuple[str, str], float]:
    """`name`'s whole model timed again, in the machine's state now, for one comparison: {its pair:
    the new time}, or {} where that timing failed. Its profile becomes the faster of the two (in the
    database, `records` and the outcome's link states), as for a kernel timed again after a slow
    spell: with the vCPUs apart a 2-thread kernel runs slower, and a plan runs mostly with them near
    (194 of 240 zoo bench rounds at 2 threads, BENCHMARKS.md, 2026-12-05). Selection judges the
    backend's split kernels against this profile: a yolov4 optimize that kept the far-state look in
    place of a near-state profile timed its near-state split kernels at 1.26x the speed it expected,
    and one that kept a far-state profile beside a near-state look predicted 296 ms for a plan the
    look timed at 261. A small kernel is timed again right before it, as the speed watch's sentinel,
    so the look is known to be at the machine's speed, or not."""
    pair = (cand.key, name)
    want = {name: [cand]}
    lo, hi = ps.watch_sentinel_s
    sentinel = next(((n, c) for c in unique for n in pools if not get_backend(n).compiles_ahead
                     and lo <= usable.get((c.key, n), -1.0) <= hi), None)
    if sentinel is not None:
        want[sentinel[0]] = [*want.get(sentinel[0], ()), sentinel[1]]
    more = absorb(want, {(c.key, n) for n, cs in want.items() for c in cs}, keep_faster=pair)
    look = more.records.get(pair)
    return {} if look is None or not look.median_s else {pair: look.median_s}


def _faster_kept(more: ProfileOutcome, prior: Record | None, pair: tuple[str, str], db: ProfileDB) -> ProfileOutcome:
    """`more`, a profile that timed `pair` again, with `prior` (its earlier record) in place of the new
    one where `prior` was faster or the new timing failed; the earlier record is then stored again, and
    the new timing's link readings, speed and refill are dropped, so that the outcome `more` is merged
    into keeps those of the profile kept."""
    new = more.records.get(pair)
    if prior is None or not prior.median_s or (new is not None and new.median_s and new.median_s < prior.median_s):
        return more
    backend = pair[1]
    db.put(prior)
    return replace(more, records={**more.records, pair: prior},
                   whole_links={b: v for b, v in more.whole_links.items() if b != backend},
                   whole_at_speed=more.whole_at_speed - {backend},
                   hot_beside={p: v for p, v in more.hot_beside.items() if p != pair})


def _unsettled(got: ProfileOutcome, backends: Iterable[str], threads: int) -> dict[str, str]:
    """Backend -> why its whole model's profile, taken in this run, is worth timing once more: the core
    link read right before and after its timing fell on both sides (the host moved the vCPUs while it
    was timed), or both far while the run has read the link near. A plan runs mostly near (194 of 240
    zoo bench rounds at 2 threads, BENCHMARKS.md, 2026-12-05), and the fastest whole model's profile is
    the bar every split plan must beat: OpenVINO's whole yolov4, profiled at 291.99 ms with the link
    moving from 49 to 356 ns, and segformer-b0's, at 80.99 ms with the link at 314 / 317 ns, benched
    227.74 and 63.13 ms, and with those bars the guided loops measured kernels no plan could use
    (yolov4's profile stage took 412 s against 288). One thread has no link; a run that never read
    the link near has nothing better to compare with."""
    if threads <= 1:
        return {}
    nearest = got.nearest_link()
    why = {}
    for name in backends:
        links = got.whole_links.get(name, ())
        if not links:
            continue
        state = link.state(links, nearest)
        if state is None:
            why[name] = f"the core link moved during its timing ({' / '.join(f'{x:.0f}' for x in links)} ns)"
        elif state == "far":
            why[name] = (f"the core link was far during its timing ({' / '.join(f'{x:.0f}' for x in links)} ns, "
                         f"against {nearest:.0f} ns read in this run)")
    return why


def _settle_wholes(got: ProfileOutcome, pools: Mapping[str, Sequence[Candidate]], small: Sequence[Candidate],
                   usable: Mapping[tuple[str, str], float], whole: int, absorb: Callable[..., ProfileOutcome],
                   ps: ProfileSettings, threads: int, done: Collection[str] = ()) -> set[str]:
    """Each whole model of `pools` profiled in `got` with the core link moving or far (_unsettled)
    timed once more, its profile the faster of the two (_look_again; `small`: candidates for the
    sentinel before it), but those of `done`; returns the backends timed again. Guided profiling
    settles before its rounds and after them, each whole model at most once."""
    why = _unsettled(got, pools, threads) if ps.settle_whole_models else {}
    timed: set[str] = set()
    for name, reason in why.items():
        if name in done:
            continue
        cand = next((c for c in pools[name] if c.size == whole and (c.key, name) in usable), None)
        if cand is None:                      # (rejected, or it failed: no profile to settle)
            continue
        before = usable[(cand.key, name)]
        after = _look_again(name, cand, small, pools, usable, absorb, ps).get((cand.key, name))
        timed.add(name)
        log.info("%s: its whole model profiled at %.2f ms, but %s: timed again at %s; the faster kept", name,
                 before * 1e3, reason, f"{after * 1e3:.2f} ms" if after else "no time")
    return timed


def _other_state(got: ProfileOutcome, name: str, pools: Mapping[str, Sequence[Candidate]],
                 usable: Mapping[tuple[str, str], float], whole: int, threads: int,
                 ) -> tuple[str, Candidate, tuple[str, str]] | None:
    """The fastest other whole model (backend, candidate) and the two link states, where it and `name`'s
    whole model were both profiled here at the machine's speed but in different core-link states
    (ProfileOutcome.whole_state); None otherwise. Compared across states, the two say little: the far
    state slowed OpenVINO's whole yolov4 by 1.35x (305 ms against 226), so Inductor's read 1.16x it,
    within tiles_within, where in one state it read 1.53x, and its tiling was compiled (22 s, and
    the optimize's 5.8 GB peak) to lose."""
    own = got.whole_state(name, threads)
    if own is None:
        return None
    fastest = _fastest_whole({n: cs for n, cs in pools.items() if n != name}, usable, whole)
    if fastest is None:
        return None
    _, other, cand = fastest
    theirs = got.whole_state(other, threads)
    return None if theirs is None or theirs == own else (other, cand, (own, theirs))


def _far_behind(name: str, regions: Sequence[Candidate], pools: Mapping[str, Sequence[Candidate]],
                usable: Mapping[tuple[str, str], float], whole: int, within: float) -> str | None:
    """Why `name`'s regions other than the whole model are not worth compiling: its whole model
    profiled beyond `within` times the fastest whole model of the other backends (`pools`); None if it
    did not, or either is unknown (its whole model failed: a part may still compile)."""
    own = next((usable[(c.key, name)] for c in regions if c.size == whole and (c.key, name) in usable), None)
    others = {n: cs for n, cs in pools.items() if n != name}
    best = _best_whole(others, usable, whole)
    if own is None or best is None or own <= within * best:
        return None
    return (f"its whole model profiled at {own * 1e3:.1f} ms, {own / best:.2f}x the fastest other whole model "
            f"({best * 1e3:.1f} ms; ProfileSettings.tiles_within {within:.2f})")


def _linear_alone(graph: Graph, candidate: Candidate) -> bool:
    return candidate.size == 1 and graph.nodes[candidate.nodes[0]].klass == PrimClass.LINEAR


def _usable(records: Mapping[tuple[str, str], Record], tolerance: float) -> dict[tuple[str, str], float]:
    """The time of each kernel a plan may use (profiler.accepted, and timed)."""
    return {pair: r.median_s for pair, r in records.items() if accepted(r, tolerance) and r.median_s}


def _fastest_whole(pools: Mapping[str, Sequence[Candidate]], usable: Mapping[tuple[str, str], float],
                   whole: int) -> tuple[float, str, Candidate] | None:
    """The fastest whole-model kernel measured: its time, backend and candidate."""
    return min(((usable[(c.key, name)], name, c) for name, cs in pools.items() for c in cs
                if c.size == whole and (c.key, name) in usable), key=lambda t: t[0], default=None)


def _best_whole(pools: Mapping[str, Sequence[Candidate]], usable: Mapping[tuple[str, str], float],
                whole: int) -> float | None:
    """The fastest whole-model kernel's time."""
    fastest = _fastest_whole(pools, usable, whole)
    return None if fastest is None else fastest[0]


def _bar(pools: Mapping[str, Sequence[Candidate]], usable: Mapping[tuple[str, str], float], whole: int,
         settings: OptimizeSettings) -> float | None:
    """What a split plan must cost less than to be kept: the fastest whole-model kernel measured, times
    the margin by which measured selection asks a split plan to beat it (SelectionSettings.multi_kernel_margin).
    A split plan that cannot run below it is never kept, so no kernel is worth measuring to find one."""
    best = _best_whole(pools, usable, whole)
    return None if best is None else best * settings.selection.multi_kernel_margin


def _stop_gap(settings: OptimizeSettings) -> float:
    """How far below the bar (the best whole model times the margin a split plan must win by) a
    guided loop's LP bound may stop: where no split plan could beat the best whole model by more than
    ProfileSettings.guide_regret, bound >= best / (1 + regret) = bar * (1 - gap)."""
    regret, margin = settings.profile.guide_regret, settings.selection.multi_kernel_margin
    return max(0.0, 1.0 - 1.0 / ((1.0 + regret) * margin)) if regret > 0 else 0.0


class SplitProblem:
    """The split-plan BLP (every primitive covered, no whole model) that a guided loop solves round
    after round, formulated once over every (candidate, backend) pair of `pools`: a round only prices
    it, each measured pair at its time, each pending one at its optimistic cost, and leaves the rest
    out (rejected, or never measured). Built again each round, the BLP took 0.36 s of yolox-nano's
    0.6 s rounds (benchmarks/guided_replay.py). Formulated at the first solve, so that a problem with
    no split plan at all raises SelectionError there."""

    def __init__(self, graph: Graph, pools: Mapping[str, Sequence[Candidate]], boundary: BoundaryFn | None = None,
                 start: StartCost | None = None, time_limit: float = DEFAULT_TIME_LIMIT_S,
                 refills: Refills | None = None, tally: SolveTally | None = None) -> None:
        self._graph, self._boundary, self._start, self.time_limit = graph, boundary, start, time_limit
        self.tally = tally             # where its solves are counted (None: nowhere)
        self.refills = refills         # each kernel priced as it runs in a plan (None: at its profile)
        whole = len(graph.nodes)
        self._options: list[Option] = []
        self.pairs: dict[str, tuple[str, str]] = {}        # option key -> (candidate key, backend)
        for name, candidates in pools.items():
            for c in candidates:
                if c.size != whole:
                    o = candidate_option(c, name, 0.0, len(self._options))
                    self._options.append(o)
                    self.pairs[o.key] = (c.key, name)

    @cached_property
    def formulation(self) -> Formulation | None:
        g = self._graph
        return formulate(self._options, g.inputs, g.outputs, range(len(g.nodes)), self._boundary, self._start)

    def reformulate(self) -> None:
        """Formulate again at the next solve: the boundary or start costs changed (a backend calibrated)."""
        self.__dict__.pop("formulation", None)

    def prices(self, costs: Mapping[tuple[str, str], float], pending: Mapping[tuple[str, str], Candidate],
               optimistic: Mapping[tuple[str, str], float]) -> dict[str, float]:
        """Option key -> cost: a measured pair's time (`costs`), else a pending pair's optimistic cost;
        either as it runs in a plan where `refills` are known (Refills.price)."""
        prices = {}
        refills = self.refills
        for key, pair in self.pairs.items():
            cost = costs.get(pair)
            if cost is None and pair in pending:
                cost = optimistic.get(pair)
            if cost is not None:
                prices[key] = cost if refills is None else refills.price(pair, cost)
        return prices

    def price(self, pair: tuple[str, str], cost: float) -> float:
        """What a kernel of `cost` seconds profiled costs in this problem's plans (Refills.price)."""
        return cost if self.refills is None else self.refills.price(pair, cost)

    def relax(self, costs: Mapping[tuple[str, str], float], pending: Mapping[tuple[str, str], Candidate],
              optimistic: Mapping[tuple[str, str], float], expected: Mapping[tuple[str, str], float] | None = None,
              uncertainty: int = 0) -> Relaxation | None:
        """The LP relaxation at these costs (blp.Formulation.relax); with `expected` costs and an
        `uncertainty` budget, each pending pair at its expected cost, of which at most `uncertainty`
        may fall to their optimistic costs (solve_until_stable)."""
        f = self.formulation
        if f is None:
            return Relaxation((), 0.0)
        if expected is None or uncertainty <= 0:
            return f.relax(self.prices(costs, pending, optimistic), self.time_limit)
        discounts = {key: max(0.0, expected[pair] - optimistic[pair]) for key, pair in self.pairs.items()
                     if pair in pending}
        return f.relax(self.prices(costs, pending, expected), self.time_limit, discounts, uncertainty)

    def solve(self, costs: Mapping[tuple[str, str], float], pending: Mapping[tuple[str, str], Candidate],
              optimistic: Mapping[tuple[str, str], float]) -> Selection:
        """The best split plan at these costs (blp.solve)."""
        f = self.formulation
        if f is None:
            return Selection((), 0.0, 0.0, 0.0, True)
        return f.solve(self.prices(costs, pending, optimistic), self.time_limit, tally=self.tally)


def solve_until_stable(problem: SplitProblem, costs: Mapping[tuple[str, str], float],
                       pending: dict[tuple[str, str], Candidate], optimistic: Mapping[tuple[str, str], float],
                       measure: Callable[[Mapping[str, Sequence[Candidate]]], None],
                       max_rounds: int, batch_size: int = 1, relax: bool = True,
                       budget: int | None = None, bar: float | None = None,
                       refine: Callable[[Sequence[tuple[str, str]]], int] | None = None,
                       exact_batch_size: int | None = None, expected: Mapping[tuple[str, str], float] | None = None,
                       uncertainty: int = 0, calibrate: Callable[[Collection[str]], bool] | None = None,
                       gap: float = 0.0, unrivalled: Collection[tuple[str, str]] = ()) -> tuple[int, bool]:
    """Solve `problem` over measured `costs` (usable kernels only; `measure` adds to them) and `optimistic`
    costs of the `pending` pairs; measure the pending pairs a solve chooses (removing them from
    `pending`) and solve again, until a solve chooses only measured kernels (stable) or `max_rounds`.
    A round measures the pending kernels the solve chose and, up to `batch_size` in all, the pending
    kernels over the same primitives with the lowest optimistic cost per primitive: the ones the next
    solve would otherwise turn to, one solve (seconds on a zoo model) per few kernels. A round that
    chose any of the `unrivalled` pairs measures what it chose alone, and one that chose nothing else
    measures them before `calibrate` (below): a large kernel's few boundaries are a small share of its
    time, so calibrating them first would seldom spare its compile.
    If every optimistic cost is at most the kernel's measured cost, the last solve's choice is the
    optimum over all measured costs: a cheaper choice would have been chosen at its lower costs.

    `relax` (the LP relaxation, blp.Formulation.relax): a round first measures the pending kernels it
    leans on, and solves exactly only once it leans on none (or the LP was not solved: None). A round
    whose kernels an exact solve chose fills its batch up to `exact_batch_size` (default `batch_size`)
    instead: an exact solve (a MILP) can cost seconds where the LP costs a tenth of one, so rivals
    measured then save solves worth more than their timing. The loop still ends only when an exact
    solve chooses measured kernels alone, or (`bar`) when the LP's cost, a lower bound on every split
    plan at these costs, is at least `bar` (the best whole model's time times the margin a split plan
    must win by: no split plan could then be kept, whatever the pending kernels measure, if their
    optimistic costs hold), or within `gap`, a fraction, below it (`_stop_gap`: where no split plan still
    to be found could beat the best whole model by more than ProfileSettings.guide_regret). That too
    counts as stable.

    `budget`: at most this many pending kernels are measured in all (those a solve chose first); once
    they are, the loop ends as if at `max_rounds`.

    `refine(picked)`: called with a round's pairs before they are measured; if it measures other
    kernels instead (returns how many: they count against `budget`) and raises `optimistic` costs
    in place, the round ends there and the next solves again, the pairs still pending.

    `calibrate(backends)`: called with a round's backends before anything is measured (refine
    included); True means their boundary costs were just calibrated (the problem was solved with
    them free, a lower bound: profile/boundaries.py Boundaries), and the round ends there: the next
    solves again, formulated at the calibrated costs.

    `expected` with `uncertainty` > 0, a budget of uncertainty (Bertsimas and Sim): optimistic costs
    for every pending kernel at once make a plan of many of them look about half its expected cost,
    where their errors, independent, would largely cancel. The relaxation prices each pending kernel
    at its `expected` cost instead, and lets at most `uncertainty` of a plan's fall to their optimistic
    costs (the largest falls: blp.Formulation.relax). Its dual theta prices each pending kernel at
    min(expected, optimistic + theta) for the exact solve; that solve choosing measured kernels alone
    then stops the loop as before, though a plan with pending kernels may then still be up to
    `uncertainty` * theta below it (the bar, the usual stop, has no such slack)."""
    rounds = spent = 0
    unrivalled = frozenset(unrivalled)
    while rounds < max_rounds and (budget is None or spent < budget):
        rounds += 1
        try:
            relaxed = problem.relax(costs, pending, optimistic, expected, uncertainty) if relax else None
            if relaxed is not None and bar is not None and relaxed.bound_s >= bar * (1 - gap):
                log.info("guided profiling: no split plan can run below %.3f ms (LP bound %.3f ms%s): stopping",
                         bar * 1e3, relaxed.bound_s * 1e3,
                         f", {1 - relaxed.bound_s / bar:.1%} below it: within the {gap:.1%} a split plan still to "
                         "be found may go unkept (ProfileSettings.guide_regret)"
                         if relaxed.bound_s < bar else "")
                return rounds, True
            fresh = _pending_in(relaxed.support, problem.pairs, pending) if relaxed is not None else []
            size = batch_size
            if not fresh:
                priced = optimistic
                if expected is not None and uncertainty > 0:
                    theta = relaxed.theta_s if relaxed is not None else 0.0
                    priced = {pair: min(expected[pair], optimistic[pair] + theta) for pair in pending}
                fresh = _pending_in(problem.solve(costs, pending, priced).chosen, problem.pairs, pending)
                size = batch_size if exact_batch_size is None else exact_batch_size
        except SelectionError as e:       # no split plan at all: measured selection keeps a whole model
            log.info("guided profiling: no split plan to guide by (%s)", e)
            return rounds, True
        if not fresh:
            return rounds, True
        # fill the batch with the kernels that compete with the chosen ones most directly: pending
        # kernels over the same primitives, cheapest optimistic cost per primitive first
        covered = set().union(*(pending[p].nodes for p in fresh))
        rivals = sorted((p for p, c in pending.items() if p not in fresh and covered.intersection(c.nodes)),
                        key=lambda p: optimistic[p] / pending[p].size)
        picked = fresh if not unrivalled.isdisjoint(fresh) else fresh + rivals[:max(0, size - len(fresh))]
        if budget is not None:
            picked = picked[:budget - spent]
        if calibrate is not None and not unrivalled.issuperset(picked) and calibrate({name for _, name in picked}):
            problem.reformulate()
            log.info("guided profiling, round %d: solving again at the boundary costs just calibrated", rounds)
            continue
        if refine is not None and (extra := refine(picked)):
            spent += extra
            log.info("guided profiling, round %d: %d kernel(s) measured first to raise the floors of the %d chosen",
                     rounds, extra, len(picked))
            continue
        spent += len(picked)
        want: dict[str, list[Candidate]] = {}
        for key, name in picked:
            want.setdefault(name, []).append(pending.pop((key, name)))
        chosen = min(len(fresh), len(picked))
        log.info("guided profiling, round %d: measuring %d kernel(s) the solve chose and %d rival(s) (%s)%s", rounds,
                 chosen, len(picked) - chosen, ", ".join(f"{n} {len(c)}" for n, c in want.items()),
                 f"; LP bound {relaxed.bound_s * 1e3:.3f} ms" + (f", bar {bar * 1e3:.3f} ms" if bar is not None else "")
                 if relaxed is not None else "")
        measure(want)
    return rounds, False


def _pending_in(chosen: Sequence[Option], pairs: Mapping[str, tuple[str, str]],
                pending: Mapping[tuple[str, str], Candidate]) -> list[tuple[str, str]]:
    return list(dict.fromkeys(pairs[o.key] for o in chosen if pairs[o.key] in pending))


def _problem_key(pools: Mapping[str, Sequence[Candidate]], models: Mapping, settings: OptimizeSettings,
                 machine: str) -> str:
    """Names one guided profiling problem: the pools, the guided backends' versions, threads, machine,
    and the guiding settings. (Not the cost models: a retrained model must not redo a finished problem.)"""
    h = hashlib.sha256()
    ps = settings.profile
    h.update(f"{machine}|{settings.threads}|{ps.guide_optimism}|{ps.guide_rounds}|{settings.accuracy}".encode())
    if ps.guide_spread_sample:
        h.update(f"|spread {ps.guide_spread_sample} {ps.guide_spread_quantile}".encode())
    if ps.guide_uncertainty:
        h.update(f"|uncertainty {ps.guide_uncertainty}".encode())
    if ps.guide_regret:
        h.update(f"|regret {ps.guide_regret}".encode())
    for name in sorted(pools):
        h.update(f"|{name}:{record_version(get_backend(name), ps)}:{name in models}".encode())
        h.update(" ".join(sorted({c.key for c in pools[name]})).encode())
    return h.hexdigest()


def _profile(graph: Graph, pools: Mapping[str, Sequence[Candidate]], db: ProfileDB, settings: OptimizeSettings,
             machine: str, source: OnnxSource | None, progress: Progress | None,
             fp32_error: float | None = None, keep: KeepKernel | None = None,
             reference: ReferenceValues | None = None, retime: Collection[tuple[str, str]] = (),
             evict: Mapping[tuple[str, str], int] | None = None) -> ProfileOutcome:
    return profile(graph, pools, db, settings.threads, machine, settings.profile, settings.accuracy, settings.seed,
                   progress, source, fp32_error, keep, reference=reference, retime=retime, evict=evict)


def touched_bytes(graph: Graph, candidate: Candidate) -> int:
    """The bytes a kernel of `candidate` reads or writes at least once: its inputs, the constants its
    primitives read, and every value they compute (an engine reusing buffers touches less, never more)."""
    return _touched(graph, candidate.inputs, candidate.nodes)


def _touched(graph: Graph, inputs: Iterable[str], nodes: Iterable[int]) -> int:
    values = set(inputs)
    for i in nodes:
        node = graph.nodes[i]
        values.update(node.inputs)
        values.add(node.output)
    return sum(t.nbytes for t in (graph.types.get(v) for v in values) if t is not None and t.is_static)


def evict_cap(settings: ProfileSettings) -> int:
    """The most a sweep before a kernel's in-plan timing reads (ProfileSettings.guide_confirm_evict x
    the last-level cache, at most guide_confirm_evict_max_bytes); 0 with eviction off."""
    if settings.guide_confirm_evict is None:
        return 0
    return min(int(settings.guide_confirm_evict * last_level_cache_bytes()), settings.guide_confirm_evict_max_bytes)


class Refills:
    """The split kernels of one model priced as they run inside its plans (korch/profile/refill.py): a
    kernel timed after a sweep of about what it finds evicted here at that time, any other at its
    profile plus its backend's expected refill. Each kernel's sweep is what the rest of the model
    touches, at most `cap` (evict_cap); the samples are the profile database's for this machine and
    threads, each backend's under its record version (`versions`), and those `add`ed (stored).

    `start`: the kernel start the BLP charges every kernel of a plan besides its cost (StartCost,
    calibrated as a small kernel after another against back to back: its engine's pool waking and
    its few bytes fetched again). A sweep's refill holds the same, so a kernel is charged only the
    refill beyond its start: its profile plus max(0, refill - start). On the Zen 4 host (32 MiB of
    last-level cache) the smallest kernels' refills after the sweep were about their engines'
    starts (onnxruntime 0.13 ms against 0.10, OpenVINO 0.43 against 0.25)."""

    def __init__(self, graph: Graph, pools: Mapping[str, Sequence[Candidate]], db: ProfileDB,
                 versions: Mapping[str, str], threads: int, machine: str, cap: int, neighbours: int,
                 start: StartCost | None = None) -> None:
        self._db, self._versions, self._threads, self._machine = db, dict(versions), threads, machine
        self._neighbours = neighbours
        self._start: StartCost = start if start is not None else (lambda backend: 0.0)
        whole = len(graph.nodes)
        total = _touched(graph, graph.inputs, range(whole))
        touched: dict[str, int] = {}
        self.kernels: dict[tuple[str, str], tuple[int, int]] = {}    # pair -> (touched, evicted) bytes
        for name, candidates in pools.items():
            for c in candidates:
                if c.size != whole:
                    if c.key not in touched:
                        touched[c.key] = touched_bytes(graph, c)
                    t = touched[c.key]
                    self.kernels[(c.key, name)] = (t, min(cap, max(total - t, 0)) if cap else 0)
        self.samples: list[RefillSample] = [s for name in self._versions
                                            for s in db.refills(name, self._versions[name], threads, machine)]
        self._price()

    def _price(self) -> None:
        self.model = RefillModel.of(self.samples, self._neighbours)
        starts = {name: self._start(name) for name in {name for _, name in self.kernels}}
        # the start is charged apart
        self.extra = {pair: max(0.0, r - starts[pair[1]]) for pair, r in self.model.refills(self.kernels).items()}
        self._latest = latest = {(s.candidate_key, s.backend): s for s in self.samples}
        self.in_plan: dict[tuple[str, str], float] = {}     # a kernel sampled: its own time after the sweep
        for pair, (_, evict) in self.kernels.items():
            s = latest.get(pair)     # (one sampled in another model, after a sweep far from this one's: predicted)
            if s is not None and evict and abs(math.log2(s.evict_bytes + 1) - math.log2(evict + 1)) <= 1:
                self.in_plan[pair] = max(s.hot_s, s.evicted_s - starts[pair[1]])

    def add(self, samples: Sequence[RefillSample]) -> None:
        """Take in and store kernels timed both ways, and price every kernel again."""
        if not samples:
            return
        self._db.put_refills(samples, self._versions, self._threads, self._machine)
        self.samples.extend(samples)
        self._price()

    def hot(self, pair: tuple[str, str], profiled: float) -> float:
        """The kernel's time back to back: its sample's, if it has one (its record may be its time
        after a sweep, from a best plan's kernels timed again), else `profiled`."""
        s = self._latest.get(pair)
        return profiled if s is None else s.hot_s

    def price(self, pair: tuple[str, str], profiled: float) -> float:
        """A split kernel of `profiled` seconds back to back, as it runs in a plan."""
        at = self.in_plan.get(pair)
        return at if at is not None else profiled + self.extra.get(pair, 0.0)

    def summary(self) -> str:
        charged = [v * 1e3 for v in self.extra.values() if v > 0]
        counts = ", ".join(f"{name} {self.model.count(name)}" for name in sorted(self._versions))
        return (f"refill samples {counts}; {len(charged)} of {len(self.kernels)} split kernel(s) charged "
                f"{statistics.median(charged) if charged else 0.0:.3f} ms median over their profiles")


def load_refills(graph: Graph, pools: Mapping[str, Sequence[Candidate]], db: ProfileDB, settings: OptimizeSettings,
                 machine: str, start: StartCost | None = None) -> Refills | None:
    """`pools`' split kernels priced with their refills beyond the kernel `start` the BLP charges
    apart (Refills), or None with eviction off (guide_confirm_evict)."""
    ps = settings.profile
    cap = evict_cap(ps)
    if not cap:
        return None
    versions = {name: record_version(get_backend(name), ps) for name in pools}
    return Refills(graph, pools, db, versions, settings.threads, machine, cap, ps.refill_neighbours, start)


def _refuse_illegal(graph: Graph, pending: dict[tuple[str, str], Candidate], records: dict[tuple[str, str], Record],
                    db: ProfileDB, settings: OptimizeSettings, machine: str) -> list[Record]:
    """A rejection, with the backend's reason, for each pending pair its backend cannot compile: stored
    (as the profiler stores them: a warm run reads it, never asks again), put in `records`, and taken
    out of `pending`. Returns them."""
    out = []
    for (key, name), cand in pending.items():
        backend = get_backend(name)
        reason = backend.supports(extract_subgraph(graph, cand))
        if reason is not None:
            out.append(Record.rejected(key, name, record_version(backend, settings.profile), settings.threads, machine,
                                       f"unsupported: {reason}", Rejection.UNSUPPORTED, code_version()))
    db.put_many(out)
    for r in out:
        records[(r.candidate_key, r.backend)] = r
        del pending[(r.candidate_key, r.backend)]
    return out


def _predicted_costs(graph: Graph, pending: Mapping[tuple[str, str], Candidate], models: Mapping,
                     settings: OptimizeSettings, db: ProfileDB | None = None) -> dict[tuple[str, str], float]:
    """Each pending pair's time as its backend's model predicts it, from the features stored in `db`
    (the pipeline stores every candidate's before profiling: computing segformer-b0's again took 3.4 s)
    or computed where none is."""
    unique = {c.key: c for c in pending.values()}
    stored = db.features(unique, FEATURES_VERSION) if db is not None else {}
    features: dict[str, Features] = {}
    for key, values in stored.items():
        try:
            features[key] = Features(values)
        except ValueError:            # a vector of another length: computed again below
            pass
    features.update(features_by_key(graph, [c for key, c in unique.items() if key not in features]))
    costs: dict[tuple[str, str], float] = {}
    for name, model in models.items():
        pairs = [pair for pair in pending if pair[1] == name]
        predicted = model.predict([features[key] for key, _ in pairs], settings.threads)
        costs.update(zip(pairs, (float(p) for p in predicted)))
    return costs


def _calibration_sample(pending: Mapping[tuple[str, str], Candidate], models: Mapping, size: int,
                        seed: int) -> dict[str, list[tuple[str, str]]]:
    """`size` random pending pairs per guided backend (in a fixed order, so a run is repeatable)."""
    rng = random.Random(seed)
    sample = {}
    for name in sorted(models):
        mine = sorted(pair for pair in pending if pair[1] == name)
        sample[name] = rng.sample(mine, min(size, len(mine)))
    return sample


def _whole_scale(graph: Graph, pools: Mapping[str, Sequence[Candidate]], models: Mapping,
                 usable: Mapping[tuple[str, str], float], settings: OptimizeSettings,
                 db: ProfileDB | None = None) -> dict[str, float]:
    """Measured / predicted for each guided backend's whole model, where it was timed and accepted: how
    fast this machine runs that backend now against what its model expects. A whole model's profile is
    pinned within ProfileSettings.precision, where the median over a random sample moved with the
    sample chosen (0.48-0.98 across seeds on segformer-b0's onnxruntime kernels, BENCHMARKS.md)."""
    whole = len(graph.nodes)
    pairs = {(c.key, name): c for name in models for c in pools.get(name, ())
             if c.size == whole and usable.get((c.key, name))}
    predicted = _predicted_costs(graph, pairs, models, settings, db)
    return {name: usable[(key, name)] / predicted[(key, name)] for key, name in pairs if predicted[(key, name)] > 0}


def _scale(records: Mapping[tuple[str, str], Record], predicted: Mapping[tuple[str, str], float],
           pairs: Sequence[tuple[str, str]]) -> float:
    """The median of measured / predicted over a random sample: how fast this machine runs right now,
    against the state it was in when the model's training profiles were taken (it drifts by tens of
    percent within minutes and by 2x across days: benchmarks/machine_drift.py)."""
    ratios = [r.median_s / predicted[p] for p in pairs if (r := records.get(p)) is not None and r.median_s]
    return statistics.median(ratios) if ratios else 1.0


def _bounds(pending: Mapping[tuple[str, str], object], predicted: Mapping[tuple[str, str], float],
            scale: Mapping[str, float], optimism: Mapping[str, float], expectation: Mapping[str, float]
            ) -> tuple[dict[tuple[str, str], float], dict[tuple[str, str], float]]:
    """Each pending pair's optimistic and expected cost: its prediction rescaled to the machine, times its
    backend's optimism, and times its expectation (never below the optimism)."""
    optimistic, expected = {}, {}
    for pair in pending:
        name = pair[1]
        rescaled = predicted[pair] * scale[name]
        optimistic[pair] = rescaled * optimism[name]
        expected[pair] = rescaled * max(expectation[name], optimism[name])
    return optimistic, expected


def _spread_ratios(measured: Mapping[tuple[str, str], float], predicted: Mapping[tuple[str, str], float],
                   scale: Mapping[str, float], sample: Mapping[str, Sequence[tuple[str, str]]]) -> dict[str, list[float]]:
    """Per backend, measured / rescaled predicted over the pairs of its random `sample` measured and accepted."""
    return {name: [measured[p] / (predicted[p] * scale[name]) for p in pairs
                   if p in measured and predicted.get(p, 0) > 0 and scale.get(name, 0) > 0]
            for name, pairs in sample.items()}


def _spread_optimism(measured: Mapping[tuple[str, str], float], predicted: Mapping[tuple[str, str], float],
                     scale: Mapping[str, float], sample: Mapping[str, Sequence[tuple[str, str]]],
                     quantile: float, floor: float) -> dict[str, float]:
    """Per backend, the `quantile` of its sample's ratios (_spread_ratios) within [`floor`, 1]: how far
    below its rescaled prediction a kernel of this model measures, seldom. A backend whose sample has
    fewer than two ratios gets `floor`."""
    return {name: spread_optimism(ratios, quantile, floor)
            for name, ratios in _spread_ratios(measured, predicted, scale, sample).items()}


def _spread_expectation(measured: Mapping[tuple[str, str], float], predicted: Mapping[tuple[str, str], float],
                        scale: Mapping[str, float], sample: Mapping[str, Sequence[tuple[str, str]]],
                        floor: float) -> dict[str, float]:
    """Per backend, the median of its sample's ratios, at least `floor`: what a kernel of this model
    measures against its rescaled prediction, typically (the budget of uncertainty's expected cost).
    A backend whose sample has fewer than two ratios gets 1, the rescaled prediction itself."""
    return {name: 1.0 if len(ratios) < 2 else max(floor, float(np.median(ratios)))
            for name, ratios in _spread_ratios(measured, predicted, scale, sample).items()}
