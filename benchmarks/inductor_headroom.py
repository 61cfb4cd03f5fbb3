"""Which small candidates Inductor should compile: its budget by bytes saved, against by headroom.

    python benchmarks/inductor_headroom.py MODEL --records DB [--threads 2] [--cache DIR] [--budget 40]

Inductor, the backend that generates fused code, compiles a budget of small candidates (its
compiles take seconds). Before commit 171ee40 (prune.worth_profiling) the budget took every linear
primitive alone first, then fused candidates by the intermediate bytes they keep out of memory. The
alternative here (`by_headroom`, in korch at 171ee40 only) ranks fused candidates by what the engines
profiled before it leave on the table: the best time measured for the same candidate minus a floor
under any kernel of it (prune.floor_seconds: its linear primitives at their best measured single
time, its inputs and outputs moved once at bandwidth).

`--records DB`: a profile database that already holds MODEL's onnxruntime and OpenVINO profiles at
`--threads` on this machine (a cold `korch optimize`'s cache). Both budgets are profiled on Inductor
into one fresh database, in one process (compiled ahead in workers, as the profiler does), and each
Inductor kernel is compared with the best other engine's profile of the same candidate from DB.

Printed per budget: kernels, accepted, how many ran faster than every other engine (and by 5%), the
sum over candidates of what Inductor saves where it is faster, and the seconds spent compiling.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def by_headroom(graph, candidates, best, single, bytes_per_s, budget):
    """At most `budget` unique keys of fused candidates with a measured time (`best`, by key), by that
    time minus prune.floor_seconds; those with no headroom are left out."""
    from korch.profile.prune import floor_seconds

    unique = {}
    for c in candidates:
        unique.setdefault(c.key, c)
    room = {key: best[key] - floor_seconds(graph, c, single, bytes_per_s)
            for key, c in unique.items() if c.size > 1 and key in best}
    chosen = {key for key in sorted(room, key=lambda k: -room[k])[:budget] if room[key] > 0}
    return [c for c in candidates if c.key in chosen]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model")
    parser.add_argument("--records", type=Path, required=True)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--cache", type=Path, default=None)
    parser.add_argument("--budget", type=int, default=40)
    args = parser.parse_args()

    from dataclasses import replace

    from korch.backends import get_backend
    from korch.costmodel.model import MachinePeaks
    from korch.frontend.regions import OnnxSource
    from korch.pipeline import enumerate_all, run_fission
    from korch.profile.database import ProfileDB, Status, machine_fingerprint
    from korch.profile.profiler import accepted, profile, record_version
    from korch.profile.prune import floor_seconds, worth_profiling
    from korch.settings import OptimizeSettings

    settings = OptimizeSettings(threads=args.threads)
    ps = replace(settings.profile, watch_interval_s=None)
    machine = machine_fingerprint()
    fissioned = run_fission(args.model, cache_dir=args.cache)
    graph = fissioned.graph
    source = OnnxSource(fissioned.model, dict(fissioned.value_map or {}))
    cands = enumerate_all(graph, settings)
    small = list(cands.small)
    keys = list({c.key for c in small})
    best: dict[str, float] = {}
    with ProfileDB(args.records) as db:
        for name in ("onnxruntime", "openvino"):
            stored = db.get_many(keys, name, record_version(get_backend(name), ps), args.threads, machine)
            for key, r in stored.items():
                if r.status is Status.OK and r.median_s and (r.error is None or r.error <= 1e-4):
                    best[key] = min(best.get(key, r.median_s), r.median_s)
    if not best:
        sys.exit(f"{args.records}: no onnxruntime or OpenVINO profiles of {args.model} at {args.threads} threads here")
    single = {c.nodes[0]: best[c.key] for c in small if c.size == 1 and c.key in best}
    peaks = MachinePeaks.measure()
    budgets = {
        "bytes saved (today)": worth_profiling(graph, small, args.budget),
        "headroom": by_headroom(graph, small, best, single, peaks.bytes_per_s, args.budget),
    }
    print(f"{args.model}: {len(keys)} unique small candidates, {len(best)} with a profile in {args.records.name}; "
          f"budget {args.budget}, {args.threads} threads; bandwidth {peaks.bytes_per_s / 1e9:.1f} GB/s")
    for label, pool in budgets.items():
        unique = {c.key: c for c in pool}
        sizes = sorted(c.size for c in unique.values())
        room = [best[k] - floor_seconds(graph, c, single, peaks.bytes_per_s) for k, c in unique.items() if k in best]
        print(f"  {label}: {len(unique)} candidates, sizes {sizes[0]}-{sizes[-1]} (median {statistics.median(sizes)}), "
              f"headroom summed {sum(room) * 1e3:.2f} ms")

    print("\n| budget | kernels | accepted | faster than best other | by >= 5% | saved where faster, ms "
          "| Inductor / best other, median | compile s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for label, pool in budgets.items():
        with tempfile.TemporaryDirectory() as tmp, ProfileDB(Path(tmp) / "p.sqlite") as scratch:
            t0 = time.perf_counter()
            out = profile(graph, {"inductor": pool}, scratch, args.threads, machine, ps, settings.accuracy,
                          settings.seed, source=source)
            wall = time.perf_counter() - t0
        ratios, saved = [], 0.0
        ok = [(key, r) for (key, _), r in out.records.items() if accepted(r, out.tolerance) and r.median_s]
        for key, r in ok:
            if key in best:
                ratios.append(r.median_s / best[key])
                saved += max(0.0, best[key] - r.median_s)
        compile_s = out.seconds.get("compile ahead", 0.0) + out.seconds.get("inductor compile", 0.0)
        print(f"| {label} | {len(out.records)} | {len(ok)} | {sum(x < 1 for x in ratios)} | "
              f"{sum(x < 0.95 for x in ratios)} | {saved * 1e3:.2f} | "
              f"{statistics.median(ratios) if ratios else float('nan'):.2f} | {compile_s:.0f} (wall {wall:.0f}) |",
              flush=True)
        time.sleep(1.0)


if __name__ == "__main__":
    main()
