"""How repeatable are kernel profiles, timed one kernel at a time or a batch in interleaved rounds?

    python benchmarks/profile_repeatability.py MODEL [--backend onnxruntime] [--sample 120] [--threads 2]

Compiles a random sample of the model's candidates on one backend (the kernels korch would profile),
then times every kernel twice under each protocol and reports how well the second measurement
ranks like the first (pairwise comparison accuracy, PCA: the ceiling any cost model or selection
can reach on those profiles) and the median relative change between the two:

- *profiler*: korch's profiler's own timing (ProfileSettings: a sweep before each call, at least
  `repeats` runs and `min_seconds`), with and without its early stop once the median is pinned
  within +-`precision`; each kernel timed alone, one after the other, the whole pass twice.
- *one at a time*: `--samples` runs of each kernel (a sweep before each), one kernel after the other.
- *interleaved*: as many samples, taken in rounds; each round times every kernel once (after a
  sweep), in a rotating order, so the machine's slow and fast phases fall on all kernels alike.
  The two measurements are the odd and the even rounds.

"one at a time" and "interleaved" take the same number of samples per kernel, so their comparison
is of when samples are taken, not how many. With --json, a second run minutes later compares the
medians of both runs (drift over minutes, not seconds).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from korch.backends import CompileOptions  # noqa: E402
from korch.costmodel import pairwise_accuracy  # noqa: E402
from korch.frontend.regions import OnnxSource  # noqa: E402
from korch.pipeline import enumerate_all, profile_pools, run_fission  # noqa: E402
from korch.profile.profiler import Job, _streamed_values, compile_candidate  # noqa: E402
from korch.profile.timing import CacheSweep, measure  # noqa: E402
from korch.settings import OptimizeSettings, ProfileSettings  # noqa: E402
from korch.verify import random_feeds  # noqa: E402


def one_at_a_time(calls, samples: int, sweep) -> list[float]:
    medians = []
    for call in calls:
        call()
        times = []
        for _ in range(samples):
            sweep()
            t0 = time.perf_counter_ns()
            call()
            times.append(time.perf_counter_ns() - t0)
        medians.append(statistics.median(times) / 1e9)
    return medians


def interleaved_rounds(calls, rounds: int, sweep) -> tuple[list[float], list[float]]:
    times: list[list[int]] = [[] for _ in calls]
    order = list(range(len(calls)))
    for k in order:
        calls[k]()
    for r in range(rounds):
        shift = (r * 7) % len(order)
        for k in order[shift:] + order[:shift]:
            sweep()
            t0 = time.perf_counter_ns()
            calls[k]()
            times[k].append(time.perf_counter_ns() - t0)
    odd = [statistics.median(t[0::2]) / 1e9 for t in times]
    even = [statistics.median(t[1::2]) / 1e9 for t in times]
    return odd, even


def change(a, b) -> float:
    return statistics.median(abs(y / x - 1) for x, y in zip(a, b))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model")
    parser.add_argument("--backend", default="onnxruntime")
    parser.add_argument("--sample", type=int, default=120)
    parser.add_argument("--samples", type=int, default=10, help="timed samples per kernel and measurement")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--min-seconds", type=float, nargs="*", default=[],
                        help="also time the profiler's protocol at each of these time floors, with its early "
                             "stop, and compare each with the default floor's first pass")
    parser.add_argument("--cache", default=None, help="where the zoo model's export is cached")
    parser.add_argument("--json", default=None,
                        help="keep this run's medians here; if the file exists, compare with the run that wrote it")
    args = parser.parse_args()

    settings = OptimizeSettings(threads=args.threads, backends=(args.backend,))
    fissioned = run_fission(args.model, cache_dir=args.cache)
    graph = fissioned.graph
    source = OnnxSource(fissioned.model, dict(fissioned.value_map or {}))
    pool = profile_pools(graph, enumerate_all(graph, settings), settings)[args.backend]
    reps = {c.key: c for c in pool if c.size < len(graph.nodes)}
    keys = random.Random(0).sample(sorted(reps), min(args.sample, len(reps)))
    jobs = [Job(reps[k], args.backend) for k in keys]
    options = CompileOptions(threads=args.threads)
    calls = []
    keys_timed = []
    t0 = time.perf_counter()
    for job, env in _streamed_values(graph, random_feeds(graph, 0), jobs):
        try:
            kernel = compile_candidate(graph, job.candidate, job.backend, options, source)
        except Exception as e:                 # a kernel the backend refuses is simply not in the sample
            print(f"skipped {job.candidate.key[:12]}: {type(e).__name__}", file=sys.stderr)
            continue
        inputs = [np.asarray(env[i], order="C") for i in job.candidate.inputs]
        calls.append(lambda kernel=kernel, inputs=inputs: kernel.run(inputs))
        keys_timed.append(job.candidate.key)
    print(f"{args.model}, {args.backend}, {args.threads} threads: {len(calls)} kernels compiled in "
          f"{time.perf_counter() - t0:.0f} s; {args.samples} samples per kernel and measurement")
    sweep = CacheSweep()
    ps = ProfileSettings()
    results = {}

    def as_profiled(precision, min_seconds=ps.min_seconds):
        return [measure(call, warmup=ps.warmup, repeats=ps.repeats, min_seconds=min_seconds, before=sweep,
                        precision=precision) for call in calls]

    protocols = [("profiler, min_seconds", None, ps.min_seconds),
                 (f"profiler, precision {ps.precision}", ps.precision, ps.min_seconds)]
    protocols += [(f"profiler, precision {ps.precision}, min_seconds {m}", ps.precision, m) for m in args.min_seconds]
    for name, precision, min_seconds in protocols:
        t0 = time.perf_counter()
        a, b = as_profiled(precision, min_seconds), as_profiled(precision, min_seconds)
        runs = statistics.mean(t.runs for t in a + b)
        results[name] = ([t.median_s for t in a], [t.median_s for t in b], (time.perf_counter() - t0) / 2, runs)
    t0 = time.perf_counter()
    first = one_at_a_time(calls, args.samples, sweep)
    second = one_at_a_time(calls, args.samples, sweep)
    results["one at a time"] = (first, second, (time.perf_counter() - t0) / 2, args.samples)
    t0 = time.perf_counter()
    odd, even = interleaved_rounds(calls, 2 * args.samples, sweep)
    results["interleaved"] = (odd, even, (time.perf_counter() - t0) / 2, args.samples)
    print("| protocol | PCA, second vs first | median change | seconds per pass | runs per kernel |")
    print("|---|---:|---:|---:|---:|")
    for name, (a, b, seconds, runs) in results.items():
        print(f"| {name} | {pairwise_accuracy(b, a):.3f} | {change(a, b) * 100:.1f}% | {seconds:.1f} | {runs:.1f} |")
    default = results[protocols[1][0]][0]
    for name, _, _ in protocols[2:]:
        a = results[name][0]
        print(f"{name} against the default's first pass: PCA {pairwise_accuracy(a, default):.3f}, "
              f"median change {change(default, a) * 100:.1f}%, median ratio "
              f"{statistics.median(y / x for x, y in zip(default, a)):.3f}")
    both = [(x + y) / 2 for x, y in zip(first, second)]
    inter = [(x + y) / 2 for x, y in zip(odd, even)]
    print(f"one at a time against interleaved (all samples of each): PCA {pairwise_accuracy(inter, both):.3f}, "
          f"median change {change(both, inter) * 100:.1f}%, median ratio interleaved / one at a time "
          f"{statistics.median(y / x for x, y in zip(both, inter)):.3f}")
    if args.json:
        keep = {"keys": keys_timed, "one_at_a_time": both, "interleaved": inter}
        if Path(args.json).exists():                # an earlier run of the same kernels: how far it drifted
            before = json.loads(Path(args.json).read_text())
            common = [k for k in keys_timed if k in before["keys"]]
            for name in ("one_at_a_time", "interleaved"):
                old = dict(zip(before["keys"], before[name]))
                new = dict(zip(keys_timed, keep[name]))
                a, b = [old[k] for k in common], [new[k] for k in common]
                print(f"{name.replace('_', ' ')}, this run against the earlier one ({len(common)} kernels): "
                      f"PCA {pairwise_accuracy(b, a):.3f}, median change {change(a, b) * 100:.1f}%")
        else:
            Path(args.json).write_text(json.dumps(keep))


if __name__ == "__main__":
    main()
