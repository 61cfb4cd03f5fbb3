"""Runs the fission rules over a loaded ONNX model and returns the primitive graph.

A node korch cannot fission (no rule, a rule that refuses it, or an input of data-dependent shape)
stays whole as opaque primitives, one per used output, that only an ONNX engine runs; everything
around it is fissioned as usual. With `strict`, such nodes are refused instead, all of them listed.
A node no ONNX engine can run, or whose outputs ONNX shape inference cannot type, is always refused.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import numpy_helper

from korch.backends.reference import evaluate
from korch.errors import ModelLoadError, UnsupportedError
from korch.frontend.engines import describe_node, engine_runs, node_key, unrunnable_error
from korch.frontend.fission import RULES, FissionContext, FissionError, OnnxNode, load_rules
from korch.ir.check import check_graph
from korch.ir.graph import Graph, GraphBuilder, Node, Value
from korch.ir.opaque import NONDETERMINISTIC_OPS, OPAQUE, normal_domain, opaque_attrs
from korch.ir.ops import IRError
from korch.ir.types import UNKNOWN_DIM, DType, TensorType

log = logging.getLogger("korch.fission")

DEFAULT_DOMAINS = ("", "ai.onnx")
NO_RULE = "no fission rule for this op"


@dataclass(frozen=True)
class OpaqueNode:
    """An ONNX node kept whole: only an ONNX engine runs it. `reason`: why it was not fissioned."""

    name: str
    op_type: str
    domain: str
    reason: str


@dataclass(frozen=True)
class Fissioned:
    graph: Graph
    value_map: dict[str, str]            # ONNX value name -> primitive-graph value name
    opaque: tuple[OpaqueNode, ...]


def _fold(node: Node, arrays: list[np.ndarray]) -> np.ndarray:
    if node.op != OPAQUE:
        return evaluate(node, arrays)
    try:
        return evaluate(node, arrays)
    except Exception as e:  # onnxruntime raises its own types; the node is the user's to look at
        raise UnsupportedError(f"node {node.origin!r} ({node.attrs['op_type']}) has constant inputs, but "
                               f"onnxruntime cannot run it: {type(e).__name__}: {e}") from None


def fission_graph(model: onnx.ModelProto, strict: bool = False) -> Graph:
    """Fission every node of `model` (static input shapes, checked) into a primitive graph."""
    return fission_model(model, strict).graph


def fission_with_value_map(model: onnx.ModelProto, strict: bool = False) -> tuple[Graph, dict[str, str]]:
    """Like fission_graph, and also which primitive-graph value each ONNX value became
    (ONNX name -> value name; constants included, values that became dead are left out)."""
    result = fission_model(model, strict)
    return result.graph, result.value_map


def _start(model: onnx.ModelProto) -> tuple[GraphBuilder, dict[str, Value]]:
    g = model.graph
    builder = GraphBuilder(g.name or "model", fold=_fold)
    values: dict[str, Value] = {}
    for init in g.initializer:
        # to_array gives a fresh array, or a read-only view of bytes it read for it: korch's alone
        values[init.name] = builder.add_constant(numpy_helper.to_array(init), name=init.name, owned=True)
    for inp in g.input:
        if inp.name in values:
            continue
        t = inp.type.tensor_type
        shape = tuple(d.dim_value for d in t.shape.dim)
        values[inp.name] = builder.add_input(inp.name, TensorType(shape, DType.from_onnx(t.elem_type)))
    return builder, values


def fission_model(model: onnx.ModelProto, strict: bool = False) -> Fissioned:
    """Fission `model` (loaded by load_model: static input shapes, checked, shapes inferred).

    Refused nodes are reported together in one UnsupportedError."""
    load_rules()
    opsets = {normal_domain(o.domain): o.version for o in model.opset_import}
    g = model.graph
    builder, values = _start(model)
    onnx_types = _onnx_types(model)
    used = {i for n in g.node for i in n.input} | {o.name for o in g.output}
    refused: list[str] = []
    unrunnable: list[onnx.NodeProto] = []
    opaque: list[OpaqueNode] = []
    poisoned: set[str] = set()
    for proto in g.node:
        if any(i in poisoned for i in proto.input):
            poisoned.update(proto.output)
            continue
        inputs = tuple(values[i] if i else None for i in proto.input)
        outputs, reason = _fission_node(builder, proto, opsets.get("", 0), inputs)
        if outputs is None and strict:
            refused.append(f"{describe_node(proto)}: {reason}")
        elif outputs is None and not engine_runs(proto):
            unrunnable.append(proto)
        elif outputs is None:
            try:
                outputs = _emit_opaque(builder, proto, inputs, opsets, onnx_types, used)
            except UnsupportedError as e:
                refused.append(str(e))
            else:
                opaque.append(OpaqueNode(proto.name, proto.op_type, normal_domain(proto.domain), reason))
        if outputs is None:
            poisoned.update(proto.output)
        else:
            _record(proto, outputs, values, poisoned)
    _refuse(refused, unrunnable, strict)
    for node in opaque:
        log.info("opaque: %s (%s): %s", node.name, node.op_type, node.reason)

    missing = [o.name for o in g.output if o.name not in values]
    if missing:
        raise ModelLoadError(f"graph outputs {missing} are not produced by any node")
    graph = builder.build([(o.name, values[o.name]) for o in g.output])
    log.debug("fission: %d ONNX nodes -> %d primitives, %d opaque nodes", len(g.node), len(graph.nodes), len(opaque))
    value_map = {}
    for onnx_name, value in values.items():
        name = builder.renamed.get(value.name, value.name)
        if name in graph.types:
            value_map[onnx_name] = name
    return Fissioned(check_graph(graph), value_map, tuple(opaque))


def _record(proto: onnx.NodeProto, outputs: list[Value | None], values: dict[str, Value], poisoned: set[str]) -> None:
    """Name the node's output values; an output a rule did not produce cannot be read."""
    outputs = outputs + [None] * (len(proto.output) - len(outputs))
    for name, value in zip(proto.output, outputs):
        if name and value is not None:
            values[name] = value
        elif name:
            poisoned.add(name)


