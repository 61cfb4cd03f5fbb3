"""Per-kernel dispatch overhead of korch's runtime: a plan of N tiny kernels vs calling them directly.

    python benchmarks/dispatch_overhead.py [--kernels 200] [--backend onnxruntime]

The plan is a chain of N one-primitive kernels on 16-element tensors, so nearly all the time is
overhead. Reported: the runtime's own cost per step (session.run minus the same kernels called in a
bare loop) and the kernels' own per-call cost.
"""

from __future__ import annotations

import argparse

import numpy as np

from korch import __version__
from korch.backends import CompileOptions, get_backend
from korch.candidates import Candidate, extract_subgraph
from korch.ir.graph import GraphBuilder
from korch.ir.types import DType, TensorType
from korch.plan import Plan, Step
from korch.profile.database import machine_fingerprint
from korch.profile.timing import interleaved
from korch.runtime import Session


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", type=int, default=200)
    parser.add_argument("--backend", default="onnxruntime")
    args = parser.parse_args()
    b = GraphBuilder("chain")
    x = b.add_input("x", TensorType((16,), DType.FLOAT32))
    one = b.add_constant(np.ones(16, np.float32))
    for _ in range(args.kernels):
        x = b.emit("add", [x, one])
    graph = b.build([("y", x)])
    steps = []
    for k, node in enumerate(graph.nodes):
        inputs = tuple(i for i in node.inputs if i not in graph.constants)
        steps.append(Step(args.backend, (k,), inputs, (node.output,), f"k{k}", 0.0))
    plan = Plan(graph, tuple(steps), 1, machine_fingerprint(), __version__)
    backend = get_backend(args.backend)
    kernels = [backend.compile(extract_subgraph(graph, Candidate(s.nodes, s.inputs, s.outputs, s.key)),
                               CompileOptions(threads=1)) for s in steps]
    session = Session(plan, kernels)
    feeds = {"x": np.zeros(16, np.float32)}

    def bare() -> None:
        value = feeds["x"]
        for kernel in kernels:
            value = kernel.run([value])[0]

    t = interleaved({"session": lambda: session.run(None, feeds), "bare": bare}, rounds=30, warmup=3)
    per_step = (t["session"].median_s - t["bare"].median_s) / args.kernels
    print(f"{args.backend}: {args.kernels} kernels; kernel call {t['bare'].median_s / args.kernels * 1e6:.2f} us each; "
          f"runtime dispatch {per_step * 1e6:.2f} us per step on top")


if __name__ == "__main__":
    main()
