"""A saved plan in a fresh process, with glibc's malloc thresholds as they start and as korch sets them.

    python benchmarks/heap_faults.py PLAN_DIR [PLAN_DIR ...] [--pairs 3] [--calls 15] [--thresholds-mib 32,64]

Each plan is loaded in fresh processes, alternately with KORCH_KEEP_FREED_BLOCKS=0 (glibc's dynamic
mmap threshold, as a process that never freed a large block has it) and =1 (korch/heap.py
`keep_freed_blocks`, the default), `--pairs` times each. Every process times `--calls` calls of the
plan, each after a 60 ms pause and one untimed call (selection's turn), and counts the minor page
faults of five further calls. Printed per plan and policy: the median over processes of the calls'
median ms, and the faults per call. `--thresholds-mib`: also processes whose mmap threshold is fixed
at each size given (and the trim threshold at 1 GiB), korch's policy off, to show what size it needs.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def child(plan_dir: str, calls: int, threshold_mib: int) -> dict:
    import korch
    from korch.heap import KEEP_BLOCKS_BYTES, keep_freed_blocks, set_thresholds
    from korch.verify import random_feeds

    if threshold_mib and not set_thresholds(threshold_mib << 20, KEEP_BLOCKS_BYTES):
        raise SystemExit("glibc refused mallopt")
    session = korch.load(plan_dir)
    feeds = random_feeds(session.plan.graph, 7)
    samples = []
    for _ in range(calls):
        time.sleep(0.06)
        session.run(None, feeds)
        t0 = time.perf_counter()
        session.run(None, feeds)
        samples.append(time.perf_counter() - t0)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(5):
        session.run(None, feeds)
    faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 5
    policy = f"mmap threshold {threshold_mib} MiB" if threshold_mib else keep_freed_blocks()
    return {"policy": policy, "ms": statistics.median(samples) * 1e3, "faults": faults}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("plans", nargs="+")
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--calls", type=int, default=15)
    parser.add_argument("--thresholds-mib", default="")
    parser.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        print(json.dumps(child(args.plans[0], args.calls, args.child)))
        return 0
    print("| plan | policy | ms, median over processes (each) | minor faults per call |")
    print("|---|---|---|---:|")
    for plan in args.plans:
        sizes = [int(x) for x in args.thresholds_mib.split(",") if x]
        kinds = [("0", 0), ("1", 0)] + [("0", mib) for mib in sizes]
        runs: dict[tuple[str, int], list[dict]] = {k: [] for k in kinds}
        for _ in range(args.pairs):
            for switch, mib in kinds:
                done = subprocess.run([sys.executable, __file__, plan, "--calls", str(args.calls), "--child", str(mib)],
                                      capture_output=True, text=True, check=True,
                                      env={**os.environ, "KORCH_KEEP_FREED_BLOCKS": switch})
                runs[switch, mib].append(json.loads(done.stdout.strip().splitlines()[-1]))
        for rs in runs.values():
            each = ", ".join(f"{r['ms']:.1f}" for r in rs)
            print(f"| {Path(plan).parent.name}/{Path(plan).name} | {rs[0]['policy']} | "
                  f"{statistics.median(r['ms'] for r in rs):.1f} ({each}) | "
                  f"{statistics.median(r['faults'] for r in rs):.0f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
