"""The exact BLP solve's LP from scratch against warm from the last solve, on a guided loop's problem.

    python benchmarks/blp_warm.py MODEL --cache DIR [--threads 2] [--solves 6] [--priced 1500] [--seed 0]

DIR is a profile cache in which MODEL was optimized (a zoo_bench work directory's profile-cache):
its boundary calibration prices the crossings, and the rewrites passed there are applied, as a cold
optimize applies them. The script builds the split-plan problem guided profiling solves round after
round (profile/guided.py SplitProblem, formulated once over every candidate of the guided backends:
onnxruntime's and OpenVINO's by default), then prices it `--solves` times as a round does: every option at a random
cost (5 us, plus its primitives' costs alone, each drawn once from U[2, 200] us, times U[0.7, 1.1]
for fusing them; boundary terms as calibrated), alternating with a
random `--priced` of them plus every one-primitive option (a round over measured kernels, the rest
left out). Each pricing is solved exactly twice, side by side: with the LP from scratch (scipy's
linprog, the solve before) and warm (the formulation's HiGHS LP, from the last solve's basis: what
Formulation.solve now does), in alternating order. A relaxation at the same costs runs before each
pair, as the guided loop relaxes before it solves exactly (`--no-relax`: none, so the warm LP starts
from the last pricing's optimum, as after a budgeted relaxation, whose LP is another). Printed: seconds of each, and whether both
found the same cost. Nothing is written.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from korch.api import default_backends  # noqa: E402
from korch.candidates import Candidate  # noqa: E402
from korch.ir.graph import Graph  # noqa: E402
from korch.pipeline import candidate_universe, enumerate_all, profile_pools, run_fission  # noqa: E402
from korch.profile.boundaries import boundary_model  # noqa: E402
from korch.profile.database import DB_FILENAME, ProfileDB, machine_fingerprint  # noqa: E402
from korch.profile.guided import SplitProblem  # noqa: E402
from korch.select import blp  # noqa: E402
from korch.settings import OptimizeSettings  # noqa: E402

KERNEL_S = 5e-6          # each kernel's fixed cost in the random pricing (module doc)


def guided_problem(model: str, cache: Path, threads: int) -> tuple[Graph, dict[str, list[Candidate]], SplitProblem]:
    """MODEL's graph (the rewrites applied, as a cold optimize applies them), the guided backends' pools
    and the split-plan problem guided profiling solves, priced at `cache`'s boundary calibration."""
    settings = OptimizeSettings(threads=threads, backends=default_backends())
    ps = settings.profile
    with ProfileDB(cache / DB_FILENAME) as db:
        graph = run_fission(model, None, cache_dir=cache, rewrite=True, db=db).graph
        boundaries = boundary_model(db, settings.backends, threads, machine_fingerprint(), settings.calibration,
                                    ps.cold_cache)
    candidates = enumerate_all(graph, settings)
    pools = profile_pools(graph, candidates, settings)
    universe = candidate_universe(candidates, settings)
    pools = {name: list(universe[name]) for name in pools if name in ps.guided_backends}

    def boundary(producer: str, consumer: str, value: str) -> float:
        return boundaries.cost(producer, consumer, graph.types[value])

    return graph, pools, SplitProblem(graph, pools, boundary, boundaries.start)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model")
    p.add_argument("--cache", type=Path, required=True)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--solves", type=int, default=6)
    p.add_argument("--priced", type=int, default=1500, help="options priced in a round over measured kernels")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--time-limit", type=float, default=blp.DEFAULT_TIME_LIMIT_S, help="per exact solve, seconds")
    p.add_argument("--no-relax", action="store_true",
                   help="no relaxation at a pricing's costs before its exact solves: the warm LP starts from "
                        "the last pricing's optimum (a guided round whose relaxation was budgeted, or a confirm)")
    args = p.parse_args(argv)

    graph, pools, problem = guided_problem(args.model, args.cache, args.threads)
    t0 = time.perf_counter()
    f = problem.formulation
    print(f"{args.model}: {len(f.options)} options, {f.matrix.shape[0]} constraints, {f.matrix.shape[1]} columns; "
          f"formulated in {time.perf_counter() - t0:.2f} s")

    rng = random.Random(args.seed)
    whole = len(graph.nodes)
    pairs = {(c.key, name): c.nodes for name, cs in pools.items() for c in cs if c.size != whole}
    singles = {pair for pair, nodes in pairs.items() if len(nodes) == 1}
    alone = [rng.uniform(2e-6, 2e-4) for _ in graph.nodes]
    print("| solve | options priced | relaxation s | from scratch s | warm s | same cost | how (warm) |")
    print("|---:|---:|---:|---:|---:|---|---|")
    scratch_s, warm_s = [], []
    for k in range(args.solves):
        chosen = pairs if k % 2 == 0 else set(rng.sample(sorted(pairs), min(args.priced, len(pairs)))) | singles
        costs = {pair: KERNEL_S + sum(alone[n] for n in pairs[pair]) * rng.uniform(0.7, 1.1) for pair in chosen}
        t0 = time.perf_counter()
        if not args.no_relax:
            problem.relax(costs, {}, {})
        relax_s = time.perf_counter() - t0
        own, objective, upper = f.priced(problem.prices(costs, {}, {}))
        results = {}
        for warm in ((False, True) if k % 2 == 0 else (True, False)):
            t0 = time.perf_counter()
            solved = blp._exact(objective, f.integrality, f.matrix, f.lower, upper, args.time_limit,
                                f._lp if warm else None)
            results[warm] = (time.perf_counter() - t0, float(objective @ solved.x), solved.optimal, solved.how)
        scratch_s.append(results[False][0])
        warm_s.append(results[True][0])
        same = abs(results[False][1] - results[True][1]) <= 1e-9 * max(1.0, abs(results[False][1]))
        proven = ["" if results[w][2] else " (not proven optimal)" for w in (False, True)]
        print(f"| {k + 1} | {int(upper[:len(own)].sum())} | {relax_s:.2f} | {results[False][0]:.2f}{proven[0]} | "
              f"{results[True][0]:.2f}{proven[1]} | {'yes' if same else 'NO'} | {results[True][3]} |")
    print(f"\nmedian: from scratch {statistics.median(scratch_s):.2f} s, warm {statistics.median(warm_s):.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
