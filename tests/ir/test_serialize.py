"""A saved and reloaded primitive graph is identical and computes the same."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from korch.backends.reference import run_graph
from korch.ir.check import check_graph
from korch.ir.graph import GraphBuilder
from korch.ir.serialize import load_graph, save_graph
from korch.ir.text import dump
from korch.ir.types import DType, TensorType


def test_round_trip(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    b = GraphBuilder("g")
    x = b.add_input("x", TensorType((2, 3), DType.FLOAT32))
    w = b.add_constant(rng.standard_normal((3, 4)).astype(np.float32), name="weight/with:odd name")
    h = b.emit("matmul", [x, w])
    c = b.emit("cast", [h], {"to": DType.INT64})
    p = b.emit("pad", [h], {"pads": (0, 1, 0, 2), "mode": "reflect", "value": 0.0})
    graph = check_graph(b.build([("c", c), ("p", p)]))
    save_graph(graph, tmp_path)
    loaded = check_graph(load_graph(tmp_path))
    assert dump(loaded) == dump(graph)
    assert loaded.nodes == graph.nodes
    feeds = {"x": rng.standard_normal((2, 3)).astype(np.float32)}
    for name, value in run_graph(graph, feeds).items():
        np.testing.assert_array_equal(run_graph(loaded, feeds)[name], value)
