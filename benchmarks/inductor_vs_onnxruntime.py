"""Where does Inductor's generated code beat onnxruntime, candidate by candidate, by kind of candidate?

    python benchmarks/inductor_vs_onnxruntime.py MODEL [--per-kind 20] [--threads 2] [--cache DIR]

Inductor sees a budget of unique small candidates per model (ProfileSettings.inductor_budget), filled
by korch/profile/prune.py: each linear primitive alone first, then fused candidates by bytes saved.
This script samples `--per-kind` unique candidates of each kind:

- linear alone:      one matmul or conv;
- linear + epilogue: one linear primitive with elementwise, reduce or layout primitives around it;
- memory-bound:      several primitives, none linear;

compiles each on Inductor and on onnxruntime, checks both against the reference (a kernel that
fails or disagrees is left out of the row), and times both as the profiler does (ProfileSettings'
defaults: a cache sweep before each call). Per kind: how often Inductor is faster, the geometric
mean of onnxruntime / Inductor, and the summed times. Nothing is written.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from korch.backends import CompileOptions  # noqa: E402
from korch.ir.ops import PrimClass  # noqa: E402
from korch.pipeline import enumerate_all, run_fission  # noqa: E402
from korch.profile.profiler import Job, _streamed_values, compile_candidate  # noqa: E402
from korch.profile.timing import CacheSweep, measure  # noqa: E402
from korch.settings import OptimizeSettings, ProfileSettings  # noqa: E402
from korch.verify import diff_outputs, random_feeds  # noqa: E402

BACKENDS = ("inductor", "onnxruntime")
TOLERANCE = 1e-4


def kind_of(graph, cand) -> str:
    linear = sum(graph.nodes[i].klass == PrimClass.LINEAR for i in cand.nodes)
    if linear and cand.size == 1:
        return "linear alone"
    if linear:
        return "linear + epilogue"
    return "memory-bound" if cand.size > 1 else "single other"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model")
    parser.add_argument("--per-kind", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--cache", default=None)
    args = parser.parse_args()

    settings = OptimizeSettings(threads=args.threads, backends=BACKENDS)
    fissioned = run_fission(args.model, cache_dir=args.cache)
    graph = fissioned.graph
    unique = {}
    for c in enumerate_all(graph, settings).small:
        unique.setdefault(c.key, c)
    by_kind: dict[str, list] = {}
    for c in unique.values():
        by_kind.setdefault(kind_of(graph, c), []).append(c)
    rng = random.Random(0)
    sample = {k: rng.sample(v, min(args.per_kind, len(v))) for k, v in sorted(by_kind.items()) if k != "single other"}
    print(f"{args.model}: {len(unique)} unique small candidates: "
          + ", ".join(f"{k} {len(v)}" for k, v in sorted(by_kind.items())), file=sys.stderr)
    jobs = [Job(c, "inductor") for cands in sample.values() for c in cands]
    options = CompileOptions(threads=args.threads)
    ps = ProfileSettings()
    sweep = CacheSweep()
    times: dict[str, dict[str, float]] = {}
    t0 = time.perf_counter()
    for job, env in _streamed_values(graph, random_feeds(graph, 0), jobs):
        cand = job.candidate
        inputs = [np.asarray(env[i], order="C") for i in cand.inputs]
        row = {}
        for backend in BACKENDS:
            try:
                kernel = compile_candidate(graph, cand, backend, options, None)
                outs = kernel.run(inputs)
            except Exception as e:          # a refusal or failure leaves the candidate out
                print(f"  {backend} failed on {cand.key[:12]}: {type(e).__name__}", file=sys.stderr)
                break
            worst = max((d.rel for d in diff_outputs(dict(zip(cand.outputs, outs)), {o: env[o] for o in cand.outputs})),
                        default=0.0)
            if not worst <= TOLERANCE:
                print(f"  {backend} disagrees on {cand.key[:12]}: {worst:.1e}", file=sys.stderr)
                break
            row[backend] = measure(lambda k=kernel: k.run(inputs), warmup=ps.warmup, repeats=ps.repeats,
                                   min_seconds=ps.min_seconds, before=sweep).median_s
        if len(row) == len(BACKENDS):
            times[cand.key] = row
    print(f"compiled and timed in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    print(f"\n{args.model}, {args.threads} threads: Inductor against onnxruntime on the same candidate "
          "(times as profiled: a cache sweep before each call)\n")
    print("| kind | candidates | Inductor faster | geomean onnxruntime / Inductor | sum Inductor ms | sum onnxruntime ms |")
    print("|---|---:|---:|---:|---:|---:|")
    for kind, cands in sample.items():
        rows = [times[c.key] for c in cands if c.key in times]
        if not rows:
            continue
        ratios = [r["onnxruntime"] / r["inductor"] for r in rows]
        wins = sum(x > 1 for x in ratios)
        geo = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
        print(f"| {kind} | {len(rows)} | {wins} | {geo:.2f} | {sum(r['inductor'] for r in rows) * 1e3:.2f} | "
              f"{sum(r['onnxruntime'] for r in rows) * 1e3:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
