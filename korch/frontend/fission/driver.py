"""Runs the fission rules over a loaded ONNX model and returns the primitive graph."""

from __future__ import annotations

import logging

import numpy as np
import onnx
from onnx import numpy_helper

from korch.backends.reference import evaluate
from korch.errors import ModelLoadError, UnsupportedError
from korch.frontend.fission import RULES, FissionContext, FissionError, OnnxNode, load_rules
from korch.ir.check import check_graph
from korch.ir.graph import Graph, GraphBuilder, Node, Value
from korch.ir.ops import IRError
from korch.ir.types import DType, TensorType

log = logging.getLogger("korch.fission")

DEFAULT_DOMAINS = ("", "ai.onnx")


def _fold(node: Node, arrays: list[np.ndarray]) -> np.ndarray:
    return evaluate(node, arrays)


def _describe(node: onnx.NodeProto) -> str:
    domain = f"{node.domain}." if node.domain not in DEFAULT_DOMAINS else ""
    return f"node {node.name or '<unnamed>'!r} ({domain}{node.op_type})"


def fission_graph(model: onnx.ModelProto) -> Graph:
    """Fission every node of `model` (static input shapes, checked) into a primitive graph.

    All unsupported nodes are reported together in one UnsupportedError.
    """
    return fission_with_value_map(model)[0]


def fission_with_value_map(model: onnx.ModelProto) -> tuple[Graph, dict[str, str]]:
    """Like fission_graph, and also which primitive-graph value each ONNX value became
    (ONNX name -> value name; constants included, values that became dead are left out)."""
    load_rules()
    opset = next((o.version for o in model.opset_import if o.domain in DEFAULT_DOMAINS), 0)
    g = model.graph
    builder = GraphBuilder(g.name or "model", fold=_fold)
    values: dict[str, Value] = {}
    for init in g.initializer:
        values[init.name] = builder.add_constant(numpy_helper.to_array(init), name=init.name)
    for inp in g.input:
        if inp.name in values:
            continue
        t = inp.type.tensor_type
        shape = tuple(d.dim_value for d in t.shape.dim)
        values[inp.name] = builder.add_input(inp.name, TensorType(shape, DType.from_onnx(t.elem_type)))

    failures: list[str] = []
    poisoned: set[str] = set()
    for proto in g.node:
        names = [i for i in proto.input]
        if any(i in poisoned for i in names):
            poisoned.update(proto.output)
            continue
        rule = RULES.get(proto.op_type) if proto.domain in DEFAULT_DOMAINS else None
        if rule is None:
            failures.append(f"{_describe(proto)}: no fission rule for this op")
            poisoned.update(proto.output)
            continue
        node = OnnxNode(proto, opset, tuple(values[i] if i else None for i in names))
        ctx = FissionContext(builder, proto.name or proto.output[0])
        try:
            outputs = list(rule(ctx, node))
        except FissionError as e:
            failures.append(f"{_describe(proto)}: {e}")
            poisoned.update(proto.output)
            continue
        except IRError as e:
            raise ModelLoadError(f"{_describe(proto)}: {e}") from None
        if len(outputs) < len(proto.output):
            outputs += [None] * (len(proto.output) - len(outputs))
        for name, value in zip(proto.output, outputs):
            if name and value is not None:
                values[name] = value
            elif name:
                poisoned.add(name)
    if failures:
        raise UnsupportedError(f"{len(failures)} node(s) cannot be fissioned:\n  " + "\n  ".join(failures))

    missing = [o.name for o in g.output if o.name not in values]
    if missing:
        raise ModelLoadError(f"graph outputs {missing} are not produced by any node")
    graph = builder.build([(o.name, values[o.name]) for o in g.output])
    log.debug("fission: %d ONNX nodes -> %d primitives", len(g.node), len(graph.nodes))
    value_map = {}
    for onnx_name, value in values.items():
        name = builder.renamed.get(value.name, value.name)
        if name in graph.types:
            value_map[onnx_name] = name
    return check_graph(graph), value_map
