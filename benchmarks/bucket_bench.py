"""A zoo model with a symbolic sequence dim, optimized per bucket: korch against onnxruntime running
the dynamic model, per bucket, side by side.

    python benchmarks/bucket_bench.py [--model bert-base] [--lengths 32 64 128 256] [--threads 2]
                                      [--cache DIR] [--rounds 15]

Exports the zoo model with its input's last dim symbolic ("sequence"; torch's dynamo exporter,
dynamic_shapes), runs `korch optimize --shapes input_ids=1xL,...` (pipeline.optimize_buckets: one
plan per length, default settings), saves and loads the bucketed plan, then for each length times,
interleaved in one process (timing.side_by_side, as `korch bench`): korch's bucketed session and
an onnxruntime session of the dynamic model with default settings, on the same random token ids.
The cost of dispatching on shapes is microseconds, below this model's noise: bucket_dispatch.py
measures it on a model small enough to see it.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import korch.runtime as runtime  # noqa: E402
from korch.backends.onnxruntime import make_session  # noqa: E402
from korch.pipeline import optimize_buckets  # noqa: E402
from korch.plan.buckets import save_bucketed  # noqa: E402
from korch.profile.database import ProfileDB  # noqa: E402
from korch.profile.timing import side_by_side  # noqa: E402
from korch.settings import OptimizeSettings  # noqa: E402


def export_dynamic(name: str, path: Path) -> str:
    """The zoo model with its first input's last dim symbolic; returns that input's name."""
    import contextlib
    import io
    import warnings

    import onnx
    import torch

    from korch.zoo import get_model
    from korch.zoo.export import IR_VERSION, OPSET, build_module, example_inputs

    spec = get_model(name)
    module = build_module(name)
    args = tuple(torch.from_numpy(a) for a in example_inputs(name).values())
    first = spec.inputs[0].name
    sequence = torch.export.Dim("sequence", min=2, max=512)
    dynamic = {first: {len(spec.inputs[0].shape) - 1: sequence}}
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        program = torch.onnx.export(module, args, dynamo=True, opset_version=OPSET, input_names=[first],
                                    output_names=list(spec.outputs), dynamic_shapes=dynamic, external_data=False,
                                    optimize=True)
    proto = program.model_proto
    if proto.functions:
        proto = onnx.inliner.inline_local_functions(proto)
    proto.ir_version = IR_VERSION
    proto.graph.name = f"{name}-dynamic"
    onnx.save(proto, path)
    return first


def ms(t) -> str:
    return f"{t.median_s * 1e3:.2f} ({t.p10_s * 1e3:.2f}-{t.p90_s * 1e3:.2f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="bert-base")
    parser.add_argument("--lengths", type=int, nargs="+", default=[32, 64, 128, 256])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--cache", default=None, help="profile database directory (default: a temporary one)")
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{args.model}-dynamic.onnx"
        name = export_dynamic(args.model, path)
        cache = Path(args.cache) if args.cache else Path(tmp) / "cache"
        cache.mkdir(parents=True, exist_ok=True)
        settings = OptimizeSettings(threads=args.threads)
        t0 = time.perf_counter()
        with ProfileDB(cache / "profiles.sqlite") as db:
            plans, stats = optimize_buckets(path, db, settings, {name: [(1, n) for n in args.lengths]},
                                               on_bucket=lambda k, b: print(f"optimizing bucket {k}: {b}", flush=True))
        optimize_s = time.perf_counter() - t0
        save_bucketed(plans, Path(tmp) / "plan")
        t0 = time.perf_counter()
        session = runtime.load(Path(tmp) / "plan")
        load_s = time.perf_counter() - t0
        ort = make_session(str(path), args.threads)          # onnxruntime as its users run it: default settings
        print(f"\n{args.model}, {args.threads} threads; optimize {optimize_s:.0f} s for {len(args.lengths)} buckets, "
              f"load {load_s:.1f} s; ms per run, median (p10-p90) of {args.rounds} interleaved rounds\n")
        print("| sequence | korch ms | onnxruntime (dynamic model) ms | korch vs onnxruntime | kept |")
        print("|---:|---:|---:|---:|---|")
        rng = np.random.default_rng(0)
        for length, st in zip(args.lengths, stats):
            feeds = {name: rng.integers(0, 1000, (1, length)).astype(np.int64)}
            one = session.run(None, feeds)
            want = ort.run(None, feeds)
            worst = max(float(np.max(np.abs(a - b)) / max(float(np.max(np.abs(b))), 1e-30)) for a, b in zip(one, want))
            t = side_by_side({"korch": lambda: session.run(None, feeds), "onnxruntime": lambda: ort.run(None, feeds)},
                             args.rounds, st.selection.measured_ms / 1e3)
            print(f"| {length} | {ms(t['korch'])} | {ms(t['onnxruntime'])} | "
                  f"{t['onnxruntime'].median_s / t['korch'].median_s:.2f}x | {st.selection.kept} (err {worst:.1e}) |")


if __name__ == "__main__":
    main()
