"""Algebraic rewrites: a 1x1 convolution split over an upsampled concatenation, folded into a token MatMul;
a Focus stem as a stride-2 convolution; a 3x3 convolution over a nearest upsampling as a sub-pixel convolution;
a wide 3x3 convolution by Winograd's F(2x2, 3x3); rewrites applied together where independent."""

from __future__ import annotations

import functools
import logging
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from korch import zoo
from korch.backends.reference import run_graph
from korch.errors import ModelLoadError
from korch.frontend.onnx_import import load_model
from korch.frontend.rewrite_check import rewrite_checked
from korch.frontend.rewrites import MIN_F2_TILES, MIN_F4_TILES, Rewrite, _independent, rewrite_model, winograd_conv3x3
from korch.pipeline import run_fission
from korch.settings import AccuracyPolicy
from korch.verify import random_feeds, run_onnxruntime

RTOL = 1e-5          # fp32 reassociation of a 1x1 convolution's sums: ~1e-7 of the output's scale measured


def _model(*, kernel: int = 1, stride: int = 1, group: int = 1, upsample: bool = True, shared_resize: bool = False,
           concat_is_output: bool = False, big_conv: bool = False, seed: int = 0) -> onnx.ModelProto:
    """x1 [1,8,8,8] as is, x2 [1,6,4,4] upsampled by linear scales, x3 [1,4,2,2] by nearest sizes;
    concatenated on channels (18), then a Conv of 5 outputs with bias, then Relu. `big_conv`: also a
    3x3 Conv of x1 to 64 channels, an output of its own, 100 times the flops the rewrite saves."""
    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array(rng.standard_normal((5, 18 // group, kernel, kernel)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal(5).astype(np.float32), "b"),
             numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales"),
             numpy_helper.from_array(np.array([1, 4, 8, 8], np.int64), "sizes")]
    nodes = []
    if upsample:
        nodes += [helper.make_node("Resize", ["x2", "", "scales"], ["u2"], mode="linear"),
                  helper.make_node("Resize", ["x3", "", "", "sizes"], ["u3"], mode="nearest")]
        shapes = ([1, 6, 4, 4], [1, 4, 2, 2])
    else:
        nodes += [helper.make_node("Identity", ["x2"], ["u2"]), helper.make_node("Identity", ["x3"], ["u3"])]
        shapes = ([1, 6, 8, 8], [1, 4, 8, 8])
    nodes += [helper.make_node("Concat", ["x1", "u2", "u3"], ["cat"], axis=1),
              helper.make_node("Conv", ["cat", "w", "b"], ["conv"], kernel_shape=[kernel, kernel],
                               strides=[stride, stride], group=group, pads=[kernel // 2] * 4),
              helper.make_node("Relu", ["conv"], ["y"])]
    side = (8 - 1) // stride + 1
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5, side, side])]
    if shared_resize:
        nodes.append(helper.make_node("Neg", ["u2"], ["u2_also"]))
        outputs.append(helper.make_tensor_value_info("u2_also", TensorProto.FLOAT, [1, 6, 8, 8]))
    if concat_is_output:
        outputs.append(helper.make_tensor_value_info("cat", TensorProto.FLOAT, [1, 18, 8, 8]))
    if big_conv:
        inits.append(numpy_helper.from_array(rng.standard_normal((64, 8, 3, 3)).astype(np.float32), "w_big"))
        nodes.append(helper.make_node("Conv", ["x1", "w_big"], ["big"], kernel_shape=[3, 3], pads=[1] * 4))
        outputs.append(helper.make_tensor_value_info("big", TensorProto.FLOAT, [1, 64, 8, 8]))
    graph = helper.make_graph(nodes, "upsampled_concat", [
        helper.make_tensor_value_info("x1", TensorProto.FLOAT, [1, 8, 8, 8]),
        helper.make_tensor_value_info("x2", TensorProto.FLOAT, shapes[0]),
        helper.make_tensor_value_info("x3", TensorProto.FLOAT, shapes[1])], outputs, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    return load_model(model)


def _feeds(model: onnx.ModelProto, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {v.name: rng.standard_normal([d.dim_value for d in v.type.tensor_type.shape.dim]).astype(np.float32)
            for v in model.graph.input}


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


def _left_alone(model: onnx.ModelProto) -> None:
    """No rule applies to `model`: rewrite_model returns it as it is, with no notes."""
    rewritten, notes = rewrite_model(model)
    assert notes == () and rewritten is model


def _fissions_to_the_model_as_given(model: onnx.ModelProto, result, seed: int) -> None:
    """`result` (run_fission of `model` with rewrite and verify) passed its check, and its primitive
    graph gives onnxruntime's outputs of `model` as given on a fresh random input."""
    assert result.verify is not None and result.verify.ok, result.verify
    feeds = random_feeds(result.graph, seed=seed)
    got, want = run_graph(result.graph, feeds), run_onnxruntime(model, feeds)
    for name, w in want.items():
        assert _rel(got[name], w) <= 1e-4 and float(np.std(w)) > 0


def test_conv_over_upsampled_concat_splits_per_branch_and_agrees_with_the_model() -> None:
    model = _model()
    rewritten, notes = rewrite_model(model)
    assert len(notes) == 1 and "3 branches (2 upsampled)" in notes[0], notes
    ops = [n.op_type for n in rewritten.graph.node]
    assert "Concat" not in ops and ops.count("Conv") == 3 and ops.count("Resize") == 2 and ops.count("Add") == 2
    resize_sizes = [n for n in rewritten.graph.node if n.op_type == "Resize" and len(n.input) > 3 and n.input[3]]
    sizes = {t.name: numpy_helper.to_array(t) for t in rewritten.graph.initializer}[resize_sizes[0].input[3]]
    assert sizes.tolist() == [1, 5, 8, 8], "the upsampled branch now has the convolution's 5 channels"
    onnx.checker.check_model(rewritten)
    for seed in (1, 2):       # fresh inputs; the output depends on each of them
        feeds = _feeds(model, seed)
        want, got = run_onnxruntime(model, feeds)["y"], run_onnxruntime(rewritten, feeds)["y"]
        assert _rel(got, want) <= RTOL
        assert float(np.std(want)) > 0.1
    moved = dict(_feeds(model, 1), x3=_feeds(model, 9)["x3"])
    assert _rel(run_onnxruntime(rewritten, moved)["y"], run_onnxruntime(model, _feeds(model, 1))["y"]) > 1e-3


@pytest.mark.parametrize("variant", [dict(kernel=3), dict(stride=2), dict(upsample=False), dict(concat_is_output=True),
                                     dict(big_conv=True)],
                         ids=["3x3 kernel", "strided", "nothing upsampled", "concat an output", "saving under 1%"])
def test_conv_over_concat_is_left_alone_where_the_identity_or_the_saving_fails(variant: dict) -> None:
    model = _model(**variant)
    _left_alone(model)


def test_an_upsampled_branch_read_elsewhere_too_stays_at_full_resolution() -> None:
    model = _model(shared_resize=True)
    rewritten, notes = rewrite_model(model)
    assert len(notes) == 1 and "3 branches (1 upsampled)" in notes[0], notes
    assert any(n.op_type == "Resize" and n.output[0] == "u2" for n in rewritten.graph.node), "still read by Neg"
    feeds = _feeds(model, 4)
    want, got = run_onnxruntime(model, feeds), run_onnxruntime(rewritten, feeds)
    for name in ("y", "u2_also"):
        assert _rel(got[name], want[name]) <= RTOL


def _rewritten_and_broken(model: onnx.ModelProto, factor: float) -> tuple[onnx.ModelProto, onnx.ModelProto]:
    """The model rewritten, and a copy of that with one branch's split weight scaled by `factor`: a
    rewrite whose identity is wrong by that much."""
    rewritten, _ = rewrite_model(model)
    broken = onnx.ModelProto()
    broken.CopyFrom(rewritten)
    w = next(t for t in broken.graph.initializer if t.name.startswith("w_branch"))
    w.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(w) * factor, w.name))
    return rewritten, broken


def test_a_rewrite_that_changes_the_outputs_is_not_taken(caplog: pytest.LogCaptureFixture) -> None:
    model = _model()
    rewritten, broken = _rewritten_and_broken(model, 1.01)
    feeds = _feeds(model, 3)
    assert rewrite_checked(model, rewritten, feeds, AccuracyPolicy(rtol=RTOL))
    with caplog.at_level(logging.WARNING, logger="korch.frontend.rewrites"):
        assert not rewrite_checked(model, broken, feeds, AccuracyPolicy(rtol=RTOL))
    assert "rewrites dropped" in caplog.text


def test_a_rewrite_beyond_rtol_is_judged_against_the_float64_reference_of_the_model_as_given() -> None:
    """With no rtol to pass by, the rewritten model is judged against the exact outputs of the model
    as given: fp32 rounding passes within what onnxruntime's own error earns; a wrong identity does not,
    though it is exact for itself."""
    model = _model()
    rewritten, broken = _rewritten_and_broken(model, 1.001)
    feeds = _feeds(model, 4)
    assert rewrite_checked(model, rewritten, feeds, AccuracyPolicy(rtol=0.0, fp32_factor=8.0))
    assert not rewrite_checked(model, broken, feeds, AccuracyPolicy(rtol=0.0, fp32_factor=8.0))
    assert rewrite_checked(model, broken, feeds, AccuracyPolicy(rtol=1e-2))       # the rtol test alone: 1e-3 passes


def test_segformer_decoder_is_rewritten_and_fissions_to_the_model_as_given() -> None:
    model = zoo.to_model_proto("segformer-mini")
    plain = run_fission(model)
    result = run_fission(model, rewrite=True, verify=True, seed=4)
    assert plain.rewrites == () and plain.original is None
    assert sum("4 branches (3 upsampled)" in r for r in result.rewrites) == 1
    assert 1 <= sum("folded into the token MatMul" in r for r in result.rewrites) <= 4, result.rewrites
    assert result.original is not None and not any(n.op_type == "Concat" and n.output[0] == "cat"
                                                   for n in result.model.graph.node)
    _fissions_to_the_model_as_given(model, result, seed=5)


def _token_model(k: int = 6, c: int = 8, m: int = 5, image_read_twice: bool = False) -> onnx.ModelProto:
    """t [1, 16, k] @ M [k, c] + b, to a [1, c, 4, 4] image, a 1x1 Conv of m outputs with bias, Relu."""
    rng = np.random.default_rng(7)
    inits = [numpy_helper.from_array(rng.standard_normal((k, c)).astype(np.float32), "M"),
             numpy_helper.from_array(rng.standard_normal(c).astype(np.float32), "b"),
             numpy_helper.from_array(np.array([1, c, 4, 4], np.int64), "shape"),
             numpy_helper.from_array(rng.standard_normal((m, c, 1, 1)).astype(np.float32), "W"),
             numpy_helper.from_array(rng.standard_normal(m).astype(np.float32), "cb")]
    nodes = [helper.make_node("MatMul", ["t", "M"], ["mm"]), helper.make_node("Add", ["mm", "b"], ["lin"]),
             helper.make_node("Transpose", ["lin"], ["tr"], perm=[0, 2, 1]),
             helper.make_node("Reshape", ["tr", "shape"], ["img"]),
             helper.make_node("Conv", ["img", "W", "cb"], ["conv"], kernel_shape=[1, 1]),
             helper.make_node("Relu", ["conv"], ["y"])]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, m, 4, 4])]
    if image_read_twice:
        outputs.append(helper.make_tensor_value_info("img", TensorProto.FLOAT, [1, c, 4, 4]))
    graph = helper.make_graph(nodes, "tokens", [helper.make_tensor_value_info("t", TensorProto.FLOAT, [1, 16, k])],
                              outputs, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    return load_model(model)


def test_a_pointwise_conv_of_a_token_image_is_folded_into_the_token_matmul() -> None:
    model = _token_model()
    rewritten, notes = rewrite_model(model)
    assert len(notes) == 1 and "folded into the token MatMul" in notes[0]
    ops = [n.op_type for n in rewritten.graph.node]
    assert ops == ["MatMul", "Add", "Transpose", "Reshape", "Relu"], ops
    for seed in (1, 2):
        feeds = _feeds(model, seed)
        want, got = run_onnxruntime(model, feeds)["y"], run_onnxruntime(rewritten, feeds)["y"]
        assert _rel(got, want) <= RTOL and float(np.std(want)) > 0.1


@pytest.mark.parametrize("variant", [dict(k=64, c=4, m=64), dict(image_read_twice=True)],
                         ids=["no flops saved", "image read elsewhere"])
def test_a_pointwise_conv_stays_where_folding_saves_nothing_or_the_image_is_needed(variant: dict) -> None:
    model = _token_model(**variant)
    _left_alone(model)


def _focus_model(pads: int = 1, kernel: int = 3, odd: bool = False, order=((0, 0), (1, 0), (0, 1), (1, 1)),
                 one_slice: bool = False) -> onnx.ModelProto:
    """YOLOX's Focus stem: x [1, 3, H, W] sliced by pixel parity (two Slices per branch, rows then
    columns, or one over both axes), the four concatenated in `order`, then a Conv of 6 outputs."""
    side = 9 if odd else 8
    rng = np.random.default_rng(11)
    big = np.iinfo(np.int64).max
    inits = [numpy_helper.from_array(rng.standard_normal((6, 12, kernel, kernel)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal(6).astype(np.float32), "b")]
    for name, value in {"zero": [0], "one": [1], "end": [big], "two": [2], "ax2": [2], "ax3": [3],
                        "zz": [0, 0], "ends2": [big, big], "axes23": [2, 3], "steps22": [2, 2]}.items():
        inits.append(numpy_helper.from_array(np.array(value, np.int64), name))
    for a in (0, 1):
        for b in (0, 1):
            inits.append(numpy_helper.from_array(np.array([a, b], np.int64), f"start{a}{b}"))
    nodes, branches = [], []
    for k, (a, b) in enumerate(order):
        if one_slice:
            nodes.append(helper.make_node("Slice", ["x", f"start{a}{b}", "ends2", "axes23", "steps22"], [f"s{k}"]))
        else:
            nodes += [helper.make_node("Slice", ["x", "one" if a else "zero", "end", "ax2", "two"], [f"r{k}"]),
                      helper.make_node("Slice", [f"r{k}", "one" if b else "zero", "end", "ax3", "two"], [f"s{k}"])]
        branches.append(f"s{k}")
    nodes += [helper.make_node("Concat", branches, ["cat"], axis=1),
              helper.make_node("Conv", ["cat", "w", "b"], ["y"], kernel_shape=[kernel, kernel], pads=[pads] * 4)]
    half = (side + 1) // 2
    out = half + 2 * pads - kernel + 1
    graph = helper.make_graph(nodes, "focus", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, side, side])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 6, out, out])], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    return model