def _refuse(refused: Sequence[str], unrunnable: Sequence[onnx.NodeProto], strict: bool) -> None:
    if unrunnable:
        raise unrunnable_error(unrunnable)
    if refused and strict:
        raise UnsupportedError(f"{len(refused)} node(s) cannot be fissioned:\n  " + "\n  ".join(refused))
    if refused:
        raise UnsupportedError(f"{len(refused)} node(s) can be neither fissioned nor kept as opaque nodes:\n  "
                               + "\n  ".join(refused))


def _fission_node(builder: GraphBuilder, proto: onnx.NodeProto, opset: int, inputs: tuple[Value | None, ...],
                  ) -> tuple[list[Value | None] | None, str]:
    """The node's outputs from its fission rule, or None and the reason there are none."""
    rule = RULES.get(proto.op_type) if proto.domain in DEFAULT_DOMAINS else None
    if rule is None:
        return None, NO_RULE
    dynamic = next((v for v in inputs if v is not None and not v.type.is_static), None)
    if dynamic is not None:
        return None, f"input {dynamic.name!r} has a data-dependent shape ({dynamic.type})"
    ctx = FissionContext(builder, node_key(proto))
    try:
        return list(rule(ctx, OnnxNode(proto, opset, inputs))), ""
    except FissionError as e:
        return None, str(e)
    except IRError as e:
        raise ModelLoadError(f"{describe_node(proto)}: {e}") from None


def _emit_opaque(builder: GraphBuilder, proto: onnx.NodeProto, inputs: tuple[Value | None, ...],
                 opsets: Mapping[str, int], onnx_types: Mapping[str, onnx.TypeProto], used: set[str],
                 ) -> list[Value | None]:
    """One opaque primitive per used output of the node, emitted one after another."""
    captured = sorted(_captured_names(proto))
    if captured:
        raise UnsupportedError(f"{describe_node(proto)}: its subgraph reads {captured[:3]} from the enclosing "
                               "graph, so it cannot run alone as an opaque node")
    types = {k: _tensor_type(proto, name, onnx_types) for k, name in enumerate(proto.output) if name and name in used}
    present = [v for v in inputs if v is not None]
    foldable = proto.op_type not in NONDETERMINISTIC_OPS
    outputs: list[Value | None] = [None] * len(proto.output)
    for k, out_type in types.items():
        attrs = opaque_attrs(proto, k, opsets, out_type)
        outputs[k] = builder.emit(OPAQUE, present, attrs, node_key(proto), foldable=foldable)
    return outputs


def _captured_names(proto: onnx.NodeProto) -> set[str]:
    """Values a node's subgraphs (If, Loop, Scan bodies) read from outside themselves."""
    captured: set[str] = set()
    for attr in proto.attribute:
        for sub in [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs):
            defined = {v.name for v in sub.input} | {t.name for t in sub.initializer}
            defined |= {o for n in sub.node for o in n.output}
            for node in sub.node:
                captured |= {i for i in node.input if i and i not in defined}
                captured |= _captured_names(node) - defined
    return captured


def _onnx_types(model: onnx.ModelProto) -> dict[str, onnx.TypeProto]:
    g = model.graph
    return {v.name: v.type for v in list(g.input) + list(g.value_info) + list(g.output)}


def _tensor_type(proto: onnx.NodeProto, name: str, types: Mapping[str, onnx.TypeProto]) -> TensorType:
    """An opaque node's output type, from shape inference; a dim it cannot tell is UNKNOWN_DIM."""
    where = f"{describe_node(proto)}: output {name!r}"
    tp = types.get(name)
    if tp is None or not tp.HasField("tensor_type") or not tp.tensor_type.elem_type:
        raise UnsupportedError(f"{where} is not a tensor of known element type after shape inference")
    if not tp.tensor_type.HasField("shape"):
        raise UnsupportedError(f"{where} has an unknown rank after shape inference")
    try:
        dtype = DType.from_onnx(tp.tensor_type.elem_type)
    except ValueError as e:
        raise UnsupportedError(f"{where}: {e}") from None
    dims = tuple(d.dim_value if d.HasField("dim_value") else UNKNOWN_DIM for d in tp.tensor_type.shape.dim)
    return TensorType(dims, dtype)
