"""Opaque primitives: one output of an ONNX node korch has no fission rule for, kept as the node itself.

What an opaque primitive computes is the ONNX op as onnxruntime runs it: the reference backend runs
the node alone, as a one-node model, in onnxruntime. Its attributes hold the node serialized with its
name cleared and its inputs and outputs renamed to positional placeholders, so identical nodes in
different places have equal attributes (and so equal structural keys). An omitted optional input
keeps its empty slot in the node; the primitive's inputs are the node's present inputs, in order.
An ONNX node with k used outputs becomes k opaque primitives, one per output `index`.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import onnx
from onnx import helper

from korch.ir.graph import Node
from korch.ir.ops import IRError
from korch.ir.types import DType, TensorType

OPAQUE = "opaque"
DEFAULT_DOMAIN = ""
_DEFAULT_DOMAINS = ("", "ai.onnx")
# Ops whose outputs are random draws: never folded to constants (a constant would freeze one draw).
NONDETERMINISTIC_OPS = frozenset({"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
                                  "Bernoulli", "Multinomial"})


def normal_domain(domain: str) -> str:
    return DEFAULT_DOMAIN if domain in _DEFAULT_DOMAINS else domain


def _input_placeholder(position: int) -> str:
    return f"in{position}"


def _output_placeholder(position: int) -> str:
    return f"out{position}"


def encode_node(proto: onnx.NodeProto) -> str:
    """The node without its name, doc string or value names (placeholders by position), as base64."""
    node = onnx.NodeProto()
    node.CopyFrom(proto)
    node.name = ""
    node.doc_string = ""
    del node.metadata_props[:]
    node.domain = normal_domain(node.domain)
    node.input[:] = [_input_placeholder(k) if name else "" for k, name in enumerate(proto.input)]
    node.output[:] = [_output_placeholder(k) if name else "" for k, name in enumerate(proto.output)]
    return base64.b64encode(node.SerializeToString(deterministic=True)).decode("ascii")


def opaque_attrs(proto: onnx.NodeProto, index: int, opsets: Mapping[str, int], out_type: TensorType) -> dict[str, Any]:
    """The attributes of the opaque primitive computing output `index` of `proto`.

    `opsets` is the model's opset import (domain -> version); the node keeps the default domain's
    and its own domain's, the ones its meaning depends on."""
    domain = normal_domain(proto.domain)
    needed = {normal_domain(d): v for d, v in opsets.items() if normal_domain(d) in (DEFAULT_DOMAIN, domain)}
    return {"op_type": proto.op_type, "domain": domain, "index": index,
            "opsets": tuple(f"{d}:{v}" for d, v in sorted(needed.items())),
            "node": encode_node(proto), "shape": out_type.shape, "dtype": out_type.dtype}


def opsets_of(attrs: Mapping[str, Any]) -> dict[str, int]:
    """The opset versions an opaque node was written against (domain -> version)."""
    pairs = (entry.rpartition(":") for entry in attrs["opsets"])
    return {domain: int(version) for domain, _, version in pairs}


def decode_node(attrs: Mapping[str, Any]) -> onnx.NodeProto:
    return onnx.NodeProto.FromString(base64.b64decode(attrs["node"]))


def bind_node(attrs: Mapping[str, Any], inputs: Sequence[str], output_name: Callable[[int], str],
              name: str = "") -> onnx.NodeProto:
    """The original node with `inputs` in its present input slots (in order) and output k named
    `output_name(k)` (omitted outputs stay omitted)."""
    node = decode_node(attrs)
    slots = sum(1 for slot in node.input if slot)
    if slots != len(inputs):
        raise IRError(f"opaque {attrs['op_type']}: {len(inputs)} inputs for a node with {slots} present inputs")
    present = iter(inputs)
    node.input[:] = [next(present) if slot else "" for slot in node.input]
    node.output[:] = [output_name(k) if slot else "" for k, slot in enumerate(node.output)]
    node.name = name
    return node


def one_node_output(index: int) -> str:
    return f"y{index}"


def one_node_model(attrs: Mapping[str, Any], input_dtypes: Sequence[DType]) -> onnx.ModelProto:
    """The node alone as a model: inputs x0, x1, ... (of unknown shape), output k named one_node_output(k)."""
    inputs = [f"x{k}" for k in range(len(input_dtypes))]
    node = bind_node(attrs, inputs, one_node_output, name=attrs["op_type"])
    outputs = [helper.make_empty_tensor_value_info(o) for o in node.output if o]
    graph = helper.make_graph([node], "opaque", [helper.make_tensor_value_info(n, d.onnx, None)
                                                 for n, d in zip(inputs, input_dtypes)], outputs)
    opsets = [helper.make_opsetid(d, v) for d, v in opsets_of(attrs).items()]
    model = helper.make_model(graph, opset_imports=opsets, producer_name="korch-opaque")
    model.ir_version = helper.find_min_ir_version_for(opsets, ignore_unknown=True)
    return model


def is_opaque(node: Node) -> bool:
    return node.op == OPAQUE


def describe(node: Node) -> str:
    """'TopK' or 'com.microsoft.Gelu', with the output index when it is not the first."""
    attrs = node.attrs
    name = f"{attrs['domain']}.{attrs['op_type']}" if attrs["domain"] else attrs["op_type"]
    return name if attrs["index"] == 0 else f"{name} output {attrs['index']}"


def short_attrs(node: Node) -> str:
    """The attributes as text, the serialized node shown as its op and ONNX attributes:
    "TopK(axis=1, largest=1, sorted=1) output 1; opsets :17"."""
    attrs = node.attrs
    proto = decode_node(attrs)
    onnx_attrs = ", ".join(f"{a.name}={_attr_text(helper.get_attribute_value(a))}" for a in proto.attribute)
    name = f"{attrs['domain']}.{attrs['op_type']}" if attrs["domain"] else attrs["op_type"]
    return f"{name}({onnx_attrs}) output {attrs['index']}; opsets {' '.join(attrs['opsets'])}"


def _attr_text(value: Any) -> str:
    if isinstance(value, bytes):
        return repr(value.decode(errors="replace"))
    if isinstance(value, onnx.TensorProto):
        return f"tensor{list(value.dims)}"
    if isinstance(value, list):
        return "[" + ",".join(_attr_text(v) for v in value) + "]"
    return repr(value) if isinstance(value, str) else str(value)
