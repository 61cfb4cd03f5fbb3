"""What guided profiling costs in plan quality, and what it saves in profiling, for one held-out model.

    python benchmarks/guided_regret.py --cache DIR [--threads 2] [--rounds 30] MODEL [MODEL ...]

DIR is a cache that `costmodel_quality.py collect` filled with every candidate of every model
profiled (the exhaustive answer). For each MODEL, in a scratch copy of DIR:

- held out: every profile of a kernel seen in MODEL is deleted (and the remembered selections,
  guided problems and saved cost models), so MODEL is new to the cost models, which learn from the
  other models only; then `optimize` runs with guided profiling, as a user's first optimize of a new
  model on a machine that has optimized others;
- exhaustive: the same optimize on the full copy with guided profiling off (every candidate profiled
  already; only selection runs).

It prints the pairs each one profiled, the guided optimize's wall time, and both plans timed side by
side, interleaved in this process (median, p10-p90), and the regret: guided plan / exhaustive plan - 1.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from korch.api import default_backends  # noqa: E402
from korch.pipeline import optimize  # noqa: E402
from korch.profile.database import DB_FILENAME, ProfileDB  # noqa: E402
from korch.profile.timing import interleaved  # noqa: E402
from korch.settings import OptimizeSettings  # noqa: E402
from korch.verify import random_feeds  # noqa: E402


def held_out_copy(cache: Path, model: str, into: Path) -> int:
    """A copy of the cache without any profile of a kernel seen in `model`; returns how many were deleted."""
    shutil.copytree(cache, into, ignore=shutil.ignore_patterns("costmodels", "*-wal", "*-shm"))
    with sqlite3.connect(into / DB_FILENAME) as conn:
        gone = conn.execute("DELETE FROM profiles WHERE candidate_key IN "
                            "(SELECT candidate_key FROM sightings WHERE model = ?)", (model,)).rowcount
        conn.execute("DELETE FROM selections")
        conn.execute("DELETE FROM guided")
    return gone


def run(model: str, cache: Path, threads: int, rounds: int) -> dict:
    base = OptimizeSettings(threads=threads, backends=default_backends())
    with tempfile.TemporaryDirectory() as tmp:
        held = Path(tmp) / "held-out"
        deleted = held_out_copy(cache, model, held)
        full = Path(tmp) / "full"
        shutil.copytree(cache, full, ignore=shutil.ignore_patterns("costmodels", "*-wal", "*-shm"))
        with sqlite3.connect(full / DB_FILENAME) as conn:
            conn.execute("DELETE FROM selections")
        t0 = time.perf_counter()
        with ProfileDB(held / DB_FILENAME) as db:
            g_plan, g_session, g = optimize(model, db, base)
        guided_s = time.perf_counter() - t0
        off = replace(base, profile=replace(base.profile, guided=False))
        with ProfileDB(full / DB_FILENAME) as db:
            e_plan, e_session, e = optimize(model, db, off)
        feeds = random_feeds(g_plan.graph, 7)
        timings = interleaved({"guided": lambda: g_session.run(None, feeds),
                               "exhaustive": lambda: e_session.run(None, feeds)},
                              rounds, warmup=3, settle_s=0.05, turn_warmup=1)
    pairs = e.profiled_new + e.profiled_cached
    result = {
        "model": model, "threads": threads, "deleted_profiles": deleted,
        "guided_profiled_new": g.profiled_new, "guided_profiled_cached": g.profiled_cached,
        "exhaustive_pairs": pairs, "guided_backends": list(g.guide.backends), "guide_rounds": g.guide.rounds,
        "guide_stable": g.guide.stable, "guide_skipped": g.guide.skipped, "guided_optimize_s": guided_s,
        "guided_kernels": g.selection.kernels, "exhaustive_kernels": e.selection.kernels,
        "guided_kept": g.selection.kept, "exhaustive_kept": e.selection.kept,
        "guided_ms": {k: getattr(timings["guided"], k) * 1e3 for k in ("median_s", "p10_s", "p90_s")},
        "exhaustive_ms": {k: getattr(timings["exhaustive"], k) * 1e3 for k in ("median_s", "p10_s", "p90_s")},
    }
    result["regret"] = timings["guided"].median_s / timings["exhaustive"].median_s - 1
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cache", required=True, type=Path)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--verbose", action="store_true", help="log what guided profiling does")
    parser.add_argument("models", nargs="+")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    if args.verbose:
        logging.getLogger("korch.profile").setLevel(logging.INFO)
        logging.getLogger("korch.costmodel").setLevel(logging.INFO)
    results = []
    print("| model | profiled (guided) | profiled (all) | guided optimize s | solves | kernels guided / all | "
          "guided ms p10–p90 | exhaustive ms p10–p90 | regret |")
    print("|---|---:|---:|---:|---:|---|---|---|---:|")
    for model in args.models:
        r = run(model, args.cache, args.threads, args.rounds)
        results.append(r)
        g, e = r["guided_ms"], r["exhaustive_ms"]
        print(f"| {model} | {r['guided_profiled_new']} | {r['exhaustive_pairs']} | {r['guided_optimize_s']:.0f} | "
              f"{r['guide_rounds']} | {r['guided_kernels']} / {r['exhaustive_kernels']} | "
              f"{g['median_s']:.2f} ({g['p10_s']:.2f}–{g['p90_s']:.2f}) | "
              f"{e['median_s']:.2f} ({e['p10_s']:.2f}–{e['p90_s']:.2f}) | {r['regret'] * 100:+.1f}% |", flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    if results:
        print(f"median regret {statistics.median(r['regret'] for r in results) * 100:+.1f}%")


if __name__ == "__main__":
    main()
