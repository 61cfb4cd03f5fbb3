"""What size of cache sweep makes a kernel timed alone cost what it costs inside its plan?

    python benchmarks/plan_eviction.py WORK MODEL [--threads 2] [--rounds 10] [--sweeps 64,256,480,640,1024]

WORK is a zoo_bench work directory (WORK/profile-cache holds the model's profiles, as for
plan_breakdown.py, whose first split plan this times; `--as-given`: of the model not rewritten). Back to back, a kernel finds its whole working
set (weights, inputs, the engine's intermediate buffers) where its last call left it; on a host whose
last-level cache is large (the model-167 Xeon VM reports 480 MiB) that is all of it. Inside a plan
the other kernels ran in between. Timed in rounds, on the inputs each step gets in the plan:

- hot:        each step alone, back to back (as the profiler times it);
- sweep N:    each step alone, right after a one-thread read of one byte per cache line of N MiB
              (timing.PlanEviction, what guided profiling's second timing runs before every call);
- in plan:    each step inside plan runs (`Session.step_times`).

Printed: each step's medians and their sums. Nothing is written.
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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("work", type=Path)
    p.add_argument("model")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--sweeps", default="64,256,480,640,1024", help="sweep sizes, MiB, comma-separated")
    p.add_argument("--as-given", action="store_true", help="the model as given, not rewritten as optimize does")
    args = p.parse_args(argv)

    from plan_breakdown import first_split_plan

    from korch.backends.placement import pinned
    from korch.profile.timing import PlanEviction
    from korch.runtime import Session
    from korch.runtime.session import compile_step, plan_placement

    ctx, _, plan, _ = first_split_plan(args.work, args.model, args.threads, rewrite=not args.as_given)
    kernels = [compile_step(plan, s) for s in plan.steps]
    session = Session(plan, kernels)
    feeds = dict(session._check_feeds(ctx.feeds))
    env, inputs = dict(feeds), []
    for step, kernel in zip(plan.steps, kernels):        # each step's inputs as the plan gives them
        args_ = [env[i] for i in step.inputs]
        inputs.append([np.array(a, copy=True) for a in args_])
        env.update(zip(step.outputs, kernel.run(args_)))
    sizes = [int(s) for s in args.sweeps.split(",") if s]
    conditions = ["hot", *(f"sweep {s}" for s in sizes), "in plan"]
    n = len(kernels)
    samples = {(k, c): [] for k in range(n) for c in conditions}
    swept: dict[int, list[float]] = {s: [] for s in sizes}
    where = plan_placement(plan)

    def timed(k: int) -> float:
        t0 = time.perf_counter()
        kernels[k].run(inputs[k])
        return time.perf_counter() - t0

    with PlanEviction(max(sizes, default=0) << 20) as eviction, pinned(where.caller if where else None):
        sweeps = {s: eviction.sweep(s << 20) for s in sizes}
        for r in range(args.rounds):
            print(f"round {r + 1}/{args.rounds}", file=sys.stderr, flush=True)
            for run in [session.step_times(feeds) for _ in range(3)]:
                for k in range(n):
                    samples[(k, "in plan")].append(run[k])
            for k in range(n):
                kernels[k].run(inputs[k])
                samples[(k, "hot")].append(timed(k))
                for s, sweep in sweeps.items():
                    t0 = time.perf_counter()
                    sweep()
                    swept[s].append(time.perf_counter() - t0)
                    samples[(k, f"sweep {s}")].append(timed(k))

    med = {key: statistics.median(v) * 1e3 for key, v in samples.items()}
    print(f"{args.model}: {n} kernels ({', '.join(f'{b} {c}' for b, c in plan.kernels_by_backend().items())}), "
          f"threads {args.threads}, {args.rounds} rounds; a sweep took " +
          ", ".join(f"{s} MiB {statistics.median(v) * 1e3:.1f} ms" for s, v in swept.items()))
    print("| step | backend | primitives | " + " | ".join(f"{c} ms" for c in conditions) + " |")
    print("|---|---|---:|" + "---:|" * len(conditions))
    for k, step in enumerate(plan.steps):
        print(f"| {k + 1} | {step.backend} | {len(step.nodes)} | " +
              " | ".join(f"{med[(k, c)]:.3f}" for c in conditions) + " |")
    total = {c: sum(med[(k, c)] for k in range(n)) for c in conditions}
    print("| sum | | | " + " | ".join(f"{total[c]:.2f}" for c in conditions) + " |")
    print("| sum / in plan | | | " + " | ".join(f"{total[c] / total['in plan']:.3f}" for c in conditions) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
