"""What sampling a process's memory from outside costs the process: whole models timed with and
without another process reading its /proc files every 0.1 s, as zoo_bench samples an optimize.

    python benchmarks/tree_sampler_cost.py MODEL [--rounds 4] [--heap-gb 2] [--file smaps_rollup|statm]

This process holds a heap of `--heap-gb` (the optimizer held 2-3 GB on yolov4) and compiles each
engine's whole model as the profiler does; each round times them as the profiler times a whole
model, quiet and then with a sampler process reading `--file` of this process every 0.1 s. Printed:
the medians over rounds, and how long one read of the file takes here.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

SAMPLER = "import sys, time\nwhile True:\n    open(sys.argv[1]).read()\n    time.sleep(0.1)\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--heap-gb", type=float, default=2.0)
    parser.add_argument("--file", choices=["smaps_rollup", "statm"], default="smaps_rollup")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    from openvino_region import whole_model

    from korch.backends import CompileOptions
    from korch.ir.onnx_source import OnnxSource
    from korch.pipeline import run_fission
    from korch.profile.profiler import compile_candidate
    from korch.profile.timing import measure
    from korch.settings import ProfileSettings
    from korch.verify import random_feeds

    p = ProfileSettings()
    path = f"/proc/{os.getpid()}/{args.file}"
    with tempfile.TemporaryDirectory() as tmp:
        fissioned = run_fission(args.model, cache_dir=tmp)
        graph, model = fissioned.graph, fissioned.model
        source = OnnxSource(model, dict(fissioned.value_map or {}))
        whole = whole_model(graph, model)
        feeds = random_feeds(graph, 0)
        feed = [feeds[n] for n in whole.inputs]
        options = CompileOptions(threads=args.threads, runs_alone=True)          # as the profiler compiles it
        kernels = {e: compile_candidate(graph, whole, e, options, source) for e in ("onnxruntime", "openvino")}
        heap = bytearray(int(args.heap_gb * 2**30))
        for i in range(0, len(heap), 4096):          # touched: resident, as the optimizer's heap is
            heap[i] = 1
        times: dict[tuple[str, str], list[float]] = {}
        for r in range(args.rounds):
            for mode in ("quiet", "sampled"):
                sampler = subprocess.Popen([sys.executable, "-c", SAMPLER, path]) if mode == "sampled" else None
                time.sleep(0.3)
                for engine, kernel in kernels.items():
                    def call(k=kernel) -> None:
                        k.run(feed)
                    call()
                    t = measure(call, warmup=p.warmup, repeats=p.repeats, min_seconds=p.min_seconds,
                                precision=p.precision, max_seconds=max(p.whole_model_max_seconds or 0.0, p.min_seconds))
                    times.setdefault((engine, mode), []).append(t.median_s * 1e3)
                if sampler is not None:
                    sampler.kill()
                    sampler.wait()
            print(f"round {r + 1}/{args.rounds}: " + ", ".join(f"{e} {m} {v[-1]:.1f} ms" for (e, m), v in times.items()),
                  flush=True)
        t0 = time.perf_counter()
        with open(path) as f:
            f.read()
        read_ms = (time.perf_counter() - t0) * 1e3
    print(f"\n{args.model}, {args.threads} threads, a {args.heap_gb:g} GB heap, {args.file} read every 0.1 s "
          f"(one read: {read_ms:.2f} ms)")
    print("| engine | quiet ms | sampled ms | sampled / quiet |")
    print("|---|---:|---:|---:|")
    for engine in kernels:
        q, s = statistics.median(times[(engine, "quiet")]), statistics.median(times[(engine, "sampled")])
        print(f"| {engine} | {q:.1f} | {s:.1f} | {s / q:.3f} |")


if __name__ == "__main__":
    main()
