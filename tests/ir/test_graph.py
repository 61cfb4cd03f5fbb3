"""The primitive graph: builder folding, output naming, dead-code removal, invariants, text dump."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from korch.backends.reference import evaluate, run_graph
from korch.ir.check import check_graph, graph_problems
from korch.ir.graph import Attrs, GraphBuilder, Node
from korch.ir.ops import IRError, PrimClass
from korch.ir.text import dump
from korch.ir.types import DType, TensorType

F32 = DType.FLOAT32


def _builder() -> GraphBuilder:
    return GraphBuilder("g", fold=lambda node, arrays: evaluate(node, arrays))


def test_constant_primitives_fold_and_inputs_do_not() -> None:
    b = _builder()
    x = b.add_input("x", TensorType((2, 3), F32))
    c = b.add_constant(np.arange(3, dtype=np.float32))
    doubled = b.emit("mul", [c, b.add_constant(np.array(2.0, np.float32))])
    assert b.constant_value(doubled.name) is not None
    y = b.emit("add", [x, doubled])
    graph = check_graph(b.build([("y", y)]))
    assert [n.op for n in graph.nodes] == ["add"]
    feed = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    np.testing.assert_array_equal(run_graph(graph, {"x": feed})["y"], feed + 2 * np.arange(3, dtype=np.float32))


def test_a_transposed_constant_is_a_view_of_it_and_computes_the_same() -> None:
    """A folded transpose of a constant shares its memory (gpt2-small's tied token embedding, read
    whole by a Gather and transposed by the logits' MatMul, was held twice); other folds copy."""
    rng = np.random.default_rng()
    w = rng.standard_normal((5, 3)).astype(np.float32)
    b = _builder()
    x = b.add_input("x", TensorType((2, 3), F32))
    weight = b.add_constant(w, name="w")
    wt = b.emit("transpose", [weight], {"perm": (1, 0)})
    doubled = b.emit("mul", [weight, b.add_constant(np.array(2.0, np.float32))])
    y = b.emit("matmul", [b.emit("matmul", [x, wt]), doubled])
    graph = check_graph(b.build([("y", y), ("w_out", weight)]))
    held = graph.constants["w"]
    assert np.shares_memory(graph.constants[wt.name], held)
    assert not np.shares_memory(graph.constants[doubled.name], held)
    assert not graph.constants[wt.name].flags.writeable
    feed = rng.standard_normal((2, 3)).astype(np.float32)
    np.testing.assert_allclose(run_graph(graph, {"x": feed})["y"], (feed @ w.T) @ (2 * w), rtol=1e-5)


def test_small_constants_are_shared_by_value() -> None:
    b = _builder()
    one = b.add_constant(np.array(1.0, np.float32))
    assert b.add_constant(np.array(1.0, np.float32)).name == one.name
    assert b.add_constant(np.array(1, np.int64)).name != one.name


def test_outputs_take_public_names_and_dead_nodes_go() -> None:
    b = _builder()
    x = b.add_input("x", TensorType((4,), F32))
    r = b.emit("relu", [x])
    b.emit("exp", [x])                          # dead
    graph = check_graph(b.build([("out", r), ("same", r), ("passthrough", x)]))
    assert graph.outputs == ("out", "same", "passthrough")
    assert [n.op for n in graph.nodes] == ["relu", "reshape", "reshape"]
    feed = np.random.default_rng(1).standard_normal(4).astype(np.float32)
    result = run_graph(graph, {"x": feed})
    np.testing.assert_array_equal(result["same"], np.maximum(feed, 0))
    np.testing.assert_array_equal(result["passthrough"], feed)


def test_checker_reports_every_problem() -> None:
    b = _builder()
    x = b.add_input("x", TensorType((2, 3), F32))
    y = b.emit("relu", [x])
    graph = b.build([("y", y)])
    bad_type = dataclasses.replace(graph, types={**graph.types, "y": TensorType((3, 2), F32)})
    assert any("infers" in p for p in graph_problems(bad_type))
    dangling = dataclasses.replace(graph, nodes=(Node("relu", ("nope",), "y", Attrs(), "n"),))
    assert any("not defined before use" in p for p in graph_problems(dangling))
    dead = dataclasses.replace(graph, nodes=graph.nodes + (Node("exp", ("x",), "z", Attrs(), "n"),),
                               types={**graph.types, "z": TensorType((2, 3), F32)})
    assert any("dead" in p for p in graph_problems(dead))
    with pytest.raises(IRError, match="violates IR invariants"):
        check_graph(bad_type)


def test_attrs_are_hashable_and_order_free() -> None:
    assert Attrs({"a": [1, 2], "b": 1.5}) == Attrs({"b": 1.5, "a": (1, 2)})
    assert hash(Attrs({"a": [1, 2]})) == hash(Attrs({"a": (1, 2)}))
    with pytest.raises(TypeError):
        Attrs({"a": object()})


def test_dump_is_stable_text() -> None:
    b = _builder()
    x = b.add_input("x", TensorType((1, 2, 4), F32))
    t = b.emit("transpose", [x], {"perm": (0, 2, 1)})
    graph = b.build([("y", b.emit("sigmoid", [t]))])
    assert dump(graph) == (
        "graph g {\n"
        "  input x: float32[1x2x4]\n"
        "  %v1: float32[1x4x2] = transpose[perm=(0,2,1)](x)\n"
        "  y: float32[1x4x2] = sigmoid(%v1)\n"
        "  return y\n"
        "}\n"
    )
    assert graph.class_counts()[PrimClass.LAYOUT] == 1


def _with_constants(constants: dict[str, np.ndarray]):
    b = _builder()
    x = b.add_input("x", TensorType((3, 4), F32))
    y = x
    for name, array in constants.items():
        y = b.emit("add", [y, b.add_constant(array, name=name)])
    graph = b.build([("y", y)])
    assert set(graph.constants) == set(constants)
    return dataclasses.replace(graph, constants=dict(constants))       # (the builder keeps a copy of its own)


@pytest.mark.parametrize("where", [0, 5, 11])
def test_constants_digest_tells_one_changed_value_apart_in_any_layout(where: int) -> None:
    """Equal digests mean equal constants: one value one ulp away changes the digest, whether the
    constant is stored row-major, column-major (a transposed weight, hashed without a copy) or
    strided; an unchanged graph built again keeps it, and a subset has a digest of its own."""
    rng = np.random.default_rng(where)
    base = rng.standard_normal((4, 3)).astype(np.float32)
    layouts = {"c": base.T.copy(), "f": base.T, "strided": np.repeat(base.T, 2, axis=1)[:, ::2]}
    assert layouts["f"].flags.f_contiguous and not layouts["f"].flags.c_contiguous
    assert not layouts["strided"].flags.c_contiguous and not layouts["strided"].flags.f_contiguous
    graph = _with_constants(layouts)
    assert graph.constants["f"].flags.f_contiguous and not graph.constants["f"].flags.c_contiguous
    digest = graph.constants_digest()
    assert _with_constants({k: v.copy(order="K") for k, v in layouts.items()}).constants_digest() == digest
    assert _with_constants(layouts).constants_digest(["c", "f"]) != digest
    for name, array in layouts.items():
        changed = array.copy(order="K")
        changed.flat[where] = np.nextafter(changed.flat[where], np.float32(np.inf))
        assert _with_constants({**layouts, name: changed}).constants_digest() != digest, name
