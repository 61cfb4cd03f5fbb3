"""How long `korch.load` of a saved plan takes, with the plan's files out of and in the page cache,
and how big the plan is on disk.

    python benchmarks/plan_load.py PLAN_DIR [PLAN_DIR ...] [--runs 3]

Each load runs in a fresh Python process (what a deployment pays): the time to import korch and the
time of `korch.load(PLAN_DIR)` (checking the manifest, reading the plan, compiling or loading every
kernel), then one run on zeros so nothing is left lazy. "Cold" first asks the kernel to drop the
plan's files from the page cache (posix_fadvise DONTNEED: clean pages of files this user can read;
the engines' own libraries and caches, Inductor's included, stay as they are); "warm" loads again
right after. Size counts each file once (hard links in a bucketed plan).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import numpy as np
import korch
t1 = time.perf_counter()
session = korch.load(sys.argv[1])
t2 = time.perf_counter()
feeds = {}
plan = getattr(session, "plan", None) or session.plans.buckets[0].plan
for name in plan.graph.inputs:
    t = plan.graph.types[name]
    feeds[name] = np.zeros(t.shape, t.dtype.numpy)
session.run(None, feeds)
print(json.dumps({"import_s": t1 - t0, "load_s": t2 - t1, "first_run_s": time.perf_counter() - t2}))
"""


def plan_files(directory: Path) -> list[Path]:
    return [p for p in directory.rglob("*") if p.is_file()]


def size_bytes(directory: Path) -> int:
    seen, total = set(), 0
    for p in plan_files(directory):
        st = p.stat()
        if (st.st_dev, st.st_ino) not in seen:
            seen.add((st.st_dev, st.st_ino))
            total += st.st_size
    return total


def drop_from_page_cache(directory: Path) -> None:
    for p in plan_files(directory):
        fd = os.open(p, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def load_once(directory: Path) -> dict[str, float]:
    out = subprocess.run([sys.executable, "-c", CHILD, str(directory)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("plans", nargs="+", type=Path)
    parser.add_argument("--runs", type=int, default=3, help="cold and warm loads per plan (medians)")
    args = parser.parse_args()
    print("| plan | kernels | size MB | import korch s | load cold s | load warm s | first run s |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for directory in args.plans:
        cold, warm = [], []
        for _ in range(args.runs):
            drop_from_page_cache(directory)
            cold.append(load_once(directory))
            warm.append(load_once(directory))
        meta = directory / "plan.json"
        kernels = "buckets" if not meta.exists() else ", ".join(
            f"{b} {n}" for b, n in sorted(_count(json.loads(meta.read_text())["steps"]).items()))
        print(f"| {directory.name} | {kernels} | {size_bytes(directory) / 1e6:.1f} "
              f"| {statistics.median(r['import_s'] for r in warm):.2f} "
              f"| {statistics.median(r['load_s'] for r in cold):.2f} | {statistics.median(r['load_s'] for r in warm):.2f} "
              f"| {statistics.median(r['first_run_s'] for r in warm):.3f} |", flush=True)


def _count(steps: list[dict]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for s in steps:
        counts[s["backend"]] = counts.get(s["backend"], 0) + 1
    return counts


if __name__ == "__main__":
    main()
