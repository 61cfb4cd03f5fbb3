"""The top-level Python API: korch.optimize -> Plan, korch.save, korch.load, korch.compile."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import korch
from korch import zoo
from korch.errors import UsageError
from korch.plan import Plan
from korch.verify import DEFAULT_RTOL, diff_outputs, random_feeds, run_onnxruntime


def test_optimize_save_load_run_matches_onnxruntime(tmp_path: Path) -> None:
    model = zoo.to_model_proto("bert-mini")
    plan = korch.optimize(model, threads=1, backends=["onnxruntime"], cache_dir=tmp_path / "cache")
    assert isinstance(plan, Plan) and plan.threads == 1
    assert {s.backend for s in plan.steps} == {"onnxruntime"}
    assert plan.summary["max_rel_error"] <= plan.summary["check_tolerance"]
    assert (tmp_path / "cache" / "profiles.sqlite").is_file()

    korch.save(plan, tmp_path / "bert.plan")
    session = korch.load(tmp_path / "bert.plan")
    feeds = random_feeds(plan.graph, seed=11)
    expected = run_onnxruntime(model, feeds)
    loaded = dict(zip(plan.graph.outputs, session.run(None, feeds)))
    for diff in diff_outputs(loaded, expected):          # fp32 kernels vs onnxruntime: within 1e-4 of scale
        assert diff.rel <= DEFAULT_RTOL, diff
    compiled = korch.compile(plan).run(None, feeds)
    for a, b in zip(compiled, session.run(None, feeds)):
        np.testing.assert_array_equal(a, b)


def test_optimize_refuses_unknown_backends_and_bad_threads(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"unknown \['tvm'\].*available: .*onnxruntime"):
        korch.optimize("bert-mini", backends=["onnxruntime", "tvm"], cache_dir=tmp_path)
    with pytest.raises(UsageError, match="threads must be >= 1"):
        korch.optimize("bert-mini", threads=0, cache_dir=tmp_path)
    assert not (tmp_path / "profiles.sqlite").exists(), "a refused call touches no cache"


def test_default_backends_are_the_installed_speed_providers() -> None:
    backends = korch.api.default_backends()
    assert "onnxruntime" in backends and "reference" not in backends


def test_import_korch_does_not_load_torch() -> None:
    code = "import sys, korch; korch.optimize; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_running_a_plan_loads_none_of_the_optimizer() -> None:
    """`import korch.runtime` (what running a saved plan needs) leaves out the optimizer and scipy
    (~20 MB of resident memory), and the public API still resolves on first use."""
    code = ("import sys, korch.runtime; "
            "print(sorted(m for m in ('scipy', 'korch.pipeline', 'korch.select', 'korch.api', 'torch') "
            "if m in sys.modules)); import korch; print(korch.optimize.__module__, korch.fission.__module__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[0] == "[]"
    assert out[1] == "korch.api korch.frontend"
    with pytest.raises(AttributeError, match="no_such_name"):
        korch.no_such_name  # noqa: B018
