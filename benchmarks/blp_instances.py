"""How long korch's kernel-selection BLP takes on the instances a real optimize solves.

    python benchmarks/blp_instances.py capture MODEL --cache DIR --out DIR [--threads 2]
    python benchmarks/blp_instances.py run DIR/*.pkl [--repeats 3]

`capture` runs `korch optimize MODEL` on a copy of the profile cache DIR with its remembered
selections removed (so measured selection solves again; the profiles are reused, so with a warm
cache no kernel is profiled) and pickles every BLP instance it solves: the options with the costs
that solve saw, graph inputs and outputs, the required primitives, and each boundary cost the solve
could ask for. Nothing is written to DIR.

`run` solves each instance with korch's solver (`korch.select.blp.solve`: LP relaxation, then the
MILP over the options reduced-cost fixing leaves) and with HiGHS's MILP over every option (the
solver before), in alternation, and prints the median seconds of each (korch's Selection.seconds:
building the constraints plus solving), how korch proved its optimum, and whether both found the
same cost.
"""

from __future__ import annotations

import argparse
import pickle
import shutil
import sqlite3
import statistics
import sys
import tempfile
from pathlib import Path


def capture(args: argparse.Namespace) -> int:
    import korch.select.measured as measured
    from korch.cli import main as korch_main

    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="korch-blp-"))
    cache = work / "cache"
    shutil.copytree(args.cache, cache)
    with sqlite3.connect(cache / "profiles.sqlite") as db:
        db.execute("DELETE FROM selections")
    solve = measured.solve
    count = 0

    def capturing(options, graph_inputs, graph_outputs, required=(), time_limit=60.0, boundary=None):
        nonlocal count
        options, required = list(options), list(required)
        table = {}
        if boundary is not None:
            engines = sorted({o.engine for o in options})
            values = sorted({t for o in options for t in o.inputs})
            table = {(a, b, t): boundary(a, b, t) for a in engines for b in engines for t in values}
        path = args.out / f"{args.model}.{count}.pkl"
        with open(path, "wb") as f:
            pickle.dump({"options": options, "inputs": list(graph_inputs), "outputs": list(graph_outputs),
                         "required": required, "time_limit": time_limit, "boundary": table}, f)
        count += 1
        print(f"captured {path} ({len(options)} options)", file=sys.stderr)
        return solve(options, graph_inputs, graph_outputs, required=required, time_limit=time_limit,
                     boundary=boundary)

    measured.solve = capturing
    try:
        rc = korch_main(["optimize", args.model, "--threads", str(args.threads), "-o", str(work / "plan"),
                         "--cache", str(cache)])
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{count} instance(s) in {args.out}", file=sys.stderr)
    return rc


def run(args: argparse.Namespace) -> int:
    from korch.select import blp

    exact = blp._exact

    def plain(cost, integrality, matrix, lower, upper, time_limit):
        result = blp._milp(cost, integrality, matrix, lower, upper, time_limit)
        return blp._Solved(result.x, blp._dual(result), result.status == 0, "HiGHS MILP over every option")

    print(f"{'instance':28} {'options':>7} {'plain MILP s':>12} {'korch s':>8} {'same cost':>9}  proof")
    for path in args.instances:
        d = pickle.loads(path.read_bytes())
        table = d["boundary"]
        boundary = (lambda a, b, t: table[(a, b, t)]) if table else None
        seconds: dict[str, list[float]] = {"plain": [], "korch": []}
        found = {}
        for _ in range(args.repeats):
            for name, how in (("plain", plain), ("korch", exact)):
                blp._exact = how
                try:
                    sel = blp.solve(d["options"], d["inputs"], d["outputs"], required=d["required"],
                                    time_limit=args.time_limit, boundary=boundary)
                finally:
                    blp._exact = exact
                seconds[name].append(sel.seconds)
                found[name] = sel
        same = abs(found["plain"].cost - found["korch"].cost) <= 1e-9 * max(1.0, found["plain"].cost)
        print(f"{path.name:28} {len(d['options']):7d} {statistics.median(seconds['plain']):12.2f} "
              f"{statistics.median(seconds['korch']):8.2f} {'yes' if same else 'NO':>9}  {found['korch'].proof}")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("capture", help="pickle the BLP instances a warm optimize solves")
    c.add_argument("model")
    c.add_argument("--cache", type=Path, required=True, help="profile cache directory (copied, not changed)")
    c.add_argument("--out", type=Path, required=True)
    c.add_argument("--threads", type=int, default=2)
    r = sub.add_parser("run", help="solve captured instances, korch's solver against the plain MILP")
    r.add_argument("instances", type=Path, nargs="+")
    r.add_argument("--repeats", type=int, default=3)
    r.add_argument("--time-limit", type=float, default=120.0)
    args = p.parse_args(argv)
    return capture(args) if args.command == "capture" else run(args)


if __name__ == "__main__":
    sys.exit(main())
