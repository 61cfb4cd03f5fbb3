"""Does holding a split plan's calling thread to its CPU still pay? The same plan, pinned and not, side by side.

    python benchmarks/caller_pin.py WORK MODEL [--threads 2] [--rounds 15]

WORK is a zoo_bench work directory (DIR/<model>-t<threads>, whose profile cache holds every profile
and the boundary calibration), as for plan_breakdown.py. The model's first split plan is solved for
from the profiles and compiled once; two sessions share its kernels (so their pool workers are held
to the same CPUs, backends/placement.py):

- pinned:    korch's runtime as it is: the caller held to `placement.caller` while the plan runs,
             its CPUs restored after (runtime.Session.run);
- unpinned:  the same session with the caller left where the scheduler puts it.

They are timed interleaved like korch's duels (korch.profile.timing.side_by_side: a settling pause
and an untimed call before each turn), and the verdict is the median over rounds of unpinned over
pinned in the same round (timing.paired_ratio). Also printed: one pin and restore alone.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from plan_breakdown import first_split_plan  # noqa: E402

from korch.backends.placement import pinned  # noqa: E402
from korch.profile.timing import paired_ratio, side_by_side  # noqa: E402
from korch.runtime import Session  # noqa: E402
from korch.runtime.session import compile_step  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("work", type=Path)
    parser.add_argument("model")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()

    ctx, _, plan, predicted = first_split_plan(args.work, args.model, args.threads)
    kernels = [compile_step(plan, step) for step in plan.steps]
    held = Session(plan, kernels)
    free = Session(plan, kernels)
    free._caller_cpu = None            # the one thing that differs: Session.run then pins nothing
    if held._caller_cpu is None:
        print(f"{args.model}: the plan's caller is not pinned at {args.threads} thread(s); nothing to compare")
        return 0
    feeds = ctx.feeds
    timings = side_by_side({"pinned": lambda: held.run(None, feeds), "unpinned": lambda: free.run(None, feeds)},
                           args.rounds, predicted, warmup=1)
    pins = []
    for _ in range(200):
        t0 = time.perf_counter()
        with pinned(held._caller_cpu):
            pass
        pins.append(time.perf_counter() - t0)
    ratio = paired_ratio(timings["pinned"], timings["unpinned"])
    print(f"{args.model}: {len(plan.steps)} kernels ({', '.join(f'{b} {n}' for b, n in plan.kernels_by_backend().items())}), "
          f"{args.threads} threads, {args.rounds} rounds")
    for name, t in timings.items():
        print(f"  {name:9s} {t.median_s * 1e3:.2f} ms ({t.p10_s * 1e3:.2f}-{t.p90_s * 1e3:.2f})")
    print(f"  unpinned / pinned, round by round: {ratio:.3f}; one pin and restore alone: "
          f"{statistics.median(pins) * 1e6:.0f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
