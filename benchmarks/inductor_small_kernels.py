"""Small Inductor kernels as the profiler times them, against onnxruntime's: what their profiles read.

    python benchmarks/inductor_small_kernels.py [--runs 5] [--threads 2]

Builds a chain of seven 1x1 convolutions with relus (26x26 maps, 32-128 channels) and profiles each
convolution alone, on Inductor and on onnxruntime, through korch's profiler as `korch optimize` does
(Inductor's kernels compiled ahead in worker processes, each timed with the caller and the pool
workers placed as in a split plan), into a fresh profile database: one fresh process per run. Prints
per run each backend's median profile over the seven and its slowest, and the runs' table.

Each conv runs in 0.05-0.2 ms. With the caller held to its CPU and Inductor's OpenMP workers free, a
worker woken on the caller's CPU took turns with it: in some runs every Inductor profile read 1.6-2.2
ms. To compare two commits, run it with PYTHONPATH set to each checkout in turn, from a directory
outside both.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

_ONE = """
import json, logging, sys, tempfile
from pathlib import Path
import numpy as np
from korch.backends.reference import evaluate
from korch.candidates.enumerate import enumerate_candidates
from korch.ir.graph import GraphBuilder
from korch.ir.types import DType, TensorType
from korch.profile.database import ProfileDB, machine_fingerprint
from korch.profile.profiler import profile
from korch.settings import ProfileSettings
logging.disable(logging.WARNING)
rng = np.random.default_rng(0)
b = GraphBuilder("convs", fold=lambda node, args: evaluate(node, args))
h = b.add_input("x", TensorType((1, 64, 26, 26), DType.FLOAT32))
for cin, cout in [(64, 64), (64, 128), (128, 64), (64, 80), (80, 64), (64, 32), (32, 64)]:
    w = b.add_constant((rng.standard_normal((cout, cin, 1, 1)) * 0.1).astype(np.float32))
    h = b.emit("relu", [b.emit("conv", [h, w], {"strides": (1, 1), "pads": (0, 0, 0, 0), "dilations": (1, 1),
                                                "group": 1})])
graph = b.build([("y", h)])
convs = [c for c in enumerate_candidates(graph) if c.size == 1 and graph.nodes[c.nodes[0]].op == "conv"]
out = {}
with tempfile.TemporaryDirectory() as d, ProfileDB(Path(d) / "profiles.sqlite") as db:
    for backend in ("inductor", "onnxruntime"):
        got = profile(graph, {backend: convs}, db, int(sys.argv[1]), machine_fingerprint(), ProfileSettings())
        out[backend] = [got.records[(c.key, backend)].median_s for c in convs]
print(json.dumps(out))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    rows = []
    for run in range(args.runs):
        done = subprocess.run([sys.executable, "-c", _ONE, str(args.threads)], capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"run {run + 1} failed:\n{done.stderr[-2000:]}")
        times = json.loads(done.stdout.splitlines()[-1])
        rows.append(times)
        print(f"run {run + 1}: " + "; ".join(f"{b} median {statistics.median(t) * 1e3:.3f} ms, slowest "
                                             f"{max(t) * 1e3:.3f}" for b, t in times.items()), flush=True)
    print("\n| backend | run medians of the seven profiles, ms | runs with a profile over 1 ms |")
    print("|---|---|---:|")
    for backend in rows[0]:
        medians = " / ".join(f"{statistics.median(r[backend]) * 1e3:.3f}" for r in rows)
        slow = sum(1 for r in rows if max(r[backend]) > 1e-3)
        print(f"| {backend} | {medians} | {slow} of {len(rows)} |")


if __name__ == "__main__":
    main()
