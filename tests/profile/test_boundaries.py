"""Kernel-boundary calibration: measured chains, fitted lines, stored once per machine and threads."""

from __future__ import annotations

import pytest

from korch.ir.types import DType, TensorType
from korch.profile.boundaries import (
    BLOCKED,
    KERNEL_START,
    PLAIN,
    Boundaries,
    BoundaryModel,
    CalibrationSettings,
    Line,
    Sample,
    boundary_model,
    calibrate,
    chain_model,
    chain_plan,
    fit,
    measure_chain,
    stored_model,
    versions,
)
from korch.profile.database import ProfileDB

TINY = CalibrationSettings(sides=(8, 12), blocks=3, rounds=1, start_rounds=5, start_side=64)


def test_cost_picks_the_layout_by_rank_clamps_at_zero_and_reads_pairs_both_ways() -> None:
    model = BoundaryModel({("a", "b", BLOCKED): Line(1e-5, 1e-9), ("a", "b", PLAIN): Line(-1e-5, 1e-9),
                              ("a", "a", PLAIN): Line(2e-6, 0.0)})
    four_d = TensorType((1, 2, 3, 4), DType.FLOAT32)          # 96 bytes
    flat = TensorType((24,), DType.FLOAT32)
    assert model.cost("a", "b", four_d) == pytest.approx(1e-5 + 96e-9)
    assert model.cost("b", "a", four_d) == pytest.approx(1e-5 + 96e-9)
    assert model.cost("a", "b", flat) == 0.0                   # the line is negative there: never below zero
    assert model.cost("a", "a", flat) == pytest.approx(2e-6)
    assert model.cost("a", "c", flat) == 0.0                   # no calibration for the pair: nothing
    assert BoundaryModel().cost("a", "b", four_d) == 0.0


def test_fit_is_a_least_squares_line() -> None:
    samples = [Sample(PLAIN, "a", "a", n, 5e-6 + 2e-10 * n, 0.0, 0.0, 0.0, 0.0) for n in (1000, 5000, 20000)]
    line = fit(samples)
    assert line.fixed_s == pytest.approx(5e-6) and line.s_per_byte == pytest.approx(2e-10)


def test_calibration_measures_every_pair_and_layout(tmp_path) -> None:
    seen, progress = [], []
    model, samples = calibrate(["onnxruntime"], 1, TINY, report=seen.append,
                               progress=lambda *args: progress.append(args))
    assert seen == samples and len(samples) == 2 * 2                # 2 layouts x 2 sizes x 1 pair
    assert progress == [(k, 5, "boundary onnxruntime->onnxruntime") for k in range(1, 5)] + \
        [(5, 5, "boundary start onnxruntime")]
    assert {(s.layout, s.nbytes) for s in samples} == {(lay, 32 * h * h * 4) for lay in (BLOCKED, PLAIN)
                                                        for h in (8, 12)}
    assert all(s.plan_s > 0 and s.sum_alone_s > 0 and s.plan_p10_s <= s.plan_s <= s.plan_p90_s for s in samples)
    assert set(model.lines) == {("onnxruntime", "onnxruntime", layout) for layout in (BLOCKED, PLAIN, KERNEL_START)}
    start = model.lines[("onnxruntime", "onnxruntime", KERNEL_START)]
    assert start.s_per_byte == 0.0 and model.start("onnxruntime") == max(0.0, start.fixed_s) < 0.01
    assert model.start("openvino") == 0.0                            # not calibrated: free


def test_stored_calibration_is_used_and_a_missing_one_is_measured_and_stored(tmp_path) -> None:
    with ProfileDB(tmp_path / "profiles.sqlite") as db:
        lines = {("onnxruntime", "onnxruntime", BLOCKED): Line(3e-6, 1e-10),
                 ("onnxruntime", "onnxruntime", PLAIN): Line(1e-6, 0.0),
                 ("onnxruntime", "onnxruntime", KERNEL_START): Line(4e-5, 0.0)}
        db.put_boundaries("m1", 1, versions(["onnxruntime"]), lines)
        stored = boundary_model(db, ["onnxruntime"], 1, "m1", TINY)
        assert stored.lines == lines and stored.start("onnxruntime") == 4e-5          # no measuring
        # a calibration stored without the kernel start is measured again, start and all
        db.put_boundaries("m0", 1, versions(["onnxruntime"]), {k: v for k, v in lines.items() if k[2] != KERNEL_START})
        assert ("onnxruntime", "onnxruntime", KERNEL_START) in boundary_model(db, ["onnxruntime"], 1, "m0", TINY).lines
        assert db.get_boundaries("m1", 2, versions(["onnxruntime"])) is None         # other threads: none
        measured = boundary_model(db, ["onnxruntime"], 2, "m1", TINY)
        assert set(measured.lines) == set(lines)
        assert db.get_boundaries("m1", 2, versions(["onnxruntime"])) == measured.lines
    with ProfileDB(tmp_path / "profiles.sqlite") as db:                              # it survives reopening
        assert db.get_boundaries("m1", 1, versions(["onnxruntime"])) == lines


