"""The core link probe (korch/profile/link.py): its reading, and rounds split by the state it read."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from korch.profile import link
from korch.profile.timing import interleaved

two_cpus = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2 or not (shutil.which("cc") or shutil.which("gcc")),
                              reason="the probe needs two CPUs and a C compiler")


@two_cpus
def test_the_probe_is_built_once_and_reads_a_round_trip_between_two_cpus(tmp_path: Path) -> None:
    read = link.reader(tmp_path / "tools")
    assert read is not None
    readings = [read() for _ in range(3)]
    # A round trip passes a cache line between two cores twice: more than a nanosecond on any
    # machine, and far under a millisecond on one that runs both threads at once.
    assert all(r is not None and 1.0 < r < 1e6 for r in readings)
    built = list((tmp_path / "tools").iterdir())
    assert len(built) == 1 and built[0].name.startswith("core_link-")      # no scratch left behind
    assert link.reader(tmp_path / "tools", (0, 0)) is not None
    assert link.reader(tmp_path / "tools", (0, 0))() is None               # one CPU with itself: refused


def test_without_a_compiler_there_is_no_reader(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    monkeypatch.setattr(link.shutil, "which", lambda name: None)
    link.reader.cache_clear()
    try:
        assert link.reader(tmp_path / "tools2", (0, 1)) is None
        assert not list((tmp_path / "tools2").iterdir())                   # nothing half-built left
    finally:
        link.reader.cache_clear()


def test_rounds_are_split_at_twice_the_nearest_reading_and_each_system_reported_in_each_state() -> None:
    readings = [55.0, 700.0, 60.0, None, 720.0, 58.0]
    samples = {"korch": [0.225, 0.274, 0.226, 0.3, 0.276, 0.227], "openvino": [0.28, 0.29, 0.281, 0.3, 0.292, 0.279]}
    states = link.split(readings, samples)
    assert (states.rounds_near, states.rounds_far, states.unread) == (3, 2, 1)
    assert states.near_ns == 58.0 and states.far_ns == 710.0
    assert states.near_ms == {"korch": pytest.approx(226.0), "openvino": pytest.approx(280.0)}
    assert states.far_ms == {"korch": pytest.approx(275.0), "openvino": pytest.approx(291.0)}
    line = states.line()
    assert "3 near (58 ns): korch 226.00, openvino 280.00 ms" in line and "2 far (710 ns)" in line


def test_a_timing_that_ended_early_is_split_over_its_own_rounds_and_one_state_says_so() -> None:
    states = link.split([50.0, 52.0, 51.0, 900.0], {"a": [0.001, 0.002]})
    assert (states.rounds_near, states.rounds_far) == (2, 0) and states.near_ms == {"a": pytest.approx(1.5)}
    assert states.line() == "core link: near in all 2 rounds (51 ns)"
    assert link.split([None, None], {"a": [0.1, 0.2]}).line() == "core link: not read"


def test_a_timing_that_ran_far_throughout_is_far_against_the_machines_nearest_reading() -> None:
    readings, samples = [327.0, 331.0, 325.0], {"a": [0.010, 0.011, 0.010]}
    assert link.split(readings, samples).rounds_near == 3           # its own readings alone: "near"
    states = link.split(readings, samples, nearest=52.0)
    assert (states.rounds_near, states.rounds_far) == (0, 3) and states.far_ns == 327.0
    assert link.split([55.0, 330.0], {"a": [0.01, 0.02]}, nearest=80.0).rounds_near == 1   # a nearer own reading


def test_the_database_keeps_each_machines_nearest_link_reading(tmp_path: Path) -> None:
    from korch.profile.database import ProfileDB

    with ProfileDB(tmp_path / "profiles.sqlite") as db:
        assert db.nearest_link("m") is None
        db.put_link("m", 60.0)
        db.put_link("m", 330.0)                   # farther: not kept
        db.put_link("other", 40.0)
        assert db.nearest_link("m") == 60.0
        db.put_link("m", 51.5)
    with ProfileDB(tmp_path / "profiles.sqlite") as db:
        assert db.nearest_link("m") == 51.5 and db.nearest_link("other") == 40.0


def test_interleaved_runs_the_hook_before_every_round() -> None:
    events: list[str] = []
    fns = {"a": lambda: events.append("a"), "b": lambda: events.append("b")}
    interleaved(fns, rounds=3, warmup=0, between_rounds=lambda: events.append("|"))
    assert events == ["|", "a", "b", "|", "b", "a", "|", "a", "b"]


@two_cpus
def test_bench_at_two_threads_reports_the_link_with_its_rounds(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from korch.cli import main
    from korch.profile.database import DB_FILENAME, ProfileDB, machine_fingerprint

    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])],
                              "mm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [32, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [32, 64])], [w])
    model = tmp_path / "model.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), model)
    out = tmp_path / "bench.json"
    assert main(["bench", str(model), "--backends", "onnxruntime", "--threads", "2", "--rounds", "3", "--no-rss",
                 "--cache", str(tmp_path / "cache"), "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    states = result["core_link"]
    assert len(states["readings_ns"]) == 3 and states["rounds_near"] + states["rounds_far"] + states["unread"] == 3
    assert "core link" in capsys.readouterr().out
    read = [x for x in states["readings_ns"] if x is not None]
    with ProfileDB(tmp_path / "cache" / DB_FILENAME) as db:
        # kept as the machine's, unless the optimize before the rounds read a nearer one
        assert db.nearest_link(machine_fingerprint()) <= min(read)
        db.put_link(machine_fingerprint(), 0.5)        # a machine whose link once read far nearer than now
    assert main(["bench", str(model), "--backends", "onnxruntime", "--threads", "2", "--rounds", "3", "--no-rss",
                 "--cache", str(tmp_path / "cache"), "--json", str(out)]) == 0
    again = json.loads(out.read_text())["core_link"]
    assert again["rounds_near"] == 0 and again["rounds_far"] + again["unread"] == 3    # judged against it


def test_a_cache_that_cannot_hold_the_probe_means_no_reader_not_a_failure(tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    assert link.reader(blocked / "tools", (0, 1)) is None


def test_a_timings_state_is_one_state_around_it_judged_against_the_runs_nearest_reading() -> None:
    assert link.state([55.0, 60.0]) == "near" and link.state([330.0, 340.0], nearest=52.0) == "far"
    assert link.state([330.0, 340.0]) == "near"           # alone, the nearest of them sets the floor
    assert link.state([55.0, 330.0]) is None and link.state([]) is None      # moved during it; unread
    reads = iter([331.0, 52.0, 50.0, 53.0, None, 330.0, None, None])
    probe = link.StateProbe(lambda: next(reads), nearest=49.0)
    assert probe.around(lambda: 7.0) == (7.0, "moving")   # read right before and right after the timing
    assert probe.around(lambda: 8.0) == (8.0, "near")
    assert probe.around(lambda: 9.0) == (9.0, "far")      # one reading of the two: judged by it
    assert probe.around(lambda: 6.0) == (6.0, "unread")   # none: not said to be moving
    unread = link.StateProbe(lambda: None)
    assert unread.around(lambda: 1.0) == (1.0, "unread")
    assert link.state_probe(Path("/nonexistent"), threads=1) is None         # one thread: no link to cross
