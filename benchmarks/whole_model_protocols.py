"""Does a whole model's profile predict what the side-by-side duel then measures?

    python benchmarks/whole_model_protocols.py MODEL [--threads 1] [--rounds 10] [--engines onnxruntime,openvino]

At 1 thread on the AMD host, whole models profiled 9-12% faster than selection's duels then measured
them (yolox-nano: onnxruntime 41.4 against 45.6-46.4 ms, OpenVINO 51.6 against 56.4; efficientvit-b1:
OpenVINO 34.5 against 38.2), which put the kept plan's prediction 10.3% from its measurement.
This script compiles each engine's whole model as the profiler does (the whole-model region,
`runs_alone`) and times it both ways, in alternation, round after round, so the machine's drift
falls on both alike:

- profile: `measure` with the profiler's settings for a whole model (ProfileSettings defaults:
           calls back to back, stopped when the median is pinned or at the time cap);
- duel:    one round of `side_by_side` over all the engines, as selection's duels and `korch bench`
           time them (a settling pause, one untimed call, then the timed call, each engine in turn).

Printed per engine: the median over rounds of each protocol's figure, and of profile / duel in the
same round.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", help="a zoo model name or an .onnx file")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--engines", default="onnxruntime,openvino")
    args = parser.parse_args()

    from openvino_region import whole_model

    from korch.backends import CompileOptions
    from korch.ir.onnx_source import OnnxSource
    from korch.pipeline import run_fission
    from korch.profile.profiler import compile_candidate
    from korch.profile.timing import measure, side_by_side
    from korch.settings import ProfileSettings
    from korch.verify import random_feeds

    engines = args.engines.split(",")
    p = ProfileSettings()
    with tempfile.TemporaryDirectory() as tmp:
        fissioned = run_fission(args.model, cache_dir=tmp)
        graph, model = fissioned.graph, fissioned.model
        source = OnnxSource(model, dict(fissioned.value_map or {}))
        whole = whole_model(graph, model)
        options = CompileOptions(threads=args.threads, runs_alone=True)          # as the profiler compiles it
        feeds = random_feeds(graph, 0)
        feed = [feeds[n] for n in whole.inputs]
        calls = {}
        for engine in engines:
            kernel = compile_candidate(graph, whole, engine, options, source)
            calls[engine] = (lambda k: lambda: k.run(feed))(kernel)
        one = min(measure(fn, warmup=1, repeats=3).median_s for fn in calls.values())
        profile: dict[str, list[float]] = {e: [] for e in engines}
        duel: dict[str, list[float]] = {e: [] for e in engines}
        for r in range(args.rounds):
            for engine, fn in calls.items():
                t = measure(fn, warmup=p.warmup, repeats=p.repeats, min_seconds=p.min_seconds, precision=p.precision,
                            max_seconds=max(p.whole_model_max_seconds or 0.0, p.min_seconds))
                profile[engine].append(t.median_s)
            for engine, t in side_by_side(calls, 1, one, warmup=1).items():
                duel[engine].append(t.median_s)
            print(f"round {r + 1}/{args.rounds}: " + ", ".join(
                f"{e} profile {profile[e][-1] * 1e3:.2f} duel {duel[e][-1] * 1e3:.2f} ms" for e in engines), flush=True)

    print(f"\n{args.model}, {args.threads} thread(s), {args.rounds} rounds")
    print("| engine | profile ms (median of rounds) | duel ms | profile / duel, round by round |")
    print("|---|---:|---:|---:|")
    for e in engines:
        ratio = statistics.median(a / b for a, b in zip(profile[e], duel[e]))
        print(f"| {e} | {statistics.median(profile[e]) * 1e3:.2f} | {statistics.median(duel[e]) * 1e3:.2f} | "
              f"{ratio:.3f} |")


if __name__ == "__main__":
    main()
