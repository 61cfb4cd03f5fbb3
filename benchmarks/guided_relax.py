"""Guided profiling's budgeted LP relaxations, round after round, on a zoo model's split-plan problem.

    python benchmarks/guided_relax.py MODEL --cache DIR [--threads 2] [--rounds 12] [--seed 0]
        [--option NAME=VALUE ...] [--plain]

DIR is a profile cache in which MODEL was optimized (a zoo_bench work directory's profile-cache):
its boundary calibration prices the crossings and the rewrites are applied (blp_warm.guided_problem). The
script builds the problem guided profiling solves (profile/guided.py SplitProblem over onnxruntime's
and OpenVINO's candidates) and replays a guided loop's relaxations at random costs: each pair's true
cost is 5 us plus its primitives' costs alone (each drawn once from U[2, 200] us) times U[0.7, 1.1];
its optimistic cost is that times U[0.3, 0.6], its expected cost that times U[0.7, 1.3]. The
one-primitive kernels start measured. Each round relaxes with the budget of uncertainty the loop
uses (ProfileSettings.guide_uncertainty) and "measures" every pending pair the relaxation leans on
(its true cost replaces its optimistic one), as a round does. `--option NAME=VALUE` sets a HiGHS
option on the budgeted LP (built first) (e.g. presolve=off, simplex_strategy=4). `--plain`: the
relaxation without the budget, every pending pair at its optimistic cost (the formulation's own LP,
which the exact solves start from too).

Printed per round: the relaxation's seconds, HiGHS's own run time and simplex iterations, and the
pairs it measured. Nothing is written.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from blp_warm import guided_problem  # noqa: E402

from korch.profile.guided import _pending_in  # noqa: E402
from korch.settings import OptimizeSettings  # noqa: E402

KERNEL_S = 5e-6


def _value(text: str) -> object:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model")
    p.add_argument("--cache", type=Path, required=True)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=12)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--option", action="append", default=[], help="a HiGHS option for the budgeted LP, NAME=VALUE")
    p.add_argument("--plain", action="store_true", help="no budget of uncertainty: the formulation's own LP")
    args = p.parse_args(argv)

    ps = OptimizeSettings(threads=args.threads).profile
    graph, pools, problem = guided_problem(args.model, args.cache, args.threads)
    t0 = time.perf_counter()
    f = problem.formulation
    print(f"{args.model}: {len(f.options)} options, {f.matrix.shape[0]} constraints, {f.matrix.shape[1]} columns; "
          f"formulated in {time.perf_counter() - t0:.2f} s; uncertainty {0 if args.plain else ps.guide_uncertainty}; "
          f"options {args.option or 'as korch sets them'}")

    rng = random.Random(args.seed)
    whole = len(graph.nodes)
    cand = {(c.key, name): c for name, cs in pools.items() for c in cs if c.size != whole}
    alone = [rng.uniform(2e-6, 2e-4) for _ in graph.nodes]
    true = {pair: KERNEL_S + sum(alone[n] for n in c.nodes) * rng.uniform(0.7, 1.1) for pair, c in cand.items()}
    optimistic = {pair: t * rng.uniform(0.3, 0.6) for pair, t in true.items()}
    expected = {pair: t * rng.uniform(0.7, 1.3) for pair, t in true.items()}
    costs = {pair: true[pair] for pair, c in cand.items() if c.size == 1}
    pending = {pair: c for pair, c in cand.items() if pair not in costs}

    # the budgeted LP, built as the first relaxation builds it, so that the options apply from the start
    keys = {key for key, pair in problem.pairs.items() if pair in pending}
    budget = 0 if args.plain else ps.guide_uncertainty
    lp = f._lp if args.plain else f._budgeted(budget, keys)[1]
    for opt in args.option:
        name, _, value = opt.partition("=")
        status = lp._highs.setOptionValue(name, _value(value))
        print(f"option {name} = {lp._highs.getOptionValue(name)} ({status})")
    print("| round | relax s | HiGHS run s | simplex iterations | measured |")
    print("|---:|---:|---:|---:|---:|")
    seconds = []
    run_before = 0.0
    for k in range(args.rounds):
        t0 = time.perf_counter()
        relaxed = problem.relax(costs, pending, optimistic, expected, budget)
        took = time.perf_counter() - t0
        highs = lp._highs
        info = highs.getInfo()
        run_s, run_before = highs.getRunTime() - run_before, highs.getRunTime()
        fresh = _pending_in(relaxed.support, problem.pairs, pending) if relaxed is not None else []
        for pair in fresh:
            pending.pop(pair)
            costs[pair] = true[pair]
        seconds.append(took)
        print(f"| {k + 1} | {took:.2f} | {run_s:.2f} | {info.simplex_iteration_count} | {len(fresh)} |")
        if not fresh:
            break
    later = seconds[1:] or seconds
    print(f"\nfirst {seconds[0]:.2f} s; later rounds median {statistics.median(later):.2f} s, "
          f"total {sum(seconds):.2f} s over {len(seconds)} rounds")
    return 0


if __name__ == "__main__":
    sys.exit(main())
