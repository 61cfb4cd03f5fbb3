"""IR invariants. `check_graph` is run after every stage in tests and before a graph leaves a stage.

Beyond well-formedness: a value of data-dependent shape (an opaque primitive's output with unknown
dims) is read only by opaque primitives and by output copies.
"""

from __future__ import annotations

from korch.ir.graph import Graph, Node
from korch.ir.opaque import OPAQUE
from korch.ir.ops import OPS, IRError, infer_type
from korch.ir.types import DType


def graph_problems(graph: Graph) -> list[str]:
    """Every violated invariant, as readable sentences (empty when the graph is well-formed)."""
    problems: list[str] = []
    defined: set[str] = set()

    def define(name: str, what: str) -> None:
        if name in defined:
            problems.append(f"{what} {name!r} is defined more than once")
        if name not in graph.types:
            problems.append(f"{what} {name!r} has no type")
        defined.add(name)

    for name in graph.inputs:
        define(name, "input")
        if name in graph.types and not graph.types[name].is_static:
            problems.append(f"input {name!r} has a data-dependent shape {graph.types[name]}")
    for name, array in graph.constants.items():
        define(name, "constant")
        t = graph.types.get(name)
        if t is not None and (tuple(array.shape) != t.shape or DType.from_numpy(array.dtype) != t.dtype):
            problems.append(f"constant {name!r} is {array.dtype}{list(array.shape)} but typed {t}")
        if array.flags.writeable:
            problems.append(f"constant {name!r} is writeable")
    for node in graph.nodes:
        where = f"node {node.output!r} ({node.op}, from {node.origin or '?'})"
        if node.op not in OPS:
            problems.append(f"{where}: unknown primitive")
            continue
        for i in node.inputs:
            if i not in defined:
                problems.append(f"{where}: input {i!r} is not defined before use")
        if any(i not in graph.types for i in node.inputs):
            continue
        dynamic = [i for i in node.inputs if not graph.types[i].is_static]
        if dynamic and not _may_read_dynamic(node, graph):
            problems.append(f"{where}: input {dynamic[0]!r} has a data-dependent shape; only opaque primitives "
                            "(and output copies) take such values")
        try:
            expected = infer_type(node.op, [graph.types[i] for i in node.inputs], node.attrs)
        except IRError as e:
            problems.append(f"{where}: {e}")
        else:
            if graph.types.get(node.output) != expected:
                problems.append(f"{where}: typed {graph.types.get(node.output)} but infers {expected}")
        define(node.output, "node output")
    for name in graph.outputs:
        if name not in defined:
            problems.append(f"graph output {name!r} is not defined")
    if len(set(graph.outputs)) != len(graph.outputs):
        problems.append("graph outputs repeat a name")
    needed = set(graph.outputs)
    for node in reversed(graph.nodes):
        if node.output not in needed:
            problems.append(f"node {node.output!r} ({node.op}) is dead: no graph output depends on it")
        needed.update(node.inputs)
    stray = set(graph.types) - defined
    if stray:
        problems.append(f"types given for undefined values: {sorted(stray)[:5]}")
    return problems


def _may_read_dynamic(node: Node, graph: Graph) -> bool:
    """Opaque primitives, and a reshape to the input's own type (the copy GraphBuilder.build adds)."""
    if node.op == OPAQUE:
        return True
    return node.op == "reshape" and node.attrs["shape"] == graph.types[node.inputs[0]].shape


def check_graph(graph: Graph) -> Graph:
    """Raise IRError listing every problem; return the graph unchanged when it is well-formed."""
    problems = graph_problems(graph)
    if problems:
        raise IRError(f"graph {graph.name!r} violates IR invariants:\n  " + "\n  ".join(problems))
    return graph
