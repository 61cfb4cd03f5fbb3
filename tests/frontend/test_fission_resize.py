"""Resize and Upsample fission rules against onnxruntime, on random shapes, scales and sizes."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from korch.backends.reference import run_graph
from korch.errors import ModelLoadError, UnsupportedError
from korch.frontend import fission
from korch.frontend.fission.driver import fission_graph
from korch.ir.graph import Graph
from korch.verify import run_onnxruntime
from tests.oracle import check_op, ops_of

EXACT = 0.0          # nearest only gathers: results must be bit-identical
LINEAR_RTOL = 1e-5   # lerp a + (b - a) * w per axis vs onnxruntime's weighted sum: float32 rounding only
RESIZE_OPSETS = (11, 13, 18, 19)
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
COORDINATE_MODES = ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric", "tf_half_pixel_for_nn")
LINEAR_COORDINATE_MODES = ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric")
EMPTY = np.zeros((0,), np.float32)


def _randn(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def _resize(x: np.ndarray, attrs: dict[str, Any], *, scales: list[float] | None = None,
            sizes: list[int] | None = None, opset: int = 18, rtol: float = EXACT, strict: bool = False) -> Graph:
    """Check one Resize node; opset 11 needs roi and scales present (empty when unused)."""
    constants: dict[str, np.ndarray] = {}
    if opset < 13:
        constants["roi"] = EMPTY
        constants["scales"] = EMPTY
    if scales is not None:
        constants["scales"] = np.array(scales, np.float32)
    if sizes is not None:
        constants["sizes"] = np.array(sizes, np.int64)
    return check_op("Resize", {"x": x}, attrs, constants=constants, opset=opset, rtol=rtol,
                    input_order=["x", "roi", "scales", "sizes"], strict=strict)


def _random_target(rng: np.random.Generator, x: np.ndarray, axes: list[int]) -> dict[str, list]:
    """Random scales (up or down; full-precision or integer) or random sizes for the given axes."""
    if rng.random() < 0.5:
        return {"scales": [float(rng.choice([rng.uniform(0.3, 3.5), rng.integers(1, 4)])) for _ in axes]}
    return {"sizes": [int(rng.integers(1, 3 * x.shape[a] + 2)) for a in axes]}


def _exact_coordinate(i: int, length: int, size: int, transform: str) -> Fraction:
    """The source coordinate of output `i` in exact arithmetic, for a scale of size / length."""
    if transform == "align_corners":
        return Fraction(0) if size == 1 else Fraction(i * (length - 1), size - 1)
    if transform == "asymmetric":
        return Fraction(i * length, size)
    centre = (i + Fraction(1, 2)) * Fraction(length, size)
    if transform == "tf_half_pixel_for_nn":
        return centre
    return Fraction(0) if transform == "pytorch_half_pixel" and size == 1 else centre - Fraction(1, 2)


def _has_inexact_tie(x: np.ndarray, target: dict[str, list], transform: str, nearest: str) -> bool:
    """Whether sizes put an output exactly on a rounding boundary (k + 1/2; k for floor/ceil) while
    the scale size / length is not exact in float32 (0.5 / (1/7) is not 3.5 in float32). korch
    evaluates onnxruntime's float32 formulas, but onnxruntime's compiled kernels settle such ties
    differently from case to case (some as exact arithmetic would, some as float32 does), so random
    tests draw sizes without them. With an exact scale (integer factors) ties are exact and tested."""
    if "sizes" not in target or transform == "align_corners":   # align_corners never divides by the scale
        return False
    boundary = Fraction(0) if nearest in ("floor", "ceil") else Fraction(1, 2)
    for length, size in zip(x.shape[-len(target["sizes"]):], target["sizes"]):
        if size == length or Fraction(float(np.float32(size) / np.float32(length))) == Fraction(size, length):
            continue
        for i in range(size):
            exact = _exact_coordinate(i, length, size, transform)
            if exact - (exact.numerator // exact.denominator) == boundary:
                return True
    return False


def _has_centre_tie(x: np.ndarray, target: dict[str, list]) -> bool:
    """half_pixel_symmetric maps the middle of an odd-sized output to (length - 1) / 2 exactly, a
    round-half tie for even lengths that onnxruntime's mixed float/double formula settles either way."""
    lengths = x.shape[-2:]
    sizes = target.get("sizes") or [int(np.float32(s) * np.float32(n)) for s, n in zip(target["scales"], lengths)]
    return any(size % 2 and length % 2 == 0 and size != length for size, length in zip(sizes, lengths))