@pytest.mark.parametrize("variant", [dict(), dict(pads=0), dict(kernel=1, pads=0), dict(one_slice=True),
                                     dict(order=((1, 1), (0, 0), (0, 1), (1, 0)))],
                         ids=["3x3 pads 1", "3x3 no pads", "1x1", "one Slice per branch", "other order"])
def test_a_conv_over_a_space_to_depth_becomes_one_stride_2_conv_of_its_source(variant: dict) -> None:
    model = load_model(_focus_model(**variant))
    rewritten, notes = rewrite_model(model)
    assert len(notes) == 1 and "stride-2 Conv" in notes[0], notes
    assert [n.op_type for n in rewritten.graph.node] == ["Conv"]
    for seed in (1, 2):
        feeds = _feeds(model, seed)
        want, got = run_onnxruntime(model, feeds)["y"], run_onnxruntime(rewritten, feeds)["y"]
        assert _rel(got, want) <= RTOL and float(np.std(want)) > 0.1


def test_a_space_to_depth_of_an_odd_image_is_not_a_stride_2_conv() -> None:
    with pytest.raises(ModelLoadError):     # its four slices differ in size: the model itself is invalid
        load_model(_focus_model(odd=True))
    model = load_model(_focus_model(order=((0, 0), (1, 0), (0, 1), (0, 1))))      # a parity twice, one missing
    assert rewrite_model(model) == (model, ())


