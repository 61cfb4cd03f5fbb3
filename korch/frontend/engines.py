"""Which ONNX ops an ONNX engine can run: the ONNX standard's, and onnxruntime's own (contrib) ops.

A node korch cannot fission stays whole, as an opaque node, when an engine runs it. A node in a
domain neither defines (a made-up custom op) makes the model unsupported: nothing could run it.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache

import onnx

from korch.errors import UnsupportedError
from korch.ir.opaque import normal_domain


@lru_cache(maxsize=1)
def _onnxruntime_ops() -> frozenset[tuple[str, str]]:
    """(domain, op type) of every operator schema onnxruntime registers (contrib ops included)."""
    from onnxruntime.capi import _pybind_state

    return frozenset((normal_domain(s.domain), s.name) for s in _pybind_state.get_all_operator_schema())


def is_standard(node: onnx.NodeProto) -> bool:
    """An op of the ONNX standard (any domain onnx defines schemas for: ai.onnx, ai.onnx.ml, ...)."""
    return onnx.defs.has(node.op_type, normal_domain(node.domain))


def engine_runs(node: onnx.NodeProto) -> bool:
    return is_standard(node) or (normal_domain(node.domain), node.op_type) in _onnxruntime_ops()


def node_key(node: onnx.NodeProto) -> str:
    """How korch names an ONNX node (primitive origins, regions): its name, else its first output.
    load_model makes these unique."""
    return node.name or (node.output[0] if node.output else "")


def describe_node(node: onnx.NodeProto) -> str:
    domain = f"{node.domain}." if normal_domain(node.domain) else ""
    return f"node {node.name or '<unnamed>'!r} ({domain}{node.op_type})"


def unrunnable_nodes(nodes: Iterable[onnx.NodeProto]) -> list[onnx.NodeProto]:
    return [n for n in nodes if not engine_runs(n)]


def unrunnable_error(nodes: Iterable[onnx.NodeProto]) -> UnsupportedError:
    """One error naming every node no engine can run."""
    lines = [f"{describe_node(n)}: neither the ONNX standard nor onnxruntime defines this op" for n in nodes]
    return UnsupportedError(f"{len(lines)} node(s) no ONNX engine can run, so korch can neither fission them nor "
                            "keep them as opaque nodes:\n  " + "\n  ".join(lines))