# ---- nearest -------------------------------------------------------------------------------------

@pytest.mark.parametrize("opset", RESIZE_OPSETS)
@pytest.mark.parametrize("transform,nearest", [("asymmetric", "floor"), ("half_pixel", "round_prefer_floor"),
                                               ("pytorch_half_pixel", "round_prefer_ceil"),
                                               ("tf_half_pixel_for_nn", "floor")])
def test_nearest_integer_upsampling(opset: int, transform: str, nearest: str) -> None:
    """The yolo/candy pattern: x2 nearest on H and W, exactly one gather per resized axis."""
    rng = np.random.default_rng(opset)
    x = _randn(rng, (1, 3, 5, 4))
    attrs = {"mode": "nearest", "coordinate_transformation_mode": transform, "nearest_mode": nearest}
    graph = _resize(x, attrs, scales=[1.0, 1.0, 2.0, 2.0], opset=opset)
    assert ops_of(graph) == ["gather", "gather"]
    assert [graph.constants[n.inputs[1]].tolist() for n in graph.nodes] == [[i // 2 for i in range(10)],
                                                                            [i // 2 for i in range(8)]]


@pytest.mark.parametrize("nearest", NEAREST_MODES)
@pytest.mark.parametrize("transform", COORDINATE_MODES)
@pytest.mark.parametrize("seed", range(3))
def test_nearest_modes(nearest: str, transform: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = _randn(rng, (2, 3, int(rng.integers(1, 7)), int(rng.integers(1, 7))))
    target = _random_target(rng, x, [2, 3])
    while _has_inexact_tie(x, target, transform, nearest):
        target = _random_target(rng, x, [2, 3])
    full = {k: [1.0, 1.0] + v if k == "scales" else [2, 3] + v for k, v in target.items()}
    attrs = {"mode": "nearest", "coordinate_transformation_mode": transform, "nearest_mode": nearest}
    graph = _resize(x, attrs, opset=int(rng.choice(RESIZE_OPSETS)), **full)
    assert set(ops_of(graph)) <= {"gather"}


def test_nearest_default_attributes_on_int_tensor() -> None:
    x = np.random.default_rng(1).integers(-50, 50, (1, 2, 3, 5)).astype(np.int32)   # ort has no int64 Resize
    _resize(x, {}, sizes=[1, 2, 7, 4], opset=13)


# ---- linear --------------------------------------------------------------------------------------

@pytest.mark.parametrize("transform", LINEAR_COORDINATE_MODES)
@pytest.mark.parametrize("seed", range(4))
def test_bilinear(transform: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = _randn(rng, (1, 2, int(rng.integers(1, 8)), int(rng.integers(1, 8))))
    target = _random_target(rng, x, [2, 3])
    full = {k: [1.0, 1.0] + v if k == "scales" else [1, 2] + v for k, v in target.items()}
    attrs = {"mode": "linear", "coordinate_transformation_mode": transform}
    graph = _resize(x, attrs, opset=int(rng.choice(RESIZE_OPSETS)), rtol=LINEAR_RTOL, **full)
    assert set(ops_of(graph)) <= {"gather", "sub", "mul", "add"}


@pytest.mark.parametrize("opset", RESIZE_OPSETS)
def test_bilinear_half_pixel_upsampling(opset: int) -> None:
    """The segformer pattern: align_corners=False (half_pixel) bilinear upsampling to fixed sizes."""
    x = _randn(np.random.default_rng(opset), (1, 4, 6, 5))
    graph = _resize(x, {"mode": "linear"}, sizes=[1, 4, 24, 20], opset=opset, rtol=LINEAR_RTOL)
    assert ops_of(graph) == ["gather", "gather", "sub", "mul", "add"] * 2
    weights = [graph.constants[n.inputs[1]] for n in graph.nodes if n.op == "mul"]
    assert [w.shape for w in weights] == [(24, 1), (20,)]


def test_linear_on_2d_input() -> None:
    x = _randn(np.random.default_rng(2), (5, 4))
    _resize(x, {"mode": "linear", "coordinate_transformation_mode": "align_corners"}, scales=[1.7, 0.6],
            rtol=LINEAR_RTOL)


@pytest.mark.parametrize("seed", range(3))
def test_trilinear(seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = _randn(rng, (1, 2, 3, 4, 5))
    target = _random_target(rng, x, [2, 3, 4])
    full = {k: [1.0, 1.0] + v if k == "scales" else [1, 2] + v for k, v in target.items()}
    graph = _resize(x, {"mode": "linear"}, rtol=LINEAR_RTOL, **full)
    assert ops_of(graph).count("mul") <= 3


def test_linear_nhwc_layout() -> None:
    x = _randn(np.random.default_rng(3), (1, 5, 6, 3))
    _resize(x, {"mode": "linear"}, scales=[1.0, 1.5, 0.5, 1.0], rtol=LINEAR_RTOL)


def test_linear_downsampling_by_an_integer_is_one_gather_per_axis() -> None:
    """asymmetric /2 lands exactly on source pixels: all weights are 0, so no lerp is emitted."""
    x = _randn(np.random.default_rng(4), (1, 1, 8, 6))
    attrs = {"mode": "linear", "coordinate_transformation_mode": "asymmetric"}
    graph = _resize(x, attrs, scales=[1.0, 1.0, 0.5, 0.5], rtol=LINEAR_RTOL)
    assert ops_of(graph) == ["gather", "gather"]


def test_scale_one_axes_are_copies_even_where_the_transform_shifts() -> None:
    """tf_half_pixel_for_nn + ceil maps i to ceil(i + 0.5) = i + 1 at scale 1; onnxruntime (and korch) copy."""
    x = _randn(np.random.default_rng(6), (2, 3, 4, 5))
    attrs = {"mode": "nearest", "coordinate_transformation_mode": "tf_half_pixel_for_nn", "nearest_mode": "ceil"}
    graph = _resize(x, attrs, scales=[1.0, 1.0, 1.0, 2.0], opset=13)
    assert ops_of(graph) == ["gather"]


def test_unchanged_sizes_emit_nothing() -> None:
    x = _randn(np.random.default_rng(5), (1, 2, 3, 4))
    for mode in ("nearest", "linear"):
        graph = _resize(x, {"mode": mode}, sizes=[1, 2, 3, 4], rtol=LINEAR_RTOL)
        assert [n.origin for n in graph.nodes] == ["output-copy"]


# ---- opset variants: axes attribute (18), half_pixel_symmetric (19), omitted inputs ---------------

@pytest.mark.parametrize("opset", [18, 19, 21])
@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_axes_attribute(opset: int, mode: str) -> None:
    rng = np.random.default_rng(opset)
    x = _randn(rng, (2, 3, 4, 5))
    _resize(x, {"mode": mode, "axes": [-1, 2]}, scales=[1.5, 0.75], opset=opset, rtol=LINEAR_RTOL)
    _resize(x, {"mode": mode, "axes": [1]}, sizes=[7], opset=opset, rtol=LINEAR_RTOL)


@pytest.mark.parametrize("mode", ["nearest", "linear"])
@pytest.mark.parametrize("seed", range(3))
def test_half_pixel_symmetric(mode: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = _randn(rng, (1, 2, int(rng.integers(2, 7)), int(rng.integers(2, 7))))
    target = _random_target(rng, x, [2, 3])
    while mode == "nearest" and (_has_inexact_tie(x, target, "half_pixel", "round_prefer_floor")
                                 or _has_centre_tie(x, target)):
        target = _random_target(rng, x, [2, 3])
    full = {k: [1.0, 1.0] + v if k == "scales" else [1, 2] + v for k, v in target.items()}
    _resize(x, {"mode": mode, "coordinate_transformation_mode": "half_pixel_symmetric"}, opset=19,
            rtol=LINEAR_RTOL, **full)


@pytest.mark.parametrize("opset", [11, 13])
def test_empty_scales_with_sizes(opset: int) -> None:
    x = _randn(np.random.default_rng(opset), (1, 1, 4, 4))
    constants = {"roi": EMPTY, "scales": EMPTY, "sizes": np.array([1, 1, 3, 9], np.int64)}
    check_op("Resize", {"x": x}, {"mode": "linear"}, constants=constants, opset=opset, rtol=LINEAR_RTOL,
             input_order=["x", "roi", "scales", "sizes"])


# ---- rejections ----------------------------------------------------------------------------------

@pytest.mark.parametrize("attrs,opset,message", [
    ({"mode": "cubic"}, 13, "mode='cubic'"),
    ({"mode": "linear", "antialias": 1}, 18, "antialias=1"),
    ({"keep_aspect_ratio_policy": "not_larger"}, 18, "keep_aspect_ratio_policy='not_larger'"),
    ({"coordinate_transformation_mode": "tf_crop_and_resize"}, 13, "'tf_crop_and_resize'"),
])
def test_unsupported_attributes_are_named(attrs: dict[str, Any], opset: int, message: str) -> None:
    x = _randn(np.random.default_rng(0), (1, 1, 4, 4))
    with pytest.raises(UnsupportedError, match=message):
        _resize(x, attrs, sizes=[1, 1, 6, 6], opset=opset, strict=True)


def test_dynamic_scales_are_rejected() -> None:
    x = _randn(np.random.default_rng(0), (1, 1, 4, 4))
    scales = np.array([1, 1, 2, 2], np.float32)
    with pytest.raises(UnsupportedError, match="Resize's scales input must be a constant"):
        check_op("Resize", {"x": x, "scales": scales}, opset=13, input_order=["x", "roi", "scales"], strict=True)


# ---- Upsample (deprecated) -----------------------------------------------------------------------

UPSAMPLE_OPSET = 9   # onnx's checker and onnxruntime reject Upsample at every opset from 10 on


def _upsample_model(shape: tuple[int, ...], scales: list[float], mode: str, opset: int) -> onnx.ModelProto:
    node = helper.make_node("Upsample", ["x", "scales"], ["y"], mode=mode)
    graph = helper.make_graph([node], "test", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              initializer=[numpy_helper.from_array(np.array(scales, np.float32), "scales")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return onnx.shape_inference.infer_shapes(model, strict_mode=True)


@pytest.mark.parametrize("mode", ["nearest", "linear"])
@pytest.mark.parametrize("scales", [[1.0, 1.0, 2.0, 2.0], [1.0, 1.0, 1.5, 3.0], [1.0, 1.0, 2.5, 1.0]])
def test_upsample_against_onnxruntime(mode: str, scales: list[float]) -> None:
    """At opset 9 (the last where it is valid; the korch loader needs 11+, so fission_graph is called directly)."""
    x = _randn(np.random.default_rng(len(mode)), (1, 2, 3, 4))
    model = _upsample_model(x.shape, scales, mode, UPSAMPLE_OPSET)
    (want,) = run_onnxruntime(model, {"x": x}).values()
    got = run_graph(fission_graph(model), {"x": x})["y"]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=0, atol=LINEAR_RTOL * np.abs(want).max())


def test_upsample_at_opset_11_is_rejected_by_the_loader() -> None:
    model = _upsample_model((1, 1, 2, 2), [1.0, 1.0, 2.0, 2.0], "nearest", 11)
    with pytest.raises(ModelLoadError, match="deprecated"):
        fission(model)


def test_upsample_cubic_is_rejected() -> None:
    model = _upsample_model((1, 1, 2, 2), [1.0, 1.0, 2.0, 2.0], "cubic", UPSAMPLE_OPSET)
    with pytest.raises(UnsupportedError, match="mode='cubic'"):
        fission_graph(model, strict=True)
