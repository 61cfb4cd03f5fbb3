"""Do Inductor's regions matter? Over a model's exhaustive profiles, the split optimum with every
Inductor kernel, with fewer of its regions, and without its small kernels.

    python benchmarks/inductor_regions.py --cache DIR [--threads 2] MODEL

DIR is a cache in which MODEL was optimized with every candidate profiled (guided profiling off), as
for benchmarks/guided_replay.py. Inductor compiles its `inductor_region_budget` largest regions
(the whole model first) whatever else it measures, seconds to a minute each; this prints each
region's profile, which Inductor kernels the exhaustive split optimum uses, and the optimum (in
profiled time, with boundary costs and kernel starts, as guided profiling solves it) when the
regions other than the whole model are left out, all but the largest, or Inductor's small kernels.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from exhaustive_cache import Exhaustive, load  # noqa: E402  (benchmarks/exhaustive_cache.py)

from korch.costmodel.features import FEATURES_VERSION  # noqa: E402
from korch.costmodel.model import CostModel, MachinePeaks, train  # noqa: E402
from korch.profile.database import DB_FILENAME, ProfileDB  # noqa: E402
from korch.profile.guided import _predicted_costs, _whole_scale, solve_until_stable  # noqa: E402
from korch.select.blp import SelectionError  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", type=Path, required=True)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--guide", action="store_true", help="replay guiding the regions by Inductor's cost model")
    parser.add_argument("--peaks", type=float, nargs=2, metavar=("GFLOPS", "GBPS"), default=(64.0, 18.0),
                        help="the prior's peaks: GFLOP/s per thread and GB/s (fixed, so that replays compare)")
    parser.add_argument("--train-on", type=Path, nargs="+", default=None,
                        help="learn Inductor's model from these caches instead of using its prior")
    parser.add_argument("model")
    args = parser.parse_args()
    ex = load(args.cache, args.model, args.threads)
    if "inductor" not in ex.pools:
        raise SystemExit("inductor is not among the backends")
    regions, usable, problem, whole = ex.regions, ex.usable, ex.problem, ex.whole
    wholes = ex.whole_models()
    print(f"{args.model}: whole models " + ", ".join(f"{n} {t * 1e3:.2f} ms" for n, t in sorted(wholes.items())))
    for r in regions:
        t = usable.get((r.key, "inductor"))
        print(f"  inductor region of {r.size}/{whole} primitives: " + (f"{t * 1e3:.2f} ms" if t else "not usable"))
    best = problem.solve(usable, {}, {})
    size = {c.key: c.size for c in ex.cands.all}
    used = sorted(size.get(problem.pairs[o.key][0], 0) for o in best.chosen if o.engine == "inductor")
    print(f"split optimum {best.cost * 1e3:.3f} ms; its inductor kernels (primitives each): {used or 'none'}")
    others = [r.key for r in regions if r.size != whole]             # largest first
    region_keys = set(others)
    cases = {"without the regions but the whole model": set(others),
             "with only the largest region besides": set(others[1:]),
             "without inductor's small kernels": {k for (k, n) in usable if n == "inductor" and k not in region_keys}}
    for label, gone in cases.items():
        costs = {pair: t for pair, t in usable.items() if not (pair[1] == "inductor" and pair[0] in gone)}
        try:
            cost = problem.solve(costs, {}, {}).cost
            print(f"  {label}: {cost * 1e3:.3f} ms ({cost / best.cost - 1:+.2%})")
        except SelectionError as e:
            print(f"  {label}: no split plan ({e})")
    if args.guide:
        peaks = MachinePeaks(args.peaks[0] * 1e9, args.peaks[1] * 1e9)
        replay_guide(ex, best.cost, min(wholes.values()), peaks, args.train_on)


def replay_guide(ex: Exhaustive, best: float, bar: float, peaks: MachinePeaks, train_on: list[Path] | None) -> None:
    """Module doc, `--guide`: `best` is the split optimum with every region profiled, `bar` the best
    whole model."""
    graph, usable, problem, settings, machine, whole = ex.graph, ex.usable, ex.problem, ex.settings, ex.machine, ex.whole
    model = CostModel("inductor", machine, peaks)
    if train_on:
        rows = []
        for other in train_on:
            with ProfileDB(other / DB_FILENAME) as odb:
                rows += odb.timed_with_features("inductor", machine, FEATURES_VERSION)
        model = train(rows, "inductor", machine, peaks, settings.cost_model)
    how = (f"learned from {model.trained_rows} kernels" if model.booster is not None else
           f"its prior alone: {model.trained_rows} kernels to learn from, too few" if train_on else "its prior alone")
    models = {"inductor": model}
    scale = _whole_scale(graph, ex.pools, models, usable, settings).get("inductor")
    if scale is None:
        print("guided regions: Inductor's whole model is not usable: no scale")
        return
    others = [r for r in ex.regions if r.size != whole and (r.key, "inductor") in usable]
    pending = {(r.key, "inductor"): r for r in others}
    predicted = _predicted_costs(graph, pending, models, settings)
    optimism = settings.profile.guide_optimism
    optimistic = {pair: predicted[pair] * scale * optimism for pair in pending}
    print(f"guided regions ({how}; Inductor's whole model measured / predicted {scale:.2f}, optimism {optimism:g}):")
    for pair, r in pending.items():
        print(f"  region of {r.size}/{whole} primitives: optimistic {optimistic[pair] * 1e3:.2f} ms, "
              f"profiled {usable[pair] * 1e3:.2f} ms")
    costs = {pair: t for pair, t in usable.items() if pair not in pending}
    measured: list[int] = []

    def measure(want) -> None:
        for name, cs in want.items():
            for c in cs:
                measured.append(c.size)
                costs[(c.key, name)] = usable[(c.key, name)]

    rounds, stable = solve_until_stable(problem, costs, pending, optimistic, measure, 20, bar=bar)
    try:
        kept = problem.solve(costs, {}, {}).cost
        ending = f"split optimum {kept * 1e3:.3f} ms ({kept / best - 1:+.2%} against all regions profiled)"
    except SelectionError:
        ending = "no split plan"
    print(f"  {rounds} round(s), {'stable' if stable else 'round limit'}; regions measured (primitives): "
          f"{measured or 'none'} of {len(others)}; {ending}")


if __name__ == "__main__":
    main()
