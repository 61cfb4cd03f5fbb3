"""How many rounds the boundary calibration needs: repeated calibrations at two round counts, interleaved.

    python benchmarks/calibration_rounds.py [--threads 2] [--rounds 7,4] [--repeats 3]

Runs korch's calibration (korch/profile/boundaries.py, default settings but the rounds) `--repeats`
times at each round count, alternating, and prints each calibration's seconds and, per fitted line,
its cost for a 1 MiB tensor in every run (a kernel start: its fixed cost) with the spread (max - min)
over the runs of each round count, and the sum of the chains' spreads (the starts are timed over
`start_rounds` whatever the rounds: their spreads are the machine's alone). If the fewer rounds spread
no wider than the more, the run-to-run differences are the machine's, not the rounds'.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

MIB = 2 ** 20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", default="7,4", help="two or more round counts, comma-separated")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    from korch.api import default_backends
    from korch.profile.boundaries import KERNEL_START, CalibrationSettings, calibrate

    counts = [int(r) for r in args.rounds.split(",")]
    engines = list(default_backends())
    costs: dict[int, list[dict[tuple[str, str, str], float]]] = {r: [] for r in counts}
    for repeat in range(args.repeats):
        for rounds in counts:
            t0 = time.perf_counter()
            model, _ = calibrate(engines, args.threads, CalibrationSettings(rounds=rounds))
            print(f"repeat {repeat + 1}, {rounds} rounds: {time.perf_counter() - t0:.1f} s", flush=True)
            costs[rounds].append({key: line(MIB) for key, line in model.lines.items()})
    print(f"\n{', '.join(engines)} at {args.threads} threads; cost of a 1 MiB boundary (a start: its fixed cost), "
          f"us, per run, and the spread over the runs")
    print("| line | " + " | ".join(f"{r} rounds | spread" for r in counts) + " |")
    print("|---|" + "---|---:|" * len(counts))
    total = {r: 0.0 for r in counts}
    for key in sorted(costs[counts[0]][0]):
        cells = []
        for r in counts:
            values = [run[key] * 1e6 for run in costs[r]]
            if key[2] != KERNEL_START:
                total[r] += max(values) - min(values)
            cells.append(" ".join(f"{v:.1f}" for v in values) + f" | {max(values) - min(values):.1f}")
        print(f"| {' '.join(key)} | " + " | ".join(cells) + " |")
    print("| sum of the chains' spreads | " + " | ".join(f" | {total[r]:.1f}" for r in counts) + " |")


if __name__ == "__main__":
    main()
