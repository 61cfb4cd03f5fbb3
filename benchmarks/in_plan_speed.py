"""In-plan costs while the machine slows down: as timed, and corrected by the kernels' speed alone.

    python benchmarks/in_plan_speed.py WORK MODEL [--threads 2] [--phases 6] [--hogs 1]

WORK is a zoo_bench work directory (DIR/<model>-t<threads>, whose profile cache holds every profile
and the boundary calibration), as for plan_breakdown.py. The model's first split plan is solved from
its profiles, as measured selection solves it, and compiled. Then, in alternating phases, measured
selection's in-plan timing runs (`_Context.in_plan_times`: each round, the plan with every step
timed, then every step alone after a cache sweep): on a quiet machine, and with `--hogs` busy
processes competing for the cores (a stand-in for a VM's neighbours, which slowed every kernel of
segformer-b0's first plan by about 1.5x during one cold optimize).

Printed per phase: the predicted time (profiles + boundary costs), the steps' in-plan times summed
as timed, the same corrected by the round's slowdown (what selection now uses), and the slowdown
(the steps alone over their profiles). If the correction works, the corrected sum stays put when
the hogs run while the sum as timed grows. Nothing is written.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("work", type=Path)
    p.add_argument("model")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--phases", type=int, default=6, help="quiet and hogged phases, alternating")
    p.add_argument("--hogs", type=int, default=1, help="busy processes during a hogged phase")
    args = p.parse_args(argv)
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(args.work / "inductor-cache"))

    from plan_breakdown import first_split_plan

    ctx, selection, plan, predicted = first_split_plan(args.work, args.model, args.threads)
    session = ctx.compile(plan)
    print(f"{args.model}: {len(plan.steps)} kernels ({', '.join(f'{b} {c}' for b, c in plan.kernels_by_backend().items())}), "
          f"threads {args.threads}, predicted {predicted * 1e3:.2f} ms "
          f"(profiles {sum(st.cost_s for st in plan.steps) * 1e3:.2f} + boundaries {selection.boundary_s * 1e3:.2f})")
    print()
    print("| phase | hogs | slowdown (p10-p90 of rounds) | in plan as timed ms | in plan corrected ms | corrected / predicted |")
    print("|---|---:|---|---:|---:|---:|")
    for phase in range(args.phases):
        hogs = args.hogs if phase % 2 else 0
        procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(hogs)]
        try:
            time.sleep(0.5)
            times = ctx.in_plan_times(plan, session)
        finally:
            for proc in procs:
                proc.kill()
                proc.wait()
        costs = ctx.in_plan_costs(plan, times)          # by cost key: structural twins share one
        corrected = sum(costs[ctx.cost_key(st)] for st in plan.steps) + selection.boundary_s
        slow = sorted(times.slowdowns())
        print(f"| {phase + 1} | {hogs} | {times.slowdown():.2f} ({_q(slow, 0.1):.2f}-{_q(slow, 0.9):.2f}) | "
              f"{times.as_timed_s() * 1e3:.2f} | {corrected * 1e3:.2f} | {corrected / predicted:.3f} |", flush=True)
        time.sleep(1.0)
    return 0


def _q(ordered: list[float], q: float) -> float:
    return statistics.quantiles(ordered, n=10, method="inclusive")[int(q * 10) - 1] if len(ordered) > 1 else ordered[0]


if __name__ == "__main__":
    sys.exit(main())
