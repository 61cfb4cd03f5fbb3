"""OpenVINO running a whole model: as korch compiles it (a region of the original nodes) and as its users do.

    python benchmarks/openvino_region.py MODEL [--threads 2] [--rounds 15]

korch profiles OpenVINO's whole-model kernel as a region model: the model's original nodes, rebuilt
by korch/frontend/regions.py, with its large weights handed over as arrays (`region_model_sharing`,
OpenVinoBackend.compile_onnx). korch bench's OpenVINO peer compiles the model's ONNX file. If the
two differ in speed, korch's profile of OpenVINO's whole model is not OpenVINO's time, and measured
selection may never try it. Four ways, timed side by side (interleaved rounds, a pause and an
untimed call per turn), each with its outputs checked against the file's:

- file:             `compile_file` of the ONNX file, korch bench's peer (it copies its outputs);
- original:         the same model as bytes through korch's `compile_onnx` (outputs shared, not copied);
- region embedded:  korch's region model of every node, its weights embedded in the protobuf;
- region shared:    the region model with its weights passed as arrays: what the profiler compiles.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402
import onnx  # noqa: E402


def whole_model(graph, model):          # (korch's Graph and an onnx.ModelProto: imported lazily)
    """The whole model as the profiler's candidate: every primitive, every ONNX node (a region)."""
    from korch.candidates.candidate import Candidate, boundary
    from korch.frontend.engines import node_key

    nodes = tuple(range(len(graph.nodes)))
    inputs, outputs = boundary(graph, nodes)
    return Candidate(nodes, inputs, outputs, "whole", tuple(node_key(n) for n in model.graph.node))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", help="a zoo model name or an .onnx file")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()

    from korch.backends import CompileOptions, get_backend
    from korch.frontend.regions import region_model
    from korch.ir.onnx_source import OnnxSource
    from korch.pipeline import run_fission
    from korch.profile.profiler import compile_candidate
    from korch.profile.timing import measure, paired_ratio, side_by_side
    from korch.verify import random_feeds

    backend = get_backend("openvino")
    with tempfile.TemporaryDirectory() as tmp:
        fissioned = run_fission(args.model, cache_dir=tmp)
        graph, model = fissioned.graph, fissioned.model
        source = OnnxSource(model, dict(fissioned.value_map or {}))
        whole = whole_model(graph, model)
        inputs, outputs = whole.inputs, whole.outputs
        options = CompileOptions(threads=args.threads, runs_alone=True)          # as the profiler compiles it

        path = Path(tmp) / "model.onnx"
        onnx.save(model, path)
        file_kernel, file_inputs = backend.compile_file(path, args.threads)
        feeds = random_feeds(graph, 0)
        kernels = {          # each kernel with the names of its inputs, in the order it takes them
            "file": (file_kernel, file_inputs),
            "original": (backend.compile_onnx(model, graph.inputs, graph.outputs, options), graph.inputs),
            "region embedded": (backend.compile_onnx(region_model(source, graph, whole), inputs, outputs, options),
                                inputs),
            "region shared": (compile_candidate(graph, whole, "openvino", options, source), inputs),
        }
        calls = {}
        expected = file_kernel.run([feeds[n] for n in file_inputs])
        scale = max(float(np.abs(e).max()) for e in expected) or 1.0
        for name, (kernel, names) in kernels.items():
            kernel_inputs = [feeds[n] for n in names]
            got = kernel.run(kernel_inputs)
            diff = max(float(np.abs(np.asarray(g) - e).max()) for g, e in zip(got, expected))
            print(f"{name:16s} largest difference from the file's outputs: {diff / scale:.1e} of their scale")
            calls[name] = (lambda k, x: lambda: k.run(x))(kernel, kernel_inputs)

        one = statistics.mean(measure(f, warmup=1, repeats=3, min_seconds=0.0).median_s for f in calls.values())
        t = side_by_side(calls, args.rounds, one, warmup=2)
    print(f"\n{args.model}, {args.threads} threads, {args.rounds} rounds: ms median (p10-p90), and the time over "
          "the file's, round by round")
    for name, timing in t.items():
        print(f"  {name:16s} {timing.median_s * 1e3:9.2f} ({timing.p10_s * 1e3:.2f}-{timing.p90_s * 1e3:.2f})"
              f"   {paired_ratio(t['file'], timing):.3f}")


if __name__ == "__main__":
    main()
