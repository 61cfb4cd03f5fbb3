"""What a kernel pays inside a plan for its working set, over many kernels: back to back against after a sweep.

    python benchmarks/refill_sample.py WORK MODEL [--threads 2] [--per-backend 40] [--sweep-mib N]
                                       [--backends onnxruntime,openvino] [--repeats 7]

WORK is a zoo_bench work directory (WORK/profile-cache holds the model's profiles). From the
kernels profiled there (accepted, not the whole model), `--per-backend` are drawn per backend,
spread over their profiled times, compiled as the profiler compiles them (threads placed), and each
timed on its reference inputs back to back and after a one-thread sweep of `--sweep-mib` MiB
(default: what optimize sweeps at most, guided.evict_cap; timing.PlanEviction: what guided
profiling's second timing runs, and what a split plan's other kernels do on a host with a large
last-level cache; benchmarks/plan_eviction.py). Printed per kernel, and summarised per backend by
bins of touched bytes: the refill (after the sweep less back to back) against what the kernel
touches (guided.touched_bytes) and against its inputs, weights and outputs alone. Then how well
the refill is predicted (korch/profile/refill.py): by the refill samples optimize stored in WORK's
cache (a kernel that is one of them left out of its own prediction), and by these kernels leave one
out, against charging none. Nothing is written.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("work", type=Path)
    p.add_argument("model")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--per-backend", type=int, default=40)
    p.add_argument("--sweep-mib", type=int, default=None)
    p.add_argument("--backends", default="onnxruntime,openvino")
    p.add_argument("--repeats", type=int, default=7)
    args = p.parse_args(argv)

    from plan_breakdown import load_work

    from korch.backends import CompileOptions, get_backend
    from korch.backends.placement import pinned, placement
    from korch.profile.guided import evict_cap, touched_bytes
    from korch.profile.profiler import _streamed_values, compile_candidate, record_version
    from korch.profile.refill import RefillModel, RefillSample
    from korch.profile.timing import SETTLE_SECONDS, PlanEviction, measure
    from korch.verify import random_feeds

    work = load_work(args.work, args.model, args.threads)
    settings, db, machine, graph, source = work.settings, work.db, work.machine, work.graph, work.source
    sweep_bytes = evict_cap(settings.profile) if args.sweep_mib is None else args.sweep_mib << 20
    jobs, profiled = spread_jobs(work, args.backends.split(","), args.per_backend, args.threads)
    where = placement(args.threads)
    options = CompileOptions(threads=args.threads, worker_cpus=where.workers if where is not None else ())
    rows = []
    # every kernel's reference inputs first (as the profiler gives them): the reference run's own
    # onnxruntime pools keep spinning after each node and would slow whatever is timed beside them
    jobs_inputs = [(job, [np.asarray(env[i], order="C").copy() for i in job.candidate.inputs])
                   for job, env in _streamed_values(graph, random_feeds(graph, settings.seed), jobs)]
    time.sleep(SETTLE_SECONDS)
    with PlanEviction(sweep_bytes) as eviction:
        sweep = eviction.sweep(sweep_bytes)
        for k, (job, inputs) in enumerate(jobs_inputs):
            print(f"kernel {k + 1}/{len(jobs)}", file=sys.stderr, flush=True)
            cand = job.candidate
            try:          # (not on the pinned caller: an engine's pool made now would inherit its one CPU)
                kernel = compile_candidate(graph, cand, job.backend, options, source)
            except Exception as e:  # noqa: BLE001  (a kernel that no longer compiles is left out)
                print(f"  {job.backend} {cand.key[:12]}: {type(e).__name__}: {e}", file=sys.stderr)
                continue
            with pinned(where.caller if where is not None else None):
                hot = measure(lambda: kernel.run(inputs), warmup=2, repeats=args.repeats, min_seconds=0.0).median_s
                swept = measure(lambda: kernel.run(inputs), warmup=1, repeats=args.repeats, min_seconds=0.0,
                                before=sweep).median_s
            io = sum(graph.types[v].nbytes for v in (*cand.inputs, *cand.outputs)) + sum(
                graph.types[v].nbytes for v in {v for i in cand.nodes for v in graph.nodes[i].inputs
                                                 if v in graph.constants})
            rows.append((job.backend, cand.size, touched_bytes(graph, cand), io, profiled[(cand.key, job.backend)],
                         hot, swept, cand.key))


    mib = 1 << 20
    print(f"{args.model}: {len(rows)} kernels, threads {args.threads}, sweep {sweep_bytes / mib:.0f} MiB")
    print("| backend | primitives | touched MiB | in+weights+out MiB | profile ms | hot ms | after sweep ms | refill ms |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for b, size, touched, io, prof, hot, swept, _ in sorted(rows, key=lambda r: (r[0], r[2])):
        print(f"| {b} | {size} | {touched / mib:.1f} | {io / mib:.1f} | {prof * 1e3:.3f} | {hot * 1e3:.3f} | "
              f"{swept * 1e3:.3f} | {(swept - hot) * 1e3:+.3f} |")
    print()
    print("| backend | touched MiB | kernels | refill ms, median (p10-p90) | after sweep / hot, median |")
    print("|---|---|---:|---|---:|")
    edges = [0, 1, 4, 16, 64, 256, math.inf]
    for b in sorted({r[0] for r in rows}):
        for lo, hi in zip(edges, edges[1:]):
            sel = [r for r in rows if r[0] == b and lo * mib <= r[2] < hi * mib]
            if not sel:
                continue
            refill = sorted((r[6] - r[5]) * 1e3 for r in sel)
            q = lambda f: refill[min(len(refill) - 1, int(f * len(refill)))]  # noqa: E731
            print(f"| {b} | {lo}-{hi} | {len(sel)} | {statistics.median(refill):+.3f} ({q(0.1):+.3f} to "
                  f"{q(0.9):+.3f}) | {statistics.median(r[6] / r[5] for r in sel):.3f} |")
    print()
    print("The refill predicted (refill.RefillModel, neighbours "
          f"{settings.profile.refill_neighbours}), absolute error against the refill measured here, ms:")
    print()
    print("| backend | kernels | optimize's samples | measured refill, median | charging none: error median (p90) "
          "| optimize's samples: error median (p90) | these kernels, leave one out: error median (p90) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    k = settings.profile.refill_neighbours
    for b in sorted({r[0] for r in rows}):
        sel = [r for r in rows if r[0] == b]
        stored = db.refills(b, record_version(get_backend(b), settings.profile), args.threads, machine)
        here = [RefillSample(r[7], b, r[2], sweep_bytes, r[5], r[6]) for r in sel]

        def errors(samples_for) -> list[float]:
            out = []
            for r in sel:
                model = RefillModel.of(samples_for(r), k)
                out.append(abs(model.predict(b, r[2], sweep_bytes) - (r[6] - r[5])) * 1e3)
            return sorted(out)

        def spread(errs: list[float]) -> str:
            return f"{statistics.median(errs):.3f} ({errs[min(len(errs) - 1, int(0.9 * len(errs)))]:.3f})" if errs else "-"

        none = sorted(abs(r[6] - r[5]) * 1e3 for r in sel)
        by_db = errors(lambda r: [s for s in stored if s.candidate_key != r[7]]) if stored else []
        loo = errors(lambda r: [s for s in here if s.candidate_key != r[7]]) if len(here) > 1 else []
        print(f"| {b} | {len(sel)} | {len(stored)} | {statistics.median((r[6] - r[5]) * 1e3 for r in sel):+.3f} | "
              f"{spread(none)} | {spread(by_db)} | {spread(loo)} |")
    return 0


def spread_jobs(work, backends: list[str], per_backend: int, threads: int):
    """Up to `per_backend` split kernels per backend profiled in `work` (accepted), spread over their
    profiled times: one drawn from each of `per_backend` equal slices of the sorted list. Returns the
    jobs and each one's profiled seconds by (candidate key, backend)."""
    from korch.backends import get_backend
    from korch.profile.database import Status
    from korch.profile.profiler import Job, record_version

    graph, db = work.graph, work.db
    rng = random.Random(0)
    jobs: list[Job] = []
    profiled: dict[tuple[str, str], float] = {}
    reps = {c.key: c for c in work.cands.all if c.size < len(graph.nodes)}
    for name in backends:
        stored = db.get_many(list(reps), name, record_version(get_backend(name), work.settings.profile), threads,
                             work.machine)
        ok = sorted((r.median_s, key) for key, r in stored.items() if r.status is Status.OK and r.median_s)
        if not ok:
            print(f"{name}: no accepted profiles in {db.path}", file=sys.stderr)
            continue
        step = len(ok) / min(per_backend, len(ok))
        picked = [ok[min(len(ok) - 1, int(k * step + rng.random() * step))] for k in range(min(per_backend, len(ok)))]
        for median_s, key in dict.fromkeys(picked):
            jobs.append(Job(reps[key], name))
            profiled[(key, name)] = median_s
    return jobs, profiled


if __name__ == "__main__":
    sys.exit(main())
