"""How well korch's cost models rank kernels they have not seen: leave-one-model-out over the zoo.

    python benchmarks/costmodel_quality.py collect --cache DIR [--threads 2] [--inductor-sample N] [MODEL ...]
    python benchmarks/costmodel_quality.py evaluate --cache DIR [--json OUT] [--peaks GFLOPS GBPS]
    python benchmarks/costmodel_quality.py noise --cache DIR [--backends B ...] MODEL  # the ceiling timing noise sets

`collect` profiles each model's candidates exactly as `korch optimize` does (same pools, same
settings; profiles and features go into DIR/profiles.sqlite), without selecting a plan. `evaluate`
holds out one model at a time: each backend's cost model is trained on the kernels never seen in
that model and ranks the kernels seen in it. It prints, per backend and held-out model, the
pairwise comparison accuracy (PCA) of the roofline prior alone and of prior + learned correction.
Kernels shared by two models count as the held-out model's, so nothing it is tested on was learned.
Only profiles of each engine as korch runs it now count (costmodel.model.current_rows), each key's
newest: a database collected before an engine's version changed is collected again first.
Inductor's pool is its budget (mostly single linears and linears with small epilogues); `collect
--inductor-sample N` adds N of its kernels drawn at random from every small candidate, so its
cost model is trained and tested on the population guided profiling would rank.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from korch.backends import get_backend  # noqa: E402
from korch.candidates.candidate import Candidate  # noqa: E402
from korch.costmodel import FEATURES_VERSION, MachinePeaks, pairwise_accuracy  # noqa: E402
from korch.costmodel.model import current_rows, fp32_lanes  # noqa: E402
from korch.costmodel.quality import leave_one_model_out  # noqa: E402
from korch.frontend.regions import OnnxSource  # noqa: E402
from korch.ir.graph import Graph  # noqa: E402
from korch.pipeline import (  # noqa: E402
    CandidateSet,
    candidate_universe,
    enumerate_all,
    model_label,
    profile_pools,
    remember_features,
    run_fission,
)
from korch.profile.database import DB_FILENAME, ProfileDB, machine_fingerprint  # noqa: E402
from korch.profile.profiler import profile, record_version  # noqa: E402
from korch.settings import OptimizeSettings, ProfileSettings  # noqa: E402

DEFAULT_MODELS = ["yolox-nano", "efficientvit-b1", "candy", "segformer-b0", "vit-b16", "gpt2-small", "yolov4",
                  "bert-base"]
BACKENDS = ("onnxruntime", "inductor", "openvino")


def collect(args: argparse.Namespace) -> None:
    settings = OptimizeSettings(threads=args.threads, backends=BACKENDS,
                                profile=replace(ProfileSettings(), inductor_budget=args.inductor_budget))
    machine = machine_fingerprint()
    with ProfileDB(Path(args.cache) / DB_FILENAME) as db:
        for name in args.models:
            t0 = time.perf_counter()
            fissioned = run_fission(name, cache_dir=args.cache, rewrite=settings.rewrites, seed=settings.seed,
                                    accuracy=settings.accuracy)         # the graph `korch optimize` profiles
            source = OnnxSource(fissioned.model, dict(fissioned.value_map or {}))
            cands = enumerate_all(fissioned.graph, settings)
            pools = sampled_pools(fissioned.graph, cands, settings, args.inductor_sample)
            remember_features(db, model_label(name), fissioned.graph, candidate_universe(cands, settings))
            if args.features_only:          # profiles already there: only (re)compute the feature vectors
                print(f"{name}: features stored, {time.perf_counter() - t0:.0f} s", flush=True)
                continue
            outcome = profile(fissioned.graph, pools, db, settings.threads, machine, settings.profile,
                              settings.accuracy, settings.seed, None, source)
            print(f"{name}: {outcome.measured} measured, {outcome.stored} stored, "
                  f"{time.perf_counter() - t0:.0f} s", flush=True)


def sampled_pools(graph: Graph, cands: CandidateSet, settings: OptimizeSettings, size: int) -> dict[str, list[Candidate]]:
    """`korch optimize`'s profile pools, Inductor's with `size` more unique kernels drawn at random
    from the model's small candidates beyond its budget (seed `settings.seed`): the budget takes single linear primitives and the kernels saving most bytes first,
    so its 44 kernels per model are mostly one linear with small epilogues (bert-base: 28 of 44 one
    768 x 3072 linear), too alike for a pairwise ranking to say much; a random draw is the population
    guided profiling would rank. Every candidate of a drawn key joins (they share one profile)."""
    pools = profile_pools(graph, cands, settings)
    if size and "inductor" in pools:
        keys = sorted({c.key for c in cands.small} - {c.key for c in pools["inductor"]})
        drawn = set(random.Random(settings.seed).sample(keys, min(size, len(keys))))
        pools["inductor"] += [c for c in cands.small if c.key in drawn]
    return pools


def noise(args: argparse.Namespace) -> None:
    """The ceiling on PCA that timing noise sets: a random sample of a model's timed kernels measured
    again, as they were measured the first time, and the PCA of one measurement against the other."""
    settings = OptimizeSettings(threads=args.threads, backends=BACKENDS)
    machine = machine_fingerprint()
    rng = random.Random(0)
    fissioned = run_fission(args.model, cache_dir=args.cache, rewrite=settings.rewrites, seed=settings.seed,
                            accuracy=settings.accuracy)
    source = OnnxSource(fissioned.model, dict(fissioned.value_map or {}))
    cands = enumerate_all(fissioned.graph, settings)
    pools = sampled_pools(fissioned.graph, cands, settings, args.inductor_sample)
    print("| backend | kernels | PCA of a second measurement against the first | median |second/first - 1| |")
    print("|---|---:|---:|---:|")
    with ProfileDB(Path(args.cache) / DB_FILENAME) as db, tempfile.TemporaryDirectory() as tmp, \
            ProfileDB(Path(tmp) / DB_FILENAME) as again:
        for backend in args.backends:
            reps = {c.key: c for c in pools[backend] if c.size < len(fissioned.graph.nodes)}
            first = db.get_many(list(reps), backend, record_version(get_backend(backend), settings.profile),
                                settings.threads, machine)
            timed = sorted(k for k, r in first.items() if r.median_s is not None)
            sample = rng.sample(timed, min(args.sample, len(timed)))
            out = profile(fissioned.graph, {backend: [reps[k] for k in sample]}, again, settings.threads, machine,
                          settings.profile, settings.accuracy, settings.seed, None, source)
            pairs = [(first[k].median_s, out.records[(k, backend)].median_s) for k in sample
                     if out.records[(k, backend)].median_s is not None]
            a, b = zip(*pairs)
            change = statistics.median(abs(y / x - 1) for x, y in pairs)
            print(f"| {backend} | {len(pairs)} | {pairwise_accuracy(b, a):.3f} | {change * 100:.1f}% |", flush=True)


def evaluate(args: argparse.Namespace) -> None:
    machine = machine_fingerprint()
    # Fixed peaks make two evaluations comparable: the probe reads differently from run to run, and the
    # learned PCAs moved by up to 0.015 with it (BENCHMARKS.md).
    peaks = MachinePeaks(args.peaks[0] * 1e9, args.peaks[1] * 1e9, fp32_lanes()) if args.peaks else MachinePeaks.measure()
    print(f"peaks: {peaks.flops_per_s_per_thread / 1e9:.1f} GFLOP/s per thread, {peaks.bytes_per_s / 1e9:.1f} GB/s")
    results = []
    with ProfileDB(Path(args.cache) / DB_FILENAME) as db:
        print("| backend | held-out model | kernels tested | trained on | PCA prior | PCA learned | "
              "measured < 0.5 x rescaled prediction | measured < the spread sample's optimism x rescaled prediction |")
        print("|---|---|---:|---:|---:|---:|---:|---:|")
        for backend in BACKENDS:
            rows = current_rows(db.timed_with_features(backend, machine, FEATURES_VERSION),
                                get_backend(backend).version)
            ps = ProfileSettings()
            for r in leave_one_model_out(rows, backend, machine, peaks, optimism=ps.guide_optimism,
                                         sample=ps.guide_sample, by_whole=ps.guide_scale_by_whole,
                                         spread=ps.guide_spread_sample, quantile=ps.guide_spread_quantile):
                results.append(asdict(r))
                print(f"| {backend} | {r.model} | {r.test_rows} | {r.train_rows} | {r.pca_prior:.3f} | "
                      f"{r.pca_learned:.3f} | {r.below_optimism * 100:.1f}% | {r.below_spread * 100:.1f}% |",
                      flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": machine, "results": results}, indent=1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("collect")
    c.add_argument("--cache", required=True)
    c.add_argument("--threads", type=int, default=2)
    c.add_argument("--inductor-budget", type=int, default=ProfileSettings().inductor_budget)
    c.add_argument("--inductor-sample", type=int, default=0, metavar="N",
                   help="also profile N unique Inductor kernels drawn at random beyond its budget")
    c.add_argument("--features-only", action="store_true",
                   help="store the current feature vectors of models already profiled (after a feature change)")
    c.add_argument("models", nargs="*", default=DEFAULT_MODELS)
    e = sub.add_parser("evaluate")
    e.add_argument("--cache", required=True)
    e.add_argument("--json")
    e.add_argument("--peaks", type=float, nargs=2, metavar=("GFLOPS", "GBPS"),
                   help="the prior's peaks, GFLOP/s per thread and GB/s, instead of measuring them now")
    n = sub.add_parser("noise")
    n.add_argument("--cache", required=True)
    n.add_argument("--threads", type=int, default=2)
    n.add_argument("--sample", type=int, default=300)
    n.add_argument("--backends", nargs="+", default=["onnxruntime", "openvino"])
    n.add_argument("--inductor-sample", type=int, default=0, metavar="N",
                   help="Inductor's kernels drawn beyond its budget as `collect --inductor-sample N` drew them")
    n.add_argument("model")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    {"collect": collect, "evaluate": evaluate, "noise": noise}[args.command](args)


if __name__ == "__main__":
    main()
