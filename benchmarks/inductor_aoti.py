"""Could a saved plan hold Inductor kernels as AOT-compiled packages (issue 13)? Compile time, load
time, package size and speed of AOTInductor against korch's standalone Inductor kernels.

    python benchmarks/inductor_aoti.py MODEL [MODEL ...] [--threads 2] [--rounds 15]

For each zoo model, the whole primitive graph as korch's Inductor backend sees it (CandidateModule),
compiled two ways: korch's kernel (make_fx, standalone_compile, freezing) and an AOTInductor package
(torch.export, aoti_compile_and_package with freezing, written to a .pt2 file and loaded back). Both
are checked against korch's float64 reference on the same inputs, then timed interleaved in one
process (rounds of 3 calls each).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from korch import zoo  # noqa: E402
from korch.backends import CompileOptions, get_backend  # noqa: E402
from korch.backends.inductor.backend import CandidateModule, warmup_inputs  # noqa: E402
from korch.backends.reference import run_graph  # noqa: E402
from korch.pipeline import run_fission  # noqa: E402
from korch.profile.timing import interleaved  # noqa: E402


def rel_error(outputs, reference, names) -> float:
    return max(float(np.max(np.abs(np.asarray(o) - reference[n])) / max(float(np.max(np.abs(reference[n]))), 1e-30))
               for o, n in zip(outputs, names))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="+")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print("| model | standalone compile s | AOTI compile s | AOTI load s | package MB | standalone ms | AOTI ms "
          "| AOTI / standalone | error standalone / AOTI |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for name in args.models:
        graph = run_fission(zoo.to_model_proto(name)).graph
        inputs = warmup_inputs(graph)
        tensors = [torch.from_numpy(x) for x in inputs]
        reference = run_graph(graph, dict(zip(graph.inputs, inputs)))
        t0 = time.perf_counter()
        kernel = get_backend("inductor").compile(graph, CompileOptions(threads=args.threads))
        standalone_s = time.perf_counter() - t0
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            with torch.no_grad():
                program = torch.export.export(CandidateModule(graph, "cpu").eval(), tuple(tensors), strict=False)
            # freezing applies only to graphs compiled with grad mode off
            with torch.no_grad(), torch._inductor.config.patch({"freezing": True, "cpp.threads": args.threads}):
                path = torch._inductor.aoti_compile_and_package(program, package_path=str(Path(tmp) / f"{name}.pt2"))
            aoti_s = time.perf_counter() - t0
            size_mb = os.path.getsize(path) / 1e6
            t0 = time.perf_counter()
            runner = torch._inductor.aoti_load_package(path)
            load_s = time.perf_counter() - t0

            def aoti():
                with torch.no_grad():
                    return runner(*tensors)

            errors = (rel_error(kernel.run(inputs), reference, graph.outputs),
                      rel_error([y.numpy() for y in aoti()], reference, graph.outputs))
            t = interleaved({"standalone": lambda: kernel.run(inputs), "aoti": aoti}, args.rounds, calls_per_round=3)
        s, a = t["standalone"].median_s * 1e3, t["aoti"].median_s * 1e3
        print(f"| {name} | {standalone_s:.1f} | {aoti_s:.1f} | {load_s:.2f} | {size_mb:.1f} | {s:.2f} | {a:.2f} "
              f"| {a / s:.2f} | {errors[0]:.1e} / {errors[1]:.1e} |", flush=True)


if __name__ == "__main__":
    main()
