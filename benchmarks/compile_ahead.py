"""What compiling Inductor's kernels ahead in worker processes saves a cold optimize.

    python benchmarks/compile_ahead.py MODEL [--workers 0 1 2] [--cache DIR] [--threads 2]

Takes the candidates `korch optimize` gives Inductor on MODEL (profile_pools: its budget of small
candidates and its largest regions) and gets a runnable kernel of each, in a fresh process with an
empty Inductor cache (as on a machine that never compiled them), three ways:

- workers 0: compiled one after another in the process, as the profiler does without workers;
- workers W >= 1: compiled ahead by korch's profile/ahead.py in W worker processes (the largest
  first), then each loaded in the process, as the profiler does with them; a kernel with more
  constant bytes than ProfileSettings.compile_ahead_max_bytes is compiled in the process, as the
  profiler does.

Prints the wall time until every kernel is runnable in the process (workers' start-up, compiles
and loads included), and how many were compiled ahead and loaded. The ways run one after another
(W as given), nothing else running.

`--cache DIR`: where the zoo model's export is cached (as `korch optimize --cache`).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def one(model: str, cache: str | None, threads: int, workers: int) -> dict:
    from korch.backends import CompileOptions, get_backend
    from korch.candidates import extract_subgraph
    from korch.pipeline import enumerate_all, profile_pools, run_fission
    from korch.profile.ahead import AheadJob, compile_ahead, constant_bytes
    from korch.profile.profiler import job_work
    from korch.settings import OptimizeSettings

    settings = OptimizeSettings(threads=threads, backends=("onnxruntime", "inductor"))
    graph = run_fission(model, cache_dir=cache).graph
    cands = list({c.key: c for c in profile_pools(graph, enumerate_all(graph, settings), settings)["inductor"]}.values())
    backend = get_backend("inductor")
    options = CompileOptions(threads=threads)
    subs = [extract_subgraph(graph, c) for c in cands]
    loaded = 0
    t0 = time.perf_counter()
    if workers == 0:
        for sub in subs:
            backend.compile(sub, options)
    else:
        bound = settings.profile.compile_ahead_max_bytes      # larger ones the profiler compiles in place
        jobs = [AheadJob((c.key, "inductor"), sub, options, job_work(c.size)) for c, sub in zip(cands, subs)
                if constant_bytes(sub) <= bound]
        with tempfile.TemporaryDirectory() as tmp:
            ahead = compile_ahead(jobs, workers, Path(tmp))
            for c, sub in zip(cands, subs):
                saved = ahead.saved.get((c.key, "inductor"))
                if saved is not None:
                    backend.load_kernel(saved, sub, options)
                    loaded += 1
                else:
                    backend.compile(sub, options)
    return {"workers": workers, "kernels": len(subs), "loaded": loaded, "seconds": time.perf_counter() - t0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--cache", default=None)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)      # run one way in this process
    args = parser.parse_args()
    if args.one is not None:
        print(json.dumps(one(args.model, args.cache, args.threads, args.one)))
        return
    print(f"| {args.model} | workers | kernels | compiled ahead and loaded | s until all are runnable |")
    print("|---|---:|---:|---:|---:|")
    for w in args.workers:
        with tempfile.TemporaryDirectory() as inductor_cache:
            command = [sys.executable, __file__, args.model, "--threads", str(args.threads), "--one", str(w)]
            if args.cache:
                command += ["--cache", args.cache]
            out = subprocess.run(command, env=dict(os.environ, TORCHINDUCTOR_CACHE_DIR=inductor_cache), check=True,
                                 stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True).stdout
        r = json.loads(out.strip().splitlines()[-1])
        print(f"| | {w} | {r['kernels']} | {r['loaded']} | {r['seconds']:.1f} |", flush=True)


if __name__ == "__main__":
    main()
