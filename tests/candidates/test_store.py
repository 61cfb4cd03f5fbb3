"""A graph's candidates kept in the profile database and read back by the next optimize."""

from __future__ import annotations

import json
import logging
import sqlite3
import zlib

import numpy as np
import onnx
from onnx import helper, numpy_helper

from korch.candidates import store
from korch.pipeline import enumerate_all, run_fission
from korch.profile.database import CANDIDATE_SETS_KEPT, ProfileDB
from korch.settings import OptimizeSettings


def _model(blocks: int, seed: int, scale: float = 1.0) -> onnx.ModelProto:
    """Residual blocks y = x + relu(conv1x1(x) * s) over a 4-channel image: regions and fused candidates."""
    rng = np.random.default_rng(seed)
    nodes, inits, x = [], [], "x"
    for b in range(blocks):
        inits += [numpy_helper.from_array(rng.standard_normal((4, 4, 1, 1)).astype(np.float32), f"w{b}"),
                  numpy_helper.from_array(np.full((1, 4, 1, 1), scale, np.float32), f"s{b}")]
        nodes += [helper.make_node("Conv", [x, f"w{b}"], [f"c{b}"], name=f"conv{b}"),
                  helper.make_node("Mul", [f"c{b}", f"s{b}"], [f"m{b}"], name=f"mul{b}"),
                  helper.make_node("Relu", [f"m{b}"], [f"r{b}"], name=f"relu{b}"),
                  helper.make_node("Add", [x, f"r{b}"], [f"y{b}"], name=f"add{b}")]
        x = f"y{b}"
    graph = helper.make_graph(nodes, "blocks", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 4, 6, 6])],
                              [helper.make_tensor_value_info(x, onnx.TensorProto.FLOAT, [1, 4, 6, 6])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


SETTINGS = OptimizeSettings(threads=1, backends=("onnxruntime",))


def test_a_stored_set_reads_back_as_the_candidates_enumeration_makes(tmp_path, caplog) -> None:
    graph = run_fission(_model(3, 0)).graph
    fresh = enumerate_all(graph, SETTINGS)
    with ProfileDB(tmp_path / "p.sqlite") as db:
        first = enumerate_all(graph, SETTINGS, db)
        with caplog.at_level(logging.INFO, logger="korch.pipeline"):
            again = enumerate_all(graph, SETTINGS, db)
    assert first.small == fresh.small and first.regions == fresh.regions
    assert again.small == fresh.small and again.regions == fresh.regions
    assert len(fresh.small) > 20 and len(fresh.regions) > 3
    assert "as an earlier run enumerated them" in caplog.text


def test_a_set_is_kept_per_graph_structure_limits_and_constants(tmp_path) -> None:
    one, other = run_fission(_model(3, 0)).graph, run_fission(_model(4, 0)).graph
    key = store.set_key(one, SETTINGS.limits, SETTINGS.regions)
    assert key == store.set_key(run_fission(_model(3, 0)).graph, SETTINGS.limits, SETTINGS.regions)
    assert key != store.set_key(other, SETTINGS.limits, SETTINGS.regions)
    assert key != store.set_key(run_fission(_model(3, 0, scale=2.0)).graph, SETTINGS.limits, SETTINGS.regions)
    fewer = type(SETTINGS.limits)(max_nodes=2)
    assert key != store.set_key(one, fewer, SETTINGS.regions)
    with ProfileDB(tmp_path / "p.sqlite") as db:
        enumerate_all(one, SETTINGS, db)
        theirs = enumerate_all(other, SETTINGS, db)
    assert theirs.small == enumerate_all(other, SETTINGS).small


def test_a_set_that_does_not_fit_the_graph_is_not_trusted() -> None:
    one, other = run_fission(_model(3, 0)).graph, run_fission(_model(4, 0)).graph
    small = enumerate_all(other, SETTINGS)
    blob = store.encode(small.small, small.regions)
    assert store.decode(blob, other) == (small.small, small.regions)
    assert store.decode(blob, one) is None                   # node indices beyond the smaller graph
    assert store.decode(b"not zlib", one) is None
    assert store.decode(zlib.compress(b'{"keys": 3}'), one) is None
    negative = json.loads(zlib.decompress(store.encode(small.small, small.regions)))
    negative["small"][0][3] = -1                             # a key index read from the end
    assert store.decode(zlib.compress(json.dumps(negative).encode()), other) is None
    mine = enumerate_all(one, SETTINGS)
    moved = [type(c)(c.nodes, c.outputs, c.inputs, c.key, c.onnx_nodes) if c.inputs != c.outputs else c
             for c in mine.small]                           # inputs and outputs swapped: names fit, boundaries not
    assert store.decode(store.encode(moved, mine.regions), one) is None


def test_a_damaged_stored_set_is_enumerated_again_and_replaced(tmp_path, caplog) -> None:
    graph = run_fission(_model(3, 0)).graph
    path = tmp_path / "p.sqlite"
    with ProfileDB(path) as db:
        expected = enumerate_all(graph, SETTINGS, db)
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE candidate_sets SET blob = ?", (b"\x00garbage",))
    with ProfileDB(path) as db:
        with caplog.at_level(logging.WARNING, logger="korch.pipeline"):
            got = enumerate_all(graph, SETTINGS, db)
        assert "does not fit it; enumerating them again" in caplog.text
        assert got.small == expected.small and got.regions == expected.regions
        assert store.decode(db.candidate_set(store.set_key(graph, SETTINGS.limits, SETTINGS.regions)), graph)


def test_the_database_keeps_only_the_most_recent_sets(tmp_path) -> None:
    with ProfileDB(tmp_path / "p.sqlite") as db:
        for k in range(CANDIDATE_SETS_KEPT + 3):
            db.put_candidate_set(f"k{k}", b"x")
        assert db.candidate_set("k0") is None and db.candidate_set("k2") is None
        assert db.candidate_set("k3") == b"x" and db.candidate_set(f"k{CANDIDATE_SETS_KEPT + 2}") == b"x"
