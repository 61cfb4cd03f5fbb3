"""Does a split plan read slower side by side, and next to whom? One two-engine plan, several line-ups.

    python benchmarks/split_neighbours.py MODEL CUT [--first openvino] [--second onnxruntime]
                                          [--threads 2] [--rounds 15]

The plan: engine --first runs primitives [0, CUT) as one region, --second the rest (see
two_engine_split.py for the cuts). It is timed back to back, then side by side (`korch bench`'s
protocol: a 60 ms pause and one untimed call per turn) alone, beside an identical second copy
(compiled separately), beside each engine's whole model, and beside both. Last, each copy's steps
are timed one run at a time under the same protocol, with the CPU time every thread of this process
used during the run (from /proc/self/task): CPU time near the wall time means the plan ran on about
one core; near twice the wall time (2 threads), on both. With it, each run's run-queue wait (its
threads runnable but on no CPU) and the VM's steal time, and the slowest third of runs set against
the fastest: a slowdown that comes with run-queue wait is threads waiting for a CPU in this VM; one
that comes with steal is the host taking the VM's CPUs. Measured selection reads split plans side by
side (korch/select/measured.py), so a plan that reads much slower there than back to back loses its
duel whatever its kernels cost: this separates the plan from its neighbours. Nothing is written.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time


def thread_sched() -> dict[int, tuple[float, float]]:
    """Per thread of this process: seconds run on a CPU, and seconds spent runnable but waiting for
    one (Linux schedstat: nanoseconds on a CPU, nanoseconds on a run queue)."""
    out = {}
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/schedstat") as f:
                ran, waited = f.read().split()[:2]
            out[int(task)] = (int(ran) / 1e9, int(waited) / 1e9)
        except OSError:              # the thread ended
            continue
    return out


def steal_seconds() -> float:
    """Time this VM's CPUs were ready but the hypervisor ran something else (/proc/stat, all CPUs)."""
    with open("/proc/stat") as f:
        fields = f.readline().split()
    return int(fields[8]) / os.sysconf("SC_CLK_TCK")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model")
    p.add_argument("cut", type=int)
    p.add_argument("--first", default="openvino")
    p.add_argument("--second", default="onnxruntime")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--settle", type=float, help="pause before each turn, seconds (default: korch's SETTLE_SECONDS)")
    args = p.parse_args(argv)

    from two_engine_split import region_plan  # this directory is on sys.path when run as a script

    from korch.frontend.regions import OnnxSource
    from korch.pipeline import run_fission
    from korch.profile.timing import SETTLE_SECONDS, TURN_WARMUP, interleaved, measure
    from korch.runtime import Session, compile_plan
    from korch.runtime.session import compile_step
    from korch.verify import random_feeds

    fissioned = run_fission(args.model)
    graph = fissioned.graph
    n = len(graph.nodes)
    if not 0 < args.cut < n:
        print(f"cut must be in 1..{n - 1} for {args.model}", file=sys.stderr)
        return 2
    source = OnnxSource(fissioned.model, dict(fissioned.value_map or {}))
    feeds = random_feeds(graph, 0)

    def session(parts: list[tuple[int, int, str]]) -> Session:
        return compile_plan(region_plan(graph, source, parts, args.threads))

    parts = [(0, args.cut, args.first), (args.cut, n, args.second)]
    split_plan = region_plan(graph, source, parts, args.threads)
    split_kernels = [compile_step(split_plan, step) for step in split_plan.steps]
    split, twin = Session(split_plan, split_kernels), session(parts)
    wholes = {e: session([(0, n, e)]) for e in dict.fromkeys([args.first, args.second])}

    def call(s: Session):
        return lambda: s.run(None, feeds)

    ms = 1e3
    settle = SETTLE_SECONDS if args.settle is None else args.settle
    one = measure(call(split), warmup=3, repeats=20, min_seconds=0.3)
    print(f"{args.model}: {args.first} [0, {args.cut}) then {args.second} [{args.cut}, {n}), {args.threads} threads")
    print(f"  pause before each turn: {settle * ms:.0f} ms")
    print(f"  back to back: {one.median_s * ms:.2f} ms ({one.p10_s * ms:.2f}-{one.p90_s * ms:.2f})")
    lineups = {"alone": {"split": call(split)}, "beside a copy": {"split": call(split), "copy": call(twin)}}
    for engine, s in wholes.items():
        lineups[f"beside {engine}'s whole model"] = {"split": call(split), engine: call(s)}
    lineups["beside both whole models"] = {"split": call(split), **{e: call(s) for e, s in wholes.items()}}
    for label, fns in lineups.items():
        timings = interleaved(fns, args.rounds, calls_per_round=1, settle_s=settle, turn_warmup=TURN_WARMUP)
        print(f"  side by side, {label}: " + ", ".join(
            f"{k} {t.median_s * ms:.2f} ({t.p10_s * ms:.2f}-{t.p90_s * ms:.2f})" for k, t in timings.items()), flush=True)

    # Whose thread is whose (the engines leave them all named "python"): a thread that runs during a
    # call of one step's kernel alone belongs to that step's engine.
    owner: dict[int, str] = {os.getpid(): "main thread"}
    env = {**graph.constants, **feeds}
    for step, kernel in zip(split_plan.steps, split_kernels):
        inputs = [env[v] for v in step.inputs]
        for _ in range(3):
            before = thread_sched()
            kernel.run(inputs)
            for tid, (ran, _) in thread_sched().items():
                if tid not in owner and ran - before.get(tid, (0.0, 0.0))[0] > 1e-5:
                    owner[tid] = f"{step.backend} (split plan)"
        env.update(zip(step.outputs, kernel.run(inputs)))
    steps: dict[str, list[list[float]]] = {"split": [], "copy": []}
    usage: dict[str, list[tuple[float, float, int, float, float]]] = {"split": [], "copy": []}
    waits: list[tuple[float, dict[int, float]]] = []        # (wall, run-queue wait per thread) of every run
    sessions = {"split": split, "copy": twin}
    for r in range(args.rounds):
        for name in (["split", "copy"] if r % 2 == 0 else ["copy", "split"]):
            time.sleep(settle)
            for _ in range(TURN_WARMUP):
                sessions[name].run(None, feeds)
            before, stolen = thread_sched(), steal_seconds()
            t0 = time.perf_counter()
            steps[name].append(sessions[name].step_times(feeds))
            wall = time.perf_counter() - t0
            after, stolen = thread_sched(), steal_seconds() - stolen
            used = {tid: after[tid][0] - before.get(tid, (0.0, 0.0))[0] for tid in after}
            per_thread = {tid: after[tid][1] - before.get(tid, (0.0, 0.0))[1] for tid in after}
            waited = sum(per_thread.values())
            waits.append((wall, per_thread))
            usage[name].append((wall, sum(used.values()), sum(u > 1e-3 for u in used.values()), waited, stolen))
    for name, runs in steps.items():
        wall = statistics.median(u[0] for u in usage[name])
        cpu = statistics.median(u[1] for u in usage[name])
        busy = statistics.median(u[2] for u in usage[name])
        print(f"  per step after the pause, {name}: " + ", ".join(
            f"{statistics.median(run[k] for run in runs) * ms:.2f}" for k in range(len(parts)))
            + f" ms; run {wall * ms:.2f} ms wall, {cpu * ms:.2f} ms CPU over {busy:.0f} busy threads")
    runs = sorted(usage["split"] + usage["copy"])
    third = max(1, len(runs) // 3)
    for label, group in (("fastest third", runs[:third]), ("slowest third", runs[-third:])):
        print(f"  {label} of runs: " + ", ".join(
            f"{what} {statistics.median(u[k] for u in group) * ms:.2f} ms" for k, what in
            ((0, "wall"), (1, "CPU"), (3, "run-queue wait"), (4, "VM steal"))))
    slow = sorted(waits, key=lambda w: w[0])[-third:]
    by_thread: dict[int, float] = {}
    for _, per_thread in slow:
        for tid, w in per_thread.items():
            by_thread[tid] = by_thread.get(tid, 0.0) + w / len(slow)
    top = sorted(by_thread.items(), key=lambda kv: -kv[1])[:4]
    print("  run-queue wait per slow run, by thread: " + ", ".join(
        f"{owner.get(tid, 'another thread')} [{tid}] {w * ms:.2f} ms" for tid, w in top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
