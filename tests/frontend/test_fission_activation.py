"""Activation fission rules against onnxruntime, on random shapes, values and attributes."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from korch.backends.reference import run_graph
from korch.errors import UnsupportedError
from korch.frontend import fission
from korch.frontend.fission.driver import fission_graph
from tests.oracle import check_op, ops_of, single_node_model

RTOL = 1e-5          # composites of a few float32 primitives: a few float32 roundings
RTOL_FLOAT64 = 1e-12  # the same compositions in float64
# float16 computes every primitive in half precision (ulp ~1e-3), while onnxruntime's CPU kernels
# compute these ops in float32 and round once; a chain of ~7 half-precision roundings stays within this.
RTOL_FLOAT16 = 1e-2
SEEDS = range(3)


def _shape(rng: np.random.Generator) -> tuple[int, ...]:
    return tuple(int(d) for d in rng.integers(1, 6, size=rng.integers(1, 5)))


def _x(rng: np.random.Generator, shape: tuple[int, ...] | None = None, scale: float = 3.0) -> np.ndarray:
    return (rng.standard_normal(shape if shape is not None else _shape(rng)) * scale).astype(np.float32)


def _uniform(rng: np.random.Generator, low: float, high: float) -> float:
    return float(np.float32(rng.uniform(low, high)))


# ---- piecewise-linear -----------------------------------------------------------------------

@pytest.mark.parametrize("opset", [11, 16, 21])
@pytest.mark.parametrize("seed", SEEDS)
def test_leaky_relu(opset: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = _x(rng)
    for alpha, op in [(None, "max"), (_uniform(rng, -0.5, 1.0), "max"), (_uniform(rng, 1.0, 4.0), "min")]:
        attrs = {} if alpha is None else {"alpha": alpha}
        graph = check_op("LeakyRelu", {"x": x}, attrs, opset=opset, rtol=0)   # exact: one rounded product
        assert ops_of(graph) == ["mul", op]


def _prelu_shapes(rng: np.random.Generator) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """An input shape of rank >= 2 and a slope shape that broadcasts to it unidirectionally."""
    x = tuple(int(d) for d in rng.integers(1, 6, size=rng.integers(2, 5)))
    kind = rng.integers(0, 4)
    if kind == 0:
        return x, (1,)
    if kind == 1:
        return x, (x[1],) + (1,) * (len(x) - 2)        # per channel, as exported from torch
    if kind == 2:
        return x, x[-1:]
    return x, tuple(1 if rng.random() < 0.4 else d for d in x[rng.integers(0, len(x)):])


@pytest.mark.parametrize("opset", [11, 16, 21])
@pytest.mark.parametrize("seed", SEEDS)
def test_prelu_constant_slope(opset: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    xs, ss = _prelu_shapes(rng)
    x = _x(rng, xs)
    cases = [(rng.uniform(0.0, 1.0, ss), "max"), (rng.uniform(1.0, 3.0, ss), "min"),
             (rng.uniform(-1.0, 2.0, ss) + np.linspace(-1, 1, np.prod(ss)).reshape(ss), "where")]
    for slope, last in cases:
        if last == "where" and (np.all(slope <= 1) or np.all(slope >= 1)):
            continue   # a 1-element draw that happens to be one-sided
        graph = check_op("PRelu", {"x": x}, constants={"slope": slope.astype(np.float32)}, opset=opset, rtol=0)
        assert ops_of(graph)[-1] == last


@pytest.mark.parametrize("opset", [11, 21])
@pytest.mark.parametrize("seed", SEEDS)
def test_prelu_slope_input(opset: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    xs, ss = _prelu_shapes(rng)
    graph = check_op("PRelu", {"x": _x(rng, xs), "slope": _x(rng, ss, 1.0)}, opset=opset, rtol=0)
    assert ops_of(graph) == ["mul", "less", "where"]


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_prelu_integer(dtype: type) -> None:
    """Opset 16 added integer PRelu. onnxruntime has no CPU kernel for it: onnx's reference evaluator is the oracle."""
    rng = np.random.default_rng(4)
    x = rng.integers(-50, 50, (2, 3, 4, 5)).astype(dtype)
    slope = rng.integers(-3, 4, (3, 1, 1)).astype(dtype)
    for inputs, constants in [({"x": x}, {"slope": slope}), ({"x": x, "slope": slope}, {})]:
        model = single_node_model("PRelu", inputs, constants=constants, opset=16)
        want = ReferenceEvaluator(model).run(None, inputs)[0]
        got = run_graph(fission(model), inputs)["y0"]
        assert got.dtype == want.dtype and np.array_equal(got, want)


