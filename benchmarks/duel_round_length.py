"""How far a duel's verdict moves with the number of calls timed per round.

    python benchmarks/duel_round_length.py MODEL.onnx [--engines onnxruntime,openvino] [--duels 8]
                                           [--shapes 1x15,3x15,6x15] [--threads 2]

Selection's duels (korch/select/measured.py `_duel`) are `interleaved` rounds; before each turn a
60 ms settling pause and one untimed call (timing.SETTLE_SECONDS, TURN_WARMUP). A round timed one
call of a 15-20 ms model: most of the duel's time went to pausing, and its one call carried all of
the call's noise. Each shape CALLSxROUNDS is run `--duels` times in turn with the others (so the
machine's drift falls on all alike) over the same two contenders (duel_noise.py's: onnxruntime's
default session, OpenVINO as `korch bench` compiles it; twice the same engine for identical
contenders, whose true ratio is 1). Printed per shape: the duel's wall time, and the spread over duels
of the paired ratio (B over A round by round, the verdict selection reads).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from duel_noise import contender  # noqa: E402

from korch.profile.timing import SETTLE_SECONDS, TURN_WARMUP, interleaved, paired_ratio  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", type=Path)
    parser.add_argument("--engines", default="onnxruntime,openvino")
    parser.add_argument("--duels", type=int, default=8)
    parser.add_argument("--shapes", default="1x15,3x15,6x15", help="CALLSxROUNDS, comma-separated")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    engines = args.engines.split(",")
    if len(engines) != 2:
        parser.error("--engines takes two engines")
    shapes = [tuple(int(x) for x in s.split("x")) for s in args.shapes.split(",")]
    fns = {f"{e}#{k}": contender(e, args.model, args.threads) for k, e in enumerate(engines)}
    a, b = fns
    start = time.perf_counter()
    for _ in range(3):
        fns[a]()
    print(f"{args.model.name}: {b} / {a}, {args.threads} threads, one call {(time.perf_counter() - start) / 3 * 1e3:.1f} ms, "
          f"{args.duels} duels per shape")
    ratios: dict[tuple[int, ...], list[float]] = {s: [] for s in shapes}
    walls: dict[tuple[int, ...], list[float]] = {s: [] for s in shapes}
    for _ in range(args.duels):
        for shape in shapes:
            calls, rounds = shape
            t0 = time.perf_counter()
            t = interleaved(fns, rounds, warmup=1, calls_per_round=calls, settle_s=SETTLE_SECONDS,
                            turn_warmup=TURN_WARMUP)
            walls[shape].append(time.perf_counter() - t0)
            ratios[shape].append(paired_ratio(t[a], t[b]))
    print("| calls x rounds | duel s | ratio median | min-max | sd |")
    print("|---|---:|---:|---|---:|")
    for shape in shapes:
        r = ratios[shape]
        print(f"| {shape[0]} x {shape[1]} | {statistics.median(walls[shape]):.1f} | {statistics.median(r):.3f} | "
              f"{min(r):.3f}-{max(r):.3f} | {statistics.stdev(r):.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