def _upsample_model(*, pad: str = "reflect", transform: str = "asymmetric", rounding: str = "floor",
                    kernel: int = 3, stride: int = 1, mode: str = "nearest", pad_width: int = 1, fill: float = 0.0,
                    by_sizes: bool = False, upsampled_read_twice: bool = False) -> onnx.ModelProto:
    """x [1, 6, 5, 7] upsampled 2x (a nearest Resize by scales, or sizes), padded (`pad`: a Pad of that
    mode, or "conv": the Conv's own zero pads), then a Conv of 4 outputs with bias, then Relu."""
    rng = np.random.default_rng(21)
    inits = [numpy_helper.from_array(rng.standard_normal((4, 6, kernel, kernel)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b"),
             numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales"),
             numpy_helper.from_array(np.array([1, 6, 10, 14], np.int64), "sizes"),
             numpy_helper.from_array(np.array([0, 0, pad_width, pad_width] * 2, np.int64), "pads"),
             numpy_helper.from_array(np.array(fill, np.float32), "fill")]
    scale_inputs = ["x", "", "", "sizes"] if by_sizes else ["x", "", "scales"]
    nodes = [helper.make_node("Resize", scale_inputs, ["up"], mode=mode, coordinate_transformation_mode=transform,
                              nearest_mode=rounding)]
    conv_in, conv_pads = "up", [pad_width] * 4
    if pad != "conv":
        nodes.append(helper.make_node("Pad", ["up", "pads", *(["fill"] if pad == "constant" else [])], ["padded"],
                                      mode=pad))
        conv_in, conv_pads = "padded", [0] * 4
    side = (10 + 2 * pad_width - kernel) // stride + 1, (14 + 2 * pad_width - kernel) // stride + 1
    nodes += [helper.make_node("Conv", [conv_in, "w", "b"], ["conv"], kernel_shape=[kernel, kernel],
                               strides=[stride, stride], pads=conv_pads),
              helper.make_node("Relu", ["conv"], ["y"])]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, *side])]
    if upsampled_read_twice:
        outputs.append(helper.make_tensor_value_info("up", TensorProto.FLOAT, [1, 6, 10, 14]))
    graph = helper.make_graph(nodes, "upsample_conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                                     [1, 6, 5, 7])],
                              outputs, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    return load_model(model)


@pytest.mark.parametrize("variant", [dict(), dict(pad="edge"), dict(pad="constant"), dict(pad="conv"),
                                     dict(by_sizes=True),
                                     dict(transform="half_pixel", rounding="round_prefer_floor"),
                                     dict(transform="pytorch_half_pixel", rounding="round_prefer_ceil")],
                         ids=["reflect", "edge", "zeros", "conv pads", "sizes", "half_pixel", "pytorch_half_pixel"])
def test_a_3x3_conv_over_a_nearest_2x_upsampling_becomes_a_subpixel_conv(variant: dict) -> None:
    model = _upsample_model(**variant)
    rewritten, notes = rewrite_model(model)
    assert len(notes) == 1 and "four 2x2 Convs" in notes[0], notes
    ops = [n.op_type for n in rewritten.graph.node]
    edge = variant.get("pad", "reflect") in ("reflect", "edge")
    assert ops == [*(["Pad"] if edge else []), "Conv", "DepthToSpace", "Slice", "Relu"], ops
    onnx.checker.check_model(rewritten)
    for seed in (1, 2):       # fresh inputs; an image with a border unlike its inside
        feeds = _feeds(model, seed)
        feeds["x"][..., 0, :] += 3.0
        feeds["x"][..., :, -1] -= 2.0
        want, got = run_onnxruntime(model, feeds)["y"], run_onnxruntime(rewritten, feeds)["y"]
        assert _rel(got, want) <= RTOL and float(np.std(want)) > 0.1


@pytest.mark.parametrize("variant", [dict(mode="linear"), dict(rounding="ceil"), dict(kernel=5, pad_width=2),
                                     dict(stride=2), dict(pad_width=2), dict(pad="constant", fill=1.0),
                                     dict(upsampled_read_twice=True)],
                         ids=["linear", "not a copy of i // 2", "5x5", "strided", "pads 2", "fill 1",
                              "upsampled image read elsewhere"])
def test_a_conv_over_an_upsampling_is_left_alone_where_the_subpixel_identity_fails(variant: dict) -> None:
    model = _upsample_model(**variant)
    _left_alone(model)


def test_candy_decoder_convs_become_subpixel_convs_and_fission_to_the_model_as_given() -> None:
    model = zoo.to_model_proto("candy-mini")
    result = run_fission(model, rewrite=True, verify=True, seed=6)
    assert sum("four 2x2 Convs" in r for r in result.rewrites) == 2, result.rewrites
    assert not any(n.op_type == "Resize" for n in result.model.graph.node)
    _fissions_to_the_model_as_given(model, result, seed=7)


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_a_1x1_conv_right_after_an_upsampling_runs_before_it(mode: str) -> None:
    """x [1, 6, 4, 5] upsampled to 8x10, then a 1x1 Conv of 3 outputs with bias (fewer channels to
    upsample after the move), then Relu."""
    rng = np.random.default_rng(31)
    inits = [numpy_helper.from_array(rng.standard_normal((3, 6, 1, 1)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal(3).astype(np.float32), "b"),
             numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")]
    nodes = [helper.make_node("Resize", ["x", "", "scales"], ["up"], mode=mode),
             helper.make_node("Conv", ["up", "w", "b"], ["conv"], kernel_shape=[1, 1]),
             helper.make_node("Relu", ["conv"], ["y"])]
    graph = helper.make_graph(nodes, "upsample_pointwise",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 6, 4, 5])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 8, 10])], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    model = load_model(model)
    rewritten, notes = rewrite_model(model)
    assert len(notes) == 1 and "moved before the upsampling" in notes[0], notes
    assert [n.op_type for n in rewritten.graph.node] == ["Conv", "Resize", "Relu"]
    onnx.checker.check_model(rewritten)
    for seed in (1, 2):
        feeds = _feeds(model, seed)
        want, got = run_onnxruntime(model, feeds)["y"], run_onnxruntime(rewritten, feeds)["y"]
        assert _rel(got, want) <= RTOL and float(np.std(want)) > 0.1


