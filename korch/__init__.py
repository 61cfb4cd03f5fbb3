"""korch: optimal kernel orchestration for ONNX inference graphs (after Korch, ASPLOS 2024)."""

import os as _os
import sys as _sys

# A plan runs Inductor (OpenMP) kernels next to onnxruntime ones. libgomp's default busy-wait of
# 300,000 spins after each parallel region keeps both cores busy while the next onnxruntime kernel
# runs: candy's plan took 81.7 ms with 1,000,000 spins, 55.2 ms with 100,000, 49.4 ms with 10,000
# (its kernels' profiled sum: 43.1 ms); torch.compile of the whole candy model runs at the same
# speed with 10,000 (43.1 ms) as with the default (43.2 ms). libgomp reads this when torch loads,
# so it only takes effect if korch is imported first; a value the user set is kept.
OPENMP_SPIN_COUNT = "10000"
if "torch" not in _sys.modules:
    _os.environ.setdefault("GOMP_SPINCOUNT", OPENMP_SPIN_COUNT)

from korch.api import compile, load, optimize, save
from korch.errors import KorchError
from korch.frontend import fission, load_model
from korch.ir import DType, Graph, PrimClass, TensorType
from korch.verify import VerifyReport, verify_graph

__version__ = "0.1.0"
__all__ = ["DType", "Graph", "KorchError", "PrimClass", "TensorType", "VerifyReport", "compile", "fission", "load",
           "load_model", "optimize", "save", "verify_graph"]
