"""A saved plan's kernels as loaded from disk against the same kernels compiled again, and OpenVINO's
whole model, in one process: does loading a kept kernel cost it speed?

    python benchmarks/loaded_vs_compiled.py PLAN_DIR MODEL.onnx [--rounds 20] [--threads 2]

Interleaved rounds (a 60 ms pause and one untimed call before each timed one); medians with p10-p90.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import korch  # noqa: E402
from korch.plan.plan import load_plan  # noqa: E402
from korch.profile.database import machine_fingerprint  # noqa: E402
from korch.profile.timing import interleaved  # noqa: E402
from korch.runtime import compile_plan  # noqa: E402
from korch.verify import random_feeds  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("plan")
    parser.add_argument("onnx")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    import openvino as ov

    plan = load_plan(args.plan, korch.__version__, machine_fingerprint())
    compiled = compile_plan(replace(plan, artifacts={}))
    loaded = compile_plan(plan)
    feeds = random_feeds(plan.graph, 7)
    model = ov.Core().compile_model(args.onnx, "CPU", {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_PRECISION_HINT": "f32",
                                                        "INFERENCE_NUM_THREADS": args.threads})
    request = model.create_infer_request()
    ov_feeds = {i.get_any_name(): feeds[i.get_any_name()] for i in model.inputs}
    timings = interleaved({"compiled again": lambda: compiled.run(None, feeds),
                           "loaded": lambda: loaded.run(None, feeds),
                           "openvino": lambda: request.infer(ov_feeds)},
                          args.rounds, settle_s=0.06, turn_warmup=1)
    for name, t in timings.items():
        print(f"{name}: {t.median_s * 1e3:.1f} ms (p10-p90 {t.p10_s * 1e3:.1f}-{t.p90_s * 1e3:.1f})")


if __name__ == "__main__":
    main()