def _linear_attention_model(*, heads: int = 2, d: int = 4, n: int = 12, pad_value: float = 1.0,
                            num_outputs: bool = True, order=("q", "k", "v"), q_transposed_too: bool = False,
                            output_read: bool = False, relu_q: bool = True, opset: int = 18,
                            dv: int | None = None) -> onnx.ModelProto:
    """EfficientViT's LiteMLA attention as torch.onnx exports it: x [1, heads, 3d, n] transposed,
    split into q, k, v (in `order`), relu(q) (relu(k)^T pad(v)), the last column divides the rest,
    transposed back. `q_transposed_too`: relu(q) is also an output (read elsewhere);
    `output_read`: the attention's product before the slices is also an output; at `opset` 12 the
    split sizes are Split's attribute; `dv`: v's channels, if not d (split sizes then differ)."""
    dv = d if dv is None else dv
    sizes = [{"q": d, "k": d, "v": dv}[role] for role in order]
    inits = [numpy_helper.from_array(np.array([0, 0, 0, 0, 0, 0, 0, 1], np.int64), "pads"),
             numpy_helper.from_array(np.array(pad_value, np.float32), "pad_value"),
             numpy_helper.from_array(np.array([0], np.int64), "zero"),
             numpy_helper.from_array(np.array([-1], np.int64), "minus_one"),
             numpy_helper.from_array(np.array([1 << 62], np.int64), "big"),
             numpy_helper.from_array(np.array([3], np.int64), "axis3"),
             numpy_helper.from_array(np.array([1], np.int64), "one"),
             numpy_helper.from_array(np.array(1e-6, np.float32), "eps")]
    split_kw = {"num_outputs": 3} if num_outputs else {}
    split_in = ["t"] if num_outputs else ["t", "sizes"]
    if opset < 13:
        split_kw, split_in = {"split": sizes}, ["t"]
    elif not num_outputs:
        inits.append(numpy_helper.from_array(np.array(sizes, np.int64), "sizes"))
    relu_q_node = (helper.make_node("Relu", ["q"], ["rq"]) if relu_q else helper.make_node("Sigmoid", ["q"], ["rq"]))
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=[0, 1, 3, 2]),
             helper.make_node("Split", split_in, list(order), axis=3, **split_kw),
             relu_q_node, helper.make_node("Relu", ["k"], ["rk"]),
             helper.make_node("Pad", ["v", "pads", "pad_value"], ["vp"], mode="constant"),
             helper.make_node("Transpose", ["rk"], ["kt"], perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", ["kt", "vp"], ["kv"]),
             helper.make_node("MatMul", ["rq", "kv"], ["o"]),
             helper.make_node("Slice", ["o", "zero", "minus_one", "axis3", "one"], ["num"]),
             helper.make_node("Slice", ["o", "minus_one", "big", "axis3", "one"], ["den"]),
             helper.make_node("Add", ["den", "eps"], ["den_eps"]),
             helper.make_node("Div", ["num", "den_eps"], ["y"]),
             helper.make_node("Transpose", ["y"], ["out"], perm=[0, 1, 3, 2])]
    outputs = [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, heads, dv, n])]
    if q_transposed_too:
        outputs.append(helper.make_tensor_value_info("rq", TensorProto.FLOAT, [1, heads, n, d]))
    if output_read:
        outputs.append(helper.make_tensor_value_info("o", TensorProto.FLOAT, [1, heads, n, dv + 1]))
    graph = helper.make_graph(nodes, "linear_attention",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, heads, 2 * d + dv, n])],
                              outputs, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 9
    return load_model(model)


@pytest.mark.parametrize("variant", [{}, {"num_outputs": False}, {"order": ("k", "v", "q")}, {"pad_value": 0.5},
                                     {"heads": 3, "d": 8, "n": 49}, {"num_outputs": False, "dv": 6},
                                     {"opset": 12, "dv": 6, "order": ("v", "q", "k")}])
def test_linear_attention_runs_on_channel_first_q_k_v_without_transposing_them(variant: dict) -> None:
    model = _linear_attention_model(**variant)
    rewritten, notes = rewrite_model(model)
    assert len(notes) == 1 and "channel-first" in notes[0], notes
    transposes = [n for n in rewritten.graph.node if n.op_type == "Transpose"]
    assert len(transposes) == 1 and transposes[0].input[0].startswith("rk"), [n.input for n in transposes]
    for seed in (0, 1):
        feeds = _feeds(model, seed)
        feeds["x"] = np.abs(feeds["x"])             # relu(k) . 1 > 0: the denominators are not near zero
        want, got = run_onnxruntime(model, feeds), run_onnxruntime(rewritten, feeds)
        assert _rel(got["out"], want["out"]) <= RTOL


