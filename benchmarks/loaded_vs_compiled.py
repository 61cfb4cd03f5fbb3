"""A saved plan against OpenVINO's whole model, in one process: does loading a kept kernel cost it
speed, and does one engine's call slow the next one's after selection's settling pause?

    python benchmarks/loaded_vs_compiled.py PLAN_DIR MODEL.onnx [--rounds 20] [--threads 2]

First table: the plan as saved (its kernels loaded), the same plan compiled again, and OpenVINO
compiling MODEL.onnx as `korch bench` runs it, interleaved (a 60 ms pause and one untimed call before
each turn). Second table: the loaded plan and OpenVINO, each timed right after itself and right
after the other: a 0.2 s rest, one untimed call of the neighbour, selection's settling pause
(korch.profile.timing.SETTLE_SECONDS), then the timed call, as a turn of a duel follows the other
side's turn. Medians with p10-p90.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import korch  # noqa: E402
from korch.backends import get_backend  # noqa: E402
from korch.plan.plan import load_plan  # noqa: E402
from korch.profile.database import machine_fingerprint  # noqa: E402
from korch.profile.timing import SETTLE_SECONDS, Timing, interleaved, summarize  # noqa: E402
from korch.runtime import compile_plan  # noqa: E402
from korch.verify import random_feeds  # noqa: E402


def _print(timings: dict[str, Timing]) -> None:
    for name, t in timings.items():
        print(f"{name}: {t.median_s * 1e3:.1f} ms (p10-p90 {t.p10_s * 1e3:.1f}-{t.p90_s * 1e3:.1f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("plan")
    parser.add_argument("onnx", type=Path)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    plan = load_plan(args.plan, korch.__version__, machine_fingerprint())
    compiled = compile_plan(replace(plan, artifacts={}))
    loaded = compile_plan(plan)
    feeds = random_feeds(plan.graph, 7)
    kernel, inputs = get_backend("openvino").compile_file(args.onnx, args.threads)   # type: ignore[attr-defined]
    ov_args = [feeds[name] for name in inputs]
    systems = {"loaded": lambda: loaded.run(None, feeds), "openvino": lambda: kernel.run(ov_args)}
    _print(interleaved({"compiled again": lambda: compiled.run(None, feeds), **systems},
                       args.rounds, settle_s=0.06, turn_warmup=1))
    samples: dict[tuple[str, str], list[float]] = {(a, b): [] for a in systems for b in systems}
    for _ in range(args.rounds):
        for (timed, neighbour), values in samples.items():
            time.sleep(0.2)
            systems[neighbour]()
            time.sleep(SETTLE_SECONDS)
            t0 = time.perf_counter()
            systems[timed]()
            values.append(time.perf_counter() - t0)
    _print({f"{timed} after {neighbour}": summarize(values) for (timed, neighbour), values in samples.items()})


if __name__ == "__main__":
    main()
