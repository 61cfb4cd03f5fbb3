"""Where a split plan's time goes: each kernel as profiled, alone now (hot and cold caches), and in the plan.

    python benchmarks/plan_breakdown.py WORK MODEL [--threads 2] [--rounds 5] [--top 12]

WORK is a zoo_bench work directory (DIR/<model>-t<threads>, whose profile cache holds every
profile and the boundary calibration). The model's best split plan is solved for again as measured
selection does, compiled, and timed in rotating rounds:

- plan:      the whole plan, end to end (`Session.run`), as measured selection times it;
- in plan:   each step inside a plan run (`Session.step_times`): what the step costs among its neighbours;
- hot:       each step alone on the inputs it gets in the plan, back to back, as the profiler times it;
- cold:      each step alone after a 64 MiB sweep that evicts the last-level cache before every call;
- paused:    each step inside a plan run that starts as a side-by-side turn does (korch bench, measured
             selection's comparison): after SETTLE_SECONDS idle and TURN_WARMUP untimed runs.

With --whole ENGINE, the same engine's whole-model kernel is timed back to back and after the pause,
for comparison: a plan that suffers more from the pause than the whole model loses side by side.

Printed: the totals (sum of profiles + predicted boundaries = predicted; the plan as measured), and
the steps whose time in the plan exceeds their profile the most. Nothing is written.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from korch.frontend.regions import OnnxSource  # noqa: E402
from korch.ir.graph import Graph  # noqa: E402
from korch.pipeline import CandidateSet  # noqa: E402
from korch.profile.database import ProfileDB, machine_fingerprint  # noqa: E402
from korch.settings import OptimizeSettings  # noqa: E402

SWEEP = np.ones(64 << 20, np.uint8)      # larger than this machine's 32 MiB L3


def evict() -> None:
    SWEEP[::64] += 1                          # one write per cache line


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("work", type=Path)
    p.add_argument("model")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--top", type=int, default=12)
    p.add_argument("--whole", action="append", default=[], metavar="ENGINE",
                   help="also time this engine's whole-model kernel back to back and after the pause")
    args = p.parse_args(argv)
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(args.work / "inductor-cache"))

    from korch.profile.timing import SETTLE_SECONDS, TURN_WARMUP, measure
    from korch.runtime import Session
    from korch.runtime.session import compile_step

    ctx, selection, plan, predicted = first_split_plan(args.work, args.model, args.threads)
    graph, boundaries = ctx.graph, ctx.boundaries
    kernels = [compile_step(plan, s) for s in plan.steps]
    session = Session(plan, kernels)
    feeds = ctx.feeds

    # Each step's inputs as the plan gives them.
    env = dict(session._check_feeds(feeds))
    step_inputs = []
    for step, kernel in zip(plan.steps, kernels):
        args_ = [env[i] for i in step.inputs]
        step_inputs.append(args_)
        env.update(zip(step.outputs, kernel.run(args_)))

    def boundary_s(k: int) -> float:
        makers = {o: s.backend for s in plan.steps[:k] for o in s.outputs}
        step = plan.steps[k]
        return sum(boundaries.cost(makers[i], step.backend, graph.types[i]) for i in step.inputs if i in makers)

    def cold(kernel, inputs) -> float:
        samples = []
        for _ in range(5):
            evict()
            t0 = time.perf_counter()
            kernel.run(inputs)
            samples.append(time.perf_counter() - t0)
        return statistics.median(samples)

    def after_pause(call, warmup=TURN_WARMUP):
        """`call()` as a side-by-side turn runs it: after the pause and the untimed warm-up runs."""
        time.sleep(SETTLE_SECONDS)
        for _ in range(warmup):
            call()
        t0 = time.perf_counter()
        result = call()
        return time.perf_counter() - t0, result

    wholes = {}
    for engine in args.whole:
        whole_plan, _ = ctx.whole_model(engine)
        wholes[engine] = compile_step(whole_plan, whole_plan.steps[0])
    whole_inputs = [feeds[i] for i in graph.inputs]
    whole_b2b: dict[str, list[float]] = {e: [] for e in wholes}
    whole_paused: dict[str, list[float]] = {e: [] for e in wholes}

    n = len(plan.steps)
    plan_s, in_plan, hot, cold_s = [], [[] for _ in range(n)], [[] for _ in range(n)], [[] for _ in range(n)]
    plan_paused, paused = [], [[] for _ in range(n)]
    for r in range(args.rounds):
        print(f"round {r + 1}/{args.rounds}", file=sys.stderr, flush=True)
        plan_s.append(measure(lambda: session.run(None, feeds), warmup=2, repeats=7, min_seconds=0.3).median_s)
        runs = [session.step_times(feeds) for _ in range(7)]
        for k in range(n):
            in_plan[k].append(statistics.median(run[k] for run in runs))
        plan_paused.append(statistics.median(after_pause(lambda: session.run(None, feeds))[0] for _ in range(5)))
        runs = [after_pause(lambda: session.step_times(feeds))[1] for _ in range(7)]
        for k in range(n):
            paused[k].append(statistics.median(run[k] for run in runs))
        for engine, kernel in wholes.items():
            whole_b2b[engine].append(measure(lambda kernel=kernel: kernel.run(whole_inputs), warmup=2, repeats=7,
                                             min_seconds=0.3).median_s)
            whole_paused[engine].append(statistics.median(
                after_pause(lambda kernel=kernel: kernel.run(whole_inputs))[0] for _ in range(5)))
        for k, (kernel, inputs) in enumerate(zip(kernels, step_inputs)):
            hot[k].append(measure(lambda kernel=kernel, inputs=inputs: kernel.run(inputs), warmup=2, repeats=5, min_seconds=0.05).median_s)
            cold_s[k].append(cold(kernel, inputs))

    # How many untimed runs after the pause a plan needs before it runs at its back-to-back speed.
    warmups = (0, 1, 2, 4, 8)
    recovery: dict[str, dict[int, list[float]]] = {name: {w: [] for w in warmups} for name in ["plan", *wholes]}
    calls = {"plan": lambda: session.run(None, feeds),
             **{e: (lambda kernel=kernel: kernel.run(whole_inputs)) for e, kernel in wholes.items()}}
    for _ in range(args.rounds * 3):
        for w in warmups:
            for name, call in calls.items():
                recovery[name][w].append(after_pause(call, w)[0])

    med = statistics.median
    rows = []
    for k, step in enumerate(plan.steps):
        nbytes = sum(x.nbytes for x in step_inputs[k])
        rows.append((k, step, step.cost_s, med(hot[k]), med(cold_s[k]), med(in_plan[k]), boundary_s(k), nbytes,
                     med(paused[k])))
    ms = 1e3
    print(f"{args.model}: {n} kernels ({', '.join(f'{b} {c}' for b, c in plan.kernels_by_backend().items())}), "
          f"threads {args.threads}")
    print(f"  predicted {predicted * ms:.2f} ms = profiles {sum(r[2] for r in rows) * ms:.2f} + boundaries "
          f"{selection.boundary_s * ms:.2f}")
    print(f"  plan measured {med(plan_s) * ms:.2f} ms (rounds {', '.join(f'{t * ms:.2f}' for t in plan_s)})")
    print(f"  sum in plan {sum(r[5] for r in rows) * ms:.2f} ms, sum hot {sum(r[3] for r in rows) * ms:.2f}, "
          f"sum cold {sum(r[4] for r in rows) * ms:.2f}")
    print(f"  after a {SETTLE_SECONDS * ms:.0f} ms pause and {TURN_WARMUP} untimed run: plan {med(plan_paused) * ms:.2f} ms, "
          f"sum of steps {sum(r[8] for r in rows) * ms:.2f} ms")
    for engine in wholes:
        print(f"  {engine}'s whole model: back to back {med(whole_b2b[engine]) * ms:.2f} ms, after the pause "
              f"{med(whole_paused[engine]) * ms:.2f} ms")
    print(f"  after a {SETTLE_SECONDS * ms:.0f} ms pause and W untimed runs (W = {', '.join(map(str, warmups))}):")
    for name, by_w in recovery.items():
        print(f"    {name}: " + ", ".join(f"{med(by_w[w]) * ms:.2f}" for w in warmups) + " ms")
    print(f"  in plan - profile: {sum(r[5] - r[2] for r in rows) * ms:+.2f} ms; hot - profile "
          f"{sum(r[3] - r[2] for r in rows) * ms:+.2f}; plan - sum in plan {(med(plan_s) - sum(r[5] for r in rows)) * ms:+.2f}")
    print()
    print("| step | backend | prims | onnx nodes | input MiB | profile ms | hot ms | cold ms | in plan ms | paused ms "
          "| boundary ms |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for k, step, prof, h, c, ip, b, nbytes, pz in sorted(rows, key=lambda r: -(r[5] - r[2]))[: args.top]:
        print(f"| {k + 1} | {step.backend} | {len(step.nodes)} | {len(step.onnx_nodes)} | {nbytes / 2**20:.2f} | "
              f"{prof * ms:.3f} | {h * ms:.3f} | {c * ms:.3f} | {ip * ms:.3f} | {pz * ms:.3f} | {b * ms:.3f} |")
    return 0


@dataclass(frozen=True)
class ZooWork:
    """A zoo_bench work directory's model, read as `korch optimize` reads it (`load_work`)."""

    settings: OptimizeSettings
    db: ProfileDB
    machine: str
    graph: Graph
    source: OnnxSource
    cands: CandidateSet


