"""What dispatching on shapes costs a bucketed plan's run, and what the fallback runs at.

    python benchmarks/bucket_dispatch.py [--buckets 1 4 16] [--rounds 200] [--threads 1]

Optimizes a small model with a symbolic batch dim (y = relu(x @ w) + m, x [batch, 256]) for each
batch in --buckets (onnxruntime only, quick settings: the plan is not what is measured), saves and
loads it, then times, interleaved in one process, per bucket: the bucket's own session called
directly, and the same call through the bucketed session (shape lookup + the same session). The
difference is the dispatch cost. A batch outside the buckets is timed through the fallback
(onnxruntime over the model) beside a plain onnxruntime session of the model.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import onnx  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import korch.runtime as runtime  # noqa: E402
from korch.pipeline import optimize_buckets  # noqa: E402
from korch.plan.buckets import save_bucketed  # noqa: E402
from korch.profile.database import ProfileDB  # noqa: E402
from korch.profile.timing import interleaved  # noqa: E402
from korch.settings import QUICK_CALIBRATION, QUICK_PROFILE, QUICK_SELECTION, OptimizeSettings  # noqa: E402

WIDTH = 256


def model(path: Path) -> None:
    w = np.random.default_rng(0).standard_normal((WIDTH, WIDTH)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
         helper.make_node("Add", ["r", "m"], ["y"])],
        "dyn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", WIDTH]),
                helper.make_tensor_value_info("m", TensorProto.FLOAT, ["batch", WIDTH])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", WIDTH])], initializer=[numpy_helper.from_array(w, "w")])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    proto.ir_version = 8
    onnx.save(proto, path)


def feeds(batch: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(batch)
    return {n: rng.standard_normal((batch, WIDTH)).astype(np.float32) for n in ("x", "m")}


def us(t) -> str:
    return f"{t.median_s * 1e6:.1f} ({t.p10_s * 1e6:.1f}-{t.p90_s * 1e6:.1f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--buckets", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    settings = OptimizeSettings(threads=args.threads, backends=("onnxruntime",), calibration=QUICK_CALIBRATION,
                                profile=QUICK_PROFILE, selection=QUICK_SELECTION)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "dyn.onnx"
        model(path)
        with ProfileDB(Path(tmp) / "cache" / "profiles.sqlite") as db:
            plans, _ = optimize_buckets(path, db, settings, {"x": [(b, WIDTH) for b in args.buckets]})
        save_bucketed(plans, Path(tmp) / "plan")
        session = runtime.load(Path(tmp) / "plan")
        print(f"{len(args.buckets)} buckets, {args.threads} thread(s), {args.rounds} interleaved rounds; "
              "µs per call, median (p10-p90)\n")
        print("| batch | bucket's session | through the bucketed session | dispatch cost µs |")
        print("|---:|---:|---:|---:|")
        for k, batch in enumerate(args.buckets):
            f = feeds(batch)
            direct = session.sessions[k]
            t = interleaved({"direct": lambda: direct.run(None, f), "bucketed": lambda: session.run(None, f)},
                            args.rounds, calls_per_round=10)
            print(f"| {batch} | {us(t['direct'])} | {us(t['bucketed'])} | "
                  f"{(t['bucketed'].median_s - t['direct'].median_s) * 1e6:+.1f} |")
        odd = max(args.buckets) + 1
        f = feeds(odd)
        from korch.backends.onnxruntime import make_session

        plain = make_session(str(path), args.threads)
        session.run(None, f)                     # makes the fallback session (and logs it once)
        t = interleaved({"plain": lambda: plain.run(None, f), "fallback": lambda: session.run(None, f)},
                        args.rounds, calls_per_round=10)
        print(f"\nbatch {odd} (no bucket): through the fallback {us(t['fallback'])}, a plain onnxruntime "
              f"session of the model {us(t['plain'])}")


if __name__ == "__main__":
    main()
