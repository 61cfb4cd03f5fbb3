"""What compiling OpenVINO's kernels two at a time in threads saves the profiler.

    python benchmarks/threaded_compile.py MODEL [--threads 2] [--cache DIR] [--rounds 2] [--sample 120]

Two measurements, each alternating the ways `--rounds` times in one process:

1. compiles alone: `--sample` of MODEL's candidates per backend (OpenVINO: its regions; onnxruntime:
   any), compiled as the profiler compiles them (profile.compile_candidate), one at a time and then
   in a pool of two threads. Wall and process CPU seconds. A backend gains only if one compile keeps
   one core busy, not both.
2. the profiler: OpenVINO's whole pool (every region but the whole model, as `korch optimize` gives
   it) profiled into a fresh database with ProfileSettings.compile_threads 1 and 2. Wall seconds and
   the profiler's phases, and whether both accepted the same kernels.

`--cache DIR`: where the zoo model's export is cached (as `korch optimize --cache`).

`--peak`: instead, profile OpenVINO's pool once each way, each in a fresh child process, and print
each child's peak RSS (ru_maxrss): what the window of compiled kernels adds to profiling's memory.
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--cache", type=Path, default=None)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--sample", type=int, default=120)
    parser.add_argument("--peak", action="store_true", help="peak RSS of profiling the pool, each way in a child")
    parser.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.peak:
        import subprocess
        print(f"{args.model}: OpenVINO's pool profiled in a fresh child process each way")
        print("| round | compile_threads | peak RSS MB | wall s |")
        print("|---:|---:|---:|---:|")
        for k in range(1, args.rounds + 1):
            for workers in (1, 2):
                cmd = [sys.executable, __file__, args.model, "--threads", str(args.threads), "--child", str(workers)]
                if args.cache is not None:
                    cmd += ["--cache", str(args.cache)]
                out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.split()
                print(f"| {k} | {workers} | {float(out[-2]):,.0f} | {float(out[-1]):.1f} |", flush=True)
        return

    from korch.backends import CompileOptions
    from korch.frontend.regions import OnnxSource
    from korch.pipeline import enumerate_all, run_fission
    from korch.profile.database import ProfileDB, Status, machine_fingerprint
    from korch.profile.profiler import compile_candidate, profile
    from korch.settings import OptimizeSettings

    settings = OptimizeSettings(threads=args.threads)
    fissioned = run_fission(args.model, cache_dir=args.cache)
    graph = fissioned.graph
    source = OnnxSource(fissioned.model, dict(fissioned.value_map or {}))
    cands = enumerate_all(graph, settings)
    whole = len(graph.nodes)
    options = CompileOptions(threads=args.threads)
    regions = [c for c in {c.key: c for c in cands.regions}.values() if c.size < whole]
    if args.child is not None:                  # --peak's child: one profile, then its peak RSS (MB) and wall
        ps = replace(settings.profile, compile_threads=args.child, watch_interval_s=None)
        with tempfile.TemporaryDirectory() as tmp, ProfileDB(Path(tmp) / "p.sqlite") as db:
            t0 = time.perf_counter()
            profile(graph, {"openvino": regions}, db, args.threads, machine_fingerprint(), ps,
                    settings.accuracy, settings.seed, source=source)
            wall = time.perf_counter() - t0
        print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, wall)
        return

    print(f"{args.model}: compiles alone, {args.sample} candidates per backend, {args.threads} threads per kernel")
    print("| backend | kernels | round | one at a time: wall s | CPU s | two threads: wall s | CPU s | ratio |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, pool in (("openvino", cands.regions), ("onnxruntime", cands.all)):
        unique = [c for c in {c.key: c for c in pool}.values() if c.size < whole]
        sample = unique[:: max(1, len(unique) // args.sample)][: args.sample]

        def one(c, name=name):
            return compile_candidate(graph, c, name, options, source)
        one(sample[0])                                   # first-use costs out of the timing
        for k in range(1, args.rounds + 1):
            row = []
            for workers in (1, 2):
                t0, c0 = time.perf_counter(), _cpu()
                if workers == 1:
                    kernels = [one(c) for c in sample]
                else:
                    with ThreadPoolExecutor(workers) as ex:
                        kernels = list(ex.map(one, sample))
                row.append((time.perf_counter() - t0, _cpu() - c0))
                del kernels
            (w1, c1), (w2, c2) = row
            print(f"| {name} | {len(sample)} | {k} | {w1:.2f} | {c1:.2f} | {w2:.2f} | {c2:.2f} | {w2 / w1:.2f} |",
                  flush=True)

    print(f"\n{args.model}: OpenVINO's pool profiled ({len(regions)} regions), fresh database each time")
    print("| round | compile_threads | wall s | openvino compile s | compile in threads s | openvino timing s | accepted |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    accepted_sets = {}
    for k in range(1, args.rounds + 1):
        for workers in (1, 2):
            ps = replace(settings.profile, compile_threads=workers, watch_interval_s=None)
            with tempfile.TemporaryDirectory() as tmp, ProfileDB(Path(tmp) / "p.sqlite") as db:
                t0 = time.perf_counter()
                out = profile(graph, {"openvino": regions}, db, args.threads, machine_fingerprint(), ps,
                              settings.accuracy, settings.seed, source=source)
                wall = time.perf_counter() - t0
            ok = {pair for pair, r in out.records.items() if r.status is Status.OK}
            accepted_sets.setdefault(workers, ok)
            s = out.seconds
            print(f"| {k} | {workers} | {wall:.1f} | {s.get('openvino compile', 0.0):.1f} | "
                  f"{s.get('compile in threads', 0.0):.1f} | {s.get('openvino timing', 0.0):.1f} | {len(ok)} |",
                  flush=True)
            time.sleep(1.0)
    same = accepted_sets.get(1) == accepted_sets.get(2)
    print(f"\nthe same kernels accepted both ways: {'yes' if same else 'no'}")


if __name__ == "__main__":
    main()
