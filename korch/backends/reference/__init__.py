"""The reference backend: runs a primitive graph with numpy. Used to check, never for speed."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from korch.backends.reference import opaque as _opaque  # noqa: F401  (registers the opaque kernel)
from korch.backends.reference.kernels import KERNELS
from korch.ir.graph import Graph, Node
from korch.ir.types import TensorType


def evaluate(node: Node, inputs: Sequence[np.ndarray], dtype: np.dtype | None = None) -> np.ndarray:
    """Run one primitive on numpy arrays. Accumulating kernels work in float64 for float32 inputs;
    the result is rounded to `dtype` (default: float32 again when the inputs were float32)."""
    with np.errstate(all="ignore"):
        result = np.asarray(KERNELS[node.op](inputs, node.attrs))
    if dtype is None and result.dtype == np.float64 and inputs and inputs[0].dtype == np.float32:
        dtype = np.dtype(np.float32)
    return result.astype(dtype, copy=False) if dtype is not None else result


def conform(array: np.ndarray, t: TensorType) -> np.ndarray:
    """`array` (already of t's dtype) in t's shape; a data-dependent shape is checked, not imposed."""
    if t.is_static:
        return array.reshape(t.shape)
    if not t.admits(array.shape):
        raise ValueError(f"a value of shape {array.shape} is not a {t}")
    return array


def run_graph(graph: Graph, feeds: Mapping[str, np.ndarray], intermediate: bool = False,
              also: Iterable[str] = ()) -> dict[str, np.ndarray]:
    """Run `graph` on `feeds`. Returns the graph outputs and the values named in `also` (the rest are
    freed once used), or every value when `intermediate`."""
    missing = [name for name in graph.inputs if name not in feeds]
    if missing:
        raise ValueError(f"missing feeds for graph inputs: {', '.join(missing)}")
    env: dict[str, np.ndarray] = dict(graph.constants)
    for name in graph.inputs:
        env[name] = np.asarray(feeds[name], dtype=graph.types[name].dtype.numpy)
    last_use = {i: k for k, n in enumerate(graph.nodes) for i in n.inputs}
    wanted = set(graph.outputs) | set(also)
    keep = wanted | set(graph.constants) | set(graph.inputs)
    for k, node in enumerate(graph.nodes):
        out_type = graph.types[node.output]
        env[node.output] = conform(evaluate(node, [env[i] for i in node.inputs], out_type.dtype.numpy), out_type)
        if not intermediate:
            for i in dict.fromkeys(node.inputs):        # x * x reads x twice: free it once
                if last_use[i] == k and i not in keep:
                    del env[i]
    if intermediate:
        return env
    return {name: env[name] for name in wanted}
