"""Every primitive: the reference kernel agrees with onnxruntime running the exported ONNX op.

This pins both the numpy definition of each primitive and its ONNX lowering.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest

from korch.backends.reference import run_graph
from korch.ir.check import check_graph
from korch.ir.graph import GraphBuilder
from korch.ir.onnx_export import to_onnx
from korch.ir.opaque import opaque_attrs
from korch.ir.ops import OPS, IRError
from korch.ir.types import DType, TensorType
from korch.verify import diff_outputs, run_onnxruntime

RTOL = 1e-5
F32 = np.float32

# op -> (input arrays as (shape, kind), attrs). kind: "f" normal floats, "p" positive floats, "b" bool, "i" indices
CASES: dict[str, list[tuple[list[tuple[tuple[int, ...], str]], dict[str, Any]]]] = {
    **{op: [([((2, 3, 4), "f")], {})] for op in ("neg", "abs", "exp", "tanh", "sigmoid", "erf", "relu", "floor",
                                                  "ceil", "round", "sign", "sin", "cos")},
    **{op: [([((2, 3, 4), "p")], {})] for op in ("log", "sqrt", "reciprocal")},
    "not": [([((3, 4), "b")], {})],
    "cast": [([((3, 4), "f")], {"to": DType.INT64}), ([((3, 4), "f")], {"to": DType.BOOL})],
    **{op: [([((2, 3, 4), "f"), ((3, 1), "f")], {})] for op in ("add", "sub", "mul", "max", "min", "greater",
                                                                 "less", "equal")},
    "div": [([((2, 3, 4), "f"), ((4,), "p")], {})],
    "pow": [([((2, 3), "p"), ((2, 3), "f")], {})],
    **{op: [([((3, 4), "b"), ((4,), "b")], {})] for op in ("and", "or")},
    "where": [([((3, 1), "b"), ((3, 4), "f"), ((4,), "f")], {})],
    **{op: [([((2, 3, 4, 5), "f")], {"axes": (1, 3), "keepdims": True}),
            ([((2, 3, 4, 5), "f")], {"axes": (0, 2), "keepdims": False})]
       for op in ("reduce_sum", "reduce_max", "reduce_min", "reduce_prod")},
    **{op: [([((1, 2, 9, 8), "f")], {"kernel": (3, 2), "strides": (2, 1), "dilations": (1, 2)}),
            ([((1, 2, 7), "f")], {"kernel": (3,), "strides": (2,), "dilations": (1,)})]
       for op in ("window_max", "window_mean")},
    "expand": [([((3, 1), "f")], {"shape": (2, 3, 4)})],
    "transpose": [([((2, 3, 4), "f")], {"perm": (2, 0, 1)})],
    "reshape": [([((2, 3, 4), "f")], {"shape": (4, 6)})],
    "slice": [([((5, 6), "f")], {"starts": (1, 5), "steps": (2, -2), "sizes": (2, 3)}),
              ([((5, 6), "f")], {"starts": (4, 0), "steps": (-1, 1), "sizes": (5, 6)})],
    "concat": [([((2, 3), "f"), ((2, 5), "f"), ((2, 1), "f")], {"axis": 1})],
    "pad": [([((2, 3, 4), "f")], {"pads": (0, 1, 2, 1, 0, 3), "mode": "constant", "value": 1.5}),
            ([((2, 3, 4), "f")], {"pads": (0, 2, 1, 0, 1, 3), "mode": "reflect", "value": 0.0}),
            ([((2, 3, 4), "f")], {"pads": (1, 2, 1, 0, 1, 3), "mode": "edge", "value": 0.0})],
    "gather": [([((5, 4), "f"), ((2, 3), "i")], {"axis": 0}), ([((3, 5, 4), "f"), ((6,), "i")], {"axis": 2})],
    "matmul": [([((2, 3, 4), "f"), ((4, 5), "f")], {}), ([((2, 1, 3, 4), "f"), ((3, 4, 2), "f")], {})],
    "conv": [([((1, 4, 9, 8), "f"), ((6, 2, 3, 3), "f")],
              {"strides": (2, 1), "pads": (1, 0, 2, 1), "dilations": (1, 2), "group": 2}),
             ([((2, 3, 10), "f"), ((4, 3, 3), "f")], {"strides": (1,), "pads": (0, 0), "dilations": (1,), "group": 1})],
    "conv_transpose": [([((1, 4, 5, 6), "f"), ((4, 3, 3, 3), "f")],
                        {"strides": (2, 2), "pads": (1, 0, 1, 1), "dilations": (1, 1), "group": 2,
                         "output_padding": (1, 0)}),
                       ([((1, 2, 5), "f"), ((2, 3, 2), "f")],
                        {"strides": (3,), "pads": (0, 0), "dilations": (2,), "group": 1, "output_padding": (0,)})],
    # an ONNX node kept whole (Det has no fission rule): onnxruntime runs it, on both sides here
    "opaque": [([((2, 3, 3), "f")], opaque_attrs(onnx.helper.make_node("Det", ["a"], ["d"]), 0, {"": 17},
                                                 TensorType((2,), DType.FLOAT32)))],
}


def _array(rng: np.random.Generator, shape: tuple[int, ...], kind: str, index_bound: int) -> np.ndarray:
    if kind == "b":
        return rng.random(shape) < 0.5
    if kind == "i":
        return rng.integers(-index_bound, index_bound, shape).astype(np.int64)
    x = rng.standard_normal(shape).astype(F32)
    return np.abs(x) + 0.5 if kind == "p" else x


def test_every_primitive_has_a_case() -> None:
    assert set(CASES) == set(OPS)


@pytest.mark.parametrize("op,case", [(op, k) for op, cases in CASES.items() for k in range(len(cases))])
def test_primitive_matches_onnxruntime(op: str, case: int) -> None:
    specs, attrs = CASES[op][case]
    rng = np.random.default_rng(hash((op, case)) % 2**32)
    builder = GraphBuilder(op)
    feeds = {}
    values = []
    for k, (shape, kind) in enumerate(specs):
        bound = specs[0][0][attrs.get("axis", 0)] if kind == "i" else 0
        array = _array(rng, shape, kind, bound)
        feeds[f"x{k}"] = array
        values.append(builder.add_input(f"x{k}", TensorType(shape, DType.from_numpy(array.dtype))))
    y = builder.emit(op, values, attrs)
    graph = check_graph(builder.build([("y", y)]))
    expected = run_onnxruntime(to_onnx(graph), feeds)
    actual = run_graph(graph, feeds)
    assert actual["y"].dtype == expected["y"].dtype
    for diff in diff_outputs(actual, expected):
        assert diff.rel <= RTOL, f"{op}: relative error {diff.rel:.3g}"


def test_bad_attributes_are_rejected_with_reason() -> None:
    builder = GraphBuilder("bad")
    x = builder.add_input("x", TensorType((2, 3), DType.FLOAT32))
    with pytest.raises(IRError, match="perm"):
        builder.emit("transpose", [x], {"perm": (0, 0)})
    with pytest.raises(IRError, match="cannot reshape"):
        builder.emit("reshape", [x], {"shape": (4, 2)})
    with pytest.raises(IRError, match="do not broadcast"):
        builder.emit("add", [x, builder.add_input("z", TensorType((4,), DType.FLOAT32))])
    with pytest.raises(IRError, match="attributes"):
        builder.emit("relu", [x], {"alpha": 1.0})


def test_run_graph_frees_a_value_read_twice_by_its_last_reader() -> None:
    """y = (x + 1) * (x + 1): the product is the last reader of x + 1, and reads it twice."""
    from korch.ir.graph import GraphBuilder
    from korch.ir.types import DType, TensorType

    b = GraphBuilder("square")
    x = b.add_input("x", TensorType((4,), DType.FLOAT32))
    one = b.add_constant(np.ones(4, np.float32))
    t = b.emit("add", [x, one])
    graph = b.build([("y", b.emit("mul", [t, t]))])
    xs = np.random.default_rng().standard_normal(4).astype(np.float32)
    np.testing.assert_allclose(run_graph(graph, {"x": xs})["y"], (xs + 1) ** 2, rtol=1e-6)
