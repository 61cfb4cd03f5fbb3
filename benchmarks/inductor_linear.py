"""Inductor's whole model with its float32 linears run by oneDNN (korch's choice on this CPU) against
MKL's packed GEMM (Inductor's own choice wherever torch has MKL): both compiled by korch's Inductor
backend from the graph `korch optimize` profiles, in one process, timed in alternation.

    python benchmarks/inductor_linear.py [--threads 2] [--rounds 12] [--cache DIR] MODEL [MODEL ...]

Each model's two kernels run alone (a whole-model plan: the engine's threads free), as korch times
a whole model. Per model: each kernel's median (p10-p90) over the rounds, the ratio MKL / oneDNN
paired round by round, and the largest difference between the two kernels' outputs over the largest
output. One linear at a time, on the transformers' shapes: benchmarks/linear_packing.py.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from korch.backends.base import CompileOptions  # noqa: E402
from korch.backends.inductor import InductorBackend  # noqa: E402
from korch.backends.inductor.backend import warmup_inputs  # noqa: E402
from korch.pipeline import run_fission  # noqa: E402
from korch.profile.timing import SETTLE_SECONDS  # noqa: E402
from korch.settings import OptimizeSettings  # noqa: E402


def compare(name: str, threads: int, rounds: int, cache: str) -> None:
    settings = OptimizeSettings(threads=threads)
    graph = run_fission(name, cache_dir=cache, rewrite=settings.rewrites, seed=settings.seed,
                        accuracy=settings.accuracy).graph
    kernels = {}
    for label, onednn in (("mkl", False), ("onednn", True)):
        t0 = time.perf_counter()
        kernels[label] = InductorBackend(onednn_linears=onednn).compile(graph, CompileOptions(threads=threads,
                                                                                               runs_alone=True))
        print(f"{name}: compiled with {label} linears in {time.perf_counter() - t0:.1f} s", flush=True)
    rng = np.random.default_rng(1)
    inputs = [rng.standard_normal(a.shape).astype(a.dtype) if a.dtype.kind == "f" else a for a in warmup_inputs(graph)]
    outs = {label: k.run(inputs) for label, k in kernels.items()}
    diff = max(float(np.max(np.abs(a - b)) / max(float(np.max(np.abs(a))), 1e-30))
               for a, b in zip(outs["mkl"], outs["onednn"]) if a.dtype.kind == "f")
    times: dict[str, list[float]] = {label: [] for label in kernels}
    for r in range(rounds):
        for label in (("mkl", "onednn") if r % 2 else ("onednn", "mkl")):
            kernels[label].run(inputs)                    # untimed: its pool awake, its buffers warm
            t0 = time.perf_counter()
            kernels[label].run(inputs)
            times[label].append(time.perf_counter() - t0)
            time.sleep(SETTLE_SECONDS)                     # the next engine's pool does not meet this one's
    ms = {label: np.asarray(v) * 1e3 for label, v in times.items()}
    ratio = ms["mkl"] / ms["onednn"]
    cells = " | ".join(f"{np.median(v):.2f} ({np.percentile(v, 10):.2f}-{np.percentile(v, 90):.2f})" for v in ms.values())
    print(f"| {name} | {cells} | {np.median(ratio):.3f} ({np.percentile(ratio, 10):.3f}-{np.percentile(ratio, 90):.3f}) "
          f"| {diff:.1e} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="+")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--cache", help="where the zoo's exported models are kept (default: a temporary directory)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    print("| model | MKL linears ms (p10-p90) | oneDNN linears ms (p10-p90) | MKL / oneDNN, paired | max output difference |")
    print("|---|---|---|---|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models:
            compare(name, args.threads, args.rounds, args.cache or tmp)


if __name__ == "__main__":
    main()