@pytest.mark.parametrize("variant", [{"q_transposed_too": True}, {"output_read": True}, {"relu_q": False}])
def test_linear_attention_stays_as_given_where_a_value_is_read_elsewhere_or_the_pattern_differs(variant: dict) -> None:
    model = _linear_attention_model(**variant)
    _left_alone(model)


def test_efficientvit_attention_runs_channel_first_and_fissions_to_the_model_as_given() -> None:
    model = zoo.to_model_proto("efficientvit-mini")
    result = run_fission(model, rewrite=True, verify=True, seed=8)
    attention = sum(1 for n in model.graph.node if n.op_type == "MatMul") // 2
    assert attention >= 1 and sum("channel-first" in r for r in result.rewrites) == attention, result.rewrites
    before = sum(1 for n in model.graph.node if n.op_type == "Transpose")
    after = sum(1 for n in result.model.graph.node if n.op_type == "Transpose")
    assert after == before - 2 * attention
    _fissions_to_the_model_as_given(model, result, seed=9)


def _conv3x3_model(*, c: int = 128, m: int = 128, size: tuple[int, int] = (10, 10), pads: tuple[int, ...] = (1, 1, 1, 1),
                   bias: bool = True, batch: int = 1, reflect: bool = False, kernel: int = 3, stride: int = 1,
                   group: int = 1, dilation: int = 1, weight_input: bool = False) -> onnx.ModelProto:
    """x [batch, c, *size] (reflect: padded by 1 by a Pad node, the Conv unpadded), then a Conv of m
    outputs, then Relu. `weight_input`: the weight is a graph input, not a constant."""
    rng = np.random.default_rng(31)
    w = (rng.standard_normal((m, c // group, kernel, kernel)) / np.sqrt(kernel * kernel * c)).astype(np.float32)
    inits = [] if weight_input else [numpy_helper.from_array(w, "w")]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, c, *size])]
    if weight_input:
        inputs.append(helper.make_tensor_value_info("w", TensorProto.FLOAT, list(w.shape)))
    conv_in, nodes = "x", []
    if reflect:
        inits.append(numpy_helper.from_array(np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64), "pads"))
        nodes.append(helper.make_node("Pad", ["x", "pads"], ["padded"], mode="reflect"))
        conv_in, pads = "padded", (0, 0, 0, 0)
        size = (size[0] + 2, size[1] + 2)
    conv_inputs = [conv_in, "w"]
    if bias:
        inits.append(numpy_helper.from_array(rng.standard_normal(m).astype(np.float32), "b"))
        conv_inputs.append("b")
    span = dilation * (kernel - 1)
    out = [(size[0] + pads[0] + pads[2] - span - 1) // stride + 1, (size[1] + pads[1] + pads[3] - span - 1) // stride + 1]
    nodes += [helper.make_node("Conv", conv_inputs, ["conv"], kernel_shape=[kernel, kernel], pads=list(pads),
                               strides=[stride, stride], group=group, dilations=[dilation, dilation]),
              helper.make_node("Relu", ["conv"], ["y"])]
    graph = helper.make_graph(nodes, "conv3x3", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                                                                        [batch, m, *out])],
                              initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    return load_model(model)


WINOGRAD_RTOL = 2e-6      # fp32 transforms and 16-term sums in another order: 3-6e-7 of the output's scale measured


@pytest.mark.parametrize("variant", [dict(), dict(size=(7, 9)), dict(pads=(0, 0, 0, 0)), dict(pads=(1, 0, 2, 1)),
                                     dict(bias=False), dict(batch=2), dict(reflect=True), dict(c=160, m=130)],
                         ids=["same", "odd", "valid", "uneven pads", "no bias", "batch 2", "reflect pad", "160->130"])
def test_a_wide_3x3_conv_is_computed_by_winograd_f2x2_3x3(variant: dict) -> None:
    """F(2x2, 3x3) as the rule writes it (on images small enough that the default's MIN_F2_TILES gate
    would keep some direct: the gate is the next test's): 16 depthwise transforms, 16 products, the
    four output parities interleaved; tiles past the output cropped."""
    variant = {"size": (6, 8), **variant}
    model = _conv3x3_model(**variant)
    rewritten, notes = rewrite_model(model, rules=(functools.partial(winograd_conv3x3, min_f2_tiles=1),))
    assert len(notes) == 1 and "F(2x2, 3x3)" in notes[0], notes
    ops = [n.op_type for n in rewritten.graph.node]
    assert ops.count("Conv") == 32 and ops.count("DepthToSpace") == 1 and ops[-1] == "Relu", ops
    out = [d.dim_value for d in model.graph.output[0].type.tensor_type.shape.dim][2:]
    assert ("Slice" in ops) == (out[0] % 2 != 0 or out[1] % 2 != 0 or "pads" in variant and variant["pads"] != (
        0, 0, 0, 0)), ops
    _agrees_at_the_borders(model, rewritten, WINOGRAD_RTOL)


def _agrees_at_the_borders(model: onnx.ModelProto, rewritten: onnx.ModelProto, rtol: float) -> None:
    """The rewritten conv model is valid and gives the model's outputs within `rtol` of their scale on
    two random inputs whose first row and last column differ from the inside (the pads and the last
    tiles matter)."""
    onnx.checker.check_model(rewritten)
    for seed in (1, 2):
        feeds = _feeds(model, seed)
        feeds["x"][..., 0, :] += 2.0
        feeds["x"][..., :, -1] -= 3.0
        want, got = run_onnxruntime(model, feeds)["y"], run_onnxruntime(rewritten, feeds)["y"]
        assert _rel(got, want) <= rtol and float(np.std(want)) > 0.1


WINOGRAD_F4_RTOL = 2e-5   # transforms with entries to 8 and 1/24: 3-1e-5 of the output's scale measured


@pytest.mark.parametrize("variant", [dict(), dict(size=(7, 9)), dict(pads=(0, 0, 0, 0)), dict(pads=(1, 0, 2, 1)),
                                     dict(bias=False), dict(batch=2), dict(reflect=True), dict(c=160, m=130)],
                         ids=["same", "odd", "valid", "uneven pads", "no bias", "batch 2", "reflect pad", "160->130"])
