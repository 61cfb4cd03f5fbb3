"""What a cold optimize's fission stage costs in memory: the model read, rewritten, fissioned and the
rewrites checked (onnxruntime on the rewritten model and on the model's file, the float64 reference
where they differ by more than rtol), as `korch optimize` runs it on a model it has not checked yet.

    python benchmarks/fission_peak.py MODEL [MODEL ...] [--cache DIR]

Each MODEL (an .onnx file, or a zoo name whose export is cached in DIR, as `korch optimize --cache`)
is run in a fresh process of its own, with korch's heap policy set first as the CLI sets it
(heap.keep_freed_blocks). Prints per model the rewrites applied, the process's peak RSS (ru_maxrss,
MiB) and the seconds run_fission took. To compare two commits, run it with PYTHONPATH set to each
checkout in turn, from a directory outside both.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

_ONE = """
import json, sys, time
from korch.heap import keep_freed_blocks, peak_rss_mib
keep_freed_blocks()
from korch.pipeline import run_fission
t = time.perf_counter()
done = run_fission(sys.argv[1], rewrite=True, cache_dir=sys.argv[2] or None)
print(json.dumps({"rewrites": len(done.rewrites), "peak_mib": peak_rss_mib(), "seconds": time.perf_counter() - t}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="+")
    parser.add_argument("--cache", default="", help="where zoo exports are cached (korch optimize --cache)")
    args = parser.parse_args()
    print("| model | rewrites | fission-stage peak MiB | seconds |")
    print("|---|---:|---:|---:|")
    for model in args.models:
        done = subprocess.run([sys.executable, "-c", _ONE, model, args.cache], capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"{model}: {done.stderr.strip().splitlines()[-1] if done.stderr.strip() else 'failed'}")
        got = json.loads(done.stdout.strip().splitlines()[-1])
        print(f"| {model} | {got['rewrites']} | {got['peak_mib']:,.0f} | {got['seconds']:.1f} |", flush=True)


if __name__ == "__main__":
    main()
