"""The kernel-boundary calibration table: what one boundary costs a running plan, by bytes and engine pair.

    python benchmarks/boundary_cost.py [--threads 2] [--engines onnxruntime,openvino,inductor]
                                       [--sides 16,48,96,181] [--blocks 6] [--rounds 9] [--measure-seconds 0.03]
                                       [--out FILE.json]

Runs korch's own calibration (korch/profile/boundaries.py: the method is in its docstring) at more
sizes and prints every sample: per layout and (producer, consumer) pair, the tensor's bytes, the
boundary cost in µs (plan time minus the sum of its kernels timed alone, per boundary), the plan's
median with p10-p90, and the time of one copy of the tensor's bytes at this machine's memory
bandwidth (measured here with numpy), then the fitted lines that `korch optimize` stores and prices.
The issue's target for a boundary: <= 20 µs plus one copy of the bytes.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

from korch.backends import backend_names
from korch.profile.boundaries import CalibrationSettings, Sample, calibrate


def copy_seconds(nbytes: int) -> float:
    """One numpy copy of `nbytes` (the median of 30)."""
    a = np.ones(max(nbytes // 4, 1), np.float32)
    b = np.empty_like(a)
    times = []
    for _ in range(30):
        t = time.perf_counter()
        np.copyto(b, a)
        times.append(time.perf_counter() - t)
    return float(np.median(times))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--engines", default=",".join(e for e in ("onnxruntime", "openvino", "inductor")
                                                 if e in backend_names()))
    p.add_argument("--sides", default="16,48,96,181", help="H of the [1,32,H,H] float tensor")
    p.add_argument("--blocks", type=int, default=6)
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--measure-seconds", type=float, default=CalibrationSettings.measure_seconds,
                   help="how long each timing of a chain or kernel runs back to back")
    p.add_argument("--hot", action="store_true",
                   help="time kernels alone back to back, not after a cache sweep (profiles with cold_cache=False)")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    engines = args.engines.split(",")
    unknown = [e for e in engines if e not in backend_names()]
    if unknown:
        print(f"unknown engines {unknown}; installed: {backend_names()}", file=sys.stderr)
        return 2
    settings = CalibrationSettings(tuple(int(s) for s in args.sides.split(",")), args.blocks, args.rounds,
                                   args.measure_seconds)
    copies: dict[int, float] = {}

    def show(s: Sample) -> None:
        copy = copies.setdefault(s.nbytes, copy_seconds(s.nbytes))
        print(f"{s.layout:7s} {s.producer:>11s}->{s.consumer:<11s} {s.nbytes / 1024:7.0f} KiB  boundary "
              f"{s.boundary_s * 1e6:8.1f} us  (copy {copy * 1e6:6.1f} us)  plan {s.plan_s * 1e3:.3f} ms "
              f"[{s.plan_p10_s * 1e3:.3f}-{s.plan_p90_s * 1e3:.3f}]  kernels alone {s.sum_alone_s * 1e3:.3f} ms",
              flush=True)

    t0 = time.perf_counter()
    model, samples = calibrate(engines, args.threads, settings, report=show, cold_cache=not args.hot)
    print(f"\n{len(samples)} chains in {time.perf_counter() - t0:.0f} s; fitted lines (what korch prices):")
    for (producer, consumer, layout), line in sorted(model.lines.items()):
        print(f"{layout:7s} {producer:>11s}<->{consumer:<11s} {line.fixed_s * 1e6:8.1f} us + "
              f"{line.s_per_byte * 1e9:7.3f} ns/byte")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"threads": args.threads, "samples": [s.__dict__ for s in samples],
                       "copy_s": copies,
                       "lines": [{"producer": p, "consumer": c, "layout": lay, "fixed_s": line.fixed_s,
                                  "s_per_byte": line.s_per_byte} for (p, c, lay), line in model.lines.items()]},
                      f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
