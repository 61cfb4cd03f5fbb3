"""What korch's algebraic rewrites are worth to each engine: the model as given and as rewritten, side by side.

    python benchmarks/rewrite_gain.py MODEL [MODEL ...] [--threads 2] [--rounds 15] [--cache DIR]
                                      [--engines onnxruntime,openvino] [--winograd-f2]

MODEL is a zoo name (exported once under --cache) or an .onnx file with static shapes. The model is
rewritten by korch/frontend/rewrites.py (the rules `korch optimize` applies before fission) and each
engine runs both, as its users run a model (onnxruntime: default session; OpenVINO: latency hint,
f32), timed side by side in one process (rounds of turns, each after a pause and an untimed call:
`korch bench`'s protocol). Printed per model: the rewrites, each engine's medians with p10-p90 and
the speedup as given / rewritten, and the rewritten model's largest error against onnxruntime's
outputs of the model as given, relative to each output's scale, on a random input. Nothing is written.

`--winograd-f2` adds a third form: rewritten with every Winograd layer in F(2x2, 3x3), none in
F(4x4, 3x3) (`winograd_conv3x3`'s min_f4_tiles out of reach), and prints rules' form over it.
"""

from __future__ import annotations

import argparse
import functools
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
    p.add_argument("--winograd-f2", action="store_true", help="also time the rewrites with Winograd in F(2x2, 3x3) only")
    args = p.parse_args(argv)

    from engine_breakdown import fissioned, model_path

    from korch.frontend.onnx_import import load_model
    from korch.frontend.rewrites import RULES, rewrite_model, winograd_conv3x3
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
        f2_path = Path(scratch.name) / "f2.onnx"
        if args.winograd_f2:
            f2_only = functools.partial(winograd_conv3x3, min_f4_tiles=2**62)
            f2, f2_notes = rewrite_model(model, rules=tuple(f2_only if r is winograd_conv3x3 else r for r in RULES))
            print(f"(F(2x2, 3x3) only: {sum('Winograd' in n for n in f2_notes)} Winograd layer(s))")
            onnx.save(f2, f2_path)
        for engine in engines:
            fns[f"{engine}, as given"] = engine_call(path, engine, args.threads, feeds)
            fns[f"{engine}, rewritten"] = engine_call(rewritten_path, engine, args.threads, feeds)
            if args.winograd_f2:
                fns[f"{engine}, F2"] = engine_call(f2_path, engine, args.threads, feeds)
        one = measure(next(iter(fns.values())), warmup=1, repeats=3).median_s
        timings = side_by_side(fns, args.rounds, one)
        print(f"\nrewritten vs as given, onnxruntime's outputs: max error {err:.1e} of each output's scale; "
              f"{args.threads} threads, side by side, {args.rounds} rounds\n")
        def cell(t) -> str:
            return f"{t.median_s * 1e3:.2f} ({t.p10_s * 1e3:.2f}-{t.p90_s * 1e3:.2f})"
        extra = " rewritten, F(2x2) only ms (p10-p90) | F(2x2) only / rewritten |" if args.winograd_f2 else ""
        print("| engine | as given ms (p10-p90) | rewritten ms (p10-p90) | as given / rewritten |" + extra)
        print("|---|---|---|---:|" + ("---|---:|" if args.winograd_f2 else ""))
        for engine in engines:
            a, b = timings[f"{engine}, as given"], timings[f"{engine}, rewritten"]
            row = f"| {engine} | {cell(a)} | {cell(b)} | {a.median_s / b.median_s:.2f}x |"
            if args.winograd_f2:
                c = timings[f"{engine}, F2"]
                row += f" {cell(c)} | {c.median_s / b.median_s:.2f}x |"
            print(row)
        print(flush=True)
        scratch.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
