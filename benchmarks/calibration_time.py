"""Where a new machine's boundary calibration spends its time: compiling each engine's kernels, and timing.

    python benchmarks/calibration_time.py [--threads 2] [--engines inductor,onnxruntime,openvino]

Runs `korch.profile.boundaries.calibrate` as a first optimize on a new machine runs it (in this
process, with an empty Inductor cache of its own unless TORCHINDUCTOR_CACHE_DIR is set), and prints
its wall time, the seconds each engine's kernels took to compile (every `compile_step` it makes,
timed around the call) and what is left: the chains' timing. Nothing is stored.
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
import sys
import tempfile
import time


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--engines", default="inductor,onnxruntime,openvino")
    args = p.parse_args()
    own_cache = "TORCHINDUCTOR_CACHE_DIR" not in os.environ
    if own_cache:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="korch-calibration-")
    import korch.runtime.session as session
    from korch.profile.boundaries import calibrate

    seconds: collections.Counter[str] = collections.Counter()
    count: collections.Counter[str] = collections.Counter()
    compile_step = session.compile_step

    def timed_compile(plan, step, threads=None):
        t0 = time.perf_counter()
        try:
            return compile_step(plan, step, threads)
        finally:
            seconds[step.backend] += time.perf_counter() - t0
            count[step.backend] += 1

    session.compile_step = timed_compile        # calibrate imports it where it compiles
    t0 = time.perf_counter()
    try:
        calibrate(args.engines.split(","), args.threads)
    finally:
        session.compile_step = compile_step
        if own_cache:
            shutil.rmtree(os.environ["TORCHINDUCTOR_CACHE_DIR"], ignore_errors=True)
    total = time.perf_counter() - t0
    compiled = sum(seconds.values())
    print(f"calibration {total:.1f} s: " + ", ".join(f"{e} compile {seconds[e]:.1f} s ({count[e]} kernels)"
                                                   for e in sorted(seconds)) + f", the rest (timing) {total - compiled:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
