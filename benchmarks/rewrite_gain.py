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
import tempfile
from pathlib import Path

import onnx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def engine_call(path: Path, engine: str, threads: int, feeds: dict):
    """A call of the model in `path` on `engine` with `feeds` bound, as korch bench runs its peers:
    onnxruntime's default session, OpenVINO compiling the ONNX file itself."""
    from korch.backends import get_backend
    from korch.backends.onnxruntime import make_session

    if engine == "onnxruntime":
        session = make_session(str(path), threads, stop_spinning=False)
        return lambda: session.run(None, feeds)
    kernel, inputs = get_backend("openvino").compile_file(path, threads)
    args = [feeds[name] for name in inputs]
    return lambda: kernel.run(args)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("models", nargs="+")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--engines", default="onnxruntime,openvino")
    p.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "korch")
    args = p.parse_args(argv)

    from engine_breakdown import fissioned, model_path

    from korch.frontend.onnx_import import load_model
    from korch.frontend.rewrites import rewrite_model
    from korch.profile.timing import measure, side_by_side
    from korch.verify import diff_outputs, random_feeds, run_onnxruntime

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
        feeds = random_feeds(fissioned(path))
        err = max(d.rel for d in diff_outputs(run_onnxruntime(rewritten, feeds), run_onnxruntime(model, feeds)))
        scratch = tempfile.TemporaryDirectory()
        rewritten_path = Path(scratch.name) / "rewritten.onnx"
        onnx.save(rewritten, rewritten_path)
        fns = {}
        for engine in engines:
            fns[f"{engine}, as given"] = engine_call(path, engine, args.threads, feeds)
            fns[f"{engine}, rewritten"] = engine_call(rewritten_path, engine, args.threads, feeds)
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
        scratch.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
