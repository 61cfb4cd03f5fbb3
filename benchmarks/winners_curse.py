"""Are the kernels the BLP chooses slower than their profiles, more than kernels nobody chose?

    python benchmarks/winners_curse.py --cache DIR [--threads 2] [--random 60] [--rounds 2] MODEL

DIR is a cache in which MODEL was optimized with every candidate profiled (guided profiling off), as
for benchmarks/guided_replay.py. The split-plan BLP is solved over those profiles (with boundary costs
and kernel starts, as guided profiling solves it). Then three groups of kernels are profiled again,
together and the same way as the first time, into a fresh database, `--rounds` times:

- chosen: the kernels of that split optimum;
- random: `--random` accepted kernels drawn at random from the same backends' others (seed 0), at
  least 0.1 ms each (timer noise aside);
- whole: each engine's whole-model kernel, profiled until its median is pinned (not Inductor's, whose
  compile takes a minute).

Each kernel's second profile over its first is printed per group (median, and weighted by the first
profile as measured selection weighs its kernels, InPlanTimes.slowdowns). If the solver picks among
thousands of kernels timed once with noise, the ones it picks are those whose one timing read low:
their ratio is above the random group's. The machine's own drift since the first profiles moves
every group alike; the whole models show it with the least noise.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from exhaustive_cache import load  # noqa: E402  (benchmarks/exhaustive_cache.py)

from korch.backends import get_backend  # noqa: E402
from korch.profile.database import DB_FILENAME, ProfileDB  # noqa: E402
from korch.profile.profiler import profile  # noqa: E402
from korch.profile.timing import summarize  # noqa: E402
from korch.select.measured import _weighted_median  # noqa: E402

MIN_PROFILE_S = 1e-4


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", type=Path, required=True)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--random", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("model")
    args = parser.parse_args()
    ex = load(args.cache, args.model, args.threads)
    graph, source, usable, problem, whole = ex.graph, ex.source, ex.usable, ex.problem, ex.whole
    settings, machine, ps = ex.settings, ex.machine, ex.settings.profile
    by_key = {c.key: c for c in ex.cands.all}
    best = problem.solve(usable, {}, {})
    chosen = sorted({problem.pairs[o.key] for o in best.chosen})
    wholes = sorted(pair for pair in usable if by_key[pair[0]].size == whole
                    and not get_backend(pair[1]).compiles_ahead)          # (Inductor's takes a minute to compile)
    engines = {name for _, name in chosen}
    others = sorted(pair for pair, t in usable.items() if pair[1] in engines and pair not in chosen
                    and by_key[pair[0]].size != whole and t >= MIN_PROFILE_S)
    drawn = random.Random(0).sample(others, min(args.random, len(others)))
    groups = {"chosen": chosen, "random": drawn, "whole": wholes}
    print(f"{args.model}: split optimum {best.cost * 1e3:.3f} ms of {len(chosen)} kernels "
          f"({', '.join(sorted(engines))}); {len(drawn)} random kernels of {len(others)}; "
          f"{len(wholes)} whole models")
    ratios: dict[str, list[list[tuple[float, float]]]] = {g: [] for g in groups}
    for k in range(args.rounds):
        want: dict[str, list] = {}
        for pairs in groups.values():
            for key, name in pairs:
                want.setdefault(name, []).append(by_key[key])
        with tempfile.TemporaryDirectory() as tmp, ProfileDB(Path(tmp) / DB_FILENAME) as again:
            out = profile(graph, want, again, args.threads, machine, ps, settings.accuracy, settings.seed, None, source)
        for group, pairs in groups.items():
            got = [(out.records[p].median_s / usable[p], usable[p]) for p in pairs
                   if p in out.records and out.records[p].median_s]
            ratios[group].append(got)
        print(f"round {k + 1}: " + "; ".join(
            f"{g} {_weighted_median(r[-1]):.3f} weighted, {statistics.median(x for x, _ in r[-1]):.3f} median"
            for g, r in ratios.items() if r[-1]), flush=True)
    print("| group | kernels | second / first profile: weighted median | median | p10-p90 |")
    print("|---|---:|---:|---:|---|")
    for group, rounds in ratios.items():
        flat = [x for r in rounds for x in r]
        if not flat:
            continue
        q = summarize([x for x, _ in flat])
        print(f"| {group} | {len(groups[group])} | {_weighted_median(flat):.3f} | {q.median_s:.3f} | "
              f"{q.p10_s:.3f}-{q.p90_s:.3f} |")
    detail = sorted(((by_key[key].size, name, usable[(key, name)]) for key, name in chosen), key=lambda t: -t[2])
    print("chosen kernels (primitives, engine, first profile ms): "
          + ", ".join(f"{n} {e} {t * 1e3:.2f}" for n, e, t in detail))


if __name__ == "__main__":
    main()
