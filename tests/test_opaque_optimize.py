"""Optimizing models with opaque nodes: plans run them in onnxruntime, save, load, and match it.

Every check draws fresh random inputs and compares with onnxruntime within PLAN_RTOL of each
output's largest magnitude (outputs of data-dependent shape must also have onnxruntime's shape).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

import korch
from korch.cli import main
from korch.errors import ExitCode, UnsupportedError
from korch.pipeline import optimize
from korch.profile.database import ProfileDB
from korch.runtime import Session
from korch.settings import QUICK_CALIBRATION, OptimizeSettings
from korch.verify import DEFAULT_RTOL as PLAN_RTOL
from korch.verify import diff_outputs, random_feeds, run_onnxruntime
from tests.opaque_models import RUNNABLE, nms_model, topk_model


def _fresh_seed() -> int:
    return int(np.random.SeedSequence().entropy % 2**31)


def _assert_matches_onnxruntime(session: Session, model: onnx.ModelProto) -> None:
    seed = _fresh_seed()
    feeds = random_feeds(session.plan.graph, seed)
    expected = run_onnxruntime(model, feeds)
    actual = dict(zip(session.plan.graph.outputs, session.run(None, feeds)))
    for diff in diff_outputs(actual, expected):
        assert diff.rel <= PLAN_RTOL, f"seed {seed}: {diff}"


@pytest.mark.parametrize("name", sorted(RUNNABLE))
def test_optimized_plan_matches_onnxruntime_and_survives_save_load(name: str, tmp_path: Path) -> None:
    build = RUNNABLE[name][0]
    plan = korch.optimize(build(), threads=1, backends=["onnxruntime"], cache_dir=tmp_path / "cache")
    korch.save(plan, tmp_path / "plan")
    _assert_matches_onnxruntime(korch.load(tmp_path / "plan"), build())
    _assert_matches_onnxruntime(korch.compile(plan), build())


@pytest.mark.parametrize("name", ["nms", "lstm", "topk"])
def test_plan_of_small_kernels_runs_opaque_nodes_as_regions_alone(name: str, tmp_path: Path) -> None:
    """Without regions at large, each opaque node still gets its own region: the plan is small
    kernels around them (for nms, region boundaries of data-dependent shape)."""
    build, opaque = RUNNABLE[name]
    settings = OptimizeSettings(threads=1, backends=("onnxruntime",), regions=None, calibration=QUICK_CALIBRATION)
    with ProfileDB(tmp_path / "profiles.sqlite") as db:
        plan, session, stats = optimize(build(), db, settings)
    regions = [s.onnx_nodes for s in plan.steps if s.onnx_nodes]
    assert sorted(n for r in regions for n in r) == sorted(opaque) and all(len(r) == 1 for r in regions)
    _assert_matches_onnxruntime(session, build())
    korch.save(plan, tmp_path / "plan")
    _assert_matches_onnxruntime(korch.load(tmp_path / "plan"), build())


def test_data_dependent_output_has_onnxruntime_shape(tmp_path: Path) -> None:
    plan = korch.optimize(nms_model(), threads=1, backends=["onnxruntime"], cache_dir=tmp_path)
    session = korch.compile(plan)
    shapes = set()
    for _ in range(4):
        feeds = random_feeds(plan.graph, _fresh_seed())
        (picked, selected) = session.run(["picked", "selected_copy"], feeds)
        want = run_onnxruntime(nms_model(), feeds)
        assert picked.shape == want["picked"].shape and selected.shape == want["selected_copy"].shape
        np.testing.assert_array_equal(selected, want["selected_copy"])
        shapes.add(picked.shape)
    assert all(s[1] == 4 for s in shapes)


def test_opaque_nodes_need_an_onnx_engine(tmp_path: Path) -> None:
    with pytest.raises(UnsupportedError, match=r"run only in an ONNX engine.*topk \(TopK\)"):
        korch.optimize(topk_model(), threads=1, backends=["reference"], cache_dir=tmp_path)


def test_cli_optimize_runs_opaque_nodes_and_strict_refuses(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    onnx.save(topk_model(), tmp_path / "m.onnx")
    common = ["--backends", "onnxruntime", "--cache", str(tmp_path / "cache")]
    assert main(["optimize", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "strict"), "--strict", *common]) \
        == ExitCode.UNSUPPORTED
    assert "'topk' (TopK): no fission rule" in capsys.readouterr().err
    assert not (tmp_path / "strict").exists()
    assert main(["optimize", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "plan"), *common]) == 0
    assert main(["run", str(tmp_path / "plan")]) == 0
    assert "output      y: float32[2, 4]" in capsys.readouterr().out


@pytest.mark.slow          # ~11 s: Inductor's first compile in a process
def test_optimize_with_inductor_keeps_opaque_nodes_in_onnxruntime(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    plan = korch.optimize(topk_model(), threads=1, backends=["onnxruntime", "inductor"], cache_dir=tmp_path)
    for step in plan.steps:
        opaque = [i for i in step.nodes if plan.graph.nodes[i].op == "opaque"]
        assert not opaque or step.backend == "onnxruntime"
    korch.save(plan, tmp_path / "plan")
    _assert_matches_onnxruntime(korch.load(tmp_path / "plan"), topk_model())
