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


@pytest.fixture(scope="module")
def onnxruntime_plan(tmp_path_factory: pytest.TempPathFactory) -> tuple[Plan, Path]:
    """bert-mini optimized over onnxruntime alone and saved: (plan, its directory)."""
    tmp = tmp_path_factory.mktemp("ort-plan")
    told: list[tuple[int, int, str]] = []
    plan = korch.optimize(zoo.to_model_proto("bert-mini"), threads=1, backends=["onnxruntime"],
                          cache_dir=tmp / "cache", progress=lambda done, total, what: told.append((done, total, what)))
    # the documented progress(done, total, what): per boundary calibrated, then per kernel profiled
    profiled = [t for t in told if not t[2].startswith("boundary ")]
    assert profiled and profiled[-1][0] == profiled[-1][1] and {t[2] for t in profiled} == {"onnxruntime"}, told[-3:]
    korch.save(plan, tmp / "bert.plan")
    return plan, tmp / "bert.plan"


def test_optimize_save_load_run_matches_onnxruntime(onnxruntime_plan: tuple[Plan, Path]) -> None:
    model = zoo.to_model_proto("bert-mini")
    plan, path = onnxruntime_plan
    assert isinstance(plan, Plan) and plan.threads == 1
    assert {s.backend for s in plan.steps} == {"onnxruntime"}
    assert plan.summary["max_rel_error"] <= plan.summary["check_tolerance"]
    assert (path.parent / "cache" / "profiles.sqlite").is_file()

    session = korch.load(path)
    feeds = random_feeds(plan.graph, seed=11)
    expected = run_onnxruntime(model, feeds)
    loaded = dict(zip(plan.graph.outputs, session.run(None, feeds)))
    for diff in diff_outputs(loaded, expected):          # fp32 kernels vs onnxruntime: within 1e-4 of scale
        assert diff.rel <= DEFAULT_RTOL, diff
    compiled = korch.compile(plan).run(None, feeds)
    for a, b in zip(compiled, session.run(None, feeds)):
        np.testing.assert_array_equal(a, b)


# Run in a child with torch hidden: `import torch` raises ImportError there, and
# importlib.util.find_spec("torch") returns None, as on a machine where torch is not installed.
_WITHOUT_TORCH = """
import sys
sys.modules["torch"] = None
import numpy as np, korch
feeds = dict(np.load(sys.argv[2]))
outputs = korch.load(sys.argv[1]).run(None, feeds)
np.savez(sys.argv[3], *outputs)
print(sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "scipy") and sys.modules[m] is not None))
"""


def test_a_plan_of_onnx_kernels_loads_and_runs_without_torch(onnxruntime_plan: tuple[Plan, Path],
                                                             tmp_path: Path) -> None:
    """Issue 13: a plan with only onnxruntime kernels deploys where torch is not installed."""
    plan, path = onnxruntime_plan
    feeds = random_feeds(plan.graph, seed=23)
    np.savez(tmp_path / "feeds.npz", **feeds)
    child = subprocess.run([sys.executable, "-c", _WITHOUT_TORCH, str(path), str(tmp_path / "feeds.npz"),
                            str(tmp_path / "out.npz")], capture_output=True, text=True)
    assert child.returncode == 0, child.stderr
    assert child.stdout.strip() == "[]", "loading and running the plan imported torch or scipy"
    with np.load(tmp_path / "out.npz") as out:
        outputs = dict(zip(plan.graph.outputs, (out[f"arr_{k}"] for k in range(len(plan.graph.outputs)))))
    for diff in diff_outputs(outputs, run_onnxruntime(zoo.to_model_proto("bert-mini"), feeds)):
        assert diff.rel <= DEFAULT_RTOL, diff


def test_optimize_refuses_unknown_backends_and_bad_threads(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"unknown \['tvm'\].*available: .*onnxruntime"):
        korch.optimize("bert-mini", backends=["onnxruntime", "tvm"], cache_dir=tmp_path)
    with pytest.raises(UsageError, match="threads must be >= 1"):
        korch.optimize("bert-mini", threads=0, cache_dir=tmp_path)
    assert not (tmp_path / "profiles.sqlite").exists(), "a refused call touches no cache"


def test_optimize_whole_models_keeps_one_whole_model_kernel(tmp_path: Path) -> None:
    plan = korch.optimize(zoo.to_model_proto("bert-mini"), threads=1, backends=["onnxruntime"],
                          cache_dir=tmp_path, whole_models=True)
    assert len(plan.steps) == 1 and len(plan.steps[0].nodes) == len(plan.graph.nodes)
    assert plan.summary["candidates"] == 1 and "whole-model kernels only" in plan.summary["why"]


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
