"""Which way of timing a kernel alone predicts what it costs inside a plan?

    python benchmarks/profile_protocols.py MODEL [--pieces 24] [--engines onnxruntime] [--threads 2] [--rounds 15]
                                          [--sweeps 4,16]

Builds a split plan of MODEL: `--pieces` regions of whole ONNX nodes, cut where one tensor is live,
engines taken in turn from `--engines`. Its kernels are compiled once, then timed, in alternation
round after round so that the machine's drift falls on every protocol alike:

- plan:         the whole plan end to end (`Session.run`), back to back, as measured selection times it;
- in plan:      each step inside plan runs (`Session.step_times`): its true cost among its neighbours;
- hot:          each kernel alone, its calls back to back (no sweep);
- swept:        each kernel alone, a cache sweep before every call, its calls one after another (the
                profiler's CacheSweep, its size from the last-level cache the machine reports);
- swept N MiB:  the same with a sweep of N MiB, for each N of `--sweeps` (what size of sweep, if any,
                stands for a kernel's neighbours in a plan);
- interleaved:  the kernels in rotating order, one call each per round, a sweep before every call
                (each call then follows another kernel, as in a plan);
- interleaved, no sweep: the same without the sweep.

Printed per protocol: the sum of the kernels' medians against the plan's median (what the BLP
predicts, boundaries aside), and the median and 90th percentile of |kernel / in plan - 1|.
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

from two_engine_split import region_plan  # noqa: E402

from korch.candidates.regions import cut_positions, onnx_spans  # noqa: E402
from korch.frontend.regions import OnnxSource  # noqa: E402
from korch.pipeline import run_fission  # noqa: E402
from korch.profile.timing import CacheSweep  # noqa: E402
from korch.runtime import Session  # noqa: E402
from korch.runtime.session import compile_step  # noqa: E402
from korch.verify import random_feeds  # noqa: E402

SAMPLES = 5          # calls per kernel and protocol in one round


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model")
    parser.add_argument("--pieces", type=int, default=24)
    parser.add_argument("--engines", default="onnxruntime")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--cache", default=None)
    parser.add_argument("--sweeps", default="", help="sweep sizes to try as well, MiB, comma-separated")
    args = parser.parse_args()

    fissioned = run_fission(args.model, cache_dir=args.cache)
    graph = fissioned.graph
    source = OnnxSource(fissioned.model, dict(fissioned.value_map or {}))
    spans = onnx_spans(graph)
    cuts = sorted(s for s, _ in (spans or [])[1:] if s in cut_positions(graph))
    if not cuts:
        print(f"{args.model}: no single-tensor cut", file=sys.stderr)
        return 2
    chosen = sorted({cuts[round(k * (len(cuts) - 1) / max(1, args.pieces - 2))] for k in range(args.pieces - 1)})
    bounds = [0, *chosen, len(graph.nodes)]
    engines = args.engines.split(",")
    parts = [(a, b, engines[k % len(engines)]) for k, (a, b) in enumerate(zip(bounds, bounds[1:]))]
    plan = region_plan(graph, source, parts, args.threads)
    session = Session(plan, [compile_step(plan, step) for step in plan.steps])
    feeds = random_feeds(graph, 0)
    env = {**feeds}
    for step, kernel in zip(plan.steps, session.kernels):        # each kernel's inputs as the plan gives them
        outs = kernel.run([env[i] for i in step.inputs])
        env.update(zip(step.outputs, outs))
    calls = [lambda op=op, step=step: op.run([env[i] for i in step.inputs]) for op, step in zip(session.kernels, plan.steps)]
    sweep = CacheSweep()
    sweeps = {"swept": sweep, **{f"swept {mib} MiB": CacheSweep(int(float(mib) * (1 << 20)))
                                 for mib in args.sweeps.split(",") if mib}}
    n = len(calls)
    samples: dict[str, list[list[float]]] = {p: [[] for _ in range(n)] for p in
                                             ("in plan", "hot", *sweeps, "interleaved", "interleaved, no sweep")}
    plan_s: list[float] = []
    for call in calls:
        call()
    session.run(None, feeds)
    print(f"{args.model}: a plan of {n} {'/'.join(engines)} regions at {args.threads} threads; "
          f"{args.rounds} rounds", file=sys.stderr)
    t_start = time.perf_counter()
    for r in range(args.rounds):
        for _ in range(SAMPLES):
            t0 = time.perf_counter_ns()
            session.run(None, feeds)
            plan_s.append((time.perf_counter_ns() - t0) / 1e9)
            for k, t in enumerate(session.step_times(feeds)):
                samples["in plan"][k].append(t)
        for k, call in enumerate(calls):
            call()
            for _ in range(SAMPLES):
                t0 = time.perf_counter_ns()
                call()
                samples["hot"][k].append((time.perf_counter_ns() - t0) / 1e9)
            for name, before in sweeps.items():
                for _ in range(SAMPLES):
                    before()
                    t0 = time.perf_counter_ns()
                    call()
                    samples[name][k].append((time.perf_counter_ns() - t0) / 1e9)
        order = list(range(n))
        np.random.default_rng(r).shuffle(order)
        for with_sweep, name in ((True, "interleaved"), (False, "interleaved, no sweep")):
            for _ in range(SAMPLES):
                for k in order:
                    if with_sweep:
                        sweep()
                    t0 = time.perf_counter_ns()
                    calls[k]()
                    samples[name][k].append((time.perf_counter_ns() - t0) / 1e9)
        print(f"round {r + 1} done ({time.perf_counter() - t_start:.0f} s)", file=sys.stderr, flush=True)
    median = {p: [statistics.median(s) for s in per] for p, per in samples.items()}
    plan_median = statistics.median(plan_s)
    in_plan = median["in plan"]
    print(f"\nsweep of the profiler: {sweep.nbytes >> 20} MiB")
    print(f"{args.model}, {n} {'/'.join(engines)} regions, {args.threads} threads: plan {plan_median * 1e3:.2f} ms "
          f"(p10-p90 {np.percentile(plan_s, 10) * 1e3:.2f}-{np.percentile(plan_s, 90) * 1e3:.2f}), "
          f"sum of steps in plan {sum(in_plan) * 1e3:.2f} ms\n")
    print("| protocol | sum of kernels, ms | sum / plan | median abs(kernel / in plan - 1) | p90 |")
    print("|---|---:|---:|---:|---:|")
    for name, values in median.items():
        errors = [abs(v / p - 1) for v, p in zip(values, in_plan)]
        print(f"| {name} | {sum(values) * 1e3:.2f} | {sum(values) / plan_median:.3f} | "
              f"{statistics.median(errors) * 100:.1f}% | {np.percentile(errors, 90) * 100:.1f}% |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
