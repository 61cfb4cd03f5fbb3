"""Fission every zoo model and report ONNX nodes, primitives per class, error vs onnxruntime, time.

    python benchmarks/fission_zoo.py [--mini] [--json OUT.json] [NAME ...]
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from korch import zoo
from korch.ir.ops import PrimClass
from korch.pipeline import run_fission


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="zoo models (default: every full-size one)")
    parser.add_argument("--mini", action="store_true", help="the mini variants instead")
    parser.add_argument("--json", help="also write the rows as JSON here")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    names = args.names or [m.name for m in zoo.list_models() if m.mini == args.mini]
    header = f"{'model':<18} {'ONNX nodes':>10} {'prims':>6} " + " ".join(f"{k.value:>11}" for k in PrimClass)
    print(header + f" {'max rel err':>11} {'export s':>8} {'fission s':>9}")
    rows = []
    for name in names:
        t0 = time.perf_counter()
        model = zoo.to_model_proto(name)
        export_s = time.perf_counter() - t0
        result = run_fission(model, verify=True, seed=args.seed)
        counts = result.graph.class_counts()
        row = {"model": name, "onnx_nodes": len(result.model.graph.node), "primitives": len(result.graph.nodes),
               **{k.value: counts[k] for k in PrimClass}, "max_rel_error": result.verify.max_rel,
               "export_seconds": export_s, "fission_seconds": result.fission_seconds,
               "load_seconds": result.load_seconds}
        rows.append(row)
        print(f"{name:<18} {row['onnx_nodes']:>10} {row['primitives']:>6} "
              + " ".join(f"{counts[k]:>11}" for k in PrimClass)
              + f" {row['max_rel_error']:>11.2e} {export_s:>8.1f} {result.fission_seconds:>9.2f}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)
    return 0 if all(r["max_rel_error"] <= 1e-4 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
