"""ONNX export of primitive graphs: what onnxruntime computes from the export matches the reference."""

from __future__ import annotations

import numpy as np
import pytest

from korch.backends.reference import run_graph
from korch.ir.graph import GraphBuilder
from korch.ir.onnx_export import to_onnx
from korch.ir.types import DType, TensorType
from korch.verify import diff_outputs, run_onnxruntime

RTOL = 1e-6     # one fp32 reduction: rounding only


@pytest.mark.parametrize("op", ["reduce_sum", "reduce_max", "reduce_min", "reduce_prod"])
def test_a_reduction_over_no_axis_exports_as_the_identity(op: str) -> None:
    """ONNX reduces every axis when a Reduce* gets no axes (unless noop_with_empty_axes), so a
    reduction over no axis must not export as one; next to it, a real reduction for contrast."""
    b = GraphBuilder("r")
    x = b.add_input("x", TensorType((3, 5), DType.FLOAT32))
    none = b.emit(op, [x], {"axes": (), "keepdims": True})
    some = b.emit(op, [x], {"axes": (1,), "keepdims": False})
    graph = b.build([("none", none), ("some", some)])
    feeds = {"x": np.random.default_rng().standard_normal((3, 5)).astype(np.float32)}
    got = run_onnxruntime(to_onnx(graph), feeds)
    assert got["none"].shape == (3, 5)
    for d in diff_outputs(got, run_graph(graph, feeds)):
        assert d.rel <= RTOL, d


def test_dtype_numbers_are_onnx_element_types() -> None:
    """korch.ir.types writes ONNX's element-type numbers out (the IR must load without onnx)."""
    from onnx import TensorProto

    from korch.ir.types import DType

    for dtype in DType:
        name = {"FLOAT32": "FLOAT", "FLOAT64": "DOUBLE"}.get(dtype.name, dtype.name)
        assert dtype.onnx == getattr(TensorProto, name)
        assert DType.from_onnx(dtype.onnx) is dtype
    with pytest.raises(ValueError, match="element type STRING is not supported"):
        DType.from_onnx(TensorProto.STRING)
