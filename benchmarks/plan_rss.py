"""Run RSS of saved plans against onnxruntime and OpenVINO running the model they were made from.

    python benchmarks/plan_rss.py PLAN_DIR=MODEL.onnx [PLAN_DIR=MODEL.onnx ...] [--threads 2] [--runs 3]

Each figure is the peak resident set (VmHWM) of a fresh process that loads the plan (or makes the
engine's session from the ONNX file) and runs it 5 times on zeros (korch.bench_rss), repeated
--runs times in turn; the table gives the median (min-max) in MB and korch over onnxruntime's
median. The same process has read 666 to 858 MB on one plan, run to run, so one reading is not a
figure.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

SYSTEMS = ("korch", "onnxruntime", "openvino")


def peak_mb(system: str, target: str, threads: int) -> float:
    out = subprocess.run([sys.executable, "-m", "korch.bench_rss", system, target, str(threads)],
                         capture_output=True, text=True, check=True).stdout
    return float(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("pairs", nargs="+", metavar="PLAN_DIR=MODEL.onnx")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    print("| plan | korch MB | onnxruntime MB | OpenVINO MB | korch / onnxruntime |")
    print("|---|---:|---:|---:|---:|")
    for pair in args.pairs:
        plan, _, model = pair.partition("=")
        targets = {"korch": plan, "onnxruntime": model, "openvino": model}
        readings: dict[str, list[float]] = {s: [] for s in SYSTEMS}
        for _ in range(args.runs):
            for system in SYSTEMS:
                readings[system].append(peak_mb(system, targets[system], args.threads))
        med = {s: statistics.median(v) for s, v in readings.items()}
        cells = [f"{med[s]:,.1f} ({min(readings[s]):,.1f}-{max(readings[s]):,.1f})" for s in SYSTEMS]
        print(f"| {Path(plan).name} | {' | '.join(cells)} | {med['korch'] / med['onnxruntime']:.2f} |", flush=True)


if __name__ == "__main__":
    main()
