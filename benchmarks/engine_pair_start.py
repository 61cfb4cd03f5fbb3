"""What a kernel pays to start right after another engine's kernel: the start cost per engine pair.

    python benchmarks/engine_pair_start.py [--threads 2] [--rounds 30] [--engines onnxruntime,openvino,inductor]

korch's calibration (korch/profile/boundaries.py measure_start) times each engine's kernel start
after an onnxruntime kernel only. A split plan's kernels follow kernels of every engine, and an
engine's pool may still hold the cores when the next engine starts. Here, for every producer
engine P and consumer engine C, compiled as kernels of a plan of several (pools parked, threads
placed, the caller held to its CPU, as korch's runtime runs them):

- P's kernel: 6 blocks of 1x1 Conv + Relu on [1, 32, 192, 192] (4.5 MiB), a few ms on both cores;
- C's kernels: `small`, one Mul + Relu on [1, 32, 16, 16] (32 KiB), and `conv`, 2 blocks of
  1x1 Conv + Relu on [1, 32, 96, 96] (1.1 MiB), a kernel that needs both cores;

each C kernel timed for one call right after P's kernel, right after P's kernel and 2 ms asleep
(a pool spinning after P stops by then), and back to back (as profiled), in rounds of one call per
condition. Printed: median us and the excess over back to back, per pair.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from korch.backends.placement import pinned  # noqa: E402
from korch.profile.boundaries import BLOCKED, CHANNELS, PLAIN, plan_kernel  # noqa: E402
from korch.runtime.session import plan_placement  # noqa: E402

CONDITIONS = ("back to back", "after P", "after P + 2 ms")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--engines", default="onnxruntime,openvino,inductor")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    engines = args.engines.split(",")

    big_x = [rng.standard_normal((1, CHANNELS, 192, 192)).astype(np.float32)]
    inputs = {"small": [rng.standard_normal((1, CHANNELS, 16, 16)).astype(np.float32)],
              "conv": [rng.standard_normal((1, CHANNELS, 96, 96)).astype(np.float32)]}
    producers, consumers, where = {}, {}, None
    for engine in engines:
        kernel, plan = plan_kernel(BLOCKED, 6, 192, engine, args.threads)
        producers[engine] = lambda k=kernel: k.run(big_x)
        where = where or plan_placement(plan)
        small, _ = plan_kernel(PLAIN, 1, 16, engine, args.threads)
        conv, _ = plan_kernel(BLOCKED, 2, 96, engine, args.threads)
        consumers[(engine, "small")] = lambda k=small: k.run(inputs["small"])
        consumers[(engine, "conv")] = lambda k=conv: k.run(inputs["conv"])

    samples = {(p, c, cond): [] for p in engines for c in consumers for cond in CONDITIONS}
    produced = {p: [] for p in engines}
    with pinned(where.caller if where is not None else None):
        for call in [*producers.values(), *consumers.values()]:
            call()
        for r in range(args.rounds):
            print(f"round {r + 1}/{args.rounds}", file=sys.stderr, flush=True)
            for p, produce in producers.items():
                for c, call in consumers.items():
                    for cond in CONDITIONS:
                        if cond == "back to back":
                            call()
                        else:
                            t0 = time.perf_counter()
                            produce()
                            produced[p].append(time.perf_counter() - t0)
                            if cond == "after P + 2 ms":
                                time.sleep(0.002)
                        t0 = time.perf_counter()
                        call()
                        samples[(p, c, cond)].append(time.perf_counter() - t0)

    med = {key: statistics.median(v) * 1e6 for key, v in samples.items()}
    print(f"{args.threads} threads, {args.rounds} rounds; P's kernel took " +
          ", ".join(f"{p} {statistics.median(v) * 1e3:.2f} ms" for p, v in produced.items()))
    print("| P -> C | C's kernel | back to back us | after P us (excess) | after P + 2 ms us (excess) |")
    print("|---|---|---:|---:|---:|")
    for p in engines:
        for (c, kind) in consumers:
            base = med[(p, (c, kind), "back to back")]
            after = med[(p, (c, kind), "after P")]
            slept = med[(p, (c, kind), "after P + 2 ms")]
            print(f"| {p} -> {c} | {kind} | {base:.0f} | {after:.0f} (+{after - base:.0f}) | "
                  f"{slept:.0f} (+{slept - base:.0f}) |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
