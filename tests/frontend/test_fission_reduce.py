"""Reduce* and ArgMax/ArgMin fission rules against onnxruntime, on random shapes, axes and values."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper

from korch.errors import UnsupportedError
from korch.frontend.fission.driver import fission_graph
from tests.oracle import check_op, ops_of

RTOL = 1e-5            # float32 accumulation-order differences only (Sum, Max, L1, L2, ...)
RTOL_COMPOSITE = 1e-4  # LogSumExp: max, exp, sum, log, add each round once
EXACT = 0              # integer results and index outputs

SIMPLE = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
          "ReduceSumSquare"]
ALL = SIMPLE + ["ReduceLogSum", "ReduceLogSumExp"]


def _axes_input_opset(op: str) -> int:
    return 13 if op == "ReduceSum" else 18


def _input(op: str, rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    x = rng.standard_normal(shape).astype(np.float32)
    if op == "ReduceProd":      # magnitudes near 1: the product neither underflows nor overflows
        x = np.sign(x) * rng.uniform(0.7, 1.4, shape).astype(np.float32)
    if op == "ReduceLogSum":    # positive sums
        x = np.abs(x) + 0.1
    if op == "ReduceLogSumExp":  # large values: exp overflows without the max subtraction
        x = x * 40
    return x


def _random_case(rng: np.random.Generator) -> tuple[tuple[int, ...], list[int]]:
    """A random shape (rank 1-4) and a random non-empty subset of its axes, some negative."""
    shape = tuple(int(d) for d in rng.integers(1, 6, size=rng.integers(1, 5)))
    rank = len(shape)
    chosen = rng.choice(rank, size=rng.integers(1, rank + 1), replace=False)
    return shape, [int(a) - rank if rng.random() < 0.5 else int(a) for a in chosen]


def _check(op: str, x: np.ndarray, axes: list[int] | None, opset: int, **attrs: Any) -> Any:
    """Run `op` with axes as an attribute or as a constant input, whichever `opset` takes."""
    rtol = RTOL_COMPOSITE if op == "ReduceLogSumExp" else RTOL
    if opset >= _axes_input_opset(op):
        constants = {} if axes is None else {"axes": np.array(axes, np.int64)}
        return check_op(op, {"x": x}, attrs, constants=constants, opset=opset, rtol=rtol)
    if axes is not None:
        attrs["axes"] = axes
    return check_op(op, {"x": x}, attrs, opset=opset, rtol=rtol)


@pytest.mark.parametrize("op", ALL)
@pytest.mark.parametrize("opset", [11, 13, 18])
@pytest.mark.parametrize("seed", range(3))
def test_reduce_random_axes(op: str, opset: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    shape, axes = _random_case(rng)
    _check(op, _input(op, rng, shape), axes, opset, keepdims=int(rng.integers(0, 2)))


@pytest.mark.parametrize("op", ALL)
@pytest.mark.parametrize("keepdims", [0, 1])
def test_reduce_all_when_axes_omitted(op: str, keepdims: int) -> None:
    rng = np.random.default_rng(keepdims + 20)
    opset = _axes_input_opset(op)
    graph = _check(op, _input(op, rng, (3, 4, 2)), None, opset, keepdims=keepdims)
    reductions = [o for o in ops_of(graph) if o.startswith("reduce_")]
    assert reductions and all(n.attrs["axes"] == (0, 1, 2) for n in graph.nodes if n.op.startswith("reduce_"))


@pytest.mark.parametrize("op", ALL)
def test_noop_with_empty_axes_emits_no_reduction(op: str) -> None:
    rng = np.random.default_rng(30)
    graph = _check(op, _input(op, rng, (2, 5)), None, _axes_input_opset(op), noop_with_empty_axes=1)
    assert not any(o.startswith("reduce_") for o in ops_of(graph))


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd"])
def test_single_primitive(op: str) -> None:
    rng = np.random.default_rng(4)
    graph = _check(op, _input(op, rng, (3, 4, 5)), [1], 18, keepdims=0)
    assert ops_of(graph) == [op.replace("Reduce", "reduce_").lower()]


def test_log_sum_exp_structure_is_stable() -> None:
    rng = np.random.default_rng(5)
    graph = _check("ReduceLogSumExp", _input("ReduceLogSumExp", rng, (3, 6)), [1], 18, keepdims=1)
    assert ops_of(graph) == ["reduce_max", "sub", "exp", "reduce_sum", "log", "add"]


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
                                "ReduceSumSquare"])
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_integer_inputs(op: str, dtype: type) -> None:
    rng = np.random.default_rng(6)
    x = rng.integers(-7, 8, (3, 4, 2)).astype(dtype)
    check_op(op, {"x": x}, {"keepdims": 0}, constants={"axes": np.array([0, 2], np.int64)}, opset=18, rtol=EXACT)


@pytest.mark.parametrize("op", ["ReduceL2", "ReduceLogSum", "ReduceLogSumExp"])
def test_integer_input_to_float_only_reduction_is_rejected(op: str) -> None:
    x = np.arange(6, dtype=np.int64).reshape(2, 3)
    with pytest.raises(UnsupportedError, match=f"{op} on int64"):
        check_op(op, {"x": x}, opset=18, strict=True)


def test_non_constant_axes_input_is_rejected() -> None:
    # ONNX shape inference cannot type the output of a data-dependent reduction: declare it.
    node = helper.make_node("ReduceSum", ["x", "axes"], ["y"])
    graph = helper.make_graph([node], "test", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
                                               helper.make_tensor_value_info("axes", TensorProto.INT64, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    with pytest.raises(UnsupportedError, match="ReduceSum's axes input must be a constant"):
        fission_graph(model, strict=True)


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("opset", [11, 13])
@pytest.mark.parametrize("seed", range(3))
def test_arg_extremum(op: str, opset: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    shape = tuple(int(d) for d in rng.integers(1, 6, size=rng.integers(1, 5)))
    x = rng.integers(-2, 3, shape).astype(np.float32)  # few distinct values: many ties
    attrs = {"axis": int(rng.integers(-len(shape), len(shape))), "keepdims": int(rng.integers(0, 2))}
    if opset >= 12:
        attrs["select_last_index"] = int(rng.integers(0, 2))
    graph = check_op(op, {"x": x}, attrs, opset=opset, rtol=EXACT)
    assert ops_of(graph)[1:3] == ["equal", "where"]


def test_arg_max_of_constant_folds() -> None:
    rng = np.random.default_rng(8)
    graph = check_op("ArgMax", {}, {"axis": 1}, constants={"x": rng.standard_normal((3, 4)).astype(np.float32)},
                     opset=13, rtol=EXACT)
    assert ops_of(graph) == ["reshape"]   # the output copy of a constant: nothing is computed
