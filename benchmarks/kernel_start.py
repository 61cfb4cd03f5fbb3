"""What a kernel pays to start inside a plan: one call right after other work, against back to back.

    python benchmarks/kernel_start.py [--threads 2] [--rounds 30] [--engines onnxruntime,openvino,inductor]

A profile times a kernel back to back on the same inputs. Inside a plan the kernel runs once per
plan run, after the other kernels have run: its engine's run path, its session's state, its code
and its data are no longer in the caches. Timed here, each for one call, in rounds of one call per
condition:

- back to back:   right after a call of itself (as profiled);
- after 2 ms:     after 2 ms asleep (nothing else ran);
- after E:        right after an onnxruntime kernel E of 6 or 24 blocks of 1x1 Conv + Relu on a
                  [1, 32, S, S] tensor (1.1 MiB at S = 96, 4.5 MiB at S = 192): a plan's previous
                  kernel, both cores busy (the largest, 6x192, is what korch's calibration runs
                  before every engine's kernel: boundaries.measure_start);
- after own E:    right after the timed kernel's own engine's kernel of 6 blocks at S = 192 (after
                  another engine's kernel a kernel also pays the hand-off between the two pools);
- after a sweep:  right after a one-thread write of 16 MiB (every 64th byte).

Timed kernels: each engine's kernel of one Mul + Relu on [1, 32, 16, 16] (32 KiB), compiled as a
kernel of a plan of several (its pool parks when it returns, its threads placed), at --threads and
at one thread (no pool to wake); and a numpy add over 256 KiB, which has no engine at all. The
calling thread is held to its CPU as a plan's is. Printed: median us per condition and the excess
over back to back (what korch/profile/boundaries.py calibrates as the engine's kernel start).
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

EVICTORS = ((6, 96), (24, 96), (6, 192))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--engines", default="onnxruntime,openvino,inductor")
    args = parser.parse_args()
    rng = np.random.default_rng(0)

    evictors = {}
    where = None
    for blocks, side in EVICTORS:
        kernel, plan = plan_kernel(BLOCKED, blocks, side, "onnxruntime", args.threads)
        x = [rng.standard_normal((1, CHANNELS, side, side)).astype(np.float32)]
        evictors[f"after E {blocks}x{side}"] = (lambda k=kernel, x=x: k.run(x))
        where = plan_placement(plan)
    sweep = np.ones(16 << 20, np.uint8)

    def swept() -> None:
        sweep[::64] += 1

    small_x = [rng.standard_normal((1, CHANNELS, 16, 16)).astype(np.float32)]
    big_x = [rng.standard_normal((1, CHANNELS, 192, 192)).astype(np.float32)]
    timed, own = {}, {}
    for engine in args.engines.split(","):
        evictor, _ = plan_kernel(BLOCKED, 6, 192, engine, args.threads)
        for threads in sorted({args.threads, 1}, reverse=True):
            kernel, _ = plan_kernel(PLAIN, 1, 16, engine, threads)
            name = f"{engine}, {threads} thread(s)"
            timed[name] = (lambda k=kernel: k.run(small_x))
            own[name] = (lambda k=evictor: k.run(big_x))
    a = rng.standard_normal(65536).astype(np.float32)
    timed["numpy add, 256 KiB"] = lambda: np.add(a, 1.0)
    own["numpy add, 256 KiB"] = evictors[f"after E {EVICTORS[-1][0]}x{EVICTORS[-1][1]}"]

    conditions = ["back to back", "after 2 ms", *evictors, "after own E 6x192", "after a sweep"]
    before = {"after 2 ms": lambda: time.sleep(0.002), **evictors, "after a sweep": swept}
    samples = {(name, c): [] for name in timed for c in conditions}
    durations = {name: [] for name in evictors}
    with pinned(where.caller if where is not None else None):
        for call in [*timed.values(), *evictors.values(), *own.values()]:
            call()
        for r in range(args.rounds):
            print(f"round {r + 1}/{args.rounds}", file=sys.stderr, flush=True)
            for name, call in timed.items():
                for c in conditions:
                    if c == "back to back":
                        call()
                    else:
                        t0 = time.perf_counter()
                        (own[name] if c == "after own E 6x192" else before[c])()
                        if c in durations:
                            durations[c].append(time.perf_counter() - t0)
                    t0 = time.perf_counter()
                    call()
                    samples[(name, c)].append(time.perf_counter() - t0)

    med = {key: statistics.median(v) * 1e6 for key, v in samples.items()}
    print(f"{args.threads} threads, {args.rounds} rounds; evicting kernels took " +
          ", ".join(f"{c[len('after E '):]} {statistics.median(v) * 1e3:.2f} ms" for c, v in durations.items()))
    print("| kernel | " + " | ".join(conditions) + " |")
    print("|---|" + "---:|" * len(conditions))
    for name in timed:
        base = med[(name, "back to back")]
        cells = [f"{base:.0f}"] + [f"{med[(name, c)]:.0f} (+{med[(name, c)] - base:.0f})" for c in conditions[1:]]
        print(f"| {name} | " + " | ".join(cells) + " |")
    print("(us: median of one call; in brackets, over back to back)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
