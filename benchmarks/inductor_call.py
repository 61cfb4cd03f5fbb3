"""What a call of an Inductor kernel costs: torch.compile (Dynamo) against Inductor's standalone compile.

    python benchmarks/inductor_call.py [--threads 2] [--rounds 15] [--calls 200]

Builds a few korch candidates (an elementwise pair over 64 and 65,536 floats, a 3x3 conv with relu,
a matmul with relu), compiles each both ways from the same torch module (korch's CandidateModule,
freezing on, cpp.threads = --threads), and times them in alternation: each round times --calls calls
of one, then of the other, after 20 untimed calls. Prints the median per-call time with p10-p90 over
rounds, and the ratio. Both compiled callables get torch tensors with grad mode off, so the
difference is what runs between the caller and the generated code (Dynamo's guards and wrappers).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np


def graphs():
    from korch.backends.reference import evaluate
    from korch.ir.graph import GraphBuilder
    from korch.ir.types import DType, TensorType

    rng = np.random.default_rng(0)

    def builder(name):
        return GraphBuilder(name, fold=lambda node, args: evaluate(node, args))

    for n in (64, 65536):
        b = builder(f"relu-add-{n}")
        x = b.add_input("x", TensorType((1, n), DType.FLOAT32))
        c = b.add_constant(rng.standard_normal((1, n)).astype(np.float32))
        yield f"relu+add {n}", b.build([("y", b.emit("add", [b.emit("relu", [x]), c]))])
    b = builder("conv")
    x = b.add_input("x", TensorType((1, 32, 56, 56), DType.FLOAT32))
    w = b.add_constant(rng.standard_normal((32, 32, 3, 3)).astype(np.float32))
    y = b.emit("conv", [x, w], {"strides": (1, 1), "pads": (1, 1, 1, 1), "dilations": (1, 1), "group": 1})
    yield "conv3x3 32x56x56 + relu", b.build([("y", b.emit("relu", [y]))])
    b = builder("matmul")
    x = b.add_input("x", TensorType((64, 768), DType.FLOAT32))
    w = b.add_constant(rng.standard_normal((768, 768)).astype(np.float32))
    yield "matmul 64x768x768 + relu", b.build([("y", b.emit("relu", [b.emit("matmul", [x, w])]))])


def compile_dynamo(graph, threads):
    """korch's path before standalone compiles: torch.compile of the module's forward."""
    import torch

    from korch.backends.inductor.backend import CandidateModule, warmup_inputs

    module = CandidateModule(graph, "cpu").eval()
    fn = torch.compile(module.forward, backend="inductor", fullgraph=True, dynamic=False,
                       options={"freezing": True, "cpp.threads": threads})
    example = [torch.from_numpy(x) for x in warmup_inputs(graph)]
    with torch.no_grad(), torch._inductor.config.patch(freezing=True):
        fn(*example)
    return fn, example


def compile_standalone(graph, threads):
    import torch

    from korch.backends.base import CompileOptions
    from korch.backends.inductor import InductorBackend
    from korch.backends.inductor.backend import warmup_inputs

    kernel = InductorBackend().compile(graph, CompileOptions(threads=threads))
    return kernel.fn, [torch.from_numpy(x) for x in warmup_inputs(graph)]


def per_call_us(fn, args, calls: int) -> float:
    import torch

    with torch.no_grad():
        for _ in range(20):
            fn(*args)
        start = time.perf_counter()
        for _ in range(calls):
            fn(*args)
    return (time.perf_counter() - start) / calls * 1e6


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--calls", type=int, default=200)
    args = p.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    print(f"{'kernel':26} {'torch.compile us':>24} {'standalone us':>24} {'ratio':>6}")
    for name, graph in graphs():
        systems = {"dynamo": compile_dynamo(graph, args.threads), "standalone": compile_standalone(graph, args.threads)}
        with torch.no_grad():
            a, b = (systems[k][0](*systems[k][1])[0] for k in ("dynamo", "standalone"))
        if not torch.allclose(a, b, rtol=1e-5, atol=1e-5):
            print(f"{name}: the two compiles disagree", file=sys.stderr)
            return 1
        times: dict[str, list[float]] = {k: [] for k in systems}
        for _ in range(args.rounds):
            for key, (fn, example) in systems.items():
                time.sleep(0.05)
                times[key].append(per_call_us(fn, example, args.calls))

        def cell(ts: list[float]) -> str:
            q = statistics.quantiles(ts, n=10)
            return f"{statistics.median(ts):8.1f} [{q[0]:.1f}-{q[-1]:.1f}]"

        ratio = statistics.median(times["dynamo"]) / statistics.median(times["standalone"])
        print(f"{name:26} {cell(times['dynamo']):>24} {cell(times['standalone']):>24} {ratio:6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
