"""A stable, readable text form of a primitive graph (for diffs, tests and `korch fission --dump`)."""

from __future__ import annotations

from korch.ir.graph import Graph, Node
from korch.ir.opaque import is_opaque, short_attrs


def dump(graph: Graph) -> str:
    lines = [f"graph {graph.name} {{"]
    for name in graph.inputs:
        lines.append(f"  input {name}: {graph.types[name]}")
    for name, array in graph.constants.items():
        lines.append(f"  const {name}: {graph.types[name]}")
    for node in graph.nodes:
        attrs = f"[{attrs_text(node)}]" if len(node.attrs) else ""
        args = ", ".join(node.inputs)
        origin = f"  # {node.origin}" if node.origin else ""
        lines.append(f"  {node.output}: {graph.types[node.output]} = {node.op}{attrs}({args}){origin}")
    lines.append(f"  return {', '.join(graph.outputs)}")
    lines.append("}")
    return "\n".join(lines) + "\n"


def attrs_text(node: Node) -> str:
    """A primitive's attributes as text; an opaque one's serialized ONNX node as its op and attributes."""
    return short_attrs(node) if is_opaque(node) else repr(node.attrs)
