"""Where each engine's whole-model time goes, by its own profiler, and what that leaves for orchestration.

    python benchmarks/engine_breakdown.py MODEL [MODEL ...] [--threads 2] [--runs 20] [--cache DIR]
                                          [--engines onnxruntime,openvino] [--top 6] [--json OUT]

MODEL is a zoo name (exported once under --cache, as `korch optimize --cache` does) or an .onnx file.
Each engine runs the model as its users do (onnxruntime: default session, all graph optimizations;
OpenVINO: the ONNX file, LATENCY hint, f32), with its per-node profiler on (onnxruntime's
`enable_profiling`, OpenVINO's `PERF_COUNT`), over --runs calls after 3 untimed ones. Each executed
node's time is put in one class by its op type:

- linear: convolutions, matrix products and fully connected layers, with whatever the engine fused
  into them (bias, activations, a residual add are then inside their time);
- attention: an engine's fused attention node (matrix products and softmax in one);
- layout: pure data movement (reorders between blocked and plain layouts, transposes, concats,
  slices, gathers, pads, resizes, reshapes that copy);
- other: the rest (elementwise maps, normalizations, reductions, softmax, pooling, ...).

Printed per model: per engine, the per-call time the profiler saw (its own overhead included) and each
class's share of it, the largest non-linear op types, and the linear flop rate; then two ceilings for
a plan built from these engines' kernels: "free memory-bound work" (the best engine's time over the
smallest linear + attention time of any engine: every other node costing nothing) and "best linear
engine, the rest as measured" (the best engine's time over the least linear + attention time of any
engine plus the best engine's own non-linear time). A plan of these engines' kernels cannot beat the
first; the second is what per-region engine choice could reach at best if linear nodes carried over
alone. For scale, the rate of one large onnxruntime MatMul (2048 x 2048 x 2048) at the same thread
count is printed first: where the engines' convolutions and matrix products run at or above it,
faster linear kernels are not what a plan could gain. Last, the geometric mean of each ceiling over
the models given. Nothing is written unless --json is given.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

# Op types by class, as each engine's profiler names them (onnxruntime: the op name, including its
# NCHWc and fused contrib ops; OpenVINO's CPU plugin: the node type of its executed graph).
LINEAR = {"Conv", "FusedConv", "ConvTranspose", "MatMul", "FusedMatMul", "Gemm", "FusedGemm", "MatMulNBits",
          "Convolution", "GroupConvolution", "Deconvolution", "FullyConnected", "ConvolutionBackpropData"}
ATTENTION = {"Attention", "MultiHeadAttention", "ScaledDotProductAttention", "SDPA"}
LAYOUT = {"Reorder", "ReorderInput", "ReorderOutput", "Transpose", "Concat", "Slice", "StridedSlice", "Gather",
          "Pad", "Resize", "Interpolate", "Reshape", "Split", "VariadicSplit", "Expand", "Broadcast", "Tile",
          "DepthToSpace", "SpaceToDepth", "ShuffleChannels", "Squeeze", "Unsqueeze", "Flatten", "Identity",
          "Copy", "ScatterUpdate", "ScatterNDUpdate", "GatherND", "GatherElements"}


def op_class(op: str) -> str:
    if op in LINEAR:
        return "linear"
    if op in ATTENTION:
        return "attention"
    if op in LAYOUT:
        return "layout"
    return "other"


def onnxruntime_breakdown(path: Path, feeds: dict, threads: int, runs: int) -> tuple[float, dict[str, float]]:
    """(ms per call, {op type: ms per call}) from onnxruntime's profiler."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.enable_profiling = True
    with tempfile.TemporaryDirectory() as tmp:
        opts.profile_file_prefix = os.path.join(tmp, "ort")
        session = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
        for _ in range(3):
            session.run(None, feeds)
        walls = []
        for _ in range(runs):
            t0 = time.perf_counter()
            session.run(None, feeds)
            walls.append(time.perf_counter() - t0)
        with open(session.end_profiling()) as f:
            events = json.load(f)
    per_op: dict[str, float] = collections.defaultdict(float)
    model_runs = [e for e in events if e.get("cat") == "Session" and e.get("name") == "model_run"]
    timed_from = model_runs[3]["ts"] if len(model_runs) > 3 else 0   # leave the untimed calls out
    for e in events:
        if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time") and e["ts"] >= timed_from:
            per_op[e["args"]["op_name"]] += e["dur"] / 1e3 / runs
    return statistics.median(walls) * 1e3, dict(per_op)


def openvino_breakdown(path: Path, feeds: dict, threads: int, runs: int) -> tuple[float, dict[str, float]]:
    """(ms per call, {node type: ms per call}) from OpenVINO's per-node performance counters."""
    import openvino as ov

    core = ov.Core()
    compiled = core.compile_model(str(path), "CPU", {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_NUM_THREADS": threads,
                                                     "INFERENCE_PRECISION_HINT": "f32", "PERF_COUNT": True})
    request = compiled.create_infer_request()
    for _ in range(3):
        request.infer(feeds)
    per_op: dict[str, float] = collections.defaultdict(float)
    walls = []
    for _ in range(runs):
        t0 = time.perf_counter()
        request.infer(feeds)
        walls.append(time.perf_counter() - t0)
        for info in request.profiling_info:       # this call's counters
            if info.status == info.Status.EXECUTED:
                per_op[info.node_type] += info.real_time.total_seconds() * 1e3 / runs
    return statistics.median(walls) * 1e3, dict(per_op)


ENGINES = {"onnxruntime": onnxruntime_breakdown, "openvino": openvino_breakdown}