def test_a_wide_3x3_conv_with_enough_tiles_is_computed_by_winograd_f4x4_3x3(variant: dict) -> None:
    """F(4x4, 3x3), as the rule writes it for a layer of at least MIN_F4_TILES output tiles (forced here
    on small images; the default's choice by size is the next test's): 6 + 36 depthwise transforms, 36
    products, one MatMul for the 16 output positions; tiles past the output cropped."""
    variant = {"size": (6, 8), **variant}
    model = _conv3x3_model(**variant)
    rule = functools.partial(winograd_conv3x3, min_f4_tiles=1, min_f2_tiles=1)
    rewritten, notes = rewrite_model(model, rules=(rule,))
    assert len(notes) == 1 and "F(4x4, 3x3)" in notes[0], notes
    ops = [n.op_type for n in rewritten.graph.node]
    assert ops.count("Conv") == 78 and ops.count("MatMul") == 1 and ops.count("DepthToSpace") == 1, ops
    out = [d.dim_value for d in model.graph.output[0].type.tensor_type.shape.dim][2:]
    assert ("Slice" in ops) == (out[0] % 4 != 0 or out[1] % 4 != 0), (ops, out)
    _agrees_at_the_borders(model, rewritten, WINOGRAD_F4_RTOL)


def test_winograd_takes_f4x4_where_the_output_has_enough_tiles_and_f2x2_below() -> None:
    small = _conv3x3_model(size=(4 * 12, 4 * 14))                     # 168 tiles of 4x4: one short
    large = _conv3x3_model(size=(4 * 13, 4 * 13))                     # 169
    (_, small_notes), (_, large_notes) = rewrite_model(small), rewrite_model(large)
    assert MIN_F4_TILES == 169
    assert len(small_notes) == 1 and "F(2x2, 3x3)" in small_notes[0], small_notes
    assert len(large_notes) == 1 and "F(4x4, 3x3)" in large_notes[0], large_notes


@pytest.mark.parametrize("size,taken", [((10, 10), True), ((9, 10), True), ((8, 10), False), ((7, 7), False)],
                         ids=["25 tiles", "25 tiles, odd", "20 tiles", "7x7: 16 tiles"])
def test_winograd_keeps_a_conv_direct_where_its_output_has_few_tiles(size: tuple[int, int], taken: bool) -> None:
    """Below MIN_F2_TILES 2x2 output tiles (ResNet-50's 7x7 last stage) the products are too narrow and
    the tiles past the edge too many: the conv stays as given."""
    assert MIN_F2_TILES == 25
    model = _conv3x3_model(size=size)
    if taken:
        rewritten, notes = rewrite_model(model)
        assert len(notes) == 1 and "F(2x2, 3x3)" in notes[0], notes
        _agrees_at_the_borders(model, rewritten, WINOGRAD_RTOL)
    else:
        _left_alone(model)


@pytest.mark.parametrize("variant", [dict(c=64), dict(m=96), dict(stride=2), dict(group=2), dict(dilation=2, pads=(2,) * 4),
                                     dict(kernel=5, pads=(2,) * 4), dict(weight_input=True)],
                         ids=["64 in", "96 out", "strided", "grouped", "dilated", "5x5", "weight not constant"])
def test_a_conv_is_left_direct_where_winograd_does_not_hold_or_pay(variant: dict) -> None:
    model = _conv3x3_model(**variant)
    _left_alone(model)


def _stub(removed: tuple[str, ...], reads: tuple[str, ...]) -> Rewrite:
    return Rewrite("stub", removed, (helper.make_node("Identity", list(reads), [removed[1]]),), (), "stub")


def test_rewrites_are_applied_together_only_where_none_removes_what_another_reads_or_removes() -> None:
    first = _stub(("u", "c1"), ("x",))
    reads_removed = _stub(("c2", "c2"), ("u",))          # reads u, which the first removes
    removes_read = _stub(("x", "c3"), ("y",))            # removes x, which the first reads
    removes_removed = _stub(("u", "c4"), ("y",))         # removes u too
    apart = _stub(("c5", "c5"), ("x",))                  # reads x as the first does: both may
    batch = _independent([first, reads_removed, removes_read, removes_removed, apart])
    assert batch == [first, apart]


def test_chained_rewrites_are_taken_in_one_pass_and_agree_with_the_model() -> None:
    """Two wide 3x3 convolutions in a chain: the second reads the first's output, which the first's
    rewrite keeps by name, so both are taken together, and the outputs are the model's."""
    rng = np.random.default_rng(41)
    inits = [numpy_helper.from_array((rng.standard_normal((128, 128, 3, 3)) / 34).astype(np.float32), n)
             for n in ("w1", "w2")]
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w1"], ["c1"], kernel_shape=[3, 3], pads=[1] * 4),
         helper.make_node("Relu", ["c1"], ["r1"]),
         helper.make_node("Conv", ["r1", "w2"], ["y"], kernel_shape=[3, 3], pads=[1] * 4)], "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 128, 10, 10])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 128, 10, 10])], initializer=inits)
    model = load_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=9))
    rewritten, notes = rewrite_model(model)
    assert len(notes) == 2 and all("Winograd" in n for n in notes), notes
    feeds = _feeds(model, 5)
    assert _rel(run_onnxruntime(rewritten, feeds)["y"], run_onnxruntime(model, feeds)["y"]) <= WINOGRAD_RTOL


def test_a_passed_rewrite_check_is_remembered_and_another_model_is_checked(tmp_path: Path,
                                                                           caplog: pytest.LogCaptureFixture) -> None:
    """A second fission of the same model with the same database takes the remembered verdict: the check
    (two onnxruntime sessions and a float64 reference run) is not run again. Another model is checked."""
    from korch.profile.database import ProfileDB

    with ProfileDB(tmp_path / "profiles.sqlite") as db, caplog.at_level(logging.INFO, logger="korch.frontend.rewrites"):
        first = run_fission(_conv3x3_model(), rewrite=True, db=db)
        assert "passed their check on this model before" not in caplog.text
        again = run_fission(_conv3x3_model(), rewrite=True, db=db)
        assert "passed their check on this model before" in caplog.text
        caplog.clear()
        other = run_fission(_conv3x3_model(c=160), rewrite=True, db=db)
        assert "passed their check on this model before" not in caplog.text
    assert len(first.rewrites) == len(again.rewrites) == len(other.rewrites) == 1
    assert again.model.SerializeToString() == first.model.SerializeToString()


