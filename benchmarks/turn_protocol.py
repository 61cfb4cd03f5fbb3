"""Whether `korch bench`'s turn protocol, rather than the machine, makes a plan read slower than its profile.

    python benchmarks/turn_protocol.py PLAN_DIR MODEL.onnx [--threads 2] [--rounds 15]

A plan's prediction comes from kernels timed back to back; `korch bench` times it in turns, each
after a settling pause and an untimed call, beside its peers. Small models have benched 1.1-1.2x
their prediction with the core link near (efficientvit-b1 at 078283c: 7.21 ms predicted, 8.73
benched). This times the saved plan in PLAN_DIR three ways in one process, on one random input:
back to back (`measure`, as profiled), alone in `side_by_side` turns, and in turns beside
onnxruntime and OpenVINO running MODEL.onnx (as benched), then back to back again. If the three
agree, the gap is the machine's speed between the optimize and the bench, not the protocol.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("plan", type=Path)
    p.add_argument("model", type=Path)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=15)
    args = p.parse_args(argv)

    from rewrite_gain import engine_call

    import korch.runtime as runtime
    from korch.profile.timing import measure, side_by_side

    session = runtime.load(args.plan)
    rng = np.random.default_rng(0)
    feeds = {name: rng.standard_normal(t.shape).astype(t.dtype.numpy) for name, t in session.get_inputs()}

    def korch() -> object:
        return session.run(None, feeds)

    def ms(t) -> str:
        return f"{t.median_s * 1e3:.2f} ({t.p10_s * 1e3:.2f}-{t.p90_s * 1e3:.2f})"
    first = measure(korch, warmup=5, repeats=50)
    alone = side_by_side({"korch": korch}, args.rounds, first.median_s)["korch"]
    peers = {"korch": korch, "onnxruntime": engine_call(args.model, "onnxruntime", args.threads, feeds),
             "openvino": engine_call(args.model, "openvino", args.threads, feeds)}
    beside = side_by_side(peers, args.rounds, first.median_s)
    again = measure(korch, warmup=5, repeats=50)
    print(f"{args.threads} threads, {args.rounds} rounds; ms, median (p10-p90)\n")
    print("| korch back to back | korch in turns, alone | korch in turns, beside its peers | onnxruntime | OpenVINO | "
          "korch back to back, again |")
    print("|---|---|---|---|---|---|")
    print(f"| {ms(first)} | {ms(alone)} | {ms(beside['korch'])} | {ms(beside['onnxruntime'])} | "
          f"{ms(beside['openvino'])} | {ms(again)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
