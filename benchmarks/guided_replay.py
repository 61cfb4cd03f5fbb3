"""Guided profiling replayed over a model's exhaustive profiles: how many kernels it measures at each
optimism, and how far its split plan is from the one profiling everything finds, without noise.

    python benchmarks/guided_replay.py --cache DIR [--threads 2] MODEL [--optimism 0.5 0.8 1.0] [--batch 40 200] [--batch-exact 40]
        [--rounds N] [--sample 12 32] [--seed 0 1 2] [--scale sample whole] [--relax no|yes|both] [--bar no|yes|both]
        [--train-on CACHE ... [--hold-out]] [--peaks GFLOPS GBPS] [--regret 0 0.03]

DIR is a cache in which MODEL was optimized with every candidate profiled (a cold `korch optimize`
into an empty cache). The replay runs guided profiling's loop as if a new machine were guided by
its roofline priors (each guided backend predicted by its prior alone; with `--train-on`, by a model
learned from other caches' profiles instead: other models profiled on this machine before, the model
replayed held out; `--train-on DIR --hold-out`: from DIR's profiles of kernels never seen in MODEL),
but "measuring" a kernel reads its stored record instead of compiling and timing
it. Predictions are rescaled as guided profiling rescales them: `--scale sample` by the median over a
random sample of `--sample` pairs per backend, `--scale whole` by each backend's whole model (the
default, ProfileSettings.guide_scale_by_whole); the replay prints both, and the median over every
timed pair. For each `guide_optimism` (the factor on each unmeasured kernel's rescaled prediction)
it prints the rounds, the pairs measured out of the legal ones, how long their kernels run to be
timed (warm-up and repeats at their stored medians: the part of profiling that depends on which
kernels are measured), the solver's seconds, and the split
plan kept (over measured kernels) against the exhaustive optimum, both in profiled (predicted) time:
the regret of guidance before any engine runs. A replay cannot see a kernel the exhaustive profiles
lack, and a real run also pays for measuring (BENCHMARKS.md has both). The roofline prior divides by
the machine's peaks, measured once (printed; `--peaks` gives them, so that replays compare: two
measurements on this noisy host moved the whole-model scales by up to 1.8x).

`--bar yes`: the loop also stops once the LP relaxation at those costs cannot run below the best
whole-model profile (solve_until_stable's `bar`, which profile_last gives Inductor's rounds), or
once no split plan could beat the best whole model by more than `--regret` (ProfileSettings.guide_regret;
0: the bar alone). Then
the regret that matters is the plan's: the better of the split plan kept and the best whole model,
against the better of the exhaustive optimum and that whole model ("plan regret").
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from korch.api import default_backends  # noqa: E402
from korch.backends import get_backend  # noqa: E402
from korch.costmodel.features import FEATURES_VERSION  # noqa: E402
from korch.costmodel.model import CostModel, MachinePeaks, model_path, read_model, train  # noqa: E402
from korch.pipeline import candidate_universe, enumerate_all, profile_pools, run_fission  # noqa: E402
from korch.profile.boundaries import boundary_model  # noqa: E402
from korch.profile.database import DB_FILENAME, ProfileDB, Rejection, Status, machine_fingerprint  # noqa: E402
from korch.profile.guided import (  # noqa: E402
    SplitProblem,
    _bar,
    _bounds,
    _calibration_sample,
    _predicted_costs,
    _scale,
    _spread_expectation,
    _spread_optimism,
    _stop_gap,
    _whole_scale,
    solve_until_stable,
)
from korch.profile.profiler import accepted, record_version  # noqa: E402
from korch.profile.timing import summarize  # noqa: E402
from korch.select.blp import SelectionError  # noqa: E402
from korch.settings import OptimizeSettings  # noqa: E402


def replay(model: str, cache: Path, threads: int, optimisms: list[float], batches: list[int] | None = None,
           relaxes: tuple[bool, ...] = (False,), bars: tuple[bool, ...] = (False,), rounds: int | None = None,
           samples: list[int] | None = None, seeds: list[int] | None = None, exact_batch: int | None = None,
           scales: tuple[str, ...] = ("whole",), train_on: list[Path] | None = None,
           peaks: MachinePeaks | None = None, spreads: list[int] | None = None, quantile: float | None = None,
           uncertainties: list[int] | None = None, gaps: list[float] | None = None, hold_out: bool = False) -> None:
    settings = OptimizeSettings(threads=threads, backends=default_backends())
    ps = settings.profile
    max_rounds = rounds or ps.guide_rounds
    machine = machine_fingerprint()
    fissioned = run_fission(model, None, cache_dir=cache, rewrite=settings.rewrites, seed=settings.seed,
                            accuracy=settings.accuracy)         # the graph `korch optimize` profiles
    graph = fissioned.graph
    whole = len(graph.nodes)
    cands = enumerate_all(graph, settings)
    pools = profile_pools(graph, cands, settings)
    universe = candidate_universe(cands, settings)
    guided = [name for name in pools if name in ps.guided_backends]
    with ProfileDB(cache / DB_FILENAME) as db:
        truth = {}
        for name in pools:
            keys = list({c.key for c in (universe[name] if name in guided else pools[name])})
            stored = db.get_many(keys, name, record_version(get_backend(name), ps), threads, machine)
            truth.update({(key, name): r for key, r in stored.items()})
        boundaries = boundary_model(db, settings.backends, threads, machine, settings.calibration, ps.cold_cache)
    whole_key = next((c.key for c in pools.get("onnxruntime", ()) if c.size == whole), None)
    whole_ort = truth.get((whole_key, "onnxruntime"))          # its error sets the tolerance, as profiling's does
    tolerance = settings.accuracy.tolerance(whole_ort.error if whole_ort is not None and whole_ort.error else 0.0)
    usable_all = {pair: r.median_s for pair, r in truth.items() if accepted(r, tolerance) and r.median_s}
    run_pools = {name: (universe[name] if name in guided else pools[name]) for name in pools}
    legal = {}
    for name in guided:
        for c in universe[name]:
            r = truth.get((c.key, name))
            if c.size == whole or r is None:
                continue
            if r.status is Status.REJECTED and r.kind is Rejection.UNSUPPORTED:
                continue
            legal.setdefault((c.key, name), c)
    missing = sum(1 for name in guided for c in universe[name] if (c.key, name) not in truth)
    models = {}
    if peaks is None:
        saved = [m for name in guided if (m := read_model(model_path(cache, name, machine), name, machine))]
        peaks = saved[0].peaks if saved else MachinePeaks.measure()
    print(f"peaks: {peaks.flops_per_s_per_thread / 1e9:.2f} GFLOP/s per thread, {peaks.bytes_per_s / 1e9:.2f} GB/s")
    for name in guided:
        models[name] = CostModel(name, machine, peaks)
        if train_on:
            rows = []
            for other in train_on:
                with ProfileDB(other / DB_FILENAME) as odb:
                    rows += [r for r in odb.timed_with_features(name, machine, FEATURES_VERSION)
                             if not (hold_out and model in r.models)]
            models[name] = train(rows, name, machine, peaks, settings.cost_model)
            print(f"{name}: learned from {models[name].trained_rows} kernels of {len(train_on)} other cache(s)"
                  + (f", none seen in {model}" if hold_out else "")
                  + ("" if models[name].booster is not None else " (too few: the prior alone)"))
    predicted = _predicted_costs(graph, legal, models, settings)

    def boundary(p: str, c: str, v: str) -> float:
        return boundaries.cost(p, c, graph.types[v])

    # each kernel's engine start charged, as guided profiling charges it
    problem = SplitProblem(graph, run_pools, boundary, boundaries.start, settings.selection.solver_time_limit_s)
    best = problem.solve(usable_all, {}, {}).cost
    print(f"{model}: {len(legal)} legal guided pairs ({missing} without a stored record, left out); "
          f"exhaustive split optimum {best * 1e3:.3f} ms")
    wholes = [usable_all[(c.key, name)] for name, cs in pools.items() for c in cs
              if c.size == whole and (c.key, name) in usable_all]
    best_whole = min(wholes, default=None)
    print(f"best whole model {best_whole * 1e3:.3f} ms" if best_whole is not None else "no whole model profiled")
    by_whole = _whole_scale(graph, run_pools, models, usable_all, settings)
    for name in sorted(models):
        ratios = [usable_all[p] / predicted[p] for p in legal if p[1] == name and p in usable_all and predicted[p]]
        if ratios:
            q = summarize(ratios)
            print(f"{name}: measured / predicted over all {len(ratios)} timed legal pairs: median {q.median_s:.2f} "
                  f"(p10-p90 {q.p10_s:.2f}-{q.p90_s:.2f}); its whole model: "
                  + (f"{by_whole[name]:.2f}" if name in by_whole else "not timed"))
    quantile = ps.guide_spread_quantile if quantile is None else quantile
    print("| optimism | spread sample | uncertainty | batch | LP first | bar (regret) | sample (seed) | scale | rounds | stable | "
          "measured / legal | kernels run s | solver s | split plan kept ms | regret (predicted) | plan regret |")
    print("|---:|---|---:|---:|---|---|---:|---|---:|---|---:|---:|---:|---:|---:|---:|")
    runs = [(o, b, r, w, n, e, k, d, u, g) for o in optimisms for b in (batches or [ps.guide_batch]) for r in relaxes
            for w in bars for k in scales for d in (spreads if spreads is not None else [ps.guide_spread_sample])
            for u in (uncertainties if uncertainties is not None else [ps.guide_uncertainty])
            for g in (gaps if gaps is not None else [ps.guide_regret])
            for n, e in ([(None, e) for e in (seeds or [settings.seed])] if k == "whole" else
                         [(n, e) for n in (samples or [ps.guide_sample]) for e in (seeds or [settings.seed])])]
    for optimism, batch, relaxed, barred, size, seed, by, spread, uncertainty, gap in runs:
        pending = dict(legal)
        usable = {pair: t for pair, t in usable_all.items() if pair[1] not in guided or pair not in legal}
        unscaled = {name: m for name, m in models.items() if by == "sample" or name not in by_whole}
        seed = settings.seed if seed is None else seed
        asked, running = 0, 0.0

        def take(pairs) -> None:
            """'Measure' these pairs: read their stored records."""
            nonlocal asked, running
            for pair in pairs:
                pending.pop(pair, None)
                asked += 1
                if pair in usable_all:
                    usable[pair] = usable_all[pair]
                    running += _running_s(usable_all[pair], ps)

        def measure(want) -> None:
            take([(c.key, name) for name, cs in want.items() for c in cs])

        sample = _calibration_sample(pending, unscaled, size or ps.guide_sample, seed)
        for pairs in sample.values():
            take(pairs)
        scale = {name: _scale(truth, predicted, pairs) for name, pairs in sample.items()}
        scale.update({name: s for name, s in by_whole.items() if name not in scale})
        factor = dict.fromkeys(models, optimism)
        expectation = dict.fromkeys(models, 1.0)
        if spread:                            # each backend's optimism from a random sample's spread
            drawn = _calibration_sample(pending, models, spread, seed + 1)
            for pairs in drawn.values():
                take(pairs)
            factor = _spread_optimism(usable_all, predicted, scale, drawn, quantile, optimism)
            expectation = _spread_expectation(usable_all, predicted, scale, drawn, optimism)
        optimistic, expected = _bounds(pending, predicted, scale, factor, expectation)

        t0 = time.perf_counter()
        rounds, stable = solve_until_stable(problem, usable, pending, optimistic, measure, max_rounds, batch,
                                            relaxed or barred, bar=_bar(pools, usable_all, whole, settings) if barred else None,
                                            exact_batch_size=ps.guide_batch_exact if exact_batch is None else exact_batch,
                                            expected=expected, uncertainty=uncertainty,
                                            gap=_stop_gap(replace(settings, profile=replace(ps, guide_regret=gap))))
        seconds = time.perf_counter() - t0
        try:
            kept = problem.solve(usable, {}, {}).cost
            kept_text, regret = f"{kept * 1e3:.3f}", f"{kept / best - 1:+.2%}"
        except SelectionError:
            kept, kept_text, regret = float("inf"), "none", "-"
        ceiling = best_whole if best_whole is not None else float("inf")
        plan_regret = f"{min(kept, ceiling) / min(best, ceiling) - 1:+.2%}"
        scales = ", ".join(f"{name} {scale[name]:.2f}" for name in sorted(scale))
        spread_text = (f"{spread} (seed {seed + 1}): " + ", ".join(f"{name} {factor[name]:.2f} ({expectation[name]:.2f})"
                                                                   for name in sorted(factor)) if spread else "-")
        print(f"| {optimism:g} | {spread_text} | {uncertainty} | {batch} | {'yes' if relaxed or barred else 'no'} | {f'yes (regret {gap:.0%})' if barred else 'no'} | "
              f"{'whole model' if size is None else f'{size} ({seed})'} | {scales} | {rounds} | "
              f"{'yes' if stable else 'no (round limit)'} | {asked} / {len(legal)} "
              f"({asked / max(1, len(legal)):.0%}) | {running:.0f} | {seconds:.0f} | {kept_text} | {regret} | {plan_regret} |", flush=True)


def _running_s(median_s: float, ps) -> float:
    """How long the profiler runs a kernel of this median to time it: its warm-up calls, then its
    repeats or `min_seconds` of calls, whichever is longer (compiles, checks and retries not counted)."""
    return ps.warmup * median_s + max(ps.repeats * median_s, ps.min_seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cache", type=Path, required=True)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--optimism", type=float, nargs="+", default=[0.5, 0.8, 1.0])
    parser.add_argument("--batch", type=int, nargs="+", default=None,
                        help="guide_batch values to replay (default: ProfileSettings.guide_batch)")
    parser.add_argument("--relax", choices=["no", "yes", "both"], default="no",
                        help="each round measures the LP relaxation's support first (solve_until_stable's relax)")
    parser.add_argument("--bar", choices=["no", "yes", "both"], default="no",
                        help="stop once no split plan could beat the best whole model (implies the LP first)")
    parser.add_argument("--rounds", type=int, default=None,
                        help="the loop's round limit (default: ProfileSettings.guide_rounds)")
    parser.add_argument("--batch-exact", type=int, default=None,
                        help="a round an exact solve chose measures up to this many (default: ProfileSettings.guide_batch_exact)")
    parser.add_argument("--sample", type=int, nargs="+", default=None,
                        help="random pairs per backend that rescale its predictions (default: ProfileSettings.guide_sample)")
    parser.add_argument("--seed", type=int, nargs="+", default=None, help="the sample's seeds (default: the settings' seed)")
    parser.add_argument("--scale", nargs="+", choices=["sample", "whole"], default=["whole"],
                        help="rescale predictions by a random sample's median, or by each backend's whole model")
    parser.add_argument("--train-on", type=Path, nargs="+", default=None,
                        help="caches of other models: guide by a model learned from their profiles, not the prior")
    parser.add_argument("--hold-out", action="store_true",
                        help="with --train-on: learn from none of the kernels seen in MODEL (a cache that profiled "
                             "every model, MODEL held out of its own cost models)")
    parser.add_argument("--peaks", type=float, nargs=2, metavar=("GFLOPS", "GBPS"), default=None,
                        help="the roofline prior's peaks: GFLOP/s per thread and GB/s (default: measured)")
    parser.add_argument("--spread", type=int, nargs="+", default=None,
                        help="random pairs per backend whose spread sets its optimism, 0 for the fixed --optimism "
                             "(default: ProfileSettings.guide_spread_sample)")
    parser.add_argument("--uncertainty", type=int, nargs="+", default=None,
                        help="budgets of uncertainty: how many unmeasured kernels of a plan may fall to their optimistic "
                             "cost, the rest at the spread's median (0: all of them; default: "
                             "ProfileSettings.guide_uncertainty)")
    parser.add_argument("--quantile", type=float, default=None,
                        help="the spread's quantile (default: ProfileSettings.guide_spread_quantile)")
    parser.add_argument("--regret", type=float, nargs="+", default=None, dest="gap",
                        help="with --bar: stop once no split plan could beat the best whole model by more than this "
                             "fraction (default: ProfileSettings.guide_regret)")
    parser.add_argument("model")
    args = parser.parse_args()
    choice = {"no": (False,), "yes": (True,), "both": (False, True)}
    replay(args.model, args.cache, args.threads, args.optimism, args.batch, choice[args.relax], choice[args.bar],
           args.rounds, args.sample, args.seed, args.batch_exact, tuple(args.scale), args.train_on,
           MachinePeaks(args.peaks[0] * 1e9, args.peaks[1] * 1e9) if args.peaks else None, args.spread, args.quantile,
           args.uncertainty, args.gap, args.hold_out)


if __name__ == "__main__":
    main()
