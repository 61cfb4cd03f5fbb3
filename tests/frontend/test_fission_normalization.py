"""Softmax and normalization fission rules against onnxruntime, on random shapes, attributes and values."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from korch.backends.reference import run_graph
from korch.errors import UnsupportedError
from korch.frontend.fission.driver import fission_graph
from korch.ir.check import check_graph
from korch.ir.graph import Graph
from korch.verify import diff_outputs, run_onnxruntime
from tests.oracle import check_model, check_op, ops_of, single_node_model

RTOL = 1e-4        # composite rules: a reduction, a reciprocal sqrt and a few elementwise roundings
RTOL_FP16 = 2e-3   # float16 outputs: one fp16 rounding is 2^-11 ~ 4.9e-4 of the value, plus compute-order


def _shape(rng: np.random.Generator, min_rank: int, max_rank: int = 4) -> tuple[int, ...]:
    return tuple(int(d) for d in rng.integers(1, 6, size=rng.integers(min_rank, max_rank + 1)))


def _normal(rng: np.random.Generator, shape: tuple[int, ...], offset: float = 0.0) -> np.ndarray:
    return (rng.standard_normal(shape) * rng.uniform(0.5, 3.0) + offset).astype(np.float32)


def _check_bypassing_loader(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray], rtol: float) -> Graph:
    """check_model for models korch's loader rejects for reasons outside fission (the ONNX checker
    deprecates GroupNormalization-18; onnx shape inference fails on MeanVarianceNormalization
    without `axes`): fission the model directly and compare with onnxruntime."""
    graph = check_graph(fission_graph(model))
    for diff in diff_outputs(run_graph(graph, feeds), run_onnxruntime(model, feeds)):
        assert diff.rel <= rtol, f"output {diff.name}: relative error {diff.rel:.3g} > {rtol}"
    return graph


def _declare_output(model: onnx.ModelProto, shape: tuple[int, ...]) -> onnx.ModelProto:
    """onnx shape inference does not type GroupNormalization's output: declare it."""
    del model.graph.output[:]
    model.graph.output.append(helper.make_tensor_value_info("y0", TensorProto.FLOAT, list(shape)))
    return model


# ---- Softmax, LogSoftmax ------------------------------------------------------------------

