"""The reference meaning of an opaque primitive: the original ONNX node, run alone in onnxruntime.

An opaque primitive is an ONNX node korch has no fission rule for, so its definition is the ONNX op
as onnxruntime runs it. It runs with the dtypes the node declares (not in float64, as accumulating
primitives do here): one session per distinct node and input dtypes, kept for the process.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

import numpy as np

from korch.backends.reference.kernels import kernel
from korch.ir.opaque import OPAQUE, one_node_model, one_node_output
from korch.ir.types import DType

# Distinct opaque nodes (by structure and input dtypes) whose sessions are kept; a model has a few.
SESSION_CACHE_SIZE = 256
# One thread: the reference is for checks, and a single thread gives the same result every run.
REFERENCE_THREADS = 1


@lru_cache(maxsize=SESSION_CACHE_SIZE)
def _session(node: str, opsets: tuple[str, ...], op_type: str, input_dtypes: tuple[DType, ...]) -> Any:
    import onnxruntime as ort

    model = one_node_model({"node": node, "opsets": opsets, "op_type": op_type}, input_dtypes)
    options = ort.SessionOptions()
    options.intra_op_num_threads = REFERENCE_THREADS
    options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL   # the op as written
    options.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


@kernel(OPAQUE)
def _opaque(xs: Sequence[np.ndarray], attrs: Mapping[str, Any]) -> np.ndarray:
    dtypes = tuple(DType.from_numpy(x.dtype) for x in xs)
    session = _session(attrs["node"], attrs["opsets"], attrs["op_type"], dtypes)
    feeds = {f"x{k}": np.asarray(x, order="C") for k, x in enumerate(xs)}
    (result,) = session.run([one_node_output(attrs["index"])], feeds)
    return np.asarray(result, dtype=attrs["dtype"].numpy)
