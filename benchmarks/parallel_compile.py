"""Would compiling Inductor candidates in worker processes shorten a cold optimize on this machine?

    python benchmarks/parallel_compile.py MODEL [--workers 1 2] [--cache DIR] [--threads 2]

Takes the candidates `korch optimize` gives Inductor on MODEL (profile_pools: its budget of small
candidates and its largest regions) and compiles all of them, as the profiler does (the backend's
compile, for the plan's threads), split round-robin over W worker processes started together, sharing
one Inductor code cache, empty at the start (a cold optimize's; a C++ kernel one worker built is
found by the others, as it would be by one process). For each W it prints the wall time
until the last worker is done, and the CPU seconds the workers and their children (Inductor's C++
compiler processes) used. A process per W-th share is what parallel compiles would cost; if one
process already keeps the cores busy, W = 2 takes as long as W = 1.

`--cache DIR`: where the zoo model's export is cached (as `korch optimize --cache`).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

_WORKER = """
import json, resource, sys, time
from korch.backends import CompileOptions, get_backend
from korch.candidates import extract_subgraph
from korch.pipeline import enumerate_all, profile_pools, run_fission
from korch.settings import OptimizeSettings

model, cache, threads, share, workers = sys.argv[1], sys.argv[2] or None, int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
settings = OptimizeSettings(threads=threads, backends=("onnxruntime", "inductor"))
graph = run_fission(model, cache_dir=cache).graph
jobs = list({c.key: c for c in profile_pools(graph, enumerate_all(graph, settings), settings)["inductor"]}.values())
backend = get_backend("inductor")
import torch  # noqa: F401  (imported before the clock starts, as in an optimize that already profiled)
t0 = time.perf_counter()
mine = jobs[share::workers]
for cand in mine:
    backend.compile(extract_subgraph(graph, cand), CompileOptions(threads=threads))
print(json.dumps({"jobs": len(jobs), "compiled": len(mine), "seconds": time.perf_counter() - t0}))
"""


def run(model: str, cache: str, threads: int, workers: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        procs = [subprocess.Popen([sys.executable, "-c", _WORKER, model, cache, str(threads), str(k), str(workers)],
                                  env=dict(os.environ, TORCHINDUCTOR_CACHE_DIR=os.path.join(tmp, "inductor")),
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
                 for k in range(workers)]
        outputs = [json.loads(p.communicate()[0].strip().splitlines()[-1]) for p in procs]
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return {"workers": workers, "jobs": outputs[0]["jobs"], "compile_s": max(o["seconds"] for o in outputs),
            "wall_s": wall, "cpu_s": cpu}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--cache", default="")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    print(f"| {args.model} | workers | candidates | compiling s (slowest worker) | wall s (with start-up) | "
          "CPU s (workers + compilers) |")
    print("|---|---:|---:|---:|---:|---:|")
    for w in args.workers:
        r = run(args.model, args.cache, args.threads, w)
        print(f"| | {w} | {r['jobs']} | {r['compile_s']:.1f} | {r['wall_s']:.1f} | {r['cpu_s']:.1f} |", flush=True)


if __name__ == "__main__":
    main()