@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("opset", [11, 12, 13, 18])
@pytest.mark.parametrize("seed", range(3))
def test_softmax(op: str, opset: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    shape = _shape(rng, 1)
    x = _normal(rng, shape) * 30     # large logits: exp would overflow without the max subtraction
    attrs = {} if seed == 0 else {"axis": int(rng.integers(-len(shape), len(shape)))}
    graph = check_op(op, {"x": x}, attrs, opset=opset, rtol=RTOL)
    assert ops_of(graph)[:4] == ["reduce_max", "sub", "exp", "reduce_sum"]


def test_softmax_before_opset_13_reduces_every_dim_from_axis() -> None:
    rng = np.random.default_rng(4)
    graph = check_op("Softmax", {"x": _normal(rng, (2, 3, 4, 5))}, opset=11, rtol=RTOL)   # default axis 1
    assert graph.nodes[0].attrs["axes"] == (1, 2, 3)
    graph = check_op("Softmax", {"x": _normal(rng, (2, 3, 4, 5))}, opset=13, rtol=RTOL)   # default axis -1
    assert graph.nodes[0].attrs["axes"] == (3,)


# ---- LayerNormalization -------------------------------------------------------------------

@pytest.mark.parametrize("seed", range(4))
def test_layer_normalization(seed: int) -> None:
    rng = np.random.default_rng(seed)
    shape = _shape(rng, 2)
    axis = int(rng.integers(-len(shape), len(shape)))
    normalized = shape[axis:] if axis >= 0 else shape[len(shape) + axis:]
    inputs = {"x": _normal(rng, shape, offset=rng.uniform(-3, 3)), "scale": _normal(rng, normalized)}
    if seed % 2:    # else omitted (not given as "": onnxruntime crashes on a trailing empty input here)
        inputs["bias"] = _normal(rng, normalized)
    attrs = {"axis": axis, "epsilon": float(rng.choice([1e-5, 1e-6, 1e-3]))}
    graph = check_op("LayerNormalization", inputs, attrs, opset=17, rtol=RTOL, num_outputs=3)
    assert "pow" not in ops_of(graph) and "div" not in ops_of(graph)


def test_layer_normalization_default_attributes_and_single_output() -> None:
    rng = np.random.default_rng(11)
    x = _normal(rng, (3, 4, 8))
    graph = check_op("LayerNormalization", {"x": x, "scale": _normal(rng, (8,)), "bias": _normal(rng, (8,))},
                     opset=18, rtol=RTOL)
    assert graph.nodes[0].attrs["axes"] == (2,)


def test_layer_normalization_float16_computes_in_stash_type() -> None:
    rng = np.random.default_rng(12)
    x = _normal(rng, (4, 16)).astype(np.float16)
    inputs = {"x": x, "scale": _normal(rng, (16,)).astype(np.float16), "bias": _normal(rng, (16,)).astype(np.float16)}
    graph = check_op("LayerNormalization", inputs, {"stash_type": 1}, opset=17, rtol=RTOL_FP16, num_outputs=3)
    assert ops_of(graph)[0] == "cast"


def test_layer_normalization_rejects_integer_stash_type() -> None:
    rng = np.random.default_rng(13)
    with pytest.raises(UnsupportedError, match="stash_type=7"):
        check_op("LayerNormalization", {"x": _normal(rng, (2, 3)), "scale": _normal(rng, (3,))},
                 {"stash_type": TensorProto.INT64}, opset=17, strict=True)


# ---- InstanceNormalization, BatchNormalization --------------------------------------------

@pytest.mark.parametrize("seed", range(3))
def test_instance_normalization(seed: int) -> None:
    rng = np.random.default_rng(seed)
    shape = _shape(rng, 3, 5)
    channels = {"scale": _normal(rng, shape[1:2]), "bias": _normal(rng, shape[1:2])}
    attrs = {"epsilon": float(rng.choice([1e-5, 1e-3]))}
    check_op("InstanceNormalization", {"x": _normal(rng, shape, offset=2.0)}, attrs, constants=channels,
             opset=11, rtol=RTOL)


def _batch_norm_stats(rng: np.random.Generator, channels: int) -> dict[str, np.ndarray]:
    return {"scale": _normal(rng, (channels,)), "bias": _normal(rng, (channels,)), "mean": _normal(rng, (channels,)),
            "var": rng.uniform(0.2, 3.0, (channels,)).astype(np.float32)}


@pytest.mark.parametrize("opset", [11, 14, 15])
@pytest.mark.parametrize("seed", range(3))
def test_batch_normalization_folds_constant_statistics(opset: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    shape = _shape(rng, 2)
    attrs = {"epsilon": float(rng.choice([1e-5, 1e-3]))}
    if opset >= 14:
        attrs["training_mode"] = 0
    graph = check_op("BatchNormalization", {"x": _normal(rng, shape)}, attrs,
                     constants=_batch_norm_stats(rng, shape[1]), opset=opset, rtol=RTOL)
    assert ops_of(graph) == ["mul", "add"]


def test_batch_normalization_with_input_statistics() -> None:
    rng = np.random.default_rng(21)
    graph = check_op("BatchNormalization", {"x": _normal(rng, (2, 4, 3, 3))} | _batch_norm_stats(rng, 4),
                     opset=15, rtol=RTOL)
    assert ops_of(graph)[-2:] == ["mul", "add"]


def test_batch_normalization_rejects_training_mode() -> None:
    rng = np.random.default_rng(22)
    with pytest.raises(UnsupportedError, match="training_mode=1"):
        check_op("BatchNormalization", {"x": _normal(rng, (2, 4, 3))}, {"training_mode": 1},
                 constants=_batch_norm_stats(rng, 4), opset=15, num_outputs=3, strict=True)


# ---- GroupNormalization -------------------------------------------------------------------

@pytest.mark.parametrize("opset", [18, 21])
@pytest.mark.parametrize("seed", range(3))
def test_group_normalization(opset: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    groups = int(rng.integers(1, 4))
    shape = (int(rng.integers(1, 3)), groups * int(rng.integers(1, 4))) + _shape(rng, 0, 2)
    affine = shape[1] if opset >= 21 else groups      # opset 18: per group, opset 21: per channel
    model = single_node_model("GroupNormalization", {"x": _normal(rng, shape, offset=1.0)},
                              {"num_groups": groups, "epsilon": float(rng.choice([1e-5, 1e-3]))},
                              constants={"scale": _normal(rng, (affine,)), "bias": _normal(rng, (affine,))},
                              opset=opset)
    feeds = {"x": _normal(rng, shape, offset=1.0)}
    model = _declare_output(model, shape)
    if opset >= 21:
        check_model(model, feeds, RTOL)
    else:
        _check_bypassing_loader(model, feeds, RTOL)


def test_group_normalization_rejects_groups_that_do_not_divide_channels() -> None:
    rng = np.random.default_rng(31)
    model = single_node_model("GroupNormalization", {"x": _normal(rng, (1, 6, 4))}, {"num_groups": 4},
                              constants={"scale": _normal(rng, (6,)), "bias": _normal(rng, (6,))}, opset=21)
    with pytest.raises(UnsupportedError, match="num_groups=4"):
        fission_graph(_declare_output(model, (1, 6, 4)), strict=True)


# ---- LpNormalization, MeanVarianceNormalization -------------------------------------------

@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("seed", range(3))
def test_lp_normalization(p: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    shape = _shape(rng, 1)
    attrs = {"p": p, "axis": int(rng.integers(-len(shape), len(shape)))} if seed else {"p": p}
    graph = check_op("LpNormalization", {"x": _normal(rng, shape)}, attrs, opset=13, rtol=RTOL)
    assert ops_of(graph)[-2:] == ["reciprocal", "mul"]


def test_lp_normalization_rejects_other_p() -> None:
    rng = np.random.default_rng(41)
    with pytest.raises(UnsupportedError, match="p=3"):
        check_op("LpNormalization", {"x": _normal(rng, (2, 3))}, {"p": 3}, opset=13, strict=True)


@pytest.mark.parametrize("opset", [11, 13])
@pytest.mark.parametrize("seed", range(3))
def test_mean_variance_normalization(opset: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    shape = _shape(rng, 1)
    rank = len(shape)
    chosen = rng.choice(rank, size=rng.integers(1, rank + 1), replace=False)
    axes = [int(a) - rank if rng.random() < 0.5 else int(a) for a in chosen]
    check_op("MeanVarianceNormalization", {"x": _normal(rng, shape, offset=5.0)}, {"axes": axes},
             opset=opset, rtol=RTOL)


def test_mean_variance_normalization_default_axes() -> None:
    rng = np.random.default_rng(51)
    x = _normal(rng, (2, 3, 4, 5), offset=-2.0)
    model = single_node_model("MeanVarianceNormalization", {"x": x}, {"axes": [0, 2, 3]}, opset=13)
    del model.graph.node[0].attribute[:]    # the default is [0, 2, 3]
    graph = _check_bypassing_loader(model, {"x": x}, RTOL)
    assert graph.nodes[0].attrs["axes"] == (0, 2, 3)
