"""Tests for korch.zoo: registry, determinism, atomic export, mini-model ONNX parity, full-model sanity."""

from __future__ import annotations

import os
import zlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

from korch import zoo
from korch.errors import KorchError
from korch.zoo import export as zoo_export

# onnxruntime vs torch eager, max abs difference relative to the output's max magnitude. Random
# deep conv nets are ill-conditioned in fp32: torch fp32 vs fp64 alone differs by up to ~8e-5 of
# scale on yolox-mini, and ORT differs from torch by <= ~7e-5 (yolov4-mini); 5e-4 leaves headroom.
PARITY_RTOL = 5e-4
# Two different random inputs must move the output by more than this fraction of its scale.
MIN_CHANGE = 1e-3
# Random weights must give neither vanishing nor exploding outputs: max |output| within this range.
SCALE_RANGE = (0.05, 100.0)

FULL_NAMES = (
    "candy", "segformer-b0", "efficientvit-b1", "yolox-nano", "yolov4", "bert-base", "vit-b16", "gpt2-small",
)
# The mini variant of each full model.
MINI_OF = dict(zip(FULL_NAMES, (
    "candy-mini", "segformer-mini", "efficientvit-mini", "yolox-mini", "yolov4-mini", "bert-mini", "vit-mini",
    "gpt-mini",
), strict=True))

# Op types of each full model's exported graph (torch 2.13 dynamo exporter + onnxscript 0.7.2
# optimizer, opset 18; BatchNorm is folded into Conv). Each mini variant must use the same set.
FULL_OP_TYPES: dict[str, set[str]] = {
    "candy": {"Add", "Conv", "InstanceNormalization", "Pad", "Relu", "Resize"},
    "segformer-b0": {
        "Add", "Concat", "Conv", "Div", "Erf", "LayerNormalization", "MatMul", "Mul", "Relu", "Reshape",
        "Resize", "Softmax", "Split", "Transpose",
    },
    "efficientvit-b1": {
        "Add", "Concat", "Conv", "Div", "Gemm", "HardSwish", "LayerNormalization", "MatMul", "Pad",
        "ReduceMean", "Relu", "Reshape", "Slice", "Split", "Transpose",
    },
    "yolox-nano": {
        "Add", "Concat", "Conv", "MaxPool", "Mul", "Reshape", "Resize", "Sigmoid", "Slice", "Transpose",
    },
    "yolov4": {"Add", "Concat", "Conv", "LeakyRelu", "MaxPool", "Mish", "Resize"},
    "bert-base": {
        "Add", "Div", "Erf", "Gather", "LayerNormalization", "MatMul", "Mul", "Reshape", "Softmax",
        "Transpose",
    },
    "vit-b16": {
        "Add", "Concat", "Conv", "Div", "Erf", "Gather", "Gemm", "LayerNormalization", "MatMul", "Mul",
        "Reshape", "Softmax", "Transpose",
    },
    # Tanh GELU stays decomposed (Pow, Tanh, Mul, Add) at opset 18; the -inf causal mask is a Where.
    "gpt2-small": {
        "Add", "Gather", "LayerNormalization", "MatMul", "Mul", "Pow", "Reshape", "Softmax", "Split", "Tanh",
        "Transpose", "Where",
    },
}
# Mini variants with no full-size twin, and their op types: gpt-mini-lowest is gpt-mini with the
# additive finfo.min causal mask, an Add of a constant instead of a Where.
MINI_ONLY_OP_TYPES: dict[str, set[str]] = {"gpt-mini-lowest": FULL_OP_TYPES["gpt2-small"] - {"Where"}}
MINI_NAMES = (*MINI_OF.values(), *MINI_ONLY_OP_TYPES)

# Decoders with a causal mask, and the value each writes into masked scores.
CAUSAL_MINI_MASKS = {"gpt-mini": float("-inf"), "gpt-mini-lowest": float(np.finfo(np.float32).min)}
# gpt-mini and gpt-mini-lowest differ only in the mask style: masked terms are exactly 0 after the
# softmax in both, so their logits agree to float rounding of the same arithmetic.
MASK_STYLE_RTOL = 1e-6


def _seed(name: str, salt: str) -> int:
    """A fixed per-test seed derived from the model name and the test."""
    return zlib.crc32(f"{salt}:{name}".encode())


def _mini_op_types(name: str) -> set[str]:
    if name in MINI_ONLY_OP_TYPES:
        return MINI_ONLY_OP_TYPES[name]
    return FULL_OP_TYPES[next(f for f, m in MINI_OF.items() if m == name)]


def _random_inputs(model: zoo.ZooModel, rng: np.random.Generator) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    for spec in model.inputs:
        if spec.dtype == "int64":
            out[spec.name] = rng.integers(0, spec.high, size=spec.shape, dtype=np.int64)
        else:
            out[spec.name] = rng.standard_normal(spec.shape, dtype=np.float32)
    return out


