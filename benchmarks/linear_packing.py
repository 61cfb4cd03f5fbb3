"""How much of AOT Inductor's slowdown is its linear layers? Inductor with freezing runs an fp32 linear
on a constant weight as MKL's packed GEMM (`mkl._mkl_linear`) in korch's standalone kernels, but in
AOT mode as oneDNN's (`mkldnn._linear_pointwise`): MKL's packed matrix cannot move to another address,
so an AOT package cannot hold it. This times the three ways torch can run one linear on this machine,
interleaved, on the zoo transformers' shapes.

    python benchmarks/linear_packing.py [--threads 2] [--rounds 15]

Shapes are (tokens, in, out): bert-base at 128 tokens, vit-b16 at 197.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from korch.profile.timing import interleaved  # noqa: E402

SHAPES = [(128, 768, 768), (128, 768, 3072), (128, 3072, 768), (197, 768, 768), (197, 768, 3072), (197, 3072, 768)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print("| tokens x in x out | MKL packed ms | oneDNN packed ms | addmm ms | oneDNN / MKL | addmm / MKL |")
    print("|---|---:|---:|---:|---:|---:|")
    generator = torch.Generator().manual_seed(0)
    for m, k, n in SHAPES:
        x = torch.randn(m, k, generator=generator)
        w = torch.randn(k, n, generator=generator)
        b = torch.randn(n, generator=generator)
        wt = w.t().contiguous()                  # [out, in], as freezing hands it to the packing ops
        mkl = torch.ops.mkl._mkl_reorder_linear_weight(wt, m)
        dnn = torch.ops.mkldnn._reorder_linear_weight(wt, m)
        expected = torch.addmm(b, x, w)
        ways = {"mkl": lambda: torch.ops.mkl._mkl_linear(x, mkl, wt, b, m),
                "onednn": lambda: torch.ops.mkldnn._linear_pointwise(x, dnn, b, "none", [], ""),
                "addmm": lambda: torch.addmm(b, x, w)}
        with torch.no_grad():
            for name, f in ways.items():         # the three compute the same linear
                torch.testing.assert_close(f(), expected, rtol=1e-4, atol=1e-3, msg=f"{name} at {(m, k, n)}")
            t = interleaved(ways, args.rounds, calls_per_round=5)
        ms = {name: t[name].median_s * 1e3 for name in ways}
        print(f"| {m} x {k} x {n} | {ms['mkl']:.3f} | {ms['onednn']:.3f} | {ms['addmm']:.3f} "
              f"| {ms['onednn'] / ms['mkl']:.2f} | {ms['addmm'] / ms['mkl']:.2f} |", flush=True)


if __name__ == "__main__":
    main()
