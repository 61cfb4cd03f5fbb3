"""Do the floors Inductor's candidates are solved for at hold? Measured time over floor, per kernel.

    python benchmarks/inductor_floors.py MODEL --cache DIR [--threads 2]

profile/guided.py's profile_last gives each unmeasured fused candidate of Inductor a floor
(prune.floor_seconds: its linear primitives at the best time any backend measured for each alone,
at least Inductor's own time for each alone where it measured one, its tensors in and out moved
once at bandwidth) and measures those a split-plan solve would choose at it. The solve's answer is
exact only if no kernel measures below its floor. This reads the cache of a `korch optimize MODEL
--cache DIR` and prints, for every accepted Inductor kernel of one of MODEL's fused candidates
(linear primitives alone, measured only to raise floors, are counted apart), its profile over its
floor (drawn now, from the same cache's profiles, as profile_last draws it), and the best other
backend's profile of the same candidate: quantiles, and the kernels below 1.0x.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model")
    parser.add_argument("--cache", type=Path, required=True)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    from korch.backends import get_backend
    from korch.costmodel import MachinePeaks
    from korch.ir.ops import PrimClass
    from korch.pipeline import enumerate_all, run_fission
    from korch.profile.database import ProfileDB, machine_fingerprint
    from korch.profile.profiler import record_version
    from korch.profile.prune import best_times, floor_seconds, single_times
    from korch.settings import OptimizeSettings

    settings = OptimizeSettings(threads=args.threads)
    graph = run_fission(args.model, cache_dir=args.cache, rewrite=settings.rewrites).graph    # as optimize profiles it
    every = enumerate_all(graph, settings).small
    small = {c.key: c for c in every}
    machine = machine_fingerprint()
    tolerance = settings.accuracy.tolerance(0.0)
    others, inductor = {}, {}
    with ProfileDB(args.cache / "profiles.sqlite") as db:
        for name in settings.backends:
            got = db.get_many(list(small), name, record_version(get_backend(name), settings.profile), args.threads,
                              machine)
            (inductor if name == "inductor" else others).update({(k, name): r for k, r in got.items()})
    times = best_times(list(small.values()), inductor, tolerance)
    if not times:
        sys.exit(f"{args.cache}: no Inductor profiles of {args.model}'s small candidates at {args.threads} threads")
    best_other = best_times(list(small.values()), others, tolerance)
    # the floors as profile_last draws them: best times alone over every backend, Inductor's own too
    single = single_times(every, best_times(list(small.values()), {**others, **inductor}, tolerance))
    own = single_times(every, times)
    bandwidth = MachinePeaks.measure().bytes_per_s
    rows = []
    alone = 0
    for k, t in times.items():
        c = small[k]
        if c.size == 1 and graph.nodes[c.nodes[0]].klass == PrimClass.LINEAR:
            alone += 1                 # measured to raise floors, not floored itself
            continue
        floor = floor_seconds(graph, c, single, bandwidth, own)
        rows.append((t / floor, t, best_other.get(k)))
    if not rows:
        sys.exit(f"{args.cache}: Inductor measured no fused candidate of {args.model} ({alone} linear primitives alone)")
    rows.sort(key=lambda r: r[0])           # (a kernel no other backend measured has None beside it)
    ratios = [r[0] for r in rows]
    q = lambda p: ratios[min(len(ratios) - 1, int(p * (len(ratios) - 1) + 0.5))]  # noqa: E731
    faster = sum(1 for _, t, b in rows if b is not None and t < b)
    print(f"{args.model}: {len(rows)} Inductor kernels of fused candidates, {alone} of linear primitives alone; "
          f"bandwidth {bandwidth / 1e9:.1f} GB/s")
    print("| measured / floor: min | p10 | median | below 1.0x | faster than the best other backend on the same candidate |")
    print("|---:|---:|---:|---:|---:|")
    print(f"| {ratios[0]:.2f} | {q(0.1):.2f} | {q(0.5):.2f} | {sum(r < 1 for r in ratios)} | {faster} of {len(rows)} |")

if __name__ == "__main__":
    main()
