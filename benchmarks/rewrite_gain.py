"""What korch's algebraic rewrites are worth to each engine: the model as given and as rewritten, side by side.

    python benchmarks/rewrite_gain.py MODEL [MODEL ...] [--threads 2] [--rounds 15] [--cache DIR]
                                      [--engines onnxruntime,openvino]

MODEL is a zoo name (exported once under --cache) or an .onnx file with static shapes. The model is
rewritten by korch/frontend/rewrites.py (the rules `korch optimize` applies before fission) and each
engine runs both, as its users run a model (onnxruntime: default session; OpenVINO: latency hint,
f32), timed side by side in one process (rounds of turns, each after a pause and an untimed call:
`korch bench`'s protocol). Printed per model: the rewrites, each engine's medians with p10-p90 and
the speedup as given / rewritten, and the rewritten model's largest error against onnxruntime's
outputs of the model as given, relative to each output's scale, on a random input. Nothing is written.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def sessions(model, engine: str, threads: int, feeds: dict):
    """A call of `model` on `engine` with `feeds` bound, as the engine's users run it."""
    if engine == "onnxruntime":
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        s = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        return lambda: s.run(None, feeds)
    import openvino as ov

    core = ov.Core()
    compiled = core.compile_model(core.read_model(model.SerializeToString(), b""), "CPU",
                                  {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_NUM_THREADS": threads,
                                   "INFERENCE_PRECISION_HINT": "f32"})
    request = compiled.create_infer_request()
    return lambda: request.infer(feeds)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("models", nargs="+")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--engines", default="onnxruntime,openvino")
    p.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "korch")
    args = p.parse_args(argv)

    from engine_breakdown import model_path, random_feeds

    from korch.frontend.onnx_import import load_model
    from korch.frontend.rewrites import rewrite_model
    from korch.profile.timing import measure, side_by_side
    from korch.verify import run_onnxruntime

    engines = args.engines.split(",")
    for spec in args.models:
        path = model_path(spec, args.cache)
        model = load_model(str(path))
        rewritten, notes = rewrite_model(model)
        print(f"## {spec}: {len(notes)} rewrite(s)")
        for note in notes:
            print(f"- {note}")
        if not notes:
            print()
            continue
        feeds = random_feeds(path)
        want, got = run_onnxruntime(model, feeds), run_onnxruntime(rewritten, feeds)
        err = max(float(np.max(np.abs(got[k] - w)) / max(float(np.max(np.abs(w))), 1e-30)) for k, w in want.items())
        fns = {}
        for engine in engines:
            fns[f"{engine}, as given"] = sessions(model, engine, args.threads, feeds)
            fns[f"{engine}, rewritten"] = sessions(rewritten, engine, args.threads, feeds)
        one = measure(next(iter(fns.values())), warmup=1, repeats=3).median_s
        timings = side_by_side(fns, args.rounds, one)
        print(f"\nrewritten vs as given, onnxruntime's outputs: max error {err:.1e} of each output's scale; "
              f"{args.threads} threads, side by side, {args.rounds} rounds\n")
        print("| engine | as given ms (p10-p90) | rewritten ms (p10-p90) | as given / rewritten |")
        print("|---|---|---|---:|")
        for engine in engines:
            a, b = timings[f"{engine}, as given"], timings[f"{engine}, rewritten"]
            print(f"| {engine} | {a.median_s * 1e3:.2f} ({a.p10_s * 1e3:.2f}-{a.p90_s * 1e3:.2f}) | "
                  f"{b.median_s * 1e3:.2f} ({b.p10_s * 1e3:.2f}-{b.p90_s * 1e3:.2f}) | {a.median_s / b.median_s:.2f}x |")
        print(flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
