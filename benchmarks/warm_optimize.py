"""Warm `korch optimize`: wall time of the whole command on a cache that already holds the model's
profiles and remembered selection, for one or more korch checkouts side by side.

    python benchmarks/warm_optimize.py --cache CACHE_ROOT MODEL [MODEL ...] [--checkout DIR ...]
                                       [--runs 3] [--threads 2]
    python benchmarks/warm_optimize.py --from-cold MODEL [MODEL ...] [--checkout DIR ...] ...

CACHE_ROOT/MODEL is a profile cache of a finished optimize of MODEL (a cold run made it). Each
checkout gets its own copy of it, runs once untimed (a checkout may store what it remembers
differently), then the checkouts run in turn, `--runs` times each, `python -m korch optimize` from
their own directory (PYTHONPATH=DIR). Prints median (min-max) wall seconds per model and checkout,
and the largest peak RSS of those runs (the korch process, from wait4).
Without --checkout, the korch this script belongs to runs alone.

`--from-cold`: no cache is given; each checkout first optimizes MODEL cold into an empty cache of
its own (untimed; the checkouts in turn, not side by side), and the warm run right after it, the
first a user meets, is timed apart from the later ones ("first; later median (min-max)"): work a
cold run leaves to the next, such as retraining a cost model the database outgrew, shows there.
Each cold run compiles with an Inductor cache of its own, as zoo_bench's do.
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


def optimize(checkout: Path, model: str, cache: Path, plan: Path, threads: int) -> tuple[float, float]:
    """Wall seconds of one `korch optimize`, and its process's peak RSS in MiB (wait4's ru_maxrss)."""
    env = {**os.environ, "PYTHONPATH": str(checkout), "TORCHINDUCTOR_CACHE_DIR": str(cache / "inductor-cache")}
    t0 = time.perf_counter()
    child = subprocess.Popen([sys.executable, "-m", "korch", "optimize", model, "-o", str(plan), "--threads",
                              str(threads), "--cache", str(cache)], cwd=checkout, env=env, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    seconds = time.perf_counter() - t0
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode:
        raise subprocess.CalledProcessError(child.returncode, child.args)
    return seconds, usage.ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="+")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--cache", type=Path, help="directory with one profile cache per model")
    source.add_argument("--from-cold", action="store_true", help="each checkout optimizes each model cold first")
    parser.add_argument("--checkout", type=Path, action="append", help="a korch checkout (repeat to compare)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    checkouts = args.checkout or [ROOT]
    print("| model | " + " | ".join(str(c) for c in checkouts) + " |")
    print("|---|" + "---:|" * len(checkouts))
    with tempfile.TemporaryDirectory(prefix="korch-warm-") as tmp:
        for model in args.models:
            caches, first = [], []
            for k, checkout in enumerate(checkouts):
                cache = Path(tmp) / f"{model}-{k}"
                if args.from_cold:
                    cache.mkdir()
                    optimize(checkout, model, cache, Path(tmp) / f"plan-{k}", args.threads)  # cold, untimed
                    time.sleep(2)
                else:
                    shutil.copytree(args.cache / model, cache)
                first.append(optimize(checkout, model, cache, Path(tmp) / f"plan-{k}", args.threads)[0])
                caches.append(cache)
            seconds: list[list[float]] = [[] for _ in checkouts]
            peaks: list[list[float]] = [[] for _ in checkouts]
            for _ in range(args.runs):
                for k, checkout in enumerate(checkouts):
                    time.sleep(2)
                    wall, peak = optimize(checkout, model, caches[k], Path(tmp) / f"plan-{k}", args.threads)
                    seconds[k].append(wall)
                    peaks[k].append(peak)
            cells = [f"{statistics.median(s):.1f} ({min(s):.1f}-{max(s):.1f}), {max(p):,.0f} MiB"
                     for s, p in zip(seconds, peaks)]
            if args.from_cold:
                cells = [f"{f:.1f}; {cell}" for f, cell in zip(first, cells)]
            print(f"| {model} | " + " | ".join(cells) + " |", flush=True)
            for cache in caches:
                shutil.rmtree(cache)


if __name__ == "__main__":
    main()
