"""The primitive IR: typed, immutable graphs of tensor-algebra primitives."""

from korch.ir.graph import Attrs, Graph, GraphBuilder, Node, Value
from korch.ir.ops import OPS, IRError, PrimClass
from korch.ir.types import DType, TensorType

__all__ = ["OPS", "Attrs", "DType", "Graph", "GraphBuilder", "IRError", "Node", "PrimClass", "TensorType", "Value"]