def test_rewrites_whose_f4x4_winograd_misses_the_accuracy_policy_are_taken_with_f2x2(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """F(4x4, 3x3) rounds 10-20x more than F(2x2, 3x3): a model whose F(4x4, 3x3) form misses the
    policy (here a strict one: 2e-6, F(4x4, 3x3) lands ~7e-6, F(2x2, 3x3) ~4e-7) is rewritten with
    F(2x2, 3x3) only, not left as given; the verdict is remembered for that form."""
    from korch.profile.database import ProfileDB

    model = _conv3x3_model(size=(52, 52))                                 # 169 output tiles of 4x4
    strict = AccuracyPolicy(rtol=2e-6, fp32_factor=1.0)
    assert "F(4x4, 3x3)" in run_fission(model, rewrite=True).rewrites[0]     # the default policy takes it
    with ProfileDB(tmp_path / "profiles.sqlite") as db, caplog.at_level(logging.INFO, logger="korch.frontend.rewrites"):
        first = run_fission(model, rewrite=True, accuracy=strict, db=db)
        assert "F(4x4, 3x3) missed the accuracy policy" in caplog.text
        caplog.clear()
        again = run_fission(model, rewrite=True, accuracy=strict, db=db)
        assert "F(2x2, 3x3) only, passed their check on this model before" in caplog.text
    assert len(first.rewrites) == 1 and "F(2x2, 3x3)" in first.rewrites[0] and first.original is not None
    assert again.model.SerializeToString() == first.model.SerializeToString()
    feeds = _feeds(model, 3)
    assert _rel(run_onnxruntime(first.model, feeds)["y"], run_onnxruntime(model, feeds)["y"]) <= WINOGRAD_RTOL


def test_the_rewrite_check_runs_a_model_file_as_onnxruntime_reads_it(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A model from a file is run by onnxruntime from that file in the rewrite check, not serialized
    again from the loaded proto (benchmarks/rewrite_check_memory.py); the rewritten model, which
    exists only in memory, is run as a proto. With shapes fixed at load, the proto is run."""
    import korch.frontend.rewrite_check as rewrite_check

    path = tmp_path / "conv3x3.onnx"
    onnx.save(_conv3x3_model(), path)
    given: list[object] = []
    runner = rewrite_check.onnxruntime_runner

    def spy(model, *a, **k):
        given.append(model)
        return runner(model, *a, **k)
    monkeypatch.setattr(rewrite_check, "onnxruntime_runner", spy)
    result = run_fission(path, rewrite=True)
    assert len(result.rewrites) == 1 and result.original is not None
    assert [type(m) for m in given] == [onnx.ModelProto, type(path)] and given[1] == path
    given.clear()
    shapes = {i.name: [d.dim_value for d in i.type.tensor_type.shape.dim] for i in _conv3x3_model().graph.input}
    assert len(run_fission(path, shapes, rewrite=True).rewrites) == 1
    assert [type(m) for m in given] == [onnx.ModelProto, onnx.ModelProto]


def test_a_model_digest_changes_with_any_weight_byte_or_node_and_not_with_a_copy() -> None:
    """The rewrite check's key hashes the model without serializing its weights (onnx_import.model_digest):
    it must still tell apart models that differ in one weight's bytes, an attribute or an initializer's
    name, and agree on copies."""
    from korch.frontend.onnx_import import model_digest

    model = _conv3x3_model()
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    assert model_digest(copy) == model_digest(model)
    one_weight = onnx.ModelProto()
    one_weight.CopyFrom(model)
    w = numpy_helper.to_array(one_weight.graph.initializer[0]).copy()
    w.flat[7] += 1.0
    one_weight.graph.initializer[0].CopyFrom(numpy_helper.from_array(w, one_weight.graph.initializer[0].name))
    pads = onnx.ModelProto()
    pads.CopyFrom(model)
    next(a for a in pads.graph.node[0].attribute if a.name == "pads").ints[0] = 0
    renamed = onnx.ModelProto()
    renamed.CopyFrom(model)
    renamed.graph.initializer[0].name = "w_other"
    digests = {model_digest(m) for m in (model, one_weight, pads, renamed)}
    assert len(digests) == 4
    assert model.graph.initializer[0].HasField("raw_data")         # the argument is left as it was


def test_a_model_digest_serializes_what_a_cleared_full_copy_would() -> None:
    """model_digest builds its weightless copy field by field instead of copying the weights and
    clearing them: every other field (metadata, opsets, value_info, a tensor stored in typed fields, a
    raw tensor's doc string) must serialize to the same bytes, so keys stored by earlier runs still match."""
    from korch.frontend.onnx_import import _without_raw_data

    model = _conv3x3_model()
    model.doc_string = "given"
    onnx.helper.set_model_props(model, {"author": "test"})
    model.graph.initializer[0].doc_string = "a raw weight"
    model.graph.initializer.append(onnx.helper.make_tensor("typed", onnx.TensorProto.FLOAT, [2], [1.0, 2.0]))
    model.graph.value_info.append(onnx.helper.make_tensor_value_info("v", onnx.TensorProto.FLOAT, [1, 2]))
    cleared = onnx.ModelProto()
    cleared.CopyFrom(model)
    for t in cleared.graph.initializer:
        t.ClearField("raw_data")
    light = _without_raw_data(model)
    assert light.SerializeToString(deterministic=True) == cleared.SerializeToString(deterministic=True)
    assert len(light.graph.initializer[-1].float_data) == 2 and not light.graph.initializer[0].raw_data


def _attention_model(*, index: int = -1, t: int = 12, d: int = 16, heads: int = 2, gathered_out: bool = False,
                     softmax_over_tokens: bool = False, index_shape: tuple[int, ...] = (), sliced: int = 0,
                     opset: int = 18) -> onnx.ModelProto:
    """One pre-norm attention block over x [1, t, d] (q, k, v, heads by Reshape and Transpose, scaled
    Softmax, output projection, residual), a layer norm, then Gather of token `index` and a head. The
    norms are LayerNormalization from opset 17 on, and ReduceMean, Sub, Mul, Add, Sqrt, Div before (as
    older exporters write them). `sliced` > 0: a Slice of tokens index:index+sliced (to the end for
    index -1) instead of the Gather, as `x[:, -1:]` exports."""
    rng = np.random.default_rng(11)
    dh = d // heads

    def norm(x: str, y: str) -> list[onnx.NodeProto]:
        if opset >= 17:
            return [helper.make_node("LayerNormalization", [x, "gamma", "beta"], [y], axis=-1)]
        return [helper.make_node("ReduceMean", [x], [f"{y}_mean"], axes=[-1]),
                helper.make_node("Sub", [x, f"{y}_mean"], [f"{y}_c"]),
                helper.make_node("Mul", [f"{y}_c", f"{y}_c"], [f"{y}_sq"]),
                helper.make_node("ReduceMean", [f"{y}_sq"], [f"{y}_var"], axes=[-1]),
                helper.make_node("Add", [f"{y}_var", "eps"], [f"{y}_ve"]),
                helper.make_node("Sqrt", [f"{y}_ve"], [f"{y}_sd"]),
                helper.make_node("Div", [f"{y}_c", f"{y}_sd"], [y])]

    def w(name: str, *shape: int) -> onnx.TensorProto:
        return numpy_helper.from_array((rng.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32), name)
    inits = [w("Wq", d, d), w("Wk", d, d), w("Wv", d, d), w("Wo", d, d), w("Wh", d, 5),
             numpy_helper.from_array(rng.standard_normal(d).astype(np.float32), "bq"),
             numpy_helper.from_array(np.ones(d, np.float32), "gamma"),
             numpy_helper.from_array(np.zeros(d, np.float32), "beta"),
             numpy_helper.from_array(np.array([1, t, heads, dh], np.int64), "heads"),
             numpy_helper.from_array(np.array([1, t, d], np.int64), "merged"),
             numpy_helper.from_array(np.array(dh ** -0.5, np.float32), "scale"),
             numpy_helper.from_array(np.full(index_shape, index, np.int64), "index"),
             numpy_helper.from_array(np.array(1e-5, np.float32), "eps")]
    nodes = [*norm("x", "ln"),
             helper.make_node("MatMul", ["ln", "Wq"], ["q0"]), helper.make_node("Add", ["q0", "bq"], ["q1"]),
             helper.make_node("MatMul", ["ln", "Wk"], ["k0"]), helper.make_node("MatMul", ["ln", "Wv"], ["v0"]),
             helper.make_node("Reshape", ["q1", "heads"], ["q2"]), helper.make_node("Reshape", ["k0", "heads"], ["k2"]),
             helper.make_node("Reshape", ["v0", "heads"], ["v2"]),
             helper.make_node("Transpose", ["q2"], ["q"], perm=[0, 2, 1, 3]),
             helper.make_node("Transpose", ["k2"], ["kt"], perm=[0, 2, 3, 1]),
             helper.make_node("Transpose", ["v2"], ["v"], perm=[0, 2, 1, 3]),
             helper.make_node("MatMul", ["q", "kt"], ["s0"]), helper.make_node("Mul", ["s0", "scale"], ["s1"]),
             helper.make_node("Softmax", ["s1"], ["p"], axis=-1), helper.make_node("MatMul", ["p", "v"], ["o0"]),
             helper.make_node("Transpose", ["o0"], ["o1"], perm=[0, 2, 1, 3]),
             helper.make_node("Reshape", ["o1", "merged"], ["o2"]), helper.make_node("MatMul", ["o2", "Wo"], ["o3"]),
             helper.make_node("Add", ["x", "o3"], ["res"])]
    if softmax_over_tokens:
        nodes.append(helper.make_node("Softmax", ["res"], ["top"], axis=1))
    else:
        nodes += norm("res", "top")
    if sliced:
        end = np.iinfo(np.int64).max if index == -1 else index + sliced
        inits += [numpy_helper.from_array(np.array([v], np.int64), name)
                  for v, name in ((index, "starts"), (end, "ends"), (1, "axes"))]
        nodes.append(helper.make_node("Slice", ["top", "starts", "ends", "axes"], ["token"]))
        index_shape = (1 if index == -1 else sliced,)
    else:
        nodes.append(helper.make_node("Gather", ["top", "index"], ["token"], axis=1))
    nodes.append(helper.make_node("MatMul", ["token", "Wh"], ["y"]))
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, *index_shape, 5])]
    if gathered_out:
        outputs.append(helper.make_tensor_value_info("top", TensorProto.FLOAT, [1, t, d]))
    graph = helper.make_graph(nodes, "attention", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, t, d])],
                              outputs, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 9 if opset >= 17 else 7
    return load_model(model)


