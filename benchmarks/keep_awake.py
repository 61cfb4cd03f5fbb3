"""What keeping a split plan's CPUs awake between kernels is worth: one plan, spinners on and off, side by side.

    python benchmarks/keep_awake.py MODEL [--threads 2] [--regions 8] [--engines openvino,onnxruntime]
                                    [--rounds 15] [--cache DIR]

MODEL (a zoo name or an .onnx file) is cut at --regions - 1 single-tensor cuts spread evenly over it
(as benchmarks/two_engine_split.py cuts), and its regions run in turn on the engines of --engines, in
rotation (OpenVINO, onnxruntime, OpenVINO, ...): a plan with an engine hand-off at every boundary,
and the same cuts on each engine alone (a hand-off to a parked pool of the same engine). Each plan's
kernels are compiled once and run twice: as korch runs them, and in turns with an idle-priority
spinner process on each CPU (SCHED_IDLE, pinned, yielding at once to any thread that wants its CPU;
spinning from the start of a call to LINGER_S after it), which keeps the VM's vCPUs from halting
between kernels. They are timed
side by side with each engine's whole model (the protocol of `korch bench` and measured selection:
rounds of turns, each after a pause and an untimed call), medians and p10-p90, and with each
plan's kernels alone back to back (hot, as profiled), so that what a plan costs over its kernels,
per boundary, shows. Every plan's outputs are compared with the first engine's whole model.
Nothing is written.
"""

from __future__ import annotations

import argparse
import atexit
import mmap
import os
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from two_engine_split import region_plan  # noqa: E402  (benchmarks/two_engine_split.py)

# Spinners keep spinning this long after a call ends, so back-to-back calls of a turn stay covered.
LINGER_S = 0.05
# Shared page: [0] a call in progress (0/1), [8:16] the last call's end (CLOCK_MONOTONIC ns), [16 + i]
# spinner i blocked on its pipe (1) or spinning (0).
_FLAG, _END, _ASLEEP = 0, 8, 16
_END_FMT = struct.Struct("q")

_SPINNER = r"""
import ctypes, mmap, os, select, signal, struct, sys, time
fd, slot, cpu, rfd, linger_ns = (int(a) for a in sys.argv[1:6])
try:                                   # die with the parent (PR_SET_PDEATHSIG = 1)
    ctypes.CDLL(None).prctl(1, int(signal.SIGKILL), 0, 0, 0)
except Exception:
    pass
os.sched_setaffinity(0, {cpu})
os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
m = mmap.mmap(fd, mmap.PAGESIZE)
end = struct.Struct("q")
parent = os.getppid()
while True:
    while m[0] or time.monotonic_ns() - end.unpack_from(m, 8)[0] < linger_ns:
        for _ in range(100):
            os.sched_yield()               # a thread that yields here (TBB's spin-wait) gets the CPU back
            if not m[0]:
                break
    if os.getppid() != parent:
        sys.exit(0)
    m[16 + slot] = 1
    if not m[0]:
        ready, _, _ = select.select([rfd], [], [], 1.0)
        if ready:
            os.read(rfd, 4096)
    m[16 + slot] = 0
"""


class Spinners:
    """One idle-priority spinner process per CPU, spinning between `enter()` and `leave()` (and LINGER_S after)."""

    def __init__(self, cpus: Sequence[int]) -> None:
        self.cpus = tuple(cpus)
        self._lock = threading.Lock()
        self._depth = 0
        self._file = tempfile.TemporaryFile()
        self._file.truncate(mmap.PAGESIZE)
        self._page = mmap.mmap(self._file.fileno(), mmap.PAGESIZE)
        self._pipes: list[int] = []
        self._procs: list[subprocess.Popen] = []
        for slot, cpu in enumerate(self.cpus):
            read_end, write_end = os.pipe()
            args = [sys.executable, "-S", "-c", _SPINNER, str(self._file.fileno()), str(slot), str(cpu),
                    str(read_end), str(int(LINGER_S * 1e9))]
            self._procs.append(subprocess.Popen(args, pass_fds=(self._file.fileno(), read_end), close_fds=True,
                                                stdin=subprocess.DEVNULL))
            os.close(read_end)
            self._pipes.append(write_end)
        atexit.register(self.close)

    def enter(self) -> None:
        with self._lock:
            self._depth += 1
            if self._depth > 1:
                return
            self._page[_FLAG] = 1
            for slot, pipe in enumerate(self._pipes):
                if self._page[_ASLEEP + slot]:
                    try:
                        os.write(pipe, b"w")
                    except OSError:          # a spinner gone (killed): the run goes on without it
                        pass

    def leave(self) -> None:
        with self._lock:
            self._depth -= 1
            if self._depth == 0:
                _END_FMT.pack_into(self._page, _END, time.monotonic_ns())
                self._page[_FLAG] = 0

    def close(self) -> None:
        for proc in self._procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        for pipe in self._pipes:
            try:
                os.close(pipe)
            except OSError:
                pass
        self._procs, self._pipes = [], []




