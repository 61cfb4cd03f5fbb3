"""How much of AOT Inductor's slowdown is its linear layers? Inductor with freezing runs an fp32 linear
on a constant weight as MKL's packed GEMM (`mkl._mkl_linear`) in korch's standalone kernels, but in
AOT mode as oneDNN's (`mkldnn._linear_pointwise`): MKL's packed matrix cannot move to another address,
so an AOT package cannot hold it. This times the three ways torch can run one linear on this machine,
and onnxruntime's (a MatMul of the constant weight plus the bias, in one session with its default
settings, as onnxruntime runs an exported linear layer), interleaved, on the zoo transformers' shapes.
The last column is the fastest way's rate in GFLOP/s (2 x tokens x in x out per call).

    python benchmarks/linear_packing.py [--threads 2] [--rounds 15]

Shapes are (tokens, in, out): bert-base at 128 tokens, vit-b16 at 197.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import torch  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from korch.backends.onnxruntime import make_session  # noqa: E402
from korch.profile.timing import SETTLE_SECONDS, interleaved  # noqa: E402
from korch.zoo.export import IR_VERSION  # noqa: E402          (one onnxruntime reads; onnx 1.23 writes 14)

SHAPES = [(128, 768, 768), (128, 768, 3072), (128, 3072, 768), (197, 768, 768), (197, 768, 3072), (197, 3072, 768)]


def onnx_linear(w: np.ndarray, b: np.ndarray, m: int) -> onnx.ModelProto:
    """y = x @ w + b with w and b initializers, as torch's exporter writes a linear layer."""
    k, n = w.shape
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["xw"]), helper.make_node("Add", ["xw", "b"], ["y"])], "linear",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = IR_VERSION
    return model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print("| tokens x in x out | MKL packed ms | oneDNN packed ms | addmm ms | onnxruntime ms | oneDNN / MKL "
          "| addmm / MKL | onnxruntime / MKL | fastest GFLOP/s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    generator = torch.Generator().manual_seed(0)
    for m, k, n in SHAPES:
        x = torch.randn(m, k, generator=generator)
        w = torch.randn(k, n, generator=generator)
        b = torch.randn(n, generator=generator)
        wt = w.t().contiguous()                  # [out, in], as freezing hands it to the packing ops
        mkl = torch.ops.mkl._mkl_reorder_linear_weight(wt, m)
        dnn = torch.ops.mkldnn._reorder_linear_weight(wt, m)
        expected = torch.addmm(b, x, w)
        session = make_session(onnx_linear(w.numpy(), b.numpy(), m), args.threads, stop_spinning=False)
        feed = {"x": x.numpy()}
        ways = {"mkl": lambda: torch.ops.mkl._mkl_linear(x, mkl, wt, b, m),
                "onednn": lambda: torch.ops.mkldnn._linear_pointwise(x, dnn, b, "none", [], ""),
                "addmm": lambda: torch.addmm(b, x, w),
                "onnxruntime": lambda: torch.from_numpy(session.run(None, feed)[0])}
        with torch.no_grad():
            for name, f in ways.items():         # the four compute the same linear
                torch.testing.assert_close(f(), expected, rtol=1e-4, atol=1e-3, msg=f"{name} at {(m, k, n)}")
            t = interleaved(ways, args.rounds, calls_per_round=5, settle_s=SETTLE_SECONDS, turn_warmup=1)
        ms = {name: t[name].median_s * 1e3 for name in ways}
        gflops = 2 * m * k * n / (min(ms.values()) * 1e-3) / 1e9
        print(f"| {m} x {k} x {n} | {ms['mkl']:.3f} | {ms['onednn']:.3f} | {ms['addmm']:.3f} | {ms['onnxruntime']:.3f} "
              f"| {ms['onednn'] / ms['mkl']:.2f} | {ms['addmm'] / ms['mkl']:.2f} | {ms['onnxruntime'] / ms['mkl']:.2f} "
              f"| {gflops:.0f} |", flush=True)


if __name__ == "__main__":
    main()
