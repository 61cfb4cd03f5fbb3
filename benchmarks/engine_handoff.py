"""Thread-pool hand-off between engines: a small kernel of engine B right after a call of engine A.

    python benchmarks/engine_handoff.py [--threads 2] [--rounds 15] [--gaps 0,1,20] [--engines a,b,...]

Every engine runs the same two ONNX graphs, an MLP block (x @ W1 + b1, relu, @ W2 + b2, + x): a
medium one (about 2 ms: A's call, its pool busy on every thread) and a small one (tens of µs: B, the
timed kernel). Conditions, each timed as one call of B after a pause of --pause seconds:

    alone     B x W, B timed              (B warm, no other engine's pool around: the baseline)
    idle      B timed                     (after the pause only: B's own pool wakes from sleep)
    A+g       B x W, A, sleep g ms, B timed   (B right after A's call, or g ms later)

W (--warm) calls of B first: after an idle pause a kernel runs slow for a few calls while its threads
wake and spread over the cores (here an Inductor kernel took ~4 ms instead of 0.08 ms for up to 5
calls after a 0.3 s pause, onnxruntime and OpenVINO 1-3 calls), so without them the conditions
would measure that wake-up, not the hand-off.

A pool that keeps spinning after its call returns takes the cores from the kernel after it: that
shows as A+0 well above `alone`, falling back as g passes the time that pool spins before parking.
Trials run in a shuffled order every round, so a busy phase of the machine hits every condition.
Other processes share this machine: the pause before a trial also measures how busy they kept the
CPUs (/proc/stat minus this process's own CPU time), and a trial whose pause saw more than --max-busy
of the CPUs in use is taken again (at most --retries times; the count of trials taken busy anyway is
reported). Reported per pair: the median µs of B with its p10-p90 and the ratio to `alone`.

Before the pairs, the spin tail of each engine: the CPU time this process (all its threads) uses in
the first 1, 5, 20, 50 and 100 ms after one call of A while the calling thread sleeps; a pool that
parks at once uses ~0, one spinning thread ~1 ms per ms.

Engines: ort-spinstop (onnxruntime as korch's kernels run it, session.force_spinning_stop=1),
ort-default (onnxruntime's default session: its pool spins after a run), openvino (korch's OpenVINO
kernel), openvino-pin (the same with ENABLE_CPU_PINNING, OpenVINO's default under the latency hint),
inductor (korch's Inductor kernel of the same graph). The figures and what korch decided from them
are in korch/backends/openvino/backend.py (THREAD POOL) and korch/profile/timing.py (SETTLE_SECONDS).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper, numpy_helper

from korch.backends import CompileOptions, backend_names, get_backend
from korch.backends.onnxruntime import make_session
from korch.profile.timing import summarize

# (tokens, width): the medium kernel A runs (~300 MFLOP) and the small kernel B that is timed (~4 MFLOP).
MEDIUM = (128, 384)
SMALL = (16, 128)
ENGINES = ("ort-spinstop", "ort-default", "openvino", "openvino-pin", "inductor")

Call = Callable[[], object]


def mlp_model(tokens: int, width: int, seed: int) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)

    def weight(name: str, *shape: int) -> onnx.TensorProto:
        return numpy_helper.from_array((rng.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32), name)

    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Add", ["h", "b1"], ["hb"]),
             helper.make_node("Relu", ["hb"], ["r"]), helper.make_node("MatMul", ["r", "w2"], ["o"]),
             helper.make_node("Add", ["o", "b2"], ["ob"]), helper.make_node("Add", ["ob", "x"], ["y"])]
    graph = helper.make_graph(
        nodes, f"mlp{tokens}x{width}", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, tokens, width])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, tokens, width])],
        initializer=[weight("w1", width, 4 * width), weight("b1", 4 * width), weight("w2", 4 * width, width),
                     weight("b2", width)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 10
    return model


def build(engine: str, model: onnx.ModelProto, threads: int) -> Call:
    """One call of `model` on `engine`, with its input bound."""
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    if engine.startswith("ort-"):
        session = make_session(model, threads, stop_spinning=engine == "ort-spinstop")
        return lambda: session.run(None, {"x": x})
    if engine.startswith("openvino"):
        from korch.backends.openvino.backend import OpenVinoKernel, compile_config

        backend = get_backend("openvino")
        if engine == "openvino":
            kernel = backend.compile_onnx(model, ["x"], ["y"], CompileOptions(threads))
        else:
            ov_model, _ = backend.read(model, None)
            compiled = backend.core.compile_model(ov_model, "CPU", {**compile_config(threads), "ENABLE_CPU_PINNING": True})
            kernel = OpenVinoKernel(compiled, [0], [0], [np.dtype(np.float32)])
        return lambda: kernel.run([x])
    if engine == "inductor":
        from korch.pipeline import run_fission

        graph = run_fission(model).graph
        kernel = get_backend("inductor").compile(graph, CompileOptions(threads))
        return lambda: kernel.run([x])
    raise SystemExit(f"unknown engine {engine!r}; known: {', '.join(ENGINES)}")


# Instants after a call at which the spin tail is read (seconds).
TAIL_MARKS = (0.001, 0.005, 0.02, 0.05, 0.1)
TAIL_REPEATS = 7


def spin_tail(call: Call, pause_s: float) -> list[float]:
    """Median CPU seconds the process spent from the end of `call` to each of TAIL_MARKS, sleeping."""
    runs = []
    for _ in range(TAIL_REPEATS):
        time.sleep(pause_s)
        call()
        t0, cpu0 = time.perf_counter(), time.process_time()
        marks = []
        for mark in TAIL_MARKS:
            time.sleep(max(0.0, mark - (time.perf_counter() - t0)))
            marks.append(time.process_time() - cpu0)
        runs.append(marks)
    return [sorted(r[k] for r in runs)[len(runs) // 2] for k in range(len(TAIL_MARKS))]


@dataclass(frozen=True)
class Trial:
    victim: str                 # engine B, whose small kernel is timed
    condition: str              # "alone", "idle", or "A+g" for aggressor A and gap g ms
    aggressor: str | None = None
    gap_s: float = 0.0


def trials(engines: list[str], gaps_ms: list[float]) -> list[Trial]:
    out = []
    for b in engines:
        out += [Trial(b, "alone"), Trial(b, "idle")]
        out += [Trial(b, f"{a}+{g:g}", a, g / 1e3) for a in engines for g in gaps_ms]
    return out


def cpu_times() -> tuple[int, int, int]:
    """Clock ticks since boot: all CPUs busy, all CPUs in total, and this process (all its threads)."""
    with open("/proc/stat") as stat:
        fields = [int(v) for v in stat.readline().split()[1:]]
    with open("/proc/self/stat") as own:
        utime, stime = (int(v) for v in own.read().rsplit(")", 1)[1].split()[11:13])
    idle = fields[3] + fields[4]                        # idle + iowait
    return sum(fields) - idle, sum(fields), utime + stime


def busy_pause(seconds: float) -> float:
    """Sleep; the fraction of the CPUs that other processes kept busy meanwhile (this process's own
    threads, a pool still spinning, do not count)."""
    busy0, total0, own0 = cpu_times()
    time.sleep(seconds)
    busy1, total1, own1 = cpu_times()
    return max(0.0, (busy1 - busy0) - (own1 - own0)) / max(total1 - total0, 1)


def time_trial(trial: Trial, small: dict[str, Call], medium: dict[str, Call], pause_s: float, warm: int,
               max_busy: float, retries: int) -> tuple[float, bool]:
    """Seconds of one call of B under the trial's condition, and whether the machine was busy."""
    busy = True
    for _ in range(retries + 1):
        busy = busy_pause(pause_s) > max_busy
        if not busy:
            break
    victim = small[trial.victim]
    if trial.condition != "idle":
        for _ in range(warm):
            victim()
    if trial.aggressor is not None:
        medium[trial.aggressor]()
        if trial.gap_s > 0:
            time.sleep(trial.gap_s)
    t0 = time.perf_counter_ns()
    victim()
    return (time.perf_counter_ns() - t0) / 1e9, busy


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--gaps", default="0,1,20", help="ms between A's call and B's timed call (comma-separated)")
    parser.add_argument("--pause", type=float, default=0.3, help="seconds of idle before each trial")
    parser.add_argument("--warm", type=int, default=10, help="untimed calls of B after the pause")
    parser.add_argument("--max-busy", type=float, default=0.1,
                        help="retake a trial if other processes used more than this fraction of the CPUs")
    parser.add_argument("--retries", type=int, default=20)
    parser.add_argument("--engines", default=",".join(ENGINES))
    parser.add_argument("--json", metavar="OUT.json")
    args = parser.parse_args()
    engines = [e for e in args.engines.split(",") if e]
    missing = [e for e in engines if e.split("-")[0] in ("openvino", "inductor") and e.split("-")[0] not in backend_names()]
    if missing:
        raise SystemExit(f"not installed: {missing}")
    gaps = [float(g) for g in args.gaps.split(",")]
    small = {e: build(e, mlp_model(*SMALL, seed=0), args.threads) for e in engines}
    medium = {e: build(e, mlp_model(*MEDIUM, seed=1), args.threads) for e in engines}
    for call in [*small.values(), *medium.values()]:
        for _ in range(3):
            call()
    tails = {e: spin_tail(medium[e], args.pause) for e in engines}
    print("spin tail: CPU ms used by the process after one call of A, while the caller sleeps, at "
          + ", ".join(f"{m * 1e3:g}" for m in TAIL_MARKS) + " ms")
    for e, tail in tails.items():
        print(f"  {e:<14} " + "  ".join(f"{v * 1e3:6.2f}" for v in tail))
    plan = trials(engines, gaps)
    samples: dict[Trial, list[float]] = {t: [] for t in plan}
    rng = random.Random(0)
    busy_trials = 0
    for r in range(args.rounds):
        order = plan[:]
        rng.shuffle(order)
        for trial in order:
            seconds, busy = time_trial(trial, small, medium, args.pause, args.warm, args.max_busy,
                                        args.retries)
            samples[trial].append(seconds)
            busy_trials += busy
        print(f"round {r + 1}/{args.rounds}, load {open('/proc/loadavg').read().split()[0]}", file=sys.stderr,
              flush=True)
    report(engines, plan, samples, args, busy_trials, tails)
    return 0


