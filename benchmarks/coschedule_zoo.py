"""Co-scheduling on the zoo: the best split plan one step after another against its schedule, and
korch against the best peer, at the given threads.

    python benchmarks/coschedule_zoo.py --cache CACHE_ROOT --out OUT MODEL [MODEL ...] [--threads 2]

For each model, CACHE_ROOT/MODEL (a profile cache of an earlier optimize: its profiles are reused,
so only selection runs again) is copied to OUT/MODEL-cache, then, one process each:

1. `korch optimize MODEL --threads T --cache OUT/MODEL-cache -o OUT/MODEL.plan`. Measured selection
   schedules the best split plan (korch/select/coschedule.py) and times it against the same plan one
   step after another, side by side (the plan's summary keeps both, with p10-p90), before the split
   plan meets the engines' whole-model kernels.
2. `korch bench MODEL --plan OUT/MODEL.plan --threads T`: the kept plan against onnxruntime,
   torch.compile and OpenVINO, side by side (bench.json in the plan directory).

Prints one markdown table row per model. A split plan predicted far slower than a whole model is not
compiled, so it has no schedule to measure: the row says so.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def korch(*args: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, "-m", "korch", *args], cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL)


def ms(median: float | None, p10: float | None = None, p90: float | None = None) -> str:
    if median is None:
        return "-"
    return f"{median:.2f}" + (f" ({p10:.2f}-{p90:.2f})" if p10 is not None and p90 is not None else "")


def row(model: str, plan: Path) -> str:
    summary = json.loads((plan / "plan.json").read_text())["summary"]
    bench = json.loads((plan / "bench.json").read_text())
    sch = summary.get("schedule") or {}
    split = summary.get("split_kernels")
    if sch.get("sequential_ms") is not None:
        seq = ms(sch["sequential_ms"], sch["sequential_p10_ms"], sch["sequential_p90_ms"])
        par = ms(sch["scheduled_ms"], sch["scheduled_p10_ms"], sch["scheduled_p90_ms"])
        ratio = f"{sch['sequential_ms'] / sch['scheduled_ms']:.2f}x"
        shape = f"{sch['concurrent_steps']} / {sch['narrow_steps']} of {split}"
    else:
        seq = par = ratio = "-"
        shape = sch.get("why") or ("no split plan compiled" if split is None or summary.get("split_measured_ms") is None
                                   else "-")
        if split is not None and summary.get("split_measured_ms") is None:
            shape = (f"split plan ({split} kernels) not compiled: predicted {summary['split_predicted_ms']:.1f} ms")
    kept = summary["kept"] if summary["kept"] != "split" else "split plan" + (" (scheduled)" if sch.get("kept") else "")
    best = bench["vs_best"]
    k = bench["systems"]["korch"]
    return (f"| {model} | {shape} | {seq} | {par} | {ratio} | {'yes' if sch.get('kept') else 'no'} | {kept} | "
            f"{ms(k['median_ms'], k['p10_ms'], k['p90_ms'])} | {best['speedup']:.2f}x vs {best['peer']} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="+")
    parser.add_argument("--cache", required=True, type=Path, help="directory with one profile cache per model")
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    print("| model | side by side / on fewer threads, of the split plan's kernels | split plan one step after "
          "another ms | scheduled ms | gain | schedule kept | plan kept | korch ms | vs best peer |")
    print("|---|---|---:|---:|---:|---|---|---:|---|")
    for model in args.models:
        cache = args.out / f"{model}-cache"
        if not cache.exists():
            shutil.copytree(args.cache / model, cache)
        plan = args.out / f"{model}.plan"
        korch("optimize", model, "--threads", str(args.threads), "--cache", str(cache), "-o", str(plan))
        korch("bench", model, "--plan", str(plan), "--threads", str(args.threads), "--cache", str(cache))
        print(row(model, plan), flush=True)


if __name__ == "__main__":
    main()
