"""Memory an Inductor kernel leaves behind: RSS after each of N compiles of a distinct kernel.

    python benchmarks/inductor_retained.py [--kernels 8] [--side 2048] [--keep]

Each kernel is a [64, side] @ [side, side] matmul with its own random weight, then a Relu, compiled
by korch's Inductor backend (freezing on, as the profiler compiles). Without --keep the kernel is
dropped after one call, as the profiler drops every candidate it has timed, so RSS should stay flat;
with --keep every kernel stays alive, which shows what one live kernel holds per weight byte.
Printed: the weight's MB, then RSS (MB) at start and after each kernel.
"""

from __future__ import annotations

import argparse
import gc

import numpy as np


def rss_mb() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS"):
                return int(line.split()[1]) // 1024
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kernels", type=int, default=8)
    parser.add_argument("--side", type=int, default=2048)
    parser.add_argument("--keep", action="store_true", help="keep every kernel alive")
    args = parser.parse_args()

    from korch.backends.base import CompileOptions
    from korch.backends.inductor import InductorBackend
    from korch.ir.graph import GraphBuilder
    from korch.ir.types import DType, TensorType

    backend, kept = InductorBackend(), []
    print(f"weight {args.side * args.side * 4 / 2**20:.1f} MB; start {rss_mb()} MB", flush=True)
    for k in range(args.kernels):
        b = GraphBuilder(f"matmul_relu_{k}")
        x = b.add_input("x", TensorType((64, args.side), DType.FLOAT32))
        w = np.random.default_rng(k).standard_normal((args.side, args.side)).astype(np.float32)
        graph = b.build([("y", b.emit("relu", [b.emit("matmul", [x, b.add_constant(w)])]))])
        kernel = backend.compile(graph, CompileOptions(threads=2))
        kernel.run([np.zeros((64, args.side), np.float32)])
        if args.keep:
            kept.append(kernel)
        del kernel, graph, w
        gc.collect()
        print(f"kernel {k}: {rss_mb()} MB", flush=True)


if __name__ == "__main__":
    main()