@pytest.mark.parametrize("opset", [11, 21])
@pytest.mark.parametrize("seed", SEEDS)
def test_thresholded_relu(opset: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = _x(rng)
    for attrs in [{}, {"alpha": _uniform(rng, -2.0, 2.0)}]:
        graph = check_op("ThresholdedRelu", {"x": x}, attrs, opset=opset, rtol=0)
        assert ops_of(graph) == ["greater", "where"]


def _bounds(rng: np.random.Generator, dtype: type) -> tuple[np.ndarray, np.ndarray]:
    if np.issubdtype(dtype, np.integer):
        lo = rng.integers(-20, 10) if np.issubdtype(dtype, np.signedinteger) else rng.integers(0, 100)
        return np.array(lo, dtype), np.array(lo + rng.integers(0, 60), dtype)
    lo = rng.uniform(-3.0, 1.0)
    return np.array(lo, dtype), np.array(lo + rng.uniform(0.0, 4.0), dtype)


def _clip_input(rng: np.random.Generator, dtype: type) -> np.ndarray:
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        return rng.integers(max(info.min, -100), min(info.max, 200), _shape(rng)).astype(dtype)
    return _x(rng).astype(dtype)


# (lo present, hi present) -> primitives emitted
_CLIP_FORMS = {
    (True, True): ["max", "min"], (True, False): ["max"], (False, True): ["min"], (False, False): ["reshape"],
}


@pytest.mark.parametrize("opset", [11, 12, 13, 21])
@pytest.mark.parametrize("seed", SEEDS)
def test_clip_constant_bounds(opset: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = _clip_input(rng, np.float32)
    lo, hi = _bounds(rng, np.float32)
    for (has_lo, has_hi), expected in _CLIP_FORMS.items():
        constants = {k: v for k, v, keep in (("lo", lo, has_lo), ("hi", hi, has_hi)) if keep}
        graph = check_op("Clip", {"x": x}, constants=constants, opset=opset, rtol=0, input_order=["x", "lo", "hi"])
        assert ops_of(graph) == expected   # no bounds: Clip is the input itself (copied to the output)


@pytest.mark.parametrize("opset", [11, 21])
@pytest.mark.parametrize("seed", SEEDS)
def test_clip_bound_inputs(opset: int, seed: int) -> None:
    """Bounds fed at run time, including lo > hi (ONNX: every element becomes hi)."""
    rng = np.random.default_rng(seed)
    x = _clip_input(rng, np.float32)
    lo, hi = _bounds(rng, np.float32)
    check_op("Clip", {"x": x, "lo": lo, "hi": hi}, opset=opset, rtol=0)
    graph = check_op("Clip", {"x": x, "lo": np.asarray(hi + 1), "hi": lo}, opset=opset, rtol=0)
    assert ops_of(graph) == ["max", "min"]
    check_op("Clip", {"x": x, "lo": None, "hi": hi}, opset=opset, rtol=0)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int32, np.int64, np.float64])
@pytest.mark.parametrize("opset", [12, 21])
def test_clip_other_dtypes(dtype: type, opset: int) -> None:
    """Opset 12 added integer Clip."""
    rng = np.random.default_rng(opset)
    x = _clip_input(rng, dtype)
    lo, hi = _bounds(rng, dtype)
    check_op("Clip", {"x": x}, constants={"lo": lo, "hi": hi}, opset=opset, rtol=0)
    check_op("Clip", {"x": x, "lo": None, "hi": hi}, opset=opset, rtol=0)


