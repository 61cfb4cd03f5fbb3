"""What the BLP's crossing cuts (korch/select/blp.py, module doc) do to its hardest solves.

    python benchmarks/blp_crossing_cuts.py capture MODEL --cache DIR --out DIR [--threads 2] [--min-seconds 0.5]
    python benchmarks/blp_crossing_cuts.py run DIR/*.pkl [--repeats 3]

`capture` runs `korch optimize MODEL` (cold where DIR is a new cache: guided profiling's solves are
the hardest) and pickles each exact solve that took at least --min-seconds: its objective, matrix,
row bounds, integrality and column bounds, as the solve saw them.

`run` solves each instance with korch's exact solver (LP relaxation, then the MILP over the options
reduced-cost fixing leaves) with and without its crossing cuts (the rows with lower bound 0 that
hold a crossing variable: the other rows holding one have lower bound -1; an instance captured by a
korch that did not formulate them gets them read back from its rows, `with_cuts`), in alternation, and
prints per instance the LP bound of each, the median seconds, how optimality was proven, and whether
both found the same cost.
"""

from __future__ import annotations

import argparse
import pickle
import statistics
import sys
import time
from pathlib import Path

import numpy as np


def capture(args: argparse.Namespace) -> int:
    import korch.select.blp as blp
    from korch.cli import main as korch_main

    args.out.mkdir(parents=True, exist_ok=True)
    exact = blp._exact
    count = 0

    def timed(cost, integrality, matrix, lower, upper, time_limit, warm=None):
        nonlocal count
        t0 = time.perf_counter()
        result = exact(cost, integrality, matrix, lower, upper, time_limit, warm)
        seconds = time.perf_counter() - t0
        count += 1
        if seconds >= args.min_seconds:
            with open(args.out / f"{args.model}-{count:03d}.pkl", "wb") as f:
                pickle.dump({"cost": cost, "integrality": integrality, "matrix": matrix, "lower": lower,
                             "upper": upper, "seconds": seconds, "how": result.how}, f)
        return result
    blp._exact = timed
    return korch_main(["-v", "optimize", args.model, "-o", str(args.out / "plan"), "--threads", str(args.threads),
                       "--cache", str(args.cache)])


def _rows(matrix, r: int) -> tuple[np.ndarray, np.ndarray]:
    s, e = matrix.indptr[r], matrix.indptr[r + 1]
    return matrix.indices[s:e], matrix.data[s:e]


def without_cuts(instance: dict) -> tuple[object, np.ndarray]:
    """The instance's rows less its crossing cuts."""
    matrix, lower = instance["matrix"].tocsr(), instance["lower"]
    continuous = instance["integrality"] == 0
    touches = np.array([continuous[_rows(matrix, r)[0]].any() for r in range(matrix.shape[0])])
    rows = np.flatnonzero(~(touches & (lower == 0)))
    return matrix[rows], lower[rows]


def with_cuts(instance: dict) -> tuple[object, np.ndarray]:
    """The instance's rows and, where it was captured without them (before they were formulated), its
    crossing cuts, read back from its rows: each crossing row (w - x_k - sum of one engine's producers
    of t >= -1) belongs to the row that makes k wait on t (sum of t's producers - x_k >= 0) whose
    producers hold its own; the cut of (k, t) is sum of its w >= x_k - t's producers no w watches."""
    from scipy import sparse

    matrix, lower = instance["matrix"].tocsr(), instance["lower"]
    continuous = instance["integrality"] == 0
    if len(without_cuts(instance)[1]) < len(lower):
        return matrix, lower
    waits: dict[int, list[tuple[int, set[int]]]] = {}       # consumer -> (row, producers of what it reads)
    crossing_rows = []
    for r in range(matrix.shape[0]):
        cols, vals = _rows(matrix, r)
        if continuous[cols].any():
            crossing_rows.append(r)
        elif lower[r] == 0 and (vals < 0).sum() == 1:
            waits.setdefault(int(cols[vals < 0][0]), []).append((r, set(cols[vals > 0].tolist())))
    groups: dict[tuple[int, int], tuple[set[int], set[int], list[int]]] = {}
    for r in crossing_rows:
        cols, vals = _rows(matrix, r)
        w = int(cols[continuous[cols]][0])
        xs = [int(c) for c in cols if not continuous[c]]
        for k in xs:
            makers = set(xs) - {k}
            # (two inputs with the same producers: each takes one crossing row per engine)
            place = next(((row, producers) for row, producers in waits.get(k, ())
                          if makers <= producers and makers.isdisjoint(groups.get((k, row), (set(), set(), []))[1])),
                         None)
            if place is not None:
                row, producers = place
                group = groups.setdefault((k, row), (producers, set(), []))
                group[1].update(makers)
                group[2].append(w)
                break
        else:
            raise ValueError(f"crossing row {r} matches no row that makes its consumer wait")
    rows, cols, vals = [], [], []
    for i, ((k, _), (producers, watched, ws)) in enumerate(groups.items()):
        others = sorted(producers - watched)
        rows += [i] * (len(ws) + 1 + len(others))
        cols += ws + [k] + others
        vals += [1.0] * len(ws) + [-1.0] + [1.0] * len(others)
    cuts = sparse.csr_array((vals, (rows, cols)), shape=(len(groups), matrix.shape[1]))
    return sparse.vstack([matrix, cuts]).tocsr(), np.concatenate([lower, np.zeros(len(groups))])


def run(args: argparse.Namespace) -> int:
    import korch.select.blp as blp

    print("| instance | captured s | cuts | LP bound ms without / with | s without | s with | how without | how with | same cost |")
    print("|---|---:|---:|---|---:|---:|---|---|---|")
    for path in args.instances:
        with open(path, "rb") as f:
            instance = pickle.load(f)
        cost, integrality, upper = instance["cost"], instance["integrality"], instance["upper"]
        forms = {"without": without_cuts(instance), "with": with_cuts(instance)}
        cuts = forms["with"][0].shape[0] - forms["without"][0].shape[0]
        seconds: dict[str, list[float]] = {k: [] for k in forms}
        solved = {}
        for _ in range(args.repeats):
            for name, (matrix, lower) in forms.items():
                t0 = time.perf_counter()
                solved[name] = blp._exact(cost, integrality, matrix, lower, upper, blp.DEFAULT_TIME_LIMIT_S)
                seconds[name].append(time.perf_counter() - t0)
        bounds = [blp._lp_optimum(cost, m, lo, upper, blp.DEFAULT_TIME_LIMIT_S, None) for m, lo in forms.values()]
        bound = [f"{b.value / blp.COST_SCALE * 1e3:.3f}" if not isinstance(b, str) else b for b in bounds]
        values = {k: float(cost @ s.x) for k, s in solved.items()}
        same = abs(values["with"] - values["without"]) <= 1e-9 * max(1.0, abs(values["with"]))
        print(f"| {Path(path).name} | {instance['seconds']:.2f} | {cuts} | "
              f"{bound[0]} / {bound[1]} | {statistics.median(seconds['without']):.2f} | "
              f"{statistics.median(seconds['with']):.2f} | {solved['without'].how} | {solved['with'].how} | "
              f"{'yes' if same else 'NO'} |", flush=True)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("capture")
    p.add_argument("model")
    p.add_argument("--cache", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--min-seconds", type=float, default=0.5)
    p = sub.add_parser("run")
    p.add_argument("instances", nargs="+")
    p.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    return capture(args) if args.command == "capture" else run(args)


if __name__ == "__main__":
    sys.exit(main())
