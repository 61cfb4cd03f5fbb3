"""What computing one 3x3 convolution by Winograd's F(2x2, 3x3) is worth to each engine, per layer shape.

    python benchmarks/winograd_layers.py [--threads 2] [--rounds 15] [--layers C,K,H,W ...] [--compact] [--f4]

Each layer is a model of one 3x3 stride-1 convolution (pads 1, bias) of C channels to K at HxW,
batch 1, and the same model after korch's `winograd_conv3x3` rewrite (korch/frontend/rewrites.py),
applied whatever the channel counts (the rule's MIN_WINOGRAD_CHANNELS gate is what this measures).
Each engine runs both as its users run a model (onnxruntime: default session; OpenVINO: latency
hint, f32), side by side in one process (rounds of turns, each after a pause and an untimed call:
`korch bench`'s protocol). Printed per layer: each engine's medians with p10-p90 and direct over
Winograd, and the rewritten layer's largest error against the direct one relative to the output's
scale, on a random input. The default layers are yolov4's and candy's 3x3 stride-1 shapes.

The "winograd" form is the rule's F(2x2, 3x3) whatever the layer's size (its min_f4_tiles out of
reach); `--f4` adds the rule's F(4x4, 3x3) (`_winograd_f4`: 4x4 output tiles, 36 products) on every
layer, and prints direct over each form, so the two can be read side by side.

`--compact` adds a third form of the same F(2x2, 3x3) in 9-10 nodes instead of the rule's 58: one
grouped convolution makes all 16 transformed inputs (16 output channels per input channel), a
Transpose puts the 16 positions first, one batched MatMul multiplies them by the 16 transformed
filters, a second MatMul by A^T (x) A^T makes the four output parities, DepthToSpace interleaves
them, and the bias is added once. With `--link`, the rounds are also split by the VM's core link
read before each (korch/profile/link.py): near and far medians per form.
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


def compact_model(c: int, k: int, h: int, w: int) -> onnx.ModelProto:
    """`conv_model`'s layer by Winograd's F(2x2, 3x3) in few nodes (the module's `--compact`)."""
    from korch.frontend.rewrites import _WINOGRAD_AT, _WINOGRAD_BT, _winograd_weights

    direct = conv_model(c, k, h, w)
    weights = {t.name: numpy_helper.to_array(t) for t in direct.graph.initializer}
    th, tw = -(-h // 2), -(-w // 2)
    taps = np.stack([np.outer(_WINOGRAD_BT[i], _WINOGRAD_BT[j]) for i in range(4) for j in range(4)])
    parities = np.array([[_WINOGRAD_AT[p, i] * _WINOGRAD_AT[q, j] for i in range(4) for j in range(4)]
                         for p in range(2) for q in range(2)])
    consts = {"taps": np.broadcast_to(taps[None], (c, 16, 4, 4)).reshape(16 * c, 1, 4, 4),
              "u": _winograd_weights(weights["w"]).reshape(16, k, c), "at": parities,
              "bias": weights["b"].reshape(k, 1, 1)}
    shapes = {"s_tiles": [1, c, 16, th * tw], "s_products": [1, 16, k * th * tw], "s_parities": [1, 4 * k, th, tw]}
    nodes = [helper.make_node("Conv", ["x", "taps"], ["v"], kernel_shape=[4, 4], strides=[2, 2], group=c,
                              pads=[1, 1, 1 + h % 2, 1 + w % 2]),
             helper.make_node("Reshape", ["v", "s_tiles"], ["v16"]),
             helper.make_node("Transpose", ["v16"], ["vt"], perm=[0, 2, 1, 3]),
             helper.make_node("MatMul", ["u", "vt"], ["m"]),
             helper.make_node("Reshape", ["m", "s_products"], ["m16"]),
             helper.make_node("MatMul", ["at", "m16"], ["y4"]),
             helper.make_node("Reshape", ["y4", "s_parities"], ["yp"]),
             helper.make_node("DepthToSpace", ["yp"], ["ys"], blocksize=2, mode="DCR"),
             helper.make_node("Add", ["ys", "bias"], ["y" if not (h % 2 or w % 2) else "yb"])]
    inits = [numpy_helper.from_array(np.ascontiguousarray(v, np.float32), n) for n, v in consts.items()]
    inits += [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in shapes.items()]
    if h % 2 or w % 2:
        nodes.append(helper.make_node("Slice", ["yb", "crop_start", "crop_end", "crop_axes"], ["y"]))
        inits += [numpy_helper.from_array(np.array(v, np.int64), n)
                  for n, v in (("crop_start", [0, 0]), ("crop_end", [h, w]), ("crop_axes", [2, 3]))]
    graph = helper.make_graph(nodes, "conv3x3_winograd_compact", list(direct.graph.input), list(direct.graph.output),
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    return model


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--engines", default="onnxruntime,openvino")
    p.add_argument("--layers", nargs="*", help="C,K,H,W each (default: yolov4's and candy's)")
    p.add_argument("--compact", action="store_true", help="also time F(2x2, 3x3) in 9-10 nodes (see above)")
    p.add_argument("--f4", action="store_true", help="also time the rule's F(4x4, 3x3) on every layer")
    p.add_argument("--link", action="store_true", help="split the rounds by the core link read before each")
    args = p.parse_args(argv)

    from rewrite_gain import engine_call

    from korch.frontend.onnx_import import load_model
    from korch.frontend.rewrites import rewrite_model, winograd_conv3x3
    from korch.profile.timing import measure, side_by_side
    from korch.verify import diff_outputs, run_onnxruntime

    layers = [tuple(int(v) for v in s.split(",")) for s in args.layers] if args.layers else LAYERS
    engines = args.engines.split(",")
    forms = ("winograd",) + (("compact",) if args.compact else ()) + (("f4",) if args.f4 else ())
    rule = functools.partial(winograd_conv3x3, min_channels=1, min_f4_tiles=2**62, min_f2_tiles=1)
    f4_rule = functools.partial(winograd_conv3x3, min_channels=1, min_f4_tiles=1, min_f2_tiles=1)
    scratch = tempfile.TemporaryDirectory()
    read = None
    if args.link:
        from korch.profile import link
        read = link.reader(Path(scratch.name) / "tools")
        if read is None:
            print("no core-link probe here (it needs a C compiler and two CPUs): rounds not split")
    print(f"{args.threads} threads, side by side, {args.rounds} rounds\n")
    heads = [f"{e} direct ms" for e in engines] + [f"{e} {f} ms | direct / {f}" for e in engines for f in forms]
    print("| C -> K, HxW | max error | " + " | ".join(heads) + " |")
    print("|---|---:|" + "---|" * len(engines) + "---|---:|" * len(engines) * len(forms))
    for c, k, h, w in layers:
        model = load_model(conv_model(c, k, h, w))
        rewritten, notes = rewrite_model(model, rules=(rule,))
        assert len(notes) == 1, notes
        models = {"direct": model, "winograd": rewritten}
        if args.compact:
            models["compact"] = compact_model(c, k, h, w)
        if args.f4:
            models["f4"] = rewrite_model(model, rules=(f4_rule,))[0]
        feeds = {"x": np.random.default_rng(1).standard_normal((1, c, h, w)).astype(np.float32)}
        expected = run_onnxruntime(model, feeds)
        errors = [max(d.rel for d in diff_outputs(run_onnxruntime(models[f], feeds), expected)) for f in forms]
        paths = {}
        for name, m in models.items():
            paths[name] = Path(scratch.name) / f"{name}.onnx"
            onnx.save(m, paths[name])
        fns = {(e, name): engine_call(path, e, args.threads, feeds) for e in engines for name, path in paths.items()}
        one = measure(next(iter(fns.values())), warmup=1, repeats=3).median_s
        readings: list[float | None] = []
        t = side_by_side(fns, args.rounds, one, between_rounds=(lambda: readings.append(read())) if read else None)

        def cell(x) -> str:
            return f"{x.median_s * 1e3:.2f} ({x.p10_s * 1e3:.2f}-{x.p90_s * 1e3:.2f})"
        cells = [cell(t[e, "direct"]) for e in engines]
        cells += [f"{cell(t[e, f])} | {t[e, 'direct'].median_s / t[e, f].median_s:.2f}x" for e in engines for f in forms]
        print(f"| {c} -> {k}, {h}x{w} | {' / '.join(f'{x:.1e}' for x in errors)} | " + " | ".join(cells) + " |",
              flush=True)
        if read is not None:
            print("    " + link.split(readings, {f"{e} {n}": t[e, n].samples_s for e, n in fns}).line(), flush=True)
    scratch.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
