"""Co-scheduling where a plan is made of small kernels: a model as onnxruntime kernels of primitives.

    python benchmarks/coschedule_kernels.py MODEL [MODEL ...] --cache DIR [--threads 2]

korch's kept plans on the zoo are one engine's whole model, or split plans of a few large regions in
a chain, where nothing can run side by side (benchmarks/coschedule_zoo.py). This measures the
schedule on the plans it is made for: each model optimized with onnxruntime kernels of primitives
only (no regions, so no whole-model kernel: the split plan is the plan), co-scheduled as
`korch optimize` does (korch/select/coschedule.py). Prints the schedule's shape and the side-by-side
times it was kept or dropped on, then the kept plan against onnxruntime's default session on the
whole model, side by side (a pause and one untimed call per turn), for context.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from korch import zoo
from korch.pipeline import optimize
from korch.profile.database import ProfileDB
from korch.profile.timing import side_by_side
from korch.settings import OptimizeSettings
from korch.verify import random_feeds


def _peer(model, threads: int):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="+")
    parser.add_argument("--cache", required=True, type=Path)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    settings = OptimizeSettings(threads=args.threads, backends=("onnxruntime",), regions=None)
    args.cache.mkdir(parents=True, exist_ok=True)
    print("| model | kernels | side by side / on fewer threads | one after another ms | scheduled ms | gain | kept "
          "| korch ms | onnxruntime whole model ms |")
    print("|---|---:|---|---:|---:|---:|---|---:|---:|")
    for name in args.models:
        model = zoo.to_model_proto(name)
        with ProfileDB(args.cache / "profiles.sqlite") as db:
            plan, session, stats = optimize(model, db, settings)
        sch = stats.selection.schedule
        assert session is not None
        feeds = random_feeds(plan.graph, seed=3)
        peer = _peer(model, args.threads)
        t = side_by_side({"korch": lambda: session.run(None, feeds), "onnxruntime": lambda: peer.run(None, feeds)},
                         args.rounds, stats.selection.measured_ms * 1e-3, warmup=2)
        k, o = t["korch"], t["onnxruntime"]

        def ms(m, lo, hi):
            return "-" if m is None else f"{m:.2f} ({lo:.2f}-{hi:.2f})"

        if sch is not None and sch.sequential_ms is not None:
            shape = f"{sch.concurrent_steps} / {sch.narrow_steps} in {sch.stages} stages"
            gain = f"{sch.sequential_ms / sch.scheduled_ms:.2f}x"
            seq = ms(sch.sequential_ms, sch.sequential_p10_ms, sch.sequential_p90_ms)
            par = ms(sch.scheduled_ms, sch.scheduled_p10_ms, sch.scheduled_p90_ms)
        else:
            shape, gain, seq, par = (sch.why if sch is not None else "-"), "-", "-", "-"
        print(f"| {name} | {len(plan.steps)} | {shape} | {seq} | {par} | {gain} | "
              f"{'yes' if sch is not None and sch.kept else 'no'} | {ms(k.median_s * 1e3, k.p10_s * 1e3, k.p90_s * 1e3)} | "
              f"{ms(o.median_s * 1e3, o.p10_s * 1e3, o.p90_s * 1e3)} |", flush=True)


if __name__ == "__main__":
    main()
