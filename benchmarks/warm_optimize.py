"""Warm `korch optimize`: wall time of the whole command on a cache that already holds the model's
profiles and remembered selection, for one or more korch checkouts side by side.

    python benchmarks/warm_optimize.py --cache CACHE_ROOT MODEL [MODEL ...] [--checkout DIR ...]
                                       [--runs 3] [--threads 2]

CACHE_ROOT/MODEL is a profile cache of a finished optimize of MODEL (a cold run made it). Each
checkout gets its own copy of it, runs once untimed (a checkout may store what it remembers
differently), then the checkouts run in turn, `--runs` times each, `python -m korch optimize` from
their own directory (PYTHONPATH=DIR). Prints median (min-max) wall seconds per model and checkout.
Without --checkout, the korch this script belongs to runs alone.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def optimize(checkout: Path, model: str, cache: Path, plan: Path, threads: int) -> float:
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "korch", "optimize", model, "-o", str(plan), "--threads", str(threads),
                    "--cache", str(cache)], cwd=checkout, env=env, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="+")
    parser.add_argument("--cache", required=True, type=Path, help="directory with one profile cache per model")
    parser.add_argument("--checkout", type=Path, action="append", help="a korch checkout (repeat to compare)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    checkouts = args.checkout or [ROOT]
    print("| model | " + " | ".join(str(c) for c in checkouts) + " |")
    print("|---|" + "---:|" * len(checkouts))
    with tempfile.TemporaryDirectory(prefix="korch-warm-") as tmp:
        for model in args.models:
            caches = []
            for k, checkout in enumerate(checkouts):
                cache = Path(tmp) / f"{model}-{k}"
                shutil.copytree(args.cache / model, cache)
                optimize(checkout, model, cache, Path(tmp) / f"plan-{k}", args.threads)      # untimed
                caches.append(cache)
            seconds: list[list[float]] = [[] for _ in checkouts]
            for _ in range(args.runs):
                for k, checkout in enumerate(checkouts):
                    time.sleep(2)
                    seconds[k].append(optimize(checkout, model, caches[k], Path(tmp) / f"plan-{k}", args.threads))
            cells = [f"{statistics.median(s):.1f} ({min(s):.1f}-{max(s):.1f})" for s in seconds]
            print(f"| {model} | " + " | ".join(cells) + " |", flush=True)
            for cache in caches:
                shutil.rmtree(cache)


if __name__ == "__main__":
    main()
