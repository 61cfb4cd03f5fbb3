"""What computing one 3x3 convolution by Winograd's F(2x2, 3x3) is worth to each engine, per layer shape.

    python benchmarks/winograd_layers.py [--threads 2] [--rounds 15] [--layers C,K,H,W ...]

Each layer is a model of one 3x3 stride-1 convolution (pads 1, bias) of C channels to K at HxW,
batch 1, and the same model after korch's `winograd_conv3x3` rewrite (korch/frontend/rewrites.py),
applied whatever the channel counts (the rule's MIN_WINOGRAD_CHANNELS gate is what this measures).
Each engine runs both as its users run a model (onnxruntime: default session; OpenVINO: latency
hint, f32), side by side in one process (rounds of turns, each after a pause and an untimed call:
`korch bench`'s protocol). Printed per layer: each engine's medians with p10-p90 and direct over
Winograd, and the rewritten layer's largest error against the direct one relative to the output's
scale, on a random input. The default layers are yolov4's and candy's 3x3 stride-1 shapes.
"""

from __future__ import annotations

import argparse
import functools
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

# (C, K, H, W): yolov4's 3x3 stride-1 layers at 416x416, then candy's residual blocks at 224x224
LAYERS = ((32, 64, 208, 208), (64, 64, 104, 104), (128, 128, 52, 52), (128, 256, 52, 52), (256, 256, 26, 26),
          (256, 512, 26, 26), (512, 512, 13, 13), (512, 1024, 13, 13), (128, 128, 104, 104), (128, 128, 56, 56))


def conv_model(c: int, k: int, h: int, w: int) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    weight = (rng.standard_normal((k, c, 3, 3)) / np.sqrt(9 * c)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])], "conv3x3",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, h, w])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, k, h, w])],
        [numpy_helper.from_array(weight, "w"), numpy_helper.from_array(rng.standard_normal(k).astype(np.float32), "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    return model


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--engines", default="onnxruntime,openvino")
    p.add_argument("--layers", nargs="*", help="C,K,H,W each (default: yolov4's and candy's)")
    args = p.parse_args(argv)

    from rewrite_gain import engine_call

    from korch.frontend.onnx_import import load_model
    from korch.frontend.rewrites import rewrite_model, winograd_conv3x3
    from korch.profile.timing import measure, side_by_side
    from korch.verify import diff_outputs, run_onnxruntime

    layers = [tuple(int(v) for v in s.split(",")) for s in args.layers] if args.layers else LAYERS
    engines = args.engines.split(",")
    rule = functools.partial(winograd_conv3x3, min_channels=1)
    print(f"{args.threads} threads, side by side, {args.rounds} rounds\n")
    print("| C -> K, HxW | max error | " + " | ".join(f"{e} direct ms | {e} Winograd ms | direct / Winograd"
                                                     for e in engines) + " |")
    print("|---|---:|" + "---|---|---:|" * len(engines))
    scratch = tempfile.TemporaryDirectory()
    for c, k, h, w in layers:
        model = load_model(conv_model(c, k, h, w))
        rewritten, notes = rewrite_model(model, rules=(rule,))
        assert len(notes) == 1, notes
        feeds = {"x": np.random.default_rng(1).standard_normal((1, c, h, w)).astype(np.float32)}
        err = max(d.rel for d in diff_outputs(run_onnxruntime(rewritten, feeds), run_onnxruntime(model, feeds)))
        paths = {}
        for name, m in (("direct", model), ("winograd", rewritten)):
            paths[name] = Path(scratch.name) / f"{name}.onnx"
            onnx.save(m, paths[name])
        fns = {(e, name): engine_call(path, e, args.threads, feeds) for e in engines for name, path in paths.items()}
        one = measure(next(iter(fns.values())), warmup=1, repeats=3).median_s
        t = side_by_side(fns, args.rounds, one)
        cells = []
        for e in engines:
            a, b = t[e, "direct"], t[e, "winograd"]
            cells.append(f"{a.median_s * 1e3:.2f} ({a.p10_s * 1e3:.2f}-{a.p90_s * 1e3:.2f}) | "
                         f"{b.median_s * 1e3:.2f} ({b.p10_s * 1e3:.2f}-{b.p90_s * 1e3:.2f}) | "
                         f"{a.median_s / b.median_s:.2f}x")
        print(f"| {c} -> {k}, {h}x{w} | {err:.1e} | " + " | ".join(cells) + " |", flush=True)
    scratch.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
