"""Pooling fission rules (MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool) against onnxruntime."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest

from korch.backends.reference import run_graph
from korch.errors import UnsupportedError
from korch.frontend import fission
from korch.frontend.fission.driver import fission_graph
from korch.verify import run_onnxruntime
from tests.oracle import check_op, ops_of, single_node_model

RTOL = 1e-5   # a window max is exact; a window mean (times a count correction) is float32 rounding only


def _normal(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def _random_pool(rng: np.random.Generator, dilations: bool) -> tuple[tuple[int, ...], dict[str, Any]]:
    """A random 1-3-D pooling: kernel up to 3, stride up to 3, pads below the kernel (onnxruntime's limit)."""
    nsp = int(rng.integers(1, 4))
    kernel = [int(k) for k in rng.integers(1, 4, nsp)]
    strides = [int(s) for s in rng.integers(1, 4, nsp)]
    dil = [int(d) for d in rng.integers(1, 3, nsp)] if dilations else [1] * nsp
    pads = [int(rng.integers(0, k)) for k in kernel * 2]
    spatial = [d * (k - 1) + 1 + int(rng.integers(0, 5)) for k, d in zip(kernel, dil)]
    attrs: dict[str, Any] = {"kernel_shape": kernel, "strides": strides, "pads": pads,
                             "ceil_mode": int(rng.integers(0, 2))}
    if dilations:
        attrs["dilations"] = dil
    return (2, 3, *spatial), attrs


@pytest.mark.parametrize("opset", [11, 12, 19, 21])
@pytest.mark.parametrize("seed", range(10))
def test_max_pool_random(opset: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    shape, attrs = _random_pool(rng, dilations=True)
    attrs["storage_order"] = int(rng.integers(0, 2))   # only matters for the (unsupported) Indices output
    check_op("MaxPool", {"x": _normal(rng, *shape)}, attrs, opset=opset, rtol=RTOL)


@pytest.mark.parametrize("count_include_pad", [0, 1])
@pytest.mark.parametrize("opset", [11, 19])
@pytest.mark.parametrize("seed", range(10))
def test_average_pool_random(count_include_pad: int, opset: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    shape, attrs = _random_pool(rng, dilations=opset >= 19)
    attrs["count_include_pad"] = count_include_pad
    check_op("AveragePool", {"x": _normal(rng, *shape)}, attrs, opset=opset, rtol=RTOL)


@pytest.mark.parametrize("op_type", ["MaxPool", "AveragePool"])
@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER", "VALID"])
@pytest.mark.parametrize("size,kernel,stride", [(7, 3, 2), (8, 2, 2), (9, 3, 3), (6, 3, 1)])
def test_auto_pad(op_type: str, auto_pad: str, size: int, kernel: int, stride: int) -> None:
    rng = np.random.default_rng(size + 10 * kernel + 100 * stride)
    attrs = {"auto_pad": auto_pad, "kernel_shape": [kernel, kernel - 1], "strides": [stride, 1]}
    check_op(op_type, {"x": _normal(rng, 1, 2, size, size - 1)}, attrs, rtol=RTOL)


def spec_same_pads(sizes: list[int], kernel: list[int], strides: list[int], dilations: list[int],
                   auto_pad: str) -> list[int]:
    """The ONNX spec's SAME_* pads: output ceil(in / stride), total pad from the dilated span, odd one at the
    end (UPPER) or begin (LOWER)."""
    total = [(-(-n // s) - 1) * s + d * (k - 1) + 1 - n for n, k, s, d in zip(sizes, kernel, strides, dilations)]
    small, big = [t // 2 for t in total], [t - t // 2 for t in total]
    return small + big if auto_pad == "SAME_UPPER" else big + small


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER"])
def test_max_pool_same_with_dilation_follows_onnx_spec(auto_pad: str) -> None:
    """onnxruntime (and onnx's reference evaluator) size SAME_* padding by the undilated kernel, so the
    output is not ceil(in / stride); korch follows the spec and ONNX shape inference (dilated span).
    Oracle: onnxruntime's MaxPool with the spec's pads given explicitly."""
    rng = np.random.default_rng(4)
    x = _normal(rng, 1, 2, 9, 10)
    geometry = {"kernel_shape": [3, 3], "strides": [2, 2], "dilations": [2, 2]}   # pads < kernel, for onnxruntime
    model = single_node_model("MaxPool", {"x": x}, {"auto_pad": auto_pad, **geometry}, opset=19)
    pads = spec_same_pads([9, 10], geometry["kernel_shape"], geometry["strides"], geometry["dilations"], auto_pad)
    explicit = single_node_model("MaxPool", {"x": x}, {"pads": pads, **geometry}, opset=19)
    want = run_onnxruntime(explicit, {"x": x})["y0"]
    got = run_graph(fission(model), {"x": x})["y0"]
    assert got.shape == want.shape == (1, 2, 5, 5)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("op_type", ["MaxPool", "AveragePool"])
@pytest.mark.parametrize("count_include_pad", [0, 1])
def test_ceil_mode_drops_window_starting_in_end_padding(op_type: str, count_include_pad: int) -> None:
    """Size 6, end pad 1, kernel 2, stride 3: ceil gives 3 windows, but the third would start at 6,
    inside the end padding, so there are 2 (as onnxruntime and the ONNX spec say)."""
    rng = np.random.default_rng(6)
    attrs: dict[str, Any] = {"kernel_shape": [2], "strides": [3], "pads": [0, 1], "ceil_mode": 1}
    if op_type == "AveragePool":
        attrs["count_include_pad"] = count_include_pad
    graph = check_op(op_type, {"x": _normal(rng, 2, 3, 6)}, attrs, rtol=RTOL)
    assert graph.types[graph.outputs[0]].shape == (2, 3, 2)


def test_ceil_mode_partial_window_is_averaged_over_its_counted_elements() -> None:
    """Size 7, kernel 3, stride 2, pads 1/0: the last window is [5, 8) with 8 beyond the padded end; with
    count_include_pad=1 it still divides by 2 (the ceil extra is never counted), so a mul corrects it."""
    rng = np.random.default_rng(7)
    graph = check_op("AveragePool", {"x": _normal(rng, 1, 4, 7)},
                     {"kernel_shape": [3], "strides": [2], "pads": [1, 0], "ceil_mode": 1, "count_include_pad": 1},
                     rtol=RTOL)
    assert ops_of(graph) == ["pad", "window_mean", "mul"]


def test_structure_without_padding() -> None:
    rng = np.random.default_rng(8)
    x = _normal(rng, 1, 3, 8, 8)
    assert ops_of(check_op("MaxPool", {"x": x}, {"kernel_shape": [2, 2], "strides": [2, 2]}, rtol=0)) == ["window_max"]
    graph = check_op("AveragePool", {"x": x}, {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 1},
                     rtol=RTOL)
    assert ops_of(graph) == ["pad", "window_mean"]   # every window counts all 9 taps: no correction
    graph = check_op("AveragePool", {"x": x}, {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, rtol=RTOL)
    assert ops_of(graph) == ["pad", "window_mean", "mul"]


@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
def test_max_pool_integer_pads_with_dtype_minimum(dtype: type) -> None:
    """MaxPool-12 takes int8/uint8; the padding must be below every value, so it is the dtype's minimum."""
    x = np.random.default_rng(9).integers(np.iinfo(dtype).min, np.iinfo(dtype).max, (1, 2, 5, 6)).astype(dtype)
    check_op("MaxPool", {"x": x}, {"kernel_shape": [3, 2], "pads": [1, 1, 2, 1], "ceil_mode": 1}, opset=12, rtol=0)


@pytest.mark.parametrize("op_type,ops", [("GlobalAveragePool", ["reduce_sum", "mul"]),
                                         ("GlobalMaxPool", ["reduce_max"])])
@pytest.mark.parametrize("shape", [(2, 3, 7), (1, 4, 5, 6), (2, 2, 3, 4, 5)])
def test_global_pool(op_type: str, ops: list[str], shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng(len(shape))
    graph = check_op(op_type, {"x": _normal(rng, *shape)}, rtol=RTOL)
    assert ops_of(graph) == ops


@pytest.mark.parametrize("op_type,attrs,outputs,message", [
    ("MaxPool", {"kernel_shape": [2, 2]}, ["y", "indices"], "Indices output"),
    ("MaxPool", {"kernel_shape": [2, 2], "auto_pad": "SAME"}, ["y"], "auto_pad 'SAME'"),
    ("AveragePool", {"kernel_shape": [2, 2], "ceil_mode": 2}, ["y"], "ceil_mode 2"),
    ("AveragePool", {"kernel_shape": [2, 2], "count_include_pad": 3}, ["y"], "count_include_pad 3"),
])
def test_unsupported(op_type: str, attrs: dict[str, Any], outputs: list[str], message: str) -> None:
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node(op_type, ["x"], outputs, **attrs)], "g",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 2, 6, 6])],
        [onnx.helper.make_tensor_value_info(o, onnx.TensorProto.FLOAT, None) for o in outputs])
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 18)])
    with pytest.raises(UnsupportedError, match=message):
        fission_graph(model, strict=True)
