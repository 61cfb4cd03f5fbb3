"""Elementwise fission rules against onnxruntime, on random shapes and values."""

from __future__ import annotations

import numpy as np
import pytest

from tests.oracle import check_op, ops_of

RTOL = 1e-5   # one primitive per op: float32 rounding only


def _shapes(rng: np.random.Generator) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Two random shapes that broadcast: b drops leading dims and sets some dims to 1."""
    a = tuple(int(d) for d in rng.integers(1, 6, size=rng.integers(1, 5)))
    b = tuple(1 if rng.random() < 0.3 else d for d in a[rng.integers(0, len(a)):])
    return a, b


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div", "Max", "Min", "Sum", "Mean"])
@pytest.mark.parametrize("seed", range(3))
def test_binary_arith(op: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    sa, sb = _shapes(rng)
    a = rng.standard_normal(sa).astype(np.float32)
    b = rng.standard_normal(sb).astype(np.float32) + (3.0 if op == "Div" else 0.0)
    check_op(op, {"a": a, "b": b}, rtol=RTOL)


@pytest.mark.parametrize("op", ["Greater", "Less", "Equal", "GreaterOrEqual", "LessOrEqual"])
def test_compare(op: str) -> None:
    rng = np.random.default_rng(7)
    sa, sb = _shapes(rng)
    a = rng.integers(-2, 3, sa).astype(np.float32)
    b = rng.integers(-2, 3, sb).astype(np.float32)
    check_op(op, {"a": a, "b": b}, rtol=0)


@pytest.mark.parametrize("op", ["And", "Or", "Xor"])
def test_logic(op: str) -> None:
    rng = np.random.default_rng(3)
    check_op(op, {"a": rng.random((3, 4)) < 0.5, "b": rng.random((4,)) < 0.5}, rtol=0)


@pytest.mark.parametrize("op", ["Neg", "Abs", "Exp", "Log", "Sqrt", "Reciprocal", "Tanh", "Sigmoid", "Erf", "Relu",
                                "Floor", "Ceil", "Round", "Sign", "Sin", "Cos"])
def test_unary(op: str) -> None:
    rng = np.random.default_rng(11)
    x = rng.standard_normal((2, 3, 5)).astype(np.float32) * 3
    if op in ("Log", "Sqrt"):
        x = np.abs(x) + 0.1
    graph = check_op(op, {"x": x}, rtol=RTOL)
    assert len(graph.nodes) == 1


def test_not_and_where() -> None:
    rng = np.random.default_rng(5)
    check_op("Not", {"x": rng.random((4, 4)) < 0.5}, rtol=0)
    check_op("Where", {"c": rng.random((3, 1)) < 0.5, "x": rng.standard_normal((3, 4)).astype(np.float32),
                       "y": rng.standard_normal((4,)).astype(np.float32)}, rtol=0)


@pytest.mark.parametrize("exponent", [2.0, 0.5, 3.0, -1.5, 1.0])
def test_pow_constant_exponent(exponent: float) -> None:
    rng = np.random.default_rng(2)
    x = np.abs(rng.standard_normal((3, 7)).astype(np.float32)) + 0.1
    graph = check_op("Pow", {"x": x}, constants={"e": np.array(exponent, np.float32)}, rtol=RTOL)
    if exponent == 2.0:
        assert ops_of(graph) == ["mul"]


def test_pow_tensor_exponent_of_other_dtype() -> None:
    rng = np.random.default_rng(9)
    x = np.abs(rng.standard_normal((2, 6)).astype(np.float32)) + 0.5
    check_op("Pow", {"x": x, "e": rng.integers(0, 4, (6,)).astype(np.int64)}, rtol=RTOL)


@pytest.mark.parametrize("to", [(np.float32, 6), (np.int64, 1), (np.bool_, 1)])
def test_cast(to: tuple[type, int]) -> None:
    from onnx import TensorProto
    target = {np.float32: TensorProto.FLOAT, np.int64: TensorProto.INT64, np.bool_: TensorProto.BOOL}[to[0]]
    rng = np.random.default_rng(4)
    x = (rng.standard_normal((3, 5)) * 4).astype(np.float32) if to[0] is not np.float32 else rng.integers(-9, 9, (3, 5))
    check_op("Cast", {"x": x}, {"to": target}, rtol=0)


def test_fmod() -> None:
    rng = np.random.default_rng(6)
    a = rng.standard_normal((4, 5)).astype(np.float32) * 5
    b = np.abs(rng.standard_normal((5,))).astype(np.float32) + 0.5
    check_op("Mod", {"a": a, "b": b}, {"fmod": 1}, rtol=1e-5)