@pytest.mark.parametrize("index,opset", [(-1, 18), (0, 18), (5, 18), (-1, 13)],
                         ids=["last", "first", "middle", "norms decomposed, opset 13"])
def test_one_gathered_token_is_computed_alone_where_nothing_else_reads_its_rows(index: int, opset: int) -> None:
    model = _attention_model(index=index, opset=opset)
    rewritten, notes = rewrite_model(model)
    assert len(notes) == 1 and f"position {index % 12} of axis 1 gathered" in notes[0], notes
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim] for v in rewritten.graph.value_info}
    # the query, its attention row, projection and residual for the one token; keys and values for all 12
    assert shapes["q"] == [1, 2, 1, 8] and shapes["p"] == [1, 2, 1, 12] and shapes["res"] == [1, 1, 16], shapes
    assert shapes["kt"] == [1, 2, 8, 12] and shapes["v"] == [1, 2, 12, 8], shapes
    assert sum(n.op_type == "Slice" for n in rewritten.graph.node) == 2      # ln for the query, x for the residual
    for seed in (1, 2):
        feeds = _feeds(model, seed)
        want, got = run_onnxruntime(model, feeds)["y"], run_onnxruntime(rewritten, feeds)["y"]
        assert got.shape == want.shape and _rel(got, want) <= RTOL and float(np.std(want)) > 0.1


@pytest.mark.parametrize("variant,taken", [({"sliced": 1}, "position 11 of axis 1 sliced"),
                                           ({"sliced": 1, "index": 4}, "position 4 of axis 1 sliced"),
                                           ({"index_shape": (1,), "index": 3}, "position 3 of axis 1 gathered")],
                         ids=["x[:, -1:]", "x[:, 4:5]", "a one-element index"])
def test_one_sliced_token_is_computed_alone_with_its_axis_kept(variant: dict, taken: str) -> None:
    model = _attention_model(**variant)
    rewritten, notes = rewrite_model(model)
    assert len(notes) == 1 and taken in notes[0], notes
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim] for v in rewritten.graph.value_info}
    assert shapes["p"] == [1, 2, 1, 12] and shapes["res"] == [1, 1, 16] and shapes["kt"] == [1, 2, 8, 12], shapes
    assert not any(n.op_type == "Gather" for n in rewritten.graph.node)     # the row is the value computed
    for seed in (1, 2):
        feeds = _feeds(model, seed)
        want, got = run_onnxruntime(model, feeds)["y"], run_onnxruntime(rewritten, feeds)["y"]
        assert got.shape == want.shape == (1, 1, 5) and _rel(got, want) <= RTOL and float(np.std(want)) > 0.1


@pytest.mark.parametrize("variant", [{"gathered_out": True}, {"softmax_over_tokens": True}, {"index_shape": (2,)},
                                     {"sliced": 2, "index": 4}],
                         ids=["the rows read whole elsewhere", "a softmax over the tokens", "more than one index",
                              "a slice of two tokens"])
def test_a_gathered_token_stays_as_given_where_it_needs_every_row(variant: dict) -> None:
    model = _attention_model(**variant)
    _left_alone(model)


def test_vit_class_token_is_computed_alone_in_the_last_block_and_fissions_to_the_model_as_given() -> None:
    model = zoo.to_model_proto("vit-mini")
    result = run_fission(model, rewrite=True, verify=True, seed=8)
    assert any("position 0 of axis 1 gathered" in r for r in result.rewrites), result.rewrites
    _fissions_to_the_model_as_given(model, result, seed=9)
