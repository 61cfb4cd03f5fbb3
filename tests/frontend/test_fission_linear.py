"""Linear fission rules (Conv, ConvTranspose, MatMul, Gemm, Einsum) against onnxruntime, on random shapes."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import onnx
import pytest

from korch.backends.reference import run_graph
from korch.errors import UnsupportedError
from korch.frontend import fission
from korch.frontend.fission.driver import fission_graph
from korch.verify import run_onnxruntime
from tests.frontend.test_fission_pooling import spec_same_pads
from tests.oracle import check_op, ops_of, single_node_model

RTOL = 1e-5        # one matmul/conv (+ a bias add): float32 accumulation order only
RTOL_SUMS = 1e-4   # Einsum sums over private indices before the matmul: a different summation order
SEEDS = range(4)


def _normal(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def _random_conv(rng: np.random.Generator) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """A random Conv: 1-3 spatial dims, grouped or depthwise, strides/dilations up to 2, asymmetric pads."""
    nsp = int(rng.integers(1, 4))
    group = int(rng.choice([1, 2, 3]))
    cin = group * int(rng.integers(1, 3))
    cout = cin if rng.random() < 0.3 else group * int(rng.integers(1, 3))   # cout == cin == group: depthwise
    kernel = [int(k) for k in rng.integers(1, 4, nsp)]
    strides = [int(s) for s in rng.integers(1, 3, nsp)]
    dilations = [int(d) for d in rng.integers(1, 3, nsp)]
    pads = [int(p) for p in rng.integers(0, 3, 2 * nsp)]
    spatial = [d * (k - 1) + 1 + int(rng.integers(0, 4)) for k, d in zip(kernel, dilations)]
    inputs = {"x": _normal(rng, 2, cin, *spatial), "w": _normal(rng, cout, cin // group, *kernel)}
    if rng.random() < 0.5:
        inputs["b"] = _normal(rng, cout)
    attrs = {"group": group, "strides": strides, "dilations": dilations, "pads": pads}
    if rng.random() < 0.5:
        attrs["kernel_shape"] = kernel
    return inputs, attrs


@pytest.mark.parametrize("seed", range(12))
def test_conv_random(seed: int) -> None:
    inputs, attrs = _random_conv(np.random.default_rng(seed))
    graph = check_op("Conv", inputs, attrs, rtol=RTOL)
    assert ops_of(graph) == ["conv", "reshape", "add"][: 3 if "b" in inputs else 1]


def test_conv_depthwise_dilated_strided_with_constant_bias() -> None:
    rng = np.random.default_rng(0)
    graph = check_op("Conv", {"x": _normal(rng, 1, 6, 11, 9)},
                     {"group": 6, "strides": [2, 2], "dilations": [2, 1], "pads": [0, 2, 1, 0]},
                     constants={"w": _normal(rng, 6, 1, 3, 3), "b": _normal(rng, 6)}, rtol=RTOL)
    assert ops_of(graph) == ["conv", "add"]   # the bias reshape folds into a 6 x 1 x 1 constant


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER", "VALID"])
@pytest.mark.parametrize("size,kernel,stride", [(7, 3, 2), (8, 2, 2), (9, 4, 3), (6, 3, 1)])
def test_conv_auto_pad(auto_pad: str, size: int, kernel: int, stride: int) -> None:
    rng = np.random.default_rng(size * kernel + stride)
    check_op("Conv", {"x": _normal(rng, 1, 2, size, size + 1), "w": _normal(rng, 3, 2, kernel, kernel)},
             {"auto_pad": auto_pad, "strides": [stride, stride]}, rtol=RTOL)


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER"])
def test_conv_same_with_dilation_follows_onnx_spec(auto_pad: str) -> None:
    """onnxruntime rejects SAME_* with dilations; the spec (and ONNX shape inference) pad by the dilated
    span. Oracle: onnxruntime's Conv with the spec's pads given explicitly."""
    rng = np.random.default_rng(1)
    x, w = _normal(rng, 1, 2, 9, 8), _normal(rng, 3, 2, 3, 2)
    geometry = {"strides": [2, 1], "dilations": [2, 3]}
    model = single_node_model("Conv", {"x": x, "w": w}, {"auto_pad": auto_pad, **geometry})
    pads = spec_same_pads([9, 8], [3, 2], geometry["strides"], geometry["dilations"], auto_pad)
    explicit = single_node_model("Conv", {"x": x, "w": w}, {"pads": pads, **geometry})
    want = run_onnxruntime(explicit, {"x": x, "w": w})["y0"]
    got = run_graph(fission(model), {"x": x, "w": w})["y0"]
    assert got.shape == want.shape == (1, 3, 5, 8)
    np.testing.assert_allclose(got, want, rtol=0, atol=RTOL * np.abs(want).max())


@pytest.mark.parametrize("opset", [11, 21])
def test_conv_opsets(opset: int) -> None:
    rng = np.random.default_rng(opset)
    check_op("Conv", {"x": _normal(rng, 2, 4, 6), "w": _normal(rng, 4, 2, 3), "b": _normal(rng, 4)},
             {"group": 2, "pads": [2, 1]}, opset=opset, rtol=RTOL)


# ---- ConvTranspose ----------------------------------------------------------------------------

@pytest.mark.parametrize("seed", range(8))
def test_conv_transpose_random(seed: int) -> None:
    """Stride 2 with output_padding < stride, groups, dilations and asymmetric pads."""
    rng = np.random.default_rng(seed)
    nsp = int(rng.integers(1, 3))
    group = int(rng.choice([1, 2]))
    cin, mg = group * int(rng.integers(1, 3)), int(rng.integers(1, 3))
    kernel = [int(k) for k in rng.integers(2, 4, nsp)]
    dilations = [int(d) for d in rng.integers(1, 3, nsp)]
    strides = [2] * nsp
    output_padding = [int(p) for p in rng.integers(0, 2, nsp)]
    pads = [int(p) for p in rng.integers(0, 2, 2 * nsp)]
    inputs = {"x": _normal(rng, 2, cin, *rng.integers(2, 6, nsp)), "w": _normal(rng, cin, mg, *kernel)}
    if seed % 2:
        inputs["b"] = _normal(rng, mg * group)
    check_op("ConvTranspose", inputs, {"group": group, "strides": strides, "dilations": dilations, "pads": pads,
                                       "output_padding": output_padding}, rtol=RTOL)


@pytest.mark.parametrize("auto_pad", ["NOTSET", "SAME_UPPER", "SAME_LOWER"])
def test_conv_transpose_output_shape(auto_pad: str) -> None:
    """output_shape fixes the total padding; odd totals split per auto_pad (as the spec and onnxruntime do)."""
    rng = np.random.default_rng(2)
    graph = check_op("ConvTranspose", {"x": _normal(rng, 1, 2, 5, 5), "w": _normal(rng, 2, 3, 3, 3)},
                     {"strides": [2, 2], "output_shape": [10, 9], "auto_pad": auto_pad}, rtol=RTOL)
    assert graph.types[graph.outputs[0]].shape == (1, 3, 10, 9)


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER", "VALID"])
@pytest.mark.parametrize("kernel", [(4, 3), (1, 2)])   # (1, 2) is narrower than the strides: no padding to crop
def test_conv_transpose_auto_pad(auto_pad: str, kernel: tuple[int, int]) -> None:
    rng = np.random.default_rng(3)
    check_op("ConvTranspose", {"x": _normal(rng, 1, 2, 5, 4), "w": _normal(rng, 2, 3, *kernel), "b": _normal(rng, 3)},
             {"strides": [2, 3], "auto_pad": auto_pad, "output_padding": [1, 0]}, rtol=RTOL)


# ---- MatMul and Gemm --------------------------------------------------------------------------

@pytest.mark.parametrize("shapes", [((3,), (3,)), ((3,), (3, 4)), ((2, 5, 3), (3,)), ((3,), (2, 3, 4)),
                                    ((2, 1, 4, 3), (5, 3, 2)), ((4, 3), (3, 5)), ((6, 4, 3), (3, 2))])
@pytest.mark.parametrize("seed", SEEDS)
def test_matmul(shapes: tuple[tuple[int, ...], tuple[int, ...]], seed: int) -> None:
    rng = np.random.default_rng(seed)
    graph = check_op("MatMul", {"a": _normal(rng, *shapes[0]), "b": _normal(rng, *shapes[1])}, rtol=RTOL)
    if len(shapes[0]) > 1 and len(shapes[1]) > 1:
        assert ops_of(graph) == ["matmul"]


@pytest.mark.parametrize("opset", [11, 13])
@pytest.mark.parametrize("trans_a", [0, 1])
@pytest.mark.parametrize("trans_b", [0, 1])
@pytest.mark.parametrize("alpha,beta,c_shape", [(1.0, 1.0, (5,)), (0.5, 2.0, (3, 1)), (1.0, 0.0, (3, 5)),
                                                (2.0, 1.0, None), (1.0, 1.0, ()), (1.0, -1.5, (1, 5))])
def test_gemm(opset: int, trans_a: int, trans_b: int, alpha: float, beta: float,
              c_shape: tuple[int, ...] | None) -> None:
    rng = np.random.default_rng(trans_a + 2 * trans_b)
    a = _normal(rng, 4, 3) if trans_a else _normal(rng, 3, 4)
    b = _normal(rng, 5, 4) if trans_b else _normal(rng, 4, 5)
    inputs = {"a": a, "b": b, "c": None if c_shape is None else _normal(rng, *c_shape)}
    attrs = {"transA": trans_a, "transB": trans_b, "alpha": alpha, "beta": beta}
    graph = check_op("Gemm", inputs, attrs, opset=opset, rtol=RTOL, input_order=["a", "b", "c"])
    expected = ["transpose"] * (trans_a + trans_b) + ["matmul"] + ["mul"] * (alpha != 1.0)
    has_c = c_shape is not None and beta != 0.0
    expected += ["mul"] * (has_c and beta != 1.0) + ["add"] * has_c
    assert ops_of(graph) == expected


def test_gemm_folds_alpha_beta_and_transpose_into_constant_weights() -> None:
    rng = np.random.default_rng(5)
    graph = check_op("Gemm", {"a": _normal(rng, 3, 4)}, {"transB": 1, "alpha": 0.25, "beta": 3.0},
                     constants={"b": _normal(rng, 5, 4), "c": _normal(rng, 5)}, rtol=RTOL)
    assert ops_of(graph) == ["matmul", "add"]


# ---- Einsum -----------------------------------------------------------------------------------

EINSUM_SIZES = {"b": 2, "h": 3, "i": 3, "j": 4, "k": 5, "q": 4, "d": 6, "x": 2}


@pytest.mark.parametrize("equation,ops", [
    ("bij,bjk->bik", ["matmul"]),
    ("bhqd,bhkd->bhqk", ["transpose", "matmul"]),
    ("bhqk,bhkd->bhqd", ["matmul"]),
    ("ij,jk->ik", ["matmul"]),
    ("ij,jk", ["matmul"]),                       # implicit output "ik"
    ("bid,dh->bih", ["matmul"]),                 # A's free dims broadcast against a 2-D B
    ("ij,kj->ik", ["transpose", "matmul"]),
    ("ij,jk->ki", ["matmul", "transpose"]),
    ("bij,bjk->kbi", ["matmul", "transpose"]),
    ("bhqd,bkhd->bqhk", ["transpose", "matmul", "transpose"]),
    ("i,ji->j", ["reshape", "matmul", "reshape"]),   # the operands swap so B needs no transpose
    ("ikd,jdk->ij", None),                       # two contracted indices, in different orders
    ("ijx,jk->ik", ["reduce_sum", "matmul"]),    # x appears in one operand only: summed first
    ("i,i->", None),
    ("i,j->ij", ["reshape", "mul"]),             # nothing contracted: a broadcast product
    ("ij,ij->ij", ["mul"]),
    ("bij->bji", ["transpose"]),
    ("bij->j", ["reduce_sum"]),
    ("ij->", ["reduce_sum"]),
])
@pytest.mark.parametrize("seed", range(2))
def test_einsum(equation: str, ops: list[str] | None, seed: int) -> None:
    rng = np.random.default_rng(seed)
    terms = equation.split("->")[0].split(",")
    inputs = {f"x{n}": _normal(rng, *(EINSUM_SIZES[ch] for ch in term)) for n, term in enumerate(terms)}
    graph = check_op("Einsum", inputs, {"equation": equation}, opset=12 + 9 * seed, rtol=RTOL_SUMS)
    if ops is not None:
        assert ops_of(graph) == ops


# ---- unsupported attribute values ------------------------------------------------------------

@pytest.mark.parametrize("op_type,inputs,attrs,message", [
    ("Einsum", {"a": (2, 3), "b": (3, 4)}, {"equation": "...j,jk->...k"}, "ellipsis"),
    ("Einsum", {"a": (3, 3), "b": (3, 4)}, {"equation": "ii,ik->k"}, "repeats an index"),
    ("Einsum", {"a": (2, 3), "b": (3, 4), "c": (4, 2)}, {"equation": "ij,jk,kl->il"}, "3 operands"),
    ("Conv", {"x": (1, 2, 5), "w": (2, 2, 3)}, {"auto_pad": "SAME"}, "auto_pad 'SAME'"),
    ("ConvTranspose", {"x": (1, 2, 5), "w": (2, 2, 3)}, {"strides": [2], "output_shape": [20]}, "output_shape [20]"),
])
def test_unsupported(op_type: str, inputs: dict[str, tuple[int, ...]], attrs: dict[str, Any], message: str) -> None:
    arrays = {k: np.ones(s, np.float32) for k, s in inputs.items()}
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node(op_type, list(arrays), ["y"], **attrs)], "g",
        [onnx.helper.make_tensor_value_info(k, onnx.TensorProto.FLOAT, a.shape) for k, a in arrays.items()],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)])
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 18)])
    with pytest.raises(UnsupportedError, match=re.escape(message)):
        fission_graph(model, strict=True)