def _eager(module: torch.nn.Module, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    with torch.no_grad():
        out = module(*[torch.from_numpy(v) for v in inputs.values()])
    outs = out if isinstance(out, (tuple, list)) else (out,)
    return [o.numpy() for o in outs]


def _assert_sensitive(a: Sequence[np.ndarray], b: Sequence[np.ndarray]) -> None:
    """Outputs are finite, well scaled, and differ materially between the two inputs."""
    for x, y in zip(a, b, strict=True):
        assert np.isfinite(x).all() and np.isfinite(y).all()
        scale = float(np.abs(x).max())
        assert SCALE_RANGE[0] < scale < SCALE_RANGE[1], scale
        assert float(np.abs(x - y).max()) > MIN_CHANGE * scale


def test_registry_lists_all_models() -> None:
    assert tuple(m.name for m in zoo.list_models(include_mini=False)) == FULL_NAMES
    all_models = zoo.list_models()
    assert {m.name for m in all_models} == set(FULL_NAMES) | set(MINI_NAMES)
    assert all(m.mini == (m.name in MINI_NAMES) for m in all_models)
    for m in all_models:
        assert m.description and m.outputs and m.inputs
        assert zoo.get_model(m.name) is m


@pytest.mark.parametrize("call", [zoo.get_model, zoo.build_module, zoo.example_inputs, zoo.to_model_proto])
def test_unknown_model_lists_valid_names(call) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(zoo.UnknownModelError) as info:
        call("resnet-9000")
    assert isinstance(info.value, ValueError) and isinstance(info.value, KorchError)
    message = str(info.value)
    assert "resnet-9000" in message
    for name in FULL_NAMES + MINI_NAMES:
        assert name in message


def test_build_and_inputs_are_deterministic() -> None:
    a = zoo.build_module("yolox-mini", seed=3).state_dict()
    b = zoo.build_module("yolox-mini", seed=3).state_dict()
    c = zoo.build_module("yolox-mini", seed=4).state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert any(not torch.equal(a[k], c[k]) for k in a if a[k].is_floating_point())
    x, y = zoo.example_inputs("bert-mini", seed=5), zoo.example_inputs("bert-mini", seed=5)
    assert x.keys() == {"input_ids"} and np.array_equal(x["input_ids"], y["input_ids"])
    high = zoo.get_model("bert-mini").inputs[0].high
    assert x["input_ids"].dtype == np.int64 and high is not None and x["input_ids"].max() < high


def test_export_is_atomic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "model.onnx"

    def boom(src: str, dst: str) -> None:
        raise OSError("simulated failure")

    monkeypatch.setattr(zoo_export.os, "replace", boom)
    with pytest.raises(OSError, match="simulated"):
        zoo.export_onnx("vit-mini", target)
    assert list(tmp_path.iterdir()) == []
    monkeypatch.undo()
    zoo.export_onnx("vit-mini", target)
    assert [p.name for p in tmp_path.iterdir()] == ["model.onnx"]


@pytest.mark.parametrize("name", MINI_NAMES)
def test_mini_model_exports_and_matches_eager(name: str, tmp_path: Path) -> None:
    model = zoo.get_model(name)
    path = tmp_path / f"{name}.onnx"
    zoo.export_onnx(name, path)
    proto = onnx.load(os.fspath(path))
    onnx.checker.check_model(proto, full_check=True)
    assert proto.ir_version == 10
    assert not proto.functions
    assert {n.domain for n in proto.graph.node} <= {""}
    assert all(t.data_location != onnx.TensorProto.EXTERNAL for t in proto.graph.initializer)
    assert {n.op_type for n in proto.graph.node} == _mini_op_types(name)

    session = ort.InferenceSession(os.fspath(path), providers=["CPUExecutionProvider"])
    sess_inputs = session.get_inputs()
    assert [i.name for i in sess_inputs] == [s.name for s in model.inputs]
    assert [tuple(i.shape) for i in sess_inputs] == [s.shape for s in model.inputs]
    assert [o.name for o in session.get_outputs()] == list(model.outputs)

    module = zoo.build_module(name)
    rng = np.random.default_rng(_seed(name, "mini"))
    first, second = _random_inputs(model, rng), _random_inputs(model, rng)
    ort_first = session.run(None, first)
    eager_first = _eager(module, first)
    for got, want in zip(ort_first, eager_first, strict=True):
        assert got.shape == want.shape and got.dtype == np.float32
        scale = float(np.abs(want).max())
        assert float(np.abs(got - want).max()) <= PARITY_RTOL * scale
    _assert_sensitive(ort_first, session.run(None, second))
    _assert_sensitive(eager_first, _eager(module, second))


def test_to_model_proto_is_in_memory_model() -> None:
    proto = zoo.to_model_proto("candy-mini", seed=1)
    assert isinstance(proto, onnx.ModelProto) and proto.ir_version == 10
    assert [i.name for i in proto.graph.input] == ["input"]
    assert [o.name for o in proto.graph.output] == ["output"]


@pytest.mark.parametrize("name", FULL_NAMES)
def test_full_model_output_depends_on_input(name: str) -> None:
    model = zoo.get_model(name)
    module = zoo.build_module(name)
    assert not module.training
    rng = np.random.default_rng(_seed(name, "full"))
    first, second = _random_inputs(model, rng), _random_inputs(model, rng)
    _assert_sensitive(_eager(module, first), _eager(module, second))


def test_cached_export_exports_once_in_a_child_and_matches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Exported in a child process (torch's exporter keeps the module alive in the process that
    exports), once: the second call finds the file and starts no child."""
    children = []
    real = zoo_export._export_in_child

    def counting(name: str, path: Path, seed: int) -> None:
        children.append(name)
        real(name, path, seed)

    monkeypatch.setattr(zoo_export, "_export_in_child", counting)
    monkeypatch.setattr(zoo_export, "to_model_proto", None)       # never in this process
    first = zoo.cached_export("candy-mini", tmp_path)
    second = zoo.cached_export("candy-mini", tmp_path)
    assert first == second and children == ["candy-mini"]
    assert [p.name for p in (tmp_path / "zoo").iterdir()] == [first.name]    # no temp file left
    monkeypatch.undo()
    assert onnx.load(os.fspath(first)).SerializeToString() == zoo.to_model_proto("candy-mini").SerializeToString()
    assert zoo.cached_export("candy-mini", tmp_path, seed=1) != first


def test_a_failed_export_in_the_child_is_an_os_error_that_names_the_model(tmp_path: Path) -> None:
    """The child's error comes back as an OSError naming the model and the child's reason (and
    resolve_model then builds in memory, where a real export error shows itself). Here the
    target is a directory, so the child's final rename fails."""
    target = tmp_path / "zoo" / f"candy-mini-seed0-{zoo_export.export_fingerprint()}.onnx"
    target.mkdir(parents=True)
    with pytest.raises(OSError, match="exporting zoo model candy-mini .* failed: IsADirectoryError"):
        zoo.cached_export("candy-mini", tmp_path)
    assert sorted(p.name for p in (tmp_path / "zoo").iterdir()) == [target.name]      # no temp file left


def test_cached_export_refuses_unknown_names_before_writing(tmp_path: Path) -> None:
    with pytest.raises(KorchError, match="no-such-model"):
        zoo.cached_export("no-such-model", tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_a_cached_export_is_found_without_importing_torch(tmp_path: Path) -> None:
    """A warm optimize of a zoo model reads its cached export; the model modules (and torch, 1.5 s)
    are imported only to build one."""
    import subprocess
    import sys

    path = zoo.cached_export("candy-mini", tmp_path)
    code = ("import sys; from korch.pipeline import resolve_model; "
            f"print(resolve_model('candy-mini', {str(tmp_path)!r})); print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == [str(path), "False"]


def test_resolve_model_falls_back_to_memory_when_the_cache_is_unwritable(tmp_path: Path) -> None:
    from korch.pipeline import resolve_model

    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    assert isinstance(resolve_model("candy-mini", blocker), onnx.ModelProto)
    assert isinstance(resolve_model("candy-mini", tmp_path), Path)


def test_a_directory_named_like_a_zoo_model_is_not_the_model(tmp_path: Path, monkeypatch) -> None:
    """`korch optimize yolov4` where ./yolov4 is a directory (a plan written by `-o yolov4`) means the
    zoo model; a directory of any other name is refused as a directory, not as a missing file."""
    from korch.errors import ModelLoadError
    from korch.pipeline import resolve_model

    cache = tmp_path / "cache"
    path = zoo.cached_export("candy-mini", cache)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "candy-mini").mkdir()
    (tmp_path / "plans").mkdir()
    assert resolve_model("candy-mini", cache) == path
    with pytest.raises(ModelLoadError, match="plans: a directory, not an ONNX file, and not a zoo model"):
        resolve_model("plans", cache)
    with pytest.raises(ModelLoadError, match="absent: no such file, and not a zoo model"):
        resolve_model("absent", cache)


def _session(name: str) -> ort.InferenceSession:
    proto = zoo.to_model_proto(name)
    return ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("name", CAUSAL_MINI_MASKS)
def test_decoder_graph_holds_its_causal_mask(name: str) -> None:
    """The exported mask is a constant [seq, seq] tensor, applied to every layer's scores in its style:
    a bool 'blocked' (strictly above the diagonal) selecting -inf in a Where, or an additive float mask."""
    proto = zoo.to_model_proto(name)
    seq = zoo.get_model(name).inputs[0].shape[1]
    blocked = np.triu(np.ones((seq, seq), dtype=bool), k=1)
    masked_value = CAUSAL_MINI_MASKS[name]
    constants = {t.name: onnx.numpy_helper.to_array(t) for t in proto.graph.initializer}
    masks = []
    for node in proto.graph.node:
        arrays = [constants.get(i) for i in node.input]
        if node.op_type == "Where" and arrays[0] is not None and arrays[0].shape == (seq, seq):
            assert np.array_equal(arrays[0], blocked) and arrays[1] is not None
            masks.append(float(arrays[1]))
        if node.op_type == "Add" and any(a is not None and a.shape == (seq, seq) for a in arrays):
            mask = next(a for a in arrays if a is not None and a.shape == (seq, seq))
            assert np.array_equal(mask, np.where(blocked, np.float32(masked_value), np.float32(0)))
            masks.append(float(mask.min()))
    layers = sum(n.op_type == "Softmax" for n in proto.graph.node)
    assert masks == [masked_value] * layers


@pytest.mark.parametrize("name", CAUSAL_MINI_MASKS)
def test_decoder_is_causal_in_onnxruntime(name: str) -> None:
    """Changing token t leaves the logits of positions < t bit-identical and changes every position >= t."""
    session = _session(name)
    spec = zoo.get_model(name).inputs[0]
    assert spec.high is not None
    rng = np.random.default_rng(_seed(name, "causal"))
    seq = spec.shape[1]
    for t in (1, int(rng.integers(2, seq - 1)), seq - 1):
        ids = rng.integers(0, spec.high, size=spec.shape, dtype=np.int64)
        changed = ids.copy()
        changed[0, t] = (ids[0, t] + rng.integers(1, spec.high)) % spec.high
        before, after = (session.run(None, {spec.name: x})[0] for x in (ids, changed))
        assert np.array_equal(before[:, :t], after[:, :t]), f"position < {t} sees token {t}"
        moved = np.abs(before[:, t:] - after[:, t:]).max(axis=-1)
        assert (moved > MIN_CHANGE * float(np.abs(before).max())).all(), moved


def test_decoder_mask_styles_compute_the_same_logits() -> None:
    """With the same seed the -inf and finfo.min variants are one function: each mask really masks."""
    spec = zoo.get_model("gpt-mini").inputs[0]
    assert spec.high is not None
    ids = np.random.default_rng(_seed("gpt-mini", "styles")).integers(0, spec.high, spec.shape, dtype=np.int64)
    neg_inf, lowest = (_session(n).run(None, {spec.name: ids})[0] for n in CAUSAL_MINI_MASKS)
    assert np.isfinite(neg_inf).all() and np.isfinite(lowest).all()
    assert float(np.abs(neg_inf - lowest).max()) <= MASK_STYLE_RTOL * float(np.abs(neg_inf).max())


@pytest.mark.parametrize("freezing", [True, False])
def test_the_torch_compile_peer_is_frozen_when_asked(freezing: bool) -> None:
    """Freezing folds the weights into the compiled code: a weight changed after the compile is seen
    without freezing and not with it. (torch.compile(options={"freezing": True}) froze nothing: Dynamo
    reads the flag while it traces, before Inductor's options apply.)"""
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.ReLU()).eval()
    x = torch.randn(4, 16)
    call = zoo.torch_compiled(module, [x], freezing)
    before = call().clone()
    with torch.no_grad():
        module[0].weight.mul_(-1.0)
    changed = not torch.allclose(call(), before)
    assert changed is not freezing
    assert torch._inductor.config.freezing is False            # set for the compile only


@pytest.mark.parametrize("frozen_faster", [True, False])
def test_the_faster_torch_compile_variant_runs_its_own_code(frozen_faster: bool) -> None:
    """Whichever variant times faster is the one that runs: the frozen one ignores a later change of its
    weight, the other sees it. (Compiled frozen, then unfrozen, in one Dynamo cache, the frozen module
    ran its unfrozen twin's code: this test fails on that procedure.)"""
    def build() -> torch.nn.Module:
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.ReLU()).eval()

    x = torch.randn(4, 16)
    order = iter([2.0, 1.0] if frozen_faster else [1.0, 2.0])        # seconds: unfrozen first, then frozen
    call, frozen, module = zoo.fastest_torch_compiled(build, [x], lambda f: (f(), next(order))[1])
    assert frozen is frozen_faster
    before = call().clone()
    with torch.no_grad():
        module[0].weight.mul_(-1.0)
    assert torch.allclose(call(), before) is frozen_faster
