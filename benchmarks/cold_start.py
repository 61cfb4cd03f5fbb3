"""Why a kernel timed after a cache sweep is slower than inside a plan: evicted caches or a parked pool?

    python benchmarks/cold_start.py [--threads 2] [--engines onnxruntime,openvino,inductor]
                                    [--sides 16,96] [--rounds 5]

The profiler times every kernel but the whole model after a CacheSweep (korch/profile/timing.py),
and the boundary calibration (korch/profile/boundaries.py) subtracts kernels timed that way from a
chain of them run as a plan. On an AMD EPYC host that left every boundary negative (BENCHMARKS.md):
six kernels took less as a plan than one of them alone, times six. This times one block of the
calibration's chains (Conv 1x1 + Relu, `blocked`; Mul + Relu, `plain`) four ways, each as korch
times kernels (korch.profile.timing.measure):

- hot: back to back on the same input;
- sweep: after the sweep (caches evicted; the sweep takes milliseconds, so the pool also parks);
- idle: after a sleep as long as the sweep (the pool parks, the caches stay);
- sweep+spin: after the sweep, then 50 µs of the caller spinning (caches evicted, the caller's core busy);
- parallel sweep: the same sweep split over `threads` threads, so every core is busy until the call.

If idle is as slow as sweep, the cost is not the cache. If the parallel sweep is as fast as hot, it
is the idle cores: a virtual CPU left idle for milliseconds halts, and waking a pool thread onto it
costs far more than onto a busy one.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--engines", default="onnxruntime,openvino,inductor")
    p.add_argument("--sides", default="16,96")
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args(argv)

    from korch.backends import backend_names
    from korch.profile.boundaries import BLOCKED, CHANNELS, PLAIN, chain_model, chain_plan
    from korch.profile.timing import CacheSweep, measure
    from korch.runtime.session import compile_step

    sweep = CacheSweep()
    sweep()
    t0 = time.perf_counter()
    for _ in range(5):
        sweep()
    sweep_s = (time.perf_counter() - t0) / 5

    def idle() -> None:
        time.sleep(sweep_s)

    def sweep_spin() -> None:
        sweep()
        end = time.perf_counter() + 50e-6
        while time.perf_counter() < end:
            pass

    from concurrent.futures import ThreadPoolExecutor

    lines = np.ones(sweep.nbytes, np.uint8)[:: CacheSweep.LINE]
    parts = np.array_split(lines, args.threads)
    helpers = ThreadPoolExecutor(args.threads)

    def parallel_sweep() -> None:        # numpy's sum releases the GIL: the parts are read at once
        list(helpers.map(np.sum, parts))

    modes = {"hot": None, "sweep": sweep, "idle": idle, "sweep+spin": sweep_spin, "par. sweep": parallel_sweep}
    print(f"{args.threads} threads; one sweep reads {sweep.nbytes >> 20} MiB in {sweep_s * 1e3:.2f} ms; "
          f"µs per call, median of {args.rounds} rounds (each the median of korch's measure)")
    print(f"{'layout':<8} {'engine':<12} {'tensor':>9} " + "".join(f"{m:>12}" for m in modes))
    engines = [e for e in args.engines.split(",") if e in backend_names()]
    for layout in (BLOCKED, PLAIN):
        for side in (int(s) for s in args.sides.split(",")):
            x = np.random.default_rng(1).standard_normal((1, CHANNELS, side, side)).astype(np.float32)
            for engine in engines:
                plan = chain_plan(chain_model(layout, 1, side), (engine,), args.threads)
                kernel = compile_step(plan, plan.steps[0])
                inputs = [x]
                samples: dict[str, list[float]] = {m: [] for m in modes}
                for r in range(args.rounds):
                    order = list(modes)[r % len(modes):] + list(modes)[:r % len(modes)]
                    for m in order:
                        samples[m].append(measure(lambda k=kernel, i=inputs: k.run(i), min_seconds=0.2,
                                                  before=modes[m]).median_s)
                row = "".join(f"{statistics.median(samples[m]) * 1e6:>12.1f}" for m in modes)
                print(f"{layout:<8} {engine:<12} {x.nbytes >> 10:>6} KiB {row}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