def matmul_peak(threads: int, n: int = 2048) -> float:
    """Flop/s of onnxruntime's fp32 MatMul of two n x n matrices at `threads` threads (best of 7 calls)."""
    import onnx
    import onnxruntime as ort
    from onnx import helper

    graph = helper.make_graph([helper.make_node("MatMul", ["a", "b"], ["c"])], "peak",
                              [helper.make_tensor_value_info(x, onnx.TensorProto.FLOAT, [n, n]) for x in "ab"],
                              [helper.make_tensor_value_info("c", onnx.TensorProto.FLOAT, [n, n])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 10
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    session = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    feeds = {x: np.random.default_rng(0).standard_normal((n, n)).astype(np.float32) for x in "ab"}
    best = float("inf")
    for _ in range(8):
        t0 = time.perf_counter()
        session.run(None, feeds)
        best = min(best, time.perf_counter() - t0)
    return 2 * n ** 3 / best


def fissioned(path: Path):
    """The model's primitive graph (korch's fission), for its feeds and its linear flops."""
    from korch.frontend import load_model
    from korch.frontend.fission.driver import fission_model

    return fission_model(load_model(str(path)), False).graph


def linear_flops(graph) -> float:
    """Flops of the graph's convolutions and matrix products (two per multiply-add): korch's feature."""
    from korch.candidates.regions import _region
    from korch.costmodel.features import candidate_features

    return candidate_features(graph, _region(graph, 0, len(graph.nodes)))["linear_flops"]


def model_path(spec: str, cache: Path) -> Path:
    if Path(spec).is_file():
        return Path(spec)
    from korch import zoo

    return Path(zoo.cached_export(spec, cache))


def breakdown(spec: str, engines: list[str], threads: int, runs: int, cache: Path, top: int, peak: float) -> dict:
    from korch.verify import random_feeds

    path = model_path(spec, cache)
    graph = fissioned(path)
    feeds = random_feeds(graph)
    flops = linear_flops(graph)
    result: dict = {"model": spec, "threads": threads, "runs": runs, "linear_gflop": flops / 1e9, "engines": {}}
    for name in engines:
        time.sleep(0.3)                  # let the previous engine's pool park (see the project guide)
        wall, per_op = ENGINES[name](path, feeds, threads, runs)
        classes: dict[str, float] = collections.defaultdict(float)
        for op, ms in per_op.items():
            classes[op_class(op)] += ms
        profiled = sum(per_op.values())
        non_linear = sorted(((ms, op) for op, ms in per_op.items() if op_class(op) not in ("linear", "attention")),
                            reverse=True)
        result["engines"][name] = {
            "wall_ms": wall, "profiled_ms": profiled, "classes_ms": dict(classes),
            "linear_gflops": flops / 1e9 / (classes["linear"] / 1e3) if classes["linear"] else None,
            "top_non_linear": [(op, ms) for ms, op in non_linear[:top]]}
    best = min(result["engines"], key=lambda e: result["engines"][e]["wall_ms"])
    b = result["engines"][best]
    compute = {e: r["classes_ms"].get("linear", 0.0) + r["classes_ms"].get("attention", 0.0)
               for e, r in result["engines"].items()}
    least = min(compute.values())
    best_rest = b["profiled_ms"] - compute[best]
    result["best_engine"] = best
    result["ceiling_free_memory"] = b["profiled_ms"] / least if least else None
    result["ceiling_best_linear"] = b["profiled_ms"] / (least + best_rest)
    result["matmul_gflops"] = peak / 1e9
    return result


def format_result(r: dict) -> str:
    lines = [f"## {r['model']} ({r['threads']} threads, {r['runs']} calls; {r['linear_gflop']:.2f} GFLOP in "
             "convolutions and matrix products)", "",
             "| engine | wall ms | profiled ms | linear | attention | layout | other | linear GFLOP/s | largest non-linear ops (ms) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for name, e in r["engines"].items():
        total = e["profiled_ms"] or 1.0
        shares = [f"{100 * e['classes_ms'].get(c, 0.0) / total:.0f}%" for c in ("linear", "attention", "layout", "other")]
        rate = f"{e['linear_gflops']:.0f}" if e["linear_gflops"] else "-"
        tops = ", ".join(f"{op} {ms:.2f}" for op, ms in e["top_non_linear"])
        lines.append(f"| {name} | {e['wall_ms']:.2f} | {e['profiled_ms']:.2f} | " + " | ".join(shares)
                     + f" | {rate} | {tops} |")
    free = r["ceiling_free_memory"]
    lines += ["", f"best engine: {r['best_engine']}; ceiling with every non-linear node free: "
              f"{free:.2f}x; with the least linear time and the best engine's other nodes: "
              f"{r['ceiling_best_linear']:.2f}x", ""]
    return "\n".join(lines)


def geomean(values: list[float]) -> float:
    return float(np.exp(np.mean(np.log(values))))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("models", nargs="+")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--engines", default="onnxruntime,openvino")
    p.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "korch")
    p.add_argument("--top", type=int, default=6)
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    engines = args.engines.split(",")
    unknown = [e for e in engines if e not in ENGINES]
    if unknown:
        p.error(f"unknown engine(s) {unknown}; choose from {sorted(ENGINES)}")
    peak = matmul_peak(args.threads)
    print(f"onnxruntime's 2048^3 fp32 MatMul at {args.threads} threads: {peak / 1e9:.0f} GFLOP/s", flush=True)
    results = []
    for spec in args.models:
        r = breakdown(spec, engines, args.threads, args.runs, args.cache, args.top, peak)
        print(format_result(r), flush=True)
        results.append(r)
    if len(results) > 1:
        print("geometric mean over the models of each ceiling: " + ", ".join(
            f"{label} {geomean([r[key] for r in results]):.2f}x" for label, key in
            [("every non-linear node free", "ceiling_free_memory"), ("least linear time", "ceiling_best_linear")]))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
