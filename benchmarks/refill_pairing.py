"""A kernel's refill measured two ways, round after round: its two sides taken apart, and in turn.

    python benchmarks/refill_pairing.py WORK MODEL [--threads 2] [--per-backend 12] [--rounds 6]
                                        [--repeats 7] [--backends onnxruntime,openvino]

A refill (korch/profile/refill.py) is a kernel's time after a sweep of what a plan's other kernels
touch, less its time back to back. Until this script's commit, guided profiling took the second side
from the kernel's profile, timed earlier in the run; since it, both sides come from one timing whose
calls alternate (timing.measure_beside). On a machine whose speed moves (slow spells, the host moving
the vCPUs apart), the first way reads those moves as refills.

WORK is a zoo_bench work directory (WORK/profile-cache holds MODEL's profiles). `--per-backend`
kernels per backend, spread over their profiled times, are compiled once (threads placed as the
profiler places them). Each round makes two passes over all of them, as optimize does minutes
apart: the first times each back to back (its "profile"); the second times each with
`measure_beside`. Per kernel and round, two refills: after-the-sweep of the second pass less the first
pass's back-to-back time (apart), and less the second pass's own back-to-back time (in turn). The
same after-the-sweep series serves both, so they differ only in where the back-to-back side was taken.

Printed per backend: over kernels, the median of each kernel's refill (median over rounds), and the
median and p90 of each kernel's spread of refills over rounds (p90 - p10 of its rounds), each way;
then each round's median refill over the kernels, each way (what prices every split kernel that was
not sampled: RefillModel's neighbours). Nothing is written.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def _q(values: list[float], f: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(f * len(ordered)))]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("work", type=Path)
    p.add_argument("model")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--per-backend", type=int, default=12)
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--backends", default="onnxruntime,openvino")
    args = p.parse_args(argv)

    from plan_breakdown import load_work
    from refill_sample import spread_jobs

    from korch.backends import CompileOptions
    from korch.backends.placement import pinned, placement
    from korch.profile.guided import evict_cap
    from korch.profile.profiler import _streamed_values, compile_candidate
    from korch.profile.timing import SETTLE_SECONDS, PlanEviction, measure, measure_beside
    from korch.verify import random_feeds

    work = load_work(args.work, args.model, args.threads)
    settings, graph, source = work.settings, work.graph, work.source
    sweep_bytes = evict_cap(settings.profile)
    jobs, _ = spread_jobs(work, args.backends.split(","), args.per_backend, args.threads)
    where = placement(args.threads)
    options = CompileOptions(threads=args.threads, worker_cpus=where.workers if where is not None else ())
    runs = []
    for job, env in _streamed_values(graph, random_feeds(graph, settings.seed), jobs):
        try:          # (not on the pinned caller: an engine's pool made now would inherit its one CPU)
            kernel = compile_candidate(graph, job.candidate, job.backend, options, source)
        except Exception as e:  # noqa: BLE001  (a kernel that no longer compiles is left out)
            print(f"  {job.backend} {job.candidate.key[:12]}: {type(e).__name__}: {e}", file=sys.stderr)
            continue
        inputs = [np.asarray(env[i], order="C").copy() for i in job.candidate.inputs]
        runs.append((job, kernel, inputs))
    time.sleep(SETTLE_SECONDS)
    apart: dict[int, list[float]] = {k: [] for k in range(len(runs))}
    in_turn: dict[int, list[float]] = {k: [] for k in range(len(runs))}
    with PlanEviction(sweep_bytes) as eviction, pinned(where.caller if where is not None else None):
        sweep = eviction.sweep(sweep_bytes)
        assert sweep is not None
        for r in range(args.rounds):
            t0 = time.perf_counter()
            first = [measure(lambda k=kernel, x=inputs: k.run(x), warmup=2, repeats=args.repeats,
                             min_seconds=0.0).median_s for _, kernel, inputs in runs]
            for k, (_, kernel, inputs) in enumerate(runs):
                back, swept = measure_beside(lambda k_=kernel, x=inputs: k_.run(x), sweep, warmup=1,
                                             repeats=args.repeats, min_seconds=0.0)
                apart[k].append(swept.median_s - first[k])
                in_turn[k].append(swept.median_s - back.median_s)
            print(f"round {r + 1}/{args.rounds}: {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)

    print(f"{args.model}: {len(runs)} kernels, threads {args.threads}, sweep {sweep_bytes / 2**20:.0f} MiB, "
          f"{args.rounds} rounds of {args.repeats} calls each way")
    print()
    print("| backend | kernels | way | refill ms, median over kernels | spread over rounds (p90 - p10) ms, "
          "median (p90) over kernels |")
    print("|---|---:|---|---:|---:|")
    for b in sorted({job.backend for job, _, _ in runs}):
        ks = [k for k, (job, _, _) in enumerate(runs) if job.backend == b]
        for way, series in (("apart", apart), ("in turn", in_turn)):
            mid = [statistics.median(series[k]) * 1e3 for k in ks]
            spread = [(_q(series[k], 0.9) - _q(series[k], 0.1)) * 1e3 for k in ks]
            print(f"| {b} | {len(ks)} | {way} | {statistics.median(mid):+.3f} | "
                  f"{statistics.median(spread):.3f} ({_q(spread, 0.9):.3f}) |")
    print()
    print("Each round's median refill over a backend's kernels, ms (apart / in turn):")
    print()
    for b in sorted({job.backend for job, _, _ in runs}):
        ks = [k for k, (job, _, _) in enumerate(runs) if job.backend == b]
        rounds = [f"{statistics.median(apart[k][r] for k in ks) * 1e3:+.3f} / "
                  f"{statistics.median(in_turn[k][r] for k in ks) * 1e3:+.3f}" for r in range(args.rounds)]
        print(f"- {b}: " + ", ".join(rounds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
