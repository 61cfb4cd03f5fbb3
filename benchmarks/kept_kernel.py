"""What selection saves by loading a kept whole-model kernel instead of compiling it again.

    python benchmarks/kept_kernel.py PLAN_DIR [--rounds 3]

PLAN_DIR is a saved plan of one Inductor kernel (an engine's whole model). In one process, with
torch imported and warmed by one untimed compile, it times in turn `compile_plan` of the plan with
its saved kernel taken out (what a duel did before profiling kept the kernel: Inductor compiles it
again, its on-disk caches warm) and of the plan as saved (what a duel does now: the kept kernel is
loaded and checked), and prints each median and range in seconds.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import korch  # noqa: E402
from korch.plan.plan import load_plan  # noqa: E402
from korch.profile.database import machine_fingerprint  # noqa: E402
from korch.runtime import compile_plan  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("plan")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    plan = load_plan(args.plan, korch.__version__, machine_fingerprint())
    if not plan.artifacts:
        raise SystemExit(f"{args.plan}: holds no saved kernel")
    bare = replace(plan, artifacts={})
    compile_plan(bare)                                   # untimed: imports, Inductor's caches
    times: dict[str, list[float]] = {"compiled again": [], "kept, loaded": []}
    for _ in range(args.rounds):
        for name, which in (("compiled again", bare), ("kept, loaded", plan)):
            t0 = time.perf_counter()
            session = compile_plan(which)
            times[name].append(time.perf_counter() - t0)
            del session
    for name, ts in times.items():
        print(f"{name}: {statistics.median(ts):.2f} s ({min(ts):.2f}-{max(ts):.2f})")


if __name__ == "__main__":
    main()