def load_work(work: Path, model: str, threads: int, rewrite: bool = True) -> ZooWork:
    """`model` fissioned over WORK's profile cache, and its candidates. `rewrite`: the model rewritten
    as `korch optimize` rewrites it (OptimizeSettings.rewrites), whose candidates a zoo_bench cache
    holds; off, the model as given."""
    from korch.api import default_backends
    from korch.pipeline import enumerate_all, run_fission

    settings = OptimizeSettings(threads=threads, backends=default_backends())
    db = ProfileDB(work / "profile-cache" / "profiles.sqlite")
    fissioned = run_fission(model, cache_dir=db.path.parent, rewrite=rewrite and settings.rewrites, seed=settings.seed,
                            accuracy=settings.accuracy, db=db)
    graph = fissioned.graph
    return ZooWork(settings, db, machine_fingerprint(), graph, OnnxSource(fissioned.model, dict(fissioned.value_map or {})),
                   enumerate_all(graph, settings))


def first_split_plan(work: Path, model: str, threads: int, rewrite: bool = True):
    """Measured selection's context for `model` over WORK's profile cache (profiling whatever it lacks),
    and the first split plan it solves for from the profiles, its kernels priced with their refills
    as optimize prices them: (context, selection, plan, predicted s).
    `rewrite`: see load_work."""
    from korch.pipeline import build_options, profile_pools
    from korch.profile.boundaries import boundary_model
    from korch.profile.guided import load_refills
    from korch.profile.profiler import profile
    from korch.select.measured import _Context

    w = load_work(work, model, threads, rewrite)
    settings, db, machine, graph, source, cands = w.settings, w.db, w.machine, w.graph, w.source, w.cands
    profiled = profile(graph, profile_pools(graph, cands, settings), db, settings.threads, machine, settings.profile,
                       settings.accuracy, settings.seed, None, source)
    if profiled.measured:
        print(f"warning: {profiled.measured} candidates were not in the cache and were profiled now", file=sys.stderr)
    boundaries = boundary_model(db, settings.backends, settings.threads, machine, settings.calibration,
                                settings.profile.cold_cache)
    refills = load_refills(graph, profiled.kernels_of(cands.all, settings.backends), db, settings, machine,
                           boundaries.start)
    options, steps = build_options(graph, cands, profiled, settings, refills)
    ctx = _Context(graph, options, steps, source, settings, machine, boundaries, None)
    selection = ctx.solve(ctx.split_options)
    plan, predicted = ctx.plan(selection)
    return ctx, selection, plan, predicted


if __name__ == "__main__":
    sys.exit(main())