def test_an_engine_is_calibrated_when_first_ensured_with_only_its_own_pairs_and_read_back_after(tmp_path) -> None:
    """Boundaries: an engine not ensured costs nothing; ensuring a second engine measures its pairs
    and start only (not the first engine's again); another optimize on the machine reads both back
    and measures nothing."""
    four_d = TensorType((1, 32, 8, 8), DType.FLOAT32)
    with ProfileDB(tmp_path / "profiles.sqlite") as db:
        asked: list[str] = []
        b = Boundaries(db, 1, "m1", TINY, progress=lambda done, total, what: asked.append(what))
        assert b.ensure(["onnxruntime"]) and not b.ensure(["onnxruntime"])
        assert asked == ["boundary onnxruntime->onnxruntime"] * 4 + ["boundary start onnxruntime"]
        assert b.cost("onnxruntime", "reference", four_d) == 0.0 and b.start("reference") == 0.0   # not yet
        before = b.model
        asked.clear()
        assert b.ensure(["reference", "onnxruntime"])
        assert sorted(set(asked)) == ["boundary onnxruntime->reference", "boundary reference->reference",
                                      "boundary start reference"]
        assert set(b.lines) == {(p, c, layout) for p, c in (("onnxruntime", "onnxruntime"),
                                                            ("onnxruntime", "reference"), ("reference", "reference"))
                                for layout in (BLOCKED, PLAIN)} | {(e, e, KERNEL_START) for e in ("onnxruntime",
                                                                                               "reference")}
        assert b.cost("reference", "onnxruntime", four_d) == b.model.cost("onnxruntime", "reference", four_d)
        assert set(before.lines) < set(b.lines)             # a model taken earlier keeps its costs
        asked.clear()
        again = Boundaries(db, 1, "m1", TINY, progress=lambda done, total, what: asked.append(what))
        assert again.ensure(["onnxruntime", "reference"]) and asked == [] and again.lines == b.lines
        assert stored_model(db, ["reference", "onnxruntime"], 1, "m1").lines == b.lines
        assert stored_model(db, ["onnxruntime"], 1, "m1").lines == before.lines   # its own pairs only
        assert stored_model(db, ["onnxruntime"], 2, "m1").lines == {}


def test_calibration_by_stages_measures_an_engines_start_first_and_its_pairs_only_when_asked_again(tmp_path) -> None:
    """ensure_by_stages: the first call for an engine measures its kernel start alone (its pairs
    still free, so not `calibrated`); the next measures its pairs and not the start again; a later
    optimize's ensure_starts reads back all of it, the pairs included, and measures nothing. One
    whose pairs were never measured reads back its start alone."""
    four_d = TensorType((1, 32, 8, 8), DType.FLOAT32)
    with ProfileDB(tmp_path / "profiles.sqlite") as db:
        asked: list[str] = []
        b = Boundaries(db, 1, "m1", TINY, progress=lambda done, total, what: asked.append(what))
        assert b.ensure(["onnxruntime"])
        asked.clear()
        assert b.ensure_by_stages(["reference"])
        assert asked == ["boundary start reference"]
        assert b.start("reference") == max(0.0, b.lines[("reference", "reference", KERNEL_START)].fixed_s)
        assert not b.calibrated("reference") and b.cost("onnxruntime", "reference", four_d) == 0.0
        assert not b.ensure_starts(["reference"])                # its start is there already
        asked.clear()
        assert b.ensure_by_stages(["reference"]) and b.calibrated("reference")
        assert sorted(set(asked)) == ["boundary onnxruntime->reference", "boundary reference->reference"]
        assert not b.ensure_by_stages(["reference"])

        asked.clear()
        again = Boundaries(db, 1, "m1", TINY, progress=lambda done, total, what: asked.append(what))
        assert again.ensure(["onnxruntime"]) and again.ensure_starts(["reference"])
        assert asked == [] and again.calibrated("reference") and again.lines == b.lines

    with ProfileDB(tmp_path / "other.sqlite") as db:
        first = Boundaries(db, 1, "m1", TINY)
        assert first.ensure(["onnxruntime"]) and first.ensure_starts(["reference"])
        asked.clear()
        later = Boundaries(db, 1, "m1", TINY, progress=lambda done, total, what: asked.append(what))
        assert later.ensure(["onnxruntime"]) and later.ensure_starts(["reference"])
        assert asked == [] and not later.calibrated("reference") and later.lines == first.lines


def test_chains_of_one_layout_and_side_compile_each_block_once_and_its_kernel_computes_that_block() -> None:
    import numpy as np

    from korch.runtime.session import Session
    from korch.verify import run_onnxruntime

    kernels: dict = {}
    measure_chain(PLAIN, "onnxruntime", "reference", 8, 3, 1, 1, kernels=kernels)
    assert set(kernels) == {(PLAIN, 8, 0, "onnxruntime"), (PLAIN, 8, 1, "reference"), (PLAIN, 8, 2, "onnxruntime")}
    first = kernels[(PLAIN, 8, 0, "onnxruntime")]
    measure_chain(PLAIN, "onnxruntime", "onnxruntime", 8, 3, 1, 1, kernels=kernels)
    assert set(kernels) == {(PLAIN, 8, 0, "onnxruntime"), (PLAIN, 8, 1, "reference"), (PLAIN, 8, 2, "onnxruntime"),
                            (PLAIN, 8, 1, "onnxruntime")}
    assert kernels[(PLAIN, 8, 0, "onnxruntime")] is first            # taken again, not compiled again
    # Each stored kernel computes its own block wherever it was compiled: an onnxruntime chain put
    # together from the dictionary (blocks 0 and 2 from the first chain, 1 from the second) computes
    # the model, every block of which has weights of its own.
    model = chain_model(PLAIN, 3, 8)
    plan = chain_plan(model, ("onnxruntime",), 1)
    x = np.random.default_rng(5).standard_normal((1, 32, 8, 8)).astype(np.float32)
    got = Session(plan, [kernels[(PLAIN, 8, b, "onnxruntime")] for b in range(3)]).run(None, {"x": x})[0]
    want = run_onnxruntime(model, {"x": x})[model.graph.output[0].name]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
