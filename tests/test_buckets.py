"""Shape buckets: a model with symbolic dims optimized once per bucket, saved as one plan that
dispatches on the feeds' shapes and runs any other shape on onnxruntime over the model itself."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import korch.runtime as runtime
from korch.cli import main
from korch.errors import ShapeError, UsageError
from korch.pipeline import optimize_buckets
from korch.plan import PlanError
from korch.plan.buckets import save_bucketed
from korch.plan.plan import EXTERNAL_MIN_BYTES
from korch.profile.database import ProfileDB
from korch.runtime.buckets import BucketSession
from korch.settings import QUICK_CALIBRATION, QUICK_PROFILE, QUICK_SELECTION, OptimizeSettings
from korch.shapes import bucket_shapes, parse_shapes
from korch.verify import run_onnxruntime

FAST = OptimizeSettings(threads=1, backends=("onnxruntime",), calibration=QUICK_CALIBRATION, profile=QUICK_PROFILE,
                        selection=QUICK_SELECTION)


def _dynamic_model(path: Path | None = None) -> onnx.ModelProto:
    """y = relu(x @ w) + m, with x [batch, 64], m [batch, 32]: m's batch follows x's by name."""
    w = np.random.default_rng(0).standard_normal((64, 32)).astype(np.float32)      # 8 KiB: in the weights file
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"), helper.make_node("Relu", ["h"], ["r"], name="act"),
         helper.make_node("Add", ["r", "m"], ["y"], name="add")],
        "dyn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 64]),
                helper.make_tensor_value_info("m", TensorProto.FLOAT, ["batch", 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 32])],
        initializer=[numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    if path is not None:
        onnx.save(model, path)
    return model


def _feeds(batch: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((batch, 64)).astype(np.float32),
            "m": rng.standard_normal((batch, 32)).astype(np.float32)}


def test_shapes_parse_and_bind_symbolic_dims_by_name() -> None:
    model = _dynamic_model()
    assert parse_shapes(["x=1x64,4x64"]) == {"x": [(1, 64), (4, 64)]}
    assert bucket_shapes(model, {"x": [(1, 64), (4, 64)]}) == [{"x": (1, 64), "m": (1, 32)},
                                                               {"x": (4, 64), "m": (4, 32)}]
    assert bucket_shapes(model, {"x": [(2, 64)], "m": [(2, 32)]}) == [{"x": (2, 64), "m": (2, 32)}]
    for specs, message in ((["x"], "expected NAME="), (["x=1x64", "x=2x64"], "given twice"),
                           (["x=1xa"], "dims joined by 'x'"), (["x=0x64"], ">= 1")):
        with pytest.raises(UsageError, match=message):
            parse_shapes(specs)
    with pytest.raises(UsageError, match="has no input 'z'; its inputs are x, m"):
        bucket_shapes(model, {"z": [(1, 64)]})
    with pytest.raises(UsageError, match="different numbers of shapes"):
        bucket_shapes(model, {"x": [(1, 64), (2, 64)], "m": [(1, 32), (2, 32), (3, 32)]})
    with pytest.raises(ShapeError, match="input 'x' dim 1 is fixed at 64, --shapes gives 65"):
        bucket_shapes(model, {"x": [(1, 65)]})
    with pytest.raises(ShapeError, match="symbolic dim 'batch' is 1 and 2 in one bucket"):
        bucket_shapes(model, {"x": [(1, 64)], "m": [(2, 32)]})
    with pytest.raises(UsageError, match="two buckets have the same shapes"):
        bucket_shapes(model, {"x": [(1, 64), (1, 64)]})


def test_unbound_dims_are_named_with_the_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = _dynamic_model()
    model.graph.input[1].type.tensor_type.shape.dim[0].dim_param = "rows"      # m no longer shares x's batch
    with pytest.raises(ShapeError, match=r"input 'm' dim 0 \('rows'\) is not set .*add --shapes m=\?x32"):
        bucket_shapes(model, {"x": [(1, 64)]})
    path = tmp_path / "dyn.onnx"
    _dynamic_model(path)
    assert main(["optimize", str(path), "-o", str(tmp_path / "plan"), "--cache", str(tmp_path / "c")]) != 0
    err = capsys.readouterr().err
    assert "symbolic dim 'batch'" in err and "--shapes" in err and "Traceback" not in err
    assert not (tmp_path / "plan").exists()


def test_bucketed_plan_dispatches_on_shapes_and_falls_back_to_onnxruntime(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "dyn.onnx"
    model = _dynamic_model(path)
    with ProfileDB(tmp_path / "cache" / "profiles.sqlite") as db:
        plans, stats = optimize_buckets(path, db, FAST, {"x": [(1, 64), (4, 64)]})
    assert [dict(b.shapes) for b in plans.buckets] == [{"x": (1, 64), "m": (1, 32)}, {"x": (4, 64), "m": (4, 32)}]
    assert len(stats) == 2 and all(s.max_rel_error <= s.check_tolerance for s in stats)
    target = save_bucketed(plans, tmp_path / "plan")
    # the weights stored once: a bucket's weights file is a link to the model's, and no bucket's
    # constants.npz holds the weight (a bucket without an ONNX model maps it from ../model)
    weights = target / "model" / "original.weights"
    assert weights.stat().st_size >= 64 * 32 * 4
    for k in range(2):
        own = target / f"bucket-{k}" / "original.weights"
        assert not own.exists() or os.path.samefile(weights, own)
        with np.load(target / f"bucket-{k}" / "constants.npz") as stored:
            assert all(stored[n].nbytes < EXTERNAL_MIN_BYTES for n in stored.files)

    session = runtime.load(target)
    assert isinstance(session, BucketSession)
    for k, batch in enumerate((1, 4)):
        feeds = _feeds(batch, seed=20 + k)
        assert session.session_for(feeds) is session.sessions[k]
        got, = session.run(None, feeds)
        np.testing.assert_allclose(got, run_onnxruntime(model, feeds)["y"], rtol=1e-5, atol=1e-5)
    assert session.fallback_runs == 0
    with caplog.at_level(logging.WARNING, logger="korch.runtime"):
        for seed in (30, 31):                                  # batch 3: no bucket; onnxruntime, said once
            feeds = _feeds(3, seed)
            assert session.session_for(feeds) is None
            got, = session.run(["y"], feeds)
            np.testing.assert_allclose(got, run_onnxruntime(model, feeds)["y"], rtol=1e-5, atol=1e-5)
    assert session.fallback_runs == 2
    said = [r.getMessage() for r in caplog.records if "match no bucket" in r.getMessage()]
    assert len(said) == 1 and "x=3x64 m=3x32" in said[0]
    with pytest.raises(runtime.RunError, match="element type float64"):       # in a bucket: onnxruntime's rules
        session.run(None, {n: v.astype(np.float64) for n, v in _feeds(1, 40).items()})
    with pytest.raises(runtime.RunError, match=r"unknown feeds \['z'\]"):        # and in the fallback
        session.run(None, {**_feeds(3, 41), "z": np.zeros(1, np.float32)})

    with open(target / "model" / "original.onnx", "ab") as f:               # a damaged fallback is named at load
        f.write(b"\0")
    with pytest.raises(PlanError, match="model/original.onnx is"):
        runtime.load(target)


def test_cli_optimizes_buckets_and_runs_them(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "dyn.onnx"
    _dynamic_model(path)
    plan = tmp_path / "plan"
    assert main(["optimize", str(path), "-o", str(plan), "--shapes", "x=1x64,2x64", "--backends", "onnxruntime",
                 "--cache", str(tmp_path / "c")]) == 0
    out = capsys.readouterr().out
    assert "bucket 0: x=1x64 m=1x32" in out and "bucket 1: x=2x64 m=2x32" in out and "2 buckets" in out
    assert main(["run", str(plan)]) == 0
    assert "output      y: float32[1, 32]" in capsys.readouterr().out
    np.savez(tmp_path / "odd.npz", **_feeds(5, 0))
    assert main(["run", str(plan), "--inputs", str(tmp_path / "odd.npz")]) == 0          # the fallback
    assert "output      y: float32[5, 32]" in capsys.readouterr().out
    assert main(["report", str(plan), "-o", str(tmp_path / "r.html")]) != 0
    assert "bucket-0" in capsys.readouterr().err
    assert main(["optimize", str(path), "-o", str(plan), "--shapes", "x=1x64", "--input-shape", "x=1x64",
                 "--cache", str(tmp_path / "c")]) != 0
    assert "not both" in capsys.readouterr().err


def test_bench_compares_each_bucket_with_the_peers_on_the_dynamic_model(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "dyn.onnx"
    _dynamic_model(path)
    plan = tmp_path / "plan"
    assert main(["optimize", str(path), "-o", str(plan), "--shapes", "x=1x64,2x64", "--backends", "onnxruntime",
                 "--threads", "1", "--cache", str(tmp_path / "c")]) == 0
    capsys.readouterr()
    out = tmp_path / "bench.json"
    assert main(["bench", str(path), "--plan", str(plan), "--threads", "1", "--rounds", "3", "--json", str(out),
                 "--cache", str(tmp_path / "c")]) == 0
    table = capsys.readouterr().out
    assert "bucket 0: x 1x64, m 1x32" in table and "bucket 1: x 2x64, m 2x32" in table
    result = json.loads(out.read_text())
    assert [b["shapes"] for b in result["buckets"]] == [{"x": [1, 64], "m": [1, 32]}, {"x": [2, 64], "m": [2, 32]}]
    for k, bucket in enumerate(result["buckets"]):
        korch_, ort = bucket["systems"]["korch"], bucket["systems"]["onnxruntime"]
        assert korch_["median_ms"] > 0 and ort["median_ms"] > 0
        assert bucket["max_rel_error"] <= bucket["rtol"] and bucket["disagree"] == {}
        # peak memory measured in child processes, onnxruntime's on the bucket's shapes
        assert korch_["peak_rss_mb"] > 0 and ort["peak_rss_mb"] > 0
        beside = json.loads((plan / f"bucket-{k}" / "bench.json").read_text())
        assert beside["shapes"] == bucket["shapes"] and beside["systems"] == bucket["systems"]


def test_python_api_optimizes_saves_compiles_and_loads_buckets(tmp_path: Path) -> None:
    """korch.optimize(shapes=...) gives a BucketedPlan; compile() runs it before saving (its fallback
    is the model held in memory) and load() after, with the same outputs."""
    import korch
    from korch.plan.buckets import BucketedPlan

    path = tmp_path / "dyn.onnx"
    model = _dynamic_model(path)
    plans = korch.optimize(path, shapes={"x": [(2, 64)]}, backends=["onnxruntime"], cache_dir=tmp_path / "c")
    assert isinstance(plans, BucketedPlan) and [dict(b.shapes) for b in plans.buckets] == [{"x": (2, 64), "m": (2, 32)}]
    with pytest.raises(UsageError, match="not both"):
        korch.optimize(path, shapes={"x": [(2, 64)]}, input_shapes={"x": (2, 64)}, cache_dir=tmp_path / "c")
    compiled = korch.compile(plans)
    korch.save(plans, tmp_path / "plan")
    loaded = korch.load(tmp_path / "plan")
    korch.save(loaded.plans, tmp_path / "again")             # a loaded bucketed plan saves again
    again = korch.load(tmp_path / "again")
    for batch in (2, 5):                                     # a bucket, then the fallback
        feeds = _feeds(batch, seed=50 + batch)
        want = run_onnxruntime(model, feeds)["y"]
        for session in (compiled, loaded, again, korch.compile(loaded.plans)):
            np.testing.assert_allclose(session.run(None, feeds)[0], want, rtol=1e-5, atol=1e-5)
