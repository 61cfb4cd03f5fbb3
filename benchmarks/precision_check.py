"""How far korch's reference and onnxruntime each are from a float64 run of the zoo's torch module.

    python benchmarks/precision_check.py NAME [--seed N]

Used to tell a fission error from float32 rounding on deep models: if onnxruntime itself is as far
from float64 as it is from korch, the difference is rounding, not semantics.
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

from korch import zoo
from korch.backends.reference import run_graph
from korch.pipeline import run_fission
from korch.verify import random_feeds, run_onnxruntime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("name")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    model = zoo.to_model_proto(args.name)
    graph = run_fission(model).graph
    feeds = random_feeds(graph, args.seed)
    korch_out = run_graph(graph, feeds)
    ort_out = run_onnxruntime(model, feeds)
    module = zoo.build_module(args.name).double()
    with torch.no_grad():
        result = module(*[torch.from_numpy(feeds[i.name]).to(torch.float64 if feeds[i.name].dtype == np.float32
                                                               else torch.int64) for i in zoo.get_model(args.name).inputs])
    exact = result if isinstance(result, (tuple, list)) else [result]
    print(f"{'output':<14} {'ORT vs f64':>11} {'korch vs f64':>13} {'korch vs ORT':>13}")
    for (name, ort), ref64 in zip(ort_out.items(), exact):
        ref64 = ref64.numpy()
        scale = np.abs(ref64).max()
        print(f"{name:<14} {np.abs(ort - ref64).max() / scale:>11.2e} {np.abs(korch_out[name] - ref64).max() / scale:>13.2e}"
              f" {np.abs(korch_out[name] - ort).max() / np.abs(ort).max():>13.2e}")


if __name__ == "__main__":
    main()
