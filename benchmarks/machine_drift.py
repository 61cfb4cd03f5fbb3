"""How much one unchanged plan's time drifts on this machine over a minute, and whether a fixed probe
workload drifts with it.

    python benchmarks/machine_drift.py PLAN_DIR [--seconds 60] [--block 10]

The plan (korch.load) runs in blocks of `--block` back-to-back calls; between blocks, two probes run
in the same way: a 256x256 float32 matmul x20 (numpy's BLAS, compute-bound) and a read of one byte per
cache line of 64 MB (memory-bound). Printed: the median of each block's median with p10-p90 and the
coefficient of variation across blocks, the correlation of the plan's block medians with each probe's,
and the variation of the plan's time divided by each probe's. If the plan tracked a probe, dividing by
it would shrink the variation and profiles could be normalised by a probe run beside them; if not,
the drift is the floor under any "predicted within x%" figure whose prediction was measured minutes
before the plan.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np


def _block(fn, n: int) -> float:
    samples = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        fn()
        samples.append((time.perf_counter_ns() - t0) / 1e6)
    return statistics.median(samples)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("plan")
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--block", type=int, default=10)
    args = p.parse_args(argv)

    import korch
    from korch.verify import random_feeds

    session = korch.load(args.plan)
    feeds = random_feeds(session.plan.graph, 5)
    a = np.random.default_rng(0).random((256, 256), dtype=np.float32)
    lines = np.ones(64 << 20, np.uint8)[::64]
    systems = {"plan": lambda: session.run(None, feeds),
               "matmul probe": lambda: [a @ a for _ in range(20)],
               "memory probe": lambda: lines.sum()}
    for fn in systems.values():
        for _ in range(3):
            fn()
    rows = []
    end = time.monotonic() + args.seconds
    while time.monotonic() < end:
        rows.append([_block(fn, args.block) for fn in systems.values()])
    r = np.array(rows)
    print(f"{len(r)} blocks of {args.block} calls over {args.seconds:.0f} s")
    for k, name in enumerate(systems):
        p10, p50, p90 = np.percentile(r[:, k], [10, 50, 90])
        print(f"  {name:13s} block medians {p50:.2f} ms [{p10:.2f}-{p90:.2f}], cv {r[:, k].std() / r[:, k].mean():.3f}")
    for k, name in list(enumerate(systems))[1:]:
        ratio = r[:, 0] / r[:, k]
        print(f"  plan ~ {name}: correlation {np.corrcoef(r[:, 0], r[:, k])[0, 1]:.2f}, "
              f"cv of plan / probe {ratio.std() / ratio.mean():.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
