"""A primitive no kernel computes never reaches the solver: the error names the primitive, its ONNX
node and each backend's reason, and the CLI prints it without a traceback."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from korch.cli import main
from korch.errors import ExitCode
from korch.pipeline import optimize
from korch.profile import profiler
from korch.profile.database import ProfileDB, Record, Rejection
from korch.select import SelectionError
from korch.settings import QUICK_PROFILE, QUICK_SELECTION, OptimizeSettings
from korch.version import code_version

BACKENDS = ("onnxruntime", "reference")
SETTINGS = OptimizeSettings(threads=1, backends=BACKENDS, profile=QUICK_PROFILE, selection=QUICK_SELECTION)
# Each backend's made-up reason for refusing every kernel that computes the sigmoid.
REFUSALS = {"onnxruntime": "compile/run failed: RuntimeError: test refuses sigmoid",
            "reference": "unsupported: test refuses sigmoid too"}


def diamond() -> onnx.ModelProto:
    """c = relu(x) + sigmoid(x), d = relu(x) * sigmoid(x)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])
    outputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [4, 8]) for n in ("c", "d")]
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="relu_a"),
             helper.make_node("Sigmoid", ["x"], ["b"], name="sigmoid_b"),
             helper.make_node("Add", ["a", "b"], ["c"], name="add_c"),
             helper.make_node("Mul", ["a", "b"], ["d"], name="mul_d")]
    model = helper.make_model(helper.make_graph(nodes, "diamond", [x], outputs),
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.fixture
def sigmoid_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every backend rejects every candidate holding the sigmoid (the whole model too), with its reason."""
    measure_one = profiler._measure_one

    def refusing(graph, job, env, options, threads, machine, source, settings, *args) -> Record:
        if any(graph.nodes[i].op == "sigmoid" for i in job.candidate.nodes):
            version = profiler.record_version(profiler.get_backend(job.backend), settings)
            return Record.rejected(job.candidate.key, job.backend, version, threads, machine, REFUSALS[job.backend],
                                   Rejection.UNSUPPORTED, code_version())
        return measure_one(graph, job, env, options, threads, machine, source, settings, *args)

    monkeypatch.setattr(profiler, "_measure_one", refusing)


def test_a_primitive_every_backend_rejects_is_named_with_its_node_and_reasons(
        sigmoid_refused: None, tmp_path: Path) -> None:
    with ProfileDB(tmp_path / "profiles.sqlite") as db:
        for _ in range(2):              # cold (just profiled), then warm (the stored rejections)
            with pytest.raises(SelectionError) as e:
                optimize(diamond(), db, SETTINGS)
            message = str(e.value)
            assert "1 primitive(s)" in message
            assert "sigmoid -> '%v2'" in message and "ONNX node 'sigmoid_b'" in message
            for backend, reason in REFUSALS.items():
                assert f"\n    {backend}: candidate [1] rejected: {reason}" in message   # the smallest: sigmoid alone
            assert "relu" not in message      # computed alone; add and mul are named only as consequences
            assert "the kernels of ONNX nodes ['add_c', 'mul_d'] cannot run either" in message


def test_the_cli_prints_the_reasons_and_exits_nonzero(sigmoid_refused: None, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    onnx.save(diamond(), tmp_path / "diamond.onnx")
    plan_dir = tmp_path / "plan"
    code = main(["--quiet", "optimize", str(tmp_path / "diamond.onnx"), "-o", str(plan_dir),
                 "--backends", ",".join(BACKENDS), "--cache", str(tmp_path / "cache")])
    err = capsys.readouterr().err
    assert code == ExitCode.VERIFY and not plan_dir.exists()
    assert err.startswith("korch: error: ") and "Traceback" not in err
    assert "sigmoid_b" in err and all(reason in err for reason in REFUSALS.values())


def test_an_inaccurate_kernel_is_reported_with_its_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A kernel timed but over the tolerance is not accepted; the error gives its error and the bar."""
    measure_one = profiler._measure_one

    def inaccurate(graph, job, *args) -> Record:
        record = measure_one(graph, job, *args)
        if any(graph.nodes[i].op == "sigmoid" for i in job.candidate.nodes):
            return replace(record, error=0.5)
        return record

    monkeypatch.setattr(profiler, "_measure_one", inaccurate)
    with ProfileDB(tmp_path / "profiles.sqlite") as db, pytest.raises(SelectionError) as e:
        optimize(diamond(), db, replace(SETTINGS, backends=("onnxruntime",)))
    assert "onnxruntime: candidate [1] rejected: error 5.00e-01 against the reference exceeds the tolerance" \
        in str(e.value)