@pytest.mark.parametrize("opset", [11, 21])
@pytest.mark.parametrize("seed", SEEDS)
def test_hard_sigmoid(opset: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = _x(rng)
    for attrs in [{}, {"alpha": _uniform(rng, -1.0, 1.0), "beta": _uniform(rng, -1.0, 1.0)}]:
        graph = check_op("HardSigmoid", {"x": x}, attrs, opset=opset, rtol=RTOL)
        assert ops_of(graph) == ["mul", "add", "relu", "min"]


@pytest.mark.parametrize("opset", [14, 21])
@pytest.mark.parametrize("seed", SEEDS)
def test_hard_swish(opset: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    graph = check_op("HardSwish", {"x": _x(rng)}, opset=opset, rtol=RTOL)
    assert ops_of(graph) == ["mul", "add", "relu", "min", "mul"]


# ---- smooth ---------------------------------------------------------------------------------

# Values far out in both tails, where a naive log(1 + exp(x)) overflows or loses everything.
_EXTREMES = np.array([-100.0, -30.0, -15.0, -1e-3, 0.0, 1e-3, 15.0, 30.0, 100.0], np.float32)


@pytest.mark.parametrize("opset", [11, 21])
@pytest.mark.parametrize("seed", SEEDS)
def test_softplus(opset: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    graph = check_op("Softplus", {"x": _x(rng)}, opset=opset, rtol=RTOL)
    assert ops_of(graph) == ["abs", "sigmoid", "log", "relu", "sub"]
    check_op("Softplus", {"x": _EXTREMES}, opset=opset, rtol=RTOL)
    small = np.array([-60.0, -20.0, -10.0, -5.0, -1.0], np.float32)   # the output scale is small here
    check_op("Softplus", {"x": small}, opset=opset, rtol=RTOL)


@pytest.mark.parametrize("opset", [11, 21])
@pytest.mark.parametrize("seed", SEEDS)
def test_softsign(opset: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    graph = check_op("Softsign", {"x": _x(rng)}, opset=opset, rtol=RTOL)
    assert ops_of(graph) == ["abs", "add", "div"]


@pytest.mark.parametrize("opset", [18, 21])
@pytest.mark.parametrize("seed", SEEDS)
def test_mish(opset: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    graph = check_op("Mish", {"x": _x(rng)}, opset=opset, rtol=RTOL)
    assert ops_of(graph) == ["abs", "sigmoid", "log", "relu", "sub", "tanh", "mul"]
    check_op("Mish", {"x": _EXTREMES}, opset=opset, rtol=RTOL)


_GELU_OPS = {
    "none": ["mul", "erf", "mul", "add", "mul"],
    "tanh": ["mul", "mul", "add", "mul", "sigmoid", "mul"],
}


@pytest.mark.parametrize("approximate", [None, "none", "tanh"])
@pytest.mark.parametrize("opset", [20, 21])
@pytest.mark.parametrize("seed", SEEDS)
def test_gelu(approximate: str | None, opset: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    attrs = {} if approximate is None else {"approximate": approximate}
    graph = check_op("Gelu", {"x": _x(rng)}, attrs, opset=opset, rtol=RTOL)
    assert ops_of(graph) == _GELU_OPS[approximate or "none"]
    check_op("Gelu", {"x": _EXTREMES}, attrs, opset=opset, rtol=RTOL)


@pytest.mark.parametrize("opset", [11, 21])
@pytest.mark.parametrize("seed", SEEDS)
def test_elu(opset: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = _x(rng)
    graph = check_op("Elu", {"x": x}, opset=opset, rtol=RTOL)
    assert ops_of(graph) == ["min", "exp", "sub", "relu", "add"]   # alpha = 1: no multiply
    graph = check_op("Elu", {"x": x}, {"alpha": _uniform(rng, 0.1, 3.0)}, opset=opset, rtol=RTOL)
    assert ops_of(graph) == ["min", "exp", "sub", "mul", "relu", "add"]
    check_op("Elu", {"x": _EXTREMES}, opset=opset, rtol=RTOL)


@pytest.mark.parametrize("opset", [11, 21])
@pytest.mark.parametrize("seed", SEEDS)
def test_selu(opset: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = _x(rng)
    graph = check_op("Selu", {"x": x}, opset=opset, rtol=RTOL)
    assert ops_of(graph) == ["min", "exp", "sub", "mul", "relu", "add", "mul"]
    attrs = {"alpha": _uniform(rng, 0.5, 3.0), "gamma": _uniform(rng, 0.5, 2.0)}
    check_op("Selu", {"x": x}, attrs, opset=opset, rtol=RTOL)


@pytest.mark.parametrize("opset", [12, 21])
@pytest.mark.parametrize("seed", SEEDS)
def test_celu(opset: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = _x(rng)
    graph = check_op("Celu", {"x": x}, opset=opset, rtol=RTOL)
    assert ops_of(graph) == ["min", "exp", "sub", "relu", "add"]   # alpha = 1 is Elu
    graph = check_op("Celu", {"x": x}, {"alpha": _uniform(rng, 0.2, 3.0)}, opset=opset, rtol=RTOL)
    assert ops_of(graph) == ["min", "div", "exp", "sub", "mul", "relu", "add"]


# ---- dtypes ---------------------------------------------------------------------------------

# (op, attrs, opset) that onnxruntime's CPU provider runs in float16 (and, where marked, float64).
_HALF_CASES = [
    ("LeakyRelu", {"alpha": 0.2}, 16), ("HardSigmoid", {}, 13), ("HardSwish", {}, 14), ("Softplus", {}, 13),
    ("Softsign", {}, 13), ("Mish", {}, 18), ("Gelu", {}, 20), ("Gelu", {"approximate": "tanh"}, 20),
    ("Elu", {"alpha": 0.5}, 13), ("Selu", {}, 13), ("ThresholdedRelu", {"alpha": 0.5}, 13),
]
_DOUBLE_CASES = [("LeakyRelu", {"alpha": 0.2}, 16), ("Mish", {}, 18)]


@pytest.mark.parametrize("case", _HALF_CASES, ids=lambda c: f"{c[0]}-{c[1].get('approximate', '')}")
def test_float16_stays_float16(case: tuple[str, dict, int]) -> None:
    op, attrs, opset = case
    x = _x(np.random.default_rng(8), (3, 5)).astype(np.float16)
    check_op(op, {"x": x}, attrs, opset=opset, rtol=RTOL_FLOAT16)   # check_op also asserts the output dtype


@pytest.mark.parametrize("case", _DOUBLE_CASES, ids=lambda c: c[0])
def test_float64_stays_float64(case: tuple[str, dict, int]) -> None:
    op, attrs, opset = case
    x = _x(np.random.default_rng(9), (3, 5)).astype(np.float64)
    check_op(op, {"x": x}, attrs, opset=opset, rtol=RTOL_FLOAT64)


def test_prelu_float64_slope() -> None:
    rng = np.random.default_rng(10)
    x = _x(rng, (2, 3, 4, 2)).astype(np.float64)
    check_op("PRelu", {"x": x, "slope": rng.standard_normal((3, 1, 1))}, opset=16, rtol=RTOL_FLOAT64)


# ---- unsupported ----------------------------------------------------------------------------

def test_gelu_unknown_approximation_is_named() -> None:
    x = _x(np.random.default_rng(0), (2, 3))
    with pytest.raises(UnsupportedError, match="approximate='fast'"):
        check_op("Gelu", {"x": x}, {"approximate": "fast"}, opset=20, strict=True)


@pytest.mark.parametrize("alpha", [0.0, -1.5])
def test_celu_non_positive_alpha_is_named(alpha: float) -> None:
    x = _x(np.random.default_rng(0), (2, 3))
    with pytest.raises(UnsupportedError, match=f"Celu alpha={alpha}"):
        check_op("Celu", {"x": x}, {"alpha": alpha}, opset=12, strict=True)


def _unchecked_model(op_type: str, x_shape: list[int], constant: tuple[str, list[int], list[float]]) -> onnx.ModelProto:
    """A one-node float model with input x and one initializer, built without shape inference
    (which would reject it before the fission rule is reached)."""
    name, shape, values = constant
    node = helper.make_node(op_type, ["x", name], ["y"], name=op_type.lower())
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, x_shape)],
        initializer=[helper.make_tensor(name, TensorProto.FLOAT, shape, values)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_clip_bound_with_many_elements_is_rejected() -> None:
    with pytest.raises(UnsupportedError, match="Clip's min input must be a scalar"):
        fission_graph(_unchecked_model("Clip", [2, 3], ("lo", [2], [0.0, 1.0])), strict=True)


def test_prelu_slope_that_does_not_broadcast_is_rejected() -> None:
    with pytest.raises(UnsupportedError, match=r"PRelu slope of shape \(2,\) does not broadcast"):
        fission_graph(_unchecked_model("PRelu", [2, 3], ("slope", [2], [0.1, 0.2])), strict=True)