def report(engines: list[str], plan: list[Trial], samples: dict[Trial, list[float]], args: argparse.Namespace,
           busy_trials: int, tails: dict[str, list[float]]) -> None:
    stats = {t: summarize(samples[t]) for t in plan}
    print(f"B: small MLP {SMALL}, A: medium MLP {MEDIUM}; {args.threads} threads, {args.rounds} rounds, "
          f"pause {args.pause} s, {args.warm} warm calls; µs of one call of B: median [p10-p90] and ratio to B alone")
    print(f"trials taken while other processes used > {args.max_busy:.0%} of the CPUs: {busy_trials} of "
          f"{len(plan) * args.rounds}")
    rows = []
    for b in engines:
        base = stats[Trial(b, "alone")].median_s
        print(f"\nB = {b}")
        for t in (t for t in plan if t.victim == b):
            us = [v * 1e6 for v in (stats[t].median_s, stats[t].p10_s, stats[t].p90_s)]
            ratio = stats[t].median_s / base
            print(f"  {t.condition:<22} {us[0]:>9.1f} [{us[1]:.1f}-{us[2]:.1f}]  {ratio:5.2f}x")
            rows.append({"victim": b, "condition": t.condition, "aggressor": t.aggressor, "gap_ms": t.gap_s * 1e3,
                         "median_us": us[0], "p10_us": us[1], "p90_us": us[2], "ratio": ratio})
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"threads": args.threads, "rounds": args.rounds, "pause_s": args.pause, "warm": args.warm,
                       "busy_trials": busy_trials, "spin_tail_ms": {e: [v * 1e3 for v in t] for e, t in tails.items()},
                       "tail_marks_ms": [m * 1e3 for m in TAIL_MARKS],
                       "rows": rows}, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
