"""The front end: ONNX import and operator fission into the primitive IR.

Its modules are imported on first use (`korch.frontend.regions`, which a saved plan needs, should not
load fission and the reference kernels)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from korch.frontend.onnx_import import ModelSource
    from korch.ir.graph import Graph

_LAZY = {"fission_graph": "korch.frontend.fission.driver", "load_model": "korch.frontend.onnx_import",
         "parse_input_shape": "korch.frontend.onnx_import"}


def fission(source: ModelSource, input_shapes: Mapping[str, Sequence[int]] | None = None,
            strict: bool = False) -> Graph:
    """Load an ONNX model (path or ModelProto) and fission it into a checked primitive graph.
    Nodes korch cannot fission stay whole (opaque primitives); `strict` refuses them instead."""
    from korch.frontend.fission.driver import fission_graph
    from korch.frontend.onnx_import import load_model

    return fission_graph(load_model(source, input_shapes), strict)


def __getattr__(name: str) -> object:
    if name not in _LAZY:
        raise AttributeError(f"module 'korch.frontend' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value
    return value


__all__ = ["fission", "fission_graph", "load_model", "parse_input_shape"]