def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--regions", type=int, default=8)
    p.add_argument("--engines", default="openvino,onnxruntime")
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--cache", type=Path, default=None, help="where a zoo model's export is cached")
    args = p.parse_args(argv)

    from korch.candidates.regions import cut_positions, onnx_spans
    from korch.frontend.regions import OnnxSource
    from korch.pipeline import run_fission
    from korch.profile.timing import measure, side_by_side
    from korch.runtime import Session
    from korch.runtime.session import compile_step
    from korch.verify import random_feeds

    engines = args.engines.split(",")
    fissioned = run_fission(args.model, cache_dir=args.cache)
    graph = fissioned.graph
    source = OnnxSource(fissioned.model, dict(fissioned.value_map or {}))
    spans = onnx_spans(graph)
    n = len(graph.nodes)
    cuts = sorted(s for s, _ in spans[1:] if s in cut_positions(graph)) if spans is not None else []
    if len(cuts) < args.regions - 1:
        print(f"{args.model}: {len(cuts)} single-tensor cuts, fewer than --regions - 1", file=sys.stderr)
        return 2
    chosen = sorted({cuts[round((k + 1) * (len(cuts) - 1) / args.regions)] for k in range(args.regions - 1)})
    bounds = [0, *chosen, n]
    feeds = random_feeds(graph, 0)
    kernels: dict = {}

    def sessions(parts: list[tuple[int, int, str]]) -> tuple[Session, list]:
        plan = region_plan(graph, source, parts, args.threads)
        for step in plan.steps:
            if step not in kernels:
                kernels[step] = compile_step(plan, step)
        ks = [kernels[step] for step in plan.steps]
        return Session(plan, ks), ks

    plans = {"rotation": [(a, b, engines[k % len(engines)]) for k, (a, b) in enumerate(zip(bounds, bounds[1:]))]}
    for e in engines:
        plans[f"{e} cut"] = [(a, b, e) for a, b in zip(bounds, bounds[1:])]
    built = {name: sessions(parts) for name, parts in plans.items()}
    wholes = {e: sessions([(0, n, e)])[0] for e in engines}
    spinners: list[Spinners] = []          # started after the kernels alone are timed

    def spun(call):
        spinners[0].enter()
        try:
            return call()
        finally:
            spinners[0].leave()
    reference = dict(zip(graph.outputs, wholes[engines[0]].run(None, feeds)))

    def error(sess: Session) -> float:
        out = dict(zip(graph.outputs, sess.run(None, feeds)))
        return max(float(np.max(np.abs(out[k] - reference[k])) / max(float(np.max(np.abs(reference[k]))), 1e-30))
                   for k in graph.outputs)

    fns = {f"whole {e}": (lambda s=s: s.run(None, feeds)) for e, s in wholes.items()}
    alone_ms = {}
    for name, (sess, ks) in built.items():
        print(f"{name}: {len(ks)} kernels, error vs {engines[0]}'s whole model {error(sess):.1e}", file=sys.stderr)
        fns[f"{name}, awake"] = lambda s=sess: spun(lambda: s.run(None, feeds))
        fns[f"{name}, not awake"] = lambda s=sess: s.run(None, feeds)
        step_inputs, env = [], dict(feeds)
        for step, kernel in zip(sess.plan.steps, ks):
            step_inputs.append([env[i] for i in step.inputs])
            env.update(zip(step.outputs, kernel.run(step_inputs[-1])))
        alone_ms[name] = 1e3 * sum(measure(lambda k=k, x=x: k.run(x), warmup=2, repeats=7, min_seconds=0.05).median_s
                                   for k, x in zip(ks, step_inputs))
    spinners.append(Spinners(sorted(os.sched_getaffinity(0))[: args.threads]))
    time.sleep(0.5)                        # their interpreters' start, before anything is timed
    one_call = measure(fns[f"whole {engines[0]}"], warmup=1, repeats=3).median_s
    timings = side_by_side(fns, args.rounds, one_call)
    ms = 1e3
    best = min(timings[f"whole {e}"].median_s for e in engines)
    print(f"{args.model}, {args.threads} threads, {len(bounds) - 1} regions (cuts at primitives {chosen} of {n}); "
          f"side by side, {args.rounds} rounds")
    print()
    print("| plan | median ms (p10-p90) | best whole model / this | kernels alone, summed ms | over them, per boundary ms |")
    print("|---|---|---:|---:|---:|")
    for name, t in timings.items():
        plan_name = name.rsplit(",", 1)[0]
        extra = ""
        if plan_name in alone_ms:
            over = (t.median_s * ms - alone_ms[plan_name]) / (len(bounds) - 2)
            extra = f"{alone_ms[plan_name]:.2f} | {over:.3f}"
        else:
            extra = "| "
        print(f"| {name} | {t.median_s * ms:.2f} ({t.p10_s * ms:.2f}-{t.p90_s * ms:.2f}) | "
              f"{best / t.median_s:.3f} | {extra} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
