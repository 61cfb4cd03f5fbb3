"""The front end: ONNX import and operator fission into the primitive IR."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from korch.frontend.fission.driver import fission_graph
from korch.frontend.onnx_import import ModelSource, load_model, parse_input_shape
from korch.ir.graph import Graph


def fission(source: ModelSource, input_shapes: Mapping[str, Sequence[int]] | None = None,
            strict: bool = False) -> Graph:
    """Load an ONNX model (path or ModelProto) and fission it into a checked primitive graph.
    Nodes korch cannot fission stay whole (opaque primitives); `strict` refuses them instead."""
    return fission_graph(load_model(source, input_shapes), strict)


__all__ = ["fission", "fission_graph", "load_model", "parse_input_shape"]
