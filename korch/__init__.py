"""korch: optimal kernel orchestration for ONNX inference graphs (after Korch, ASPLOS 2024)."""

from korch.errors import KorchError
from korch.frontend import fission, load_model
from korch.ir import DType, Graph, PrimClass, TensorType
from korch.verify import VerifyReport, verify_graph

__version__ = "0.1.0"
__all__ = ["DType", "Graph", "KorchError", "PrimClass", "TensorType", "VerifyReport", "fission", "load_model",
           "verify_graph"]
