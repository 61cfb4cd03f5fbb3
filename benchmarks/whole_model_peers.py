"""korch's whole-model kernels against the engines as their users run them, in one process.

    python benchmarks/whole_model_peers.py MODEL [--threads 2] [--rounds 40] [--after-small N]
                                           [--round-seconds S]

MODEL is a zoo name or an .onnx file. Compiled as the profiler compiles a whole model (the
whole-model region, `runs_alone`): korch's onnxruntime and OpenVINO kernels; beside them
onnxruntime's default session on the model as given (korch bench's peer). Timed two ways: side by
side (korch bench's and selection's duels' protocol: rounds of turns, each after a pause and one
untimed call; bench's turns are one call, selection's duels run calls for `--round-seconds` 0.06
per turn) and back to back (the profiler's: `measure`, calls in a row). `--after-small N`
first compiles and runs the model's first N small onnxruntime candidates, as profiling does before
selection's duels, and times everything again after them. Written for shufflenet_v2, whose
onnxruntime whole model selection's duel timed 1.3-1.8x slower than korch bench did (BENCHMARKS.md).
"""

from __future__ import annotations

import argparse
import gc
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--after-small", type=int, default=0)
    parser.add_argument("--round-seconds", type=float, default=None,
                        help="calls per turn for this long (selection's duels: 0.06); default: bench's")
    args = parser.parse_args()

    import numpy as np
    import onnx
    from openvino_region import whole_model

    from korch.backends import CompileOptions
    from korch.backends.onnxruntime import make_session
    from korch.candidates import enumerate_candidates
    from korch.ir.onnx_source import OnnxSource
    from korch.pipeline import resolve_model, run_fission
    from korch.profile.profiler import compile_candidate
    from korch.profile.timing import measure, side_by_side
    from korch.settings import OptimizeSettings
    from korch.verify import random_feeds

    with tempfile.TemporaryDirectory() as tmp:
        given = resolve_model(args.model, tmp)
        fissioned = run_fission(given)
        graph, model = fissioned.graph, fissioned.model
        source = OnnxSource(model, dict(fissioned.value_map or {}))
        whole = whole_model(graph, model)
        feeds = random_feeds(graph, 0)
        feed = [feeds[n] for n in whole.inputs]
        calls = {}
        for engine in ("onnxruntime", "openvino"):
            kernel = compile_candidate(graph, whole, engine, CompileOptions(threads=args.threads, runs_alone=True),
                                       source)
            calls[f"korch {engine}"] = (lambda k: lambda: k.run(feed))(kernel)
        peer = make_session(given if isinstance(given, onnx.ModelProto) else onnx.load(given), args.threads,
                            stop_spinning=False)
        peer_feeds = {i.name: feeds[i.name] for i in peer.get_inputs()}
        calls["onnxruntime default session"] = lambda: peer.run(None, peer_feeds)

        def report(when: str) -> None:
            one = measure(calls["onnxruntime default session"], warmup=1, repeats=3).median_s
            extra = {} if args.round_seconds is None else {"round_s": args.round_seconds}
            turns = side_by_side(calls, args.rounds, one, warmup=3, **extra)
            row = {name: measure(fn, warmup=3, repeats=50, min_seconds=0.3) for name, fn in calls.items()}
            print(f"\n{args.model}, {args.threads} thread(s), {when}")
            print("| kernel | side by side ms (p10-p90) | back to back ms |")
            print("|---|---|---:|")
            for name, t in turns.items():
                print(f"| {name} | {t.median_s * 1e3:.2f} ({t.p10_s * 1e3:.2f}-{t.p90_s * 1e3:.2f}) | "
                      f"{row[name].median_s * 1e3:.2f} |", flush=True)

        report("fresh process")
        if args.after_small:
            ran = 0
            for c in enumerate_candidates(graph, OptimizeSettings().limits)[:args.after_small]:
                try:
                    kernel = compile_candidate(graph, c, "onnxruntime", CompileOptions(threads=args.threads), source)
                except Exception:  # a candidate onnxruntime cannot run: the profiler skips it too
                    continue
                inputs = [feeds[i] if i in feeds else
                          np.random.default_rng(0).standard_normal(graph.types[i].shape).astype(
                              graph.types[i].dtype.numpy) for i in c.inputs]
                for _ in range(5):
                    kernel.run(inputs)
                ran += 1
                del kernel
            gc.collect()
            report(f"after {ran} small onnxruntime kernels compiled, run and dropped")


if __name__ == "__main__":
    main()
