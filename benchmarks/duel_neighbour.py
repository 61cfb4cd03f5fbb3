"""Does one engine's call slow the next engine's, after the duel's settling pause? A saved plan's kernels
against OpenVINO's whole model, each timed right after itself and right after the other.

    python benchmarks/duel_neighbour.py PLAN_DIR MODEL.onnx [--rounds 15] [--threads 2]

Each timed call follows a 0.2 s rest, one untimed call of the neighbour, then selection's settling
pause (korch.profile.timing.SETTLE_SECONDS), as a turn of `side_by_side` follows the other system's
turn. Medians with p10-p90 per (system, neighbour).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import korch  # noqa: E402
from korch.plan.plan import load_plan  # noqa: E402
from korch.profile.database import machine_fingerprint  # noqa: E402
from korch.profile.timing import SETTLE_SECONDS, summarize  # noqa: E402
from korch.runtime import compile_plan  # noqa: E402
from korch.verify import random_feeds  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("plan")
    parser.add_argument("onnx")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    import openvino as ov

    plan = load_plan(args.plan, korch.__version__, machine_fingerprint())
    session = compile_plan(plan)
    feeds = random_feeds(plan.graph, 7)
    model = ov.Core().compile_model(args.onnx, "CPU", {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_PRECISION_HINT": "f32",
                                                        "INFERENCE_NUM_THREADS": args.threads})
    request = model.create_infer_request()
    ov_feeds = {i.get_any_name(): feeds[i.get_any_name()] for i in model.inputs}
    systems = {"korch plan": lambda: session.run(None, feeds), "openvino": lambda: request.infer(ov_feeds)}
    samples: dict[tuple[str, str], list[float]] = {(a, b): [] for a in systems for b in systems}
    for _ in range(args.rounds):
        for (timed, neighbour), values in samples.items():
            time.sleep(0.2)
            systems[neighbour]()
            time.sleep(SETTLE_SECONDS)
            t0 = time.perf_counter()
            systems[timed]()
            values.append(time.perf_counter() - t0)
    for (timed, neighbour), values in samples.items():
        t = summarize(values)
        print(f"{timed} after {neighbour}: {t.median_s * 1e3:.1f} ms (p10-p90 {t.p10_s * 1e3:.1f}-{t.p90_s * 1e3:.1f})")


if __name__ == "__main__":
    main()
