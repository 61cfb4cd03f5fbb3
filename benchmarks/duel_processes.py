"""Does a duel between two engines' whole models give the same verdict in another process?

    python benchmarks/duel_processes.py MODEL.onnx [--engines A,B] [--processes 8]
                                        [--duels 3] [--rounds 15] [--threads 2]

Measured selection decides between whole models by one duel in the optimizing process
(korch/select/measured.py `_duel`); the plan it keeps then runs in the user's processes. On
efficientvit-b1 the duel between onnxruntime and OpenVINO went onnxruntime's way in 2 of 6 selections
(by ~10%) where 30 rounds in another process had OpenVINO 8.8% faster. This script separates the two
sources of such a flip: each of `--processes` fresh processes builds both engines (the order of
building alternating from process to process) and runs `--duels` duels of `--rounds` rounds each,
all rounds, no early stop (`side_by_side`, as selection's duels). A and B: onnxruntime, openvino,
or plan:DIR, a plan `korch optimize` saved (e.g. one engine's whole model). Printed: every duel's
paired ratio (second engine's time over the first's, round by round), then the spread of the ratios
within a process against the spread of the processes' medians.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def _contender(engine: str, model: Path, threads: int):
    """An engine's call on fixed random inputs, or `plan:DIR`: a plan saved by `korch optimize`, loaded
    as its users load it (its thread count is the plan's)."""
    if engine.startswith("plan:"):
        import korch
        from korch.verify import random_feeds

        session = korch.load(engine[5:])
        feeds = random_feeds(session.plan.graph, 7)
        return lambda: session.run(None, feeds)
    from duel_noise import contender

    return contender(engine, model, threads)


def child(model: Path, engines: list[str], duels: int, rounds: int, threads: int, reverse: bool) -> dict:
    from korch.profile.timing import paired_ratio, side_by_side

    order = list(reversed(engines)) if reverse else engines
    fns = {e: _contender(e, model, threads) for e in order}
    fns = {e: fns[e] for e in engines}
    start = time.perf_counter()
    for _ in range(3):
        fns[engines[0]]()
    one = (time.perf_counter() - start) / 3
    out = []
    for _ in range(duels):
        t = side_by_side(fns, rounds, one, warmup=1)
        out.append({"ratio": paired_ratio(t[engines[0]], t[engines[1]]),
                    "ms": {e: t[e].median_s * 1e3 for e in engines}})
    return {"built": order, "duels": out}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", type=Path)
    parser.add_argument("--engines", default="onnxruntime,openvino")
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--duels", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    engines = args.engines.split(",")
    if len(engines) != 2:
        parser.error("--engines takes two engines")
    if args.child is not None:
        print(json.dumps(child(args.model, engines, args.duels, args.rounds, args.threads, bool(args.child))))
        return 0
    b, a = engines[1], engines[0]
    print(f"{args.model.name}: {b}/{a}, {args.threads} threads, {args.processes} processes x {args.duels} duels "
          f"of {args.rounds} rounds")
    medians, spreads = [], []
    for p in range(args.processes):
        cmd = [sys.executable, __file__, str(args.model), "--engines", args.engines, "--duels", str(args.duels),
               "--rounds", str(args.rounds), "--threads", str(args.threads), "--child", str(p % 2)]
        done = subprocess.run(cmd, capture_output=True, text=True, check=True)
        r = json.loads(done.stdout.strip().splitlines()[-1])
        ratios = [d["ratio"] for d in r["duels"]]
        medians.append(statistics.median(ratios))
        spreads.append(max(ratios) - min(ratios))
        ms = "; ".join(f"{d['ms'][a]:.1f}/{d['ms'][b]:.1f}" for d in r["duels"])
        print(f"process {p} (built {','.join(r['built'])}): ratios {' '.join(f'{x:.3f}' for x in ratios)}  "
              f"ms {a}/{b}: {ms}", flush=True)
    print(f"within a process: median range {statistics.median(spreads):.3f} (max {max(spreads):.3f}); "
          f"across processes: medians {min(medians):.3f}-{max(medians):.3f}, "
          f"{sum(m < 1 for m in medians)} of {len(medians)} favour {b}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
