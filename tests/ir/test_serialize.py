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


def test_constants_mapped_from_a_file_beside_the_graph(tmp_path: Path) -> None:
    """A constant whose bytes the caller wrote to another file is recorded, not stored: it loads
    from there read-only, the graph computes the same, and a record past the file's end is an error
    naming the constant."""
    import json

    import pytest

    from korch.ir.serialize import ConstantsError, Mapped

    rng = np.random.default_rng(1)
    b = GraphBuilder("g")
    x = b.add_input("x", TensorType((2, 3), DType.FLOAT32))
    weight = rng.standard_normal((3, 4)).astype(np.float32)
    w = b.add_constant(weight, name="w")
    graph = check_graph(b.build([("y", b.emit("matmul", [x, w]))]))
    (tmp_path / "blob").write_bytes(b"\0" * 64 + weight.tobytes())
    save_graph(graph, tmp_path, {"w": Mapped("blob", 64, weight.dtype.str, weight.shape)})
    with np.load(tmp_path / "constants.npz") as stored:
        assert stored.files == []                       # not stored twice
    loaded = check_graph(load_graph(tmp_path))
    mapped = loaded.constants["w"]
    np.testing.assert_array_equal(mapped, weight)
    assert not mapped.flags.writeable
    feeds = {"x": rng.standard_normal((2, 3)).astype(np.float32)}
    np.testing.assert_array_equal(run_graph(loaded, feeds)["y"], run_graph(graph, feeds)["y"])
    index = json.loads((tmp_path / "constants.json").read_text())
    index["mapped"]["w"][1] = 80                        # 48 bytes past 80 run beyond the file's 112
    (tmp_path / "constants.json").write_text(json.dumps(index))
    with pytest.raises(ConstantsError, match="constant 'w' lies outside the file"):
        load_graph(tmp_path).constants["w"]


def test_an_unchanged_constants_file_is_linked_and_a_changed_one_written_anew(tmp_path: Path) -> None:
    """Saved over an earlier save of the same constants (a warm optimize), constants.npz is that file,
    hard-linked; with one value changed, or beside a save that recorded no digest, it is written."""
    import dataclasses
    import json
    import os

    rng = np.random.default_rng(2)
    b = GraphBuilder("g")
    x = b.add_input("x", TensorType((2, 3), DType.FLOAT32))
    w = b.add_constant(rng.standard_normal((3, 4)).astype(np.float32), name="w")
    graph = check_graph(b.build([("y", b.emit("matmul", [x, w]))]))
    first, same, changed, unrecorded = (tmp_path / n for n in ("first", "same", "changed", "unrecorded"))
    for d in (first, same, changed, unrecorded):
        d.mkdir()
    assert not save_graph(graph, first)
    assert save_graph(graph, same, previous=first)
    assert os.stat(same / "constants.npz").st_ino == os.stat(first / "constants.npz").st_ino
    weight = graph.constants["w"].copy()
    weight[2, 1] += 1.0
    other = dataclasses.replace(graph, constants={"w": weight})
    assert not save_graph(other, changed, previous=first)
    assert os.stat(changed / "constants.npz").st_ino != os.stat(first / "constants.npz").st_ino
    np.testing.assert_array_equal(load_graph(changed).constants["w"], weight)
    np.testing.assert_array_equal(load_graph(same).constants["w"], graph.constants["w"])
    index = json.loads((first / "constants.json").read_text())
    del index["digest"]                                   # as written before digests were recorded
    (first / "constants.json").write_text(json.dumps(index))
    assert not save_graph(graph, unrecorded, previous=first)
