"""A candidate's standalone subgraph holds exactly the constants its nodes use, and reads no others."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from korch.candidates import Candidate, extract_subgraph
from korch.candidates.candidate import boundary
from korch.ir.check import check_graph
from korch.ir.graph import GraphBuilder
from korch.ir.serialize import LazyConstants, load_graph, save_graph
from korch.ir.types import DType, TensorType


def test_subgraph_of_a_loaded_graph_reads_only_its_own_constants(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A saved plan's constants are read on first use: extracting one kernel must not read the
    others (it read all of bert-base's 414 MB to compile one add)."""
    rng = np.random.default_rng()
    b = GraphBuilder("g")
    x = b.add_input("x", TensorType((2, 8), DType.FLOAT32))
    w1 = b.add_constant(rng.standard_normal((8, 8)).astype(np.float32), name="w1")
    w2 = b.add_constant(rng.standard_normal((8, 8)).astype(np.float32), name="w2")
    h = b.emit("matmul", [x, w1])
    y = b.emit("matmul", [h, w2])
    save_graph(check_graph(b.build([("y", y)])), tmp_path)
    graph = load_graph(tmp_path)
    read: list[str] = []
    real_getitem = LazyConstants.__getitem__
    monkeypatch.setattr(LazyConstants, "__getitem__", lambda self, name: read.append(name) or real_getitem(self, name))
    second = (len(graph.nodes) - 1,)
    inputs, outputs = boundary(graph, second)
    sub = extract_subgraph(graph, Candidate(second, inputs, outputs, "second"))
    assert read == ["w2"] and list(sub.constants) == ["w2"]
