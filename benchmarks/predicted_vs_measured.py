"""Predicted against measured time of each zoo model's best split plan, from a finished zoo_bench run.

    python benchmarks/predicted_vs_measured.py DIR [--threads 2] [names ...]

For every DIR/<model>-t<threads>/ that zoo_bench.py left, the selection is decided again over the
profiles it stored: a copy of its profile cache without the remembered selections, then `korch
optimize` (profiles all cached: nothing is re-timed but the plans). Printed per model, from the new
plan's summary: the best split plan's kernels, its predicted time (kernel profiles plus calibrated
boundary costs) and the boundary part, its measured time, the ratio measured / predicted, and what
was kept and why. The copy is deleted afterwards; DIR is left as it was.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path


def decide_again(work: Path, name: str, threads: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp) / "profile-cache"
        shutil.copytree(work / "profile-cache", cache)
        with sqlite3.connect(cache / "profiles.sqlite") as conn:
            conn.execute("DELETE FROM selections")
        plan_dir = Path(tmp) / "plan"
        cmd = [sys.executable, "-m", "korch", "-q", "optimize", name, "-o", str(plan_dir), "--threads", str(threads),
               "--cache", str(cache)]
        done = subprocess.run(cmd, check=False, capture_output=True, text=True,
                              env={**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(work / "inductor-cache")})
        if done.returncode != 0:
            return {"model": name, "error": (done.stdout + done.stderr)[-500:]}
        summary = json.loads((plan_dir / "plan.json").read_text())["summary"]
    return {"model": name, **summary}


def _num(ms: float | None) -> str:
    return "-" if ms is None else f"{ms:.2f}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("dir", type=Path)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("names", nargs="*")
    args = p.parse_intermixed_args(argv)
    works = sorted(args.dir.glob(f"*-t{args.threads}"))
    names = args.names or [w.name[: -len(f"-t{args.threads}")] for w in works]
    print("| model | split kernels | predicted ms | measured ms | measured / predicted | plans run | "
          "kernels costed in a plan | kept | solver s |")
    print("|---|---|---|---|---|---|---|---|---|")
    rows = []
    for name in names:
        r = decide_again(args.dir / f"{name}-t{args.threads}", name, args.threads)
        rows.append(r)
        if "error" in r:
            print(f"| {name} | error: {r['error']!r} |")
            continue
        pred, meas = r.get("split_predicted_ms"), r.get("split_measured_ms")
        cells = [name, str(r.get("split_kernels") or "-"), _num(pred), _num(meas),
                 f"{meas / pred:.2f}" if pred and meas else "-", str(r.get("selection_rounds", "-")),
                 str(r.get("in_plan_costs", "-")), r["kept"], f"{r['solve_seconds']:.2f}"]
        print("| " + " | ".join(cells) + " |", flush=True)
        print(f"    why: {r['why']}", file=sys.stderr, flush=True)
    (args.dir / f"predicted-vs-measured-t{args.threads}.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
