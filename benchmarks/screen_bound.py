"""How far a short screening profile of a kernel says where its full profile lands.

    python benchmarks/screen_bound.py MODEL [--threads 2] [--cache DIR] [--sample 400] [--runs 5]
                                      [--backend onnxruntime] [--rounds 2]

A full profile (ProfileSettings as `korch optimize` uses them: a cache sweep before each call, runs
until the median is pinned within 3% or 20 ms have passed) takes ~20 ms a kernel, most of it sweeps
and calls of kernels that never come near the plan. A screen is `--runs` swept calls after the same
warmup, with no time floor and no precision test. Each round profiles `--sample` unique candidates
of MODEL (spread over the pool, the whole model left out) on `--backend` into a fresh database,
screen then full, in one process; the kernels are compiled and checked in both.

Printed per round: the seconds of each pass's timing phase, and the ratio of each kernel's full
median to its screen's median and to its screen's 10th percentile, as quantiles, and the fraction of
kernels whose full median fell below m x the screen's median: the kernels that a screen would wrongly
rule out if it were trusted as a bound with margin m.

`--cache DIR`: where the zoo model's export is cached (as `korch optimize --cache`).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def _q(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * (len(ordered) - 1) + 0.5))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--cache", type=Path, default=None)
    parser.add_argument("--sample", type=int, default=400)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--backend", default="onnxruntime")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()

    from korch.frontend.regions import OnnxSource
    from korch.pipeline import enumerate_all, profile_pools, run_fission
    from korch.profile.database import ProfileDB, Status, machine_fingerprint
    from korch.profile.profiler import profile
    from korch.settings import OptimizeSettings

    settings = OptimizeSettings(threads=args.threads)
    fissioned = run_fission(args.model, cache_dir=args.cache)
    graph = fissioned.graph
    source = OnnxSource(fissioned.model, dict(fissioned.value_map or {}))
    pool = profile_pools(graph, enumerate_all(graph, settings), settings)[args.backend]
    unique = [c for c in {c.key: c for c in pool}.values() if c.size < len(graph.nodes)]
    sample = unique[:: max(1, len(unique) // args.sample)][: args.sample]
    full = replace(settings.profile, watch_interval_s=None, compile_threads=1)
    screen = replace(full, repeats=args.runs, min_seconds=0.0, precision=None, whole_model_max_seconds=None)
    machine = machine_fingerprint()
    print(f"{args.model}: {len(sample)} of {len(unique)} unique {args.backend} candidates, {args.threads} threads, "
          f"screen of {args.runs} runs")
    print("| round | pass | timing s | kernels timed |")
    print("|---:|---|---:|---:|")
    ratios_med: list[float] = []
    ratios_p10: list[float] = []
    for k in range(1, args.rounds + 1):
        got = {}
        for name, ps in (("screen", screen), ("full", full)):
            with tempfile.TemporaryDirectory() as tmp, ProfileDB(Path(tmp) / "p.sqlite") as db:
                out = profile(graph, {args.backend: sample}, db, args.threads, machine, ps, settings.accuracy,
                              settings.seed, source=source)
            got[name] = {key: r for (key, _), r in out.records.items() if r.status is Status.OK and r.median_s}
            print(f"| {k} | {name} | {out.seconds.get(f'{args.backend} timing', 0.0):.1f} | {len(got[name])} |",
                  flush=True)
            time.sleep(1.0)
        for key, r in got["full"].items():
            s = got["screen"].get(key)
            if s is not None:
                ratios_med.append(r.median_s / s.median_s)
                ratios_p10.append(r.median_s / s.p10_s)
    print(f"\nfull median over the screen's, {len(ratios_med)} kernels over {args.rounds} round(s)")
    print("| over | p1 | p5 | p10 | p50 | p90 | below 1.0x | below 0.9x | below 0.8x |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for label, ratios in (("screen median", ratios_med), ("screen p10", ratios_p10)):
        below = [sum(x < m for x in ratios) / len(ratios) for m in (1.0, 0.9, 0.8)]
        print(f"| {label} | " + " | ".join(f"{_q(ratios, q):.3f}" for q in (0.01, 0.05, 0.1, 0.5, 0.9)) + " | "
              + " | ".join(f"{100 * b:.1f}%" for b in below) + " |")


if __name__ == "__main__":
    main()
