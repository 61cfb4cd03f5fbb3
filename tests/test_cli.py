"""The command line: outputs, exit codes, and nothing written when something fails."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from korch.cli import _settings, build_parser, main
from korch.errors import ExitCode
from korch.verify import run_onnxruntime

RTOL = 1e-5


def _model(path: Path, batch: int | str = 1, op: str = "Relu") -> Path:
    w = np.random.default_rng(0).standard_normal((16, 8)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"), helper.make_node(op, ["h"], ["y"], name="act")],
        "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 8])],
        initializer=[numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def test_fission_writes_a_runnable_primitive_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = _model(tmp_path / "m.onnx")
    out = tmp_path / "prims.onnx"
    assert main(["fission", str(src), "-o", str(out), "--verify"]) == 0
    text = capsys.readouterr().out
    assert "primitives  2: elementwise 1, reduce 0, layout 0, linear 1" in text
    assert "OK" in text
    feeds = {"x": np.random.default_rng(1).standard_normal((1, 16)).astype(np.float32)}
    want = run_onnxruntime(onnx.load(src), feeds)["y"]
    got = run_onnxruntime(onnx.load(out), feeds)["y"]
    assert np.abs(got - want).max() <= RTOL * np.abs(want).max()
    assert {p.name for p in tmp_path.iterdir()} == {"m.onnx", "prims.onnx"}


def test_dump_to_stdout(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fission", str(_model(tmp_path / "m.onnx")), "--dump", "-"]) == 0
    assert "y: float32[1x8] = relu(" in capsys.readouterr().out


@pytest.mark.parametrize("case,code,message", [
    ("missing", ExitCode.BAD_MODEL, "no such file"),
    ("strict", ExitCode.UNSUPPORTED, "'act' (Hardmax): no fission rule"),
    ("symbolic", ExitCode.SHAPE, "symbolic dim 'batch'"),
    ("unwritable", ExitCode.IO, "does not exist"),
])
def test_failures_exit_nonzero_and_write_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str,
                                                 code: ExitCode, message: str) -> None:
    src = tmp_path / "m.onnx"
    out = tmp_path / "prims.onnx"
    flags = []
    if case == "strict":
        _model(src, op="Hardmax")
        flags = ["--strict"]
    elif case == "symbolic":
        _model(src, batch="batch")
    elif case == "unwritable":
        _model(src)
        out = tmp_path / "no_such_dir" / "prims.onnx"
    before = sorted(p.name for p in tmp_path.iterdir())
    assert main(["fission", str(src), "-o", str(out), *flags]) == code
    err = capsys.readouterr().err
    assert err.startswith("korch: error: ") and message in err
    assert "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_input_shape_fixes_symbolic_dims(tmp_path: Path) -> None:
    src = _model(tmp_path / "m.onnx", batch="batch")
    assert main(["fission", str(src), "--input-shape", "x=3x16", "--verify"]) == 0
    assert main(["fission", str(src), "--input-shape", "x=3"]) == ExitCode.SHAPE
    assert main(["fission", str(src), "--input-shape", "bogus"]) == ExitCode.SHAPE


def test_zoo_list_and_export(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["zoo", "list"]) == 0
    listing = capsys.readouterr().out
    for name in ("candy", "segformer-b0", "efficientvit-b1", "yolox-nano", "yolov4", "bert-base", "vit-b16"):
        assert name in listing
    out = tmp_path / "c.onnx"
    assert main(["zoo", "export", "candy-mini", "-o", str(out)]) == 0
    onnx.checker.check_model(onnx.load(out))
    assert main(["zoo", "export", "no-such-model", "-o", str(tmp_path / "x.onnx")]) == ExitCode.USAGE
    assert "candy" in capsys.readouterr().err
    assert not (tmp_path / "x.onnx").exists()


def test_verbose_enables_korch_logs_only() -> None:
    """-v turns on korch's stage logs; third-party debug logs (onnxscript, torch) would bury them."""
    import subprocess
    import sys

    code = ("import logging; from korch.cli import main; main(['-v', 'zoo', 'list']); "
            "print(logging.getLogger('korch.pipeline').isEnabledFor(logging.DEBUG), "
            "logging.getLogger('onnxscript').isEnabledFor(logging.DEBUG))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "True False"


def test_version_names_korch_and_each_engine(capsys: pytest.CaptureFixture[str]) -> None:
    from importlib.metadata import version

    import korch
    from korch.version import code_version

    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    text = capsys.readouterr().out.strip()
    assert korch.__version__ == version("korch")          # one source: the installed package's metadata
    assert text.startswith(f"korch {version('korch')} (code {code_version()});")
    for name in ("onnxruntime", "openvino", "torch", "onnx", "numpy"):
        assert f"{name} {version(name)}" in text


def test_the_verbose_log_says_when_each_line_happened() -> None:
    import logging

    from korch.logs import ElapsedFormatter

    record = logging.LogRecord("korch.select", logging.INFO, __file__, 1, "side by side: %s", ("x",), None)
    record.relativeCreated = 41_870.0
    assert ElapsedFormatter().format(record) == "   41.9s korch.select: side by side: x"


def test_optimize_rewrites_by_default_and_not_with_no_rewrites() -> None:
    parser = build_parser()
    assert _settings(parser.parse_args(["optimize", "m.onnx", "-o", "p"])).rewrites
    assert not _settings(parser.parse_args(["optimize", "m.onnx", "-o", "p", "--no-rewrites"])).rewrites


def test_optimize_profiles_split_plans_by_default_and_whole_models_only_when_asked() -> None:
    parser = build_parser()
    assert not _settings(parser.parse_args(["optimize", "m.onnx", "-o", "p"])).whole_models
    settings = _settings(parser.parse_args(["optimize", "m.onnx", "-o", "p", "--whole-models",
                                            "--backends", "onnxruntime"]))
    assert settings.whole_models and settings.backends == ("onnxruntime",)


def test_the_summary_counts_many_rewrites_and_lists_a_few() -> None:
    from korch.cli import rewrites_line

    notes = [f"conv_{k}: a 3x3 Conv by Winograd's F(2x2, 3x3)" for k in range(33)]
    line = rewrites_line(notes)
    assert line.startswith("33, the first 3 here") and "conv_2:" in line and "conv_3:" not in line
    assert line.endswith("and 30 more")
    assert rewrites_line(notes[:4]) == "; ".join(notes[:4])        # a few: all of them
