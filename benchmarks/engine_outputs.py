"""What handing a kernel's output over costs, per engine: copied out of the engine or returned in place.

    python benchmarks/engine_outputs.py --threads 2 --sizes-kib 64 1024 4096 16384 --rounds 15

A one-node model (Relu over N floats: the output is as large as the input, and the computation is one
pass) runs on each engine as korch compiles kernels (korch's own compile settings), and:

- openvino, copied: `infer(share_outputs=False)`, OpenVINO's default (and korch's before outputs were
  shared): each output copied out of the request into a fresh array;
- openvino, shared: `infer(share_outputs=True)`, what korch's OpenVINO kernels do now: views of the
  request's buffers, valid until its next call;
- onnxruntime, run: `InferenceSession.run`, korch's onnxruntime kernels;
- onnxruntime, IO binding: the output bound once to a preallocated array (`run_with_iobinding`);
- numpy copy: one copy of the tensor, the cost of moving its bytes once.

Each variant is timed in rounds, every variant once per round in turn (rotating which goes first),
each turn a median of back-to-back calls after warm-up; the table gives the median over rounds with
p10-p90, in microseconds.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np


def relu_model(n: int):
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [n])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [n])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "relu", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


def turn(fn: Callable[[], object], calls: int) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def variants(n: int, threads: int) -> dict[str, Callable[[], object]]:
    from korch.backends import CompileOptions, get_backend
    from korch.backends.onnxruntime import make_session

    model = relu_model(n)
    x = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    found: dict[str, Callable[[], object]] = {}
    try:
        kernel = get_backend("openvino").compile_onnx(model, ["x"], ["y"], CompileOptions(threads=threads))
        # (the lambdas hold the kernel: its request must not outlive its compiled model)
        found["openvino, copied"] = lambda k=kernel: k.request.infer({0: x}, share_inputs=True, share_outputs=False)
        found["openvino, shared"] = lambda k=kernel: k.request.infer({0: x}, share_inputs=True, share_outputs=True)
    except KeyError:                      # OpenVINO not installed
        pass
    session = make_session(model, threads, stop_spinning=True)
    found["onnxruntime, run"] = lambda: session.run(["y"], {"x": x})
    binding = session.io_binding()
    out = np.empty(n, np.float32)
    binding.bind_cpu_input("x", x)
    binding.bind_output("y", "cpu", 0, np.float32, [n], out.ctypes.data)
    # (the binding holds only a pointer to `out`: the lambda keeps the array alive)
    found["onnxruntime, IO binding"] = lambda o=out: session.run_with_iobinding(binding)
    found["numpy copy"] = x.copy
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--sizes-kib", type=int, nargs="+", default=[64, 1024, 4096, 16384])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=30, help="back-to-back calls per turn")
    args = parser.parse_args()
    rows = []
    for kib in args.sizes_kib:
        fns = variants(kib * 1024 // 4, args.threads)
        names = list(fns)
        samples: dict[str, list[float]] = {name: [] for name in names}
        for r in range(args.rounds):
            for name in names[r % len(names):] + names[:r % len(names)]:
                time.sleep(0.02)
                samples[name].append(turn(fns[name], args.calls))
        rows.append((kib, {name: np.percentile(v, [50, 10, 90]) * 1e6 for name, v in samples.items()}))
    names = list(rows[0][1])
    print("| tensor KiB | " + " | ".join(names) + " |")
    print("|---:|" + "---:|" * len(names))
    for kib, stats in rows:
        print(f"| {kib} | " + " | ".join(f"{m:.1f} ({lo:.1f}-{hi:.1f})" for m, lo, hi in (stats[n] for n in names)) + " |")


if __name__ == "__main__":
    main()
