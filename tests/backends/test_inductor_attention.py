"""Attention chains in a fissioned graph compile to torch's fused attention and agree with the reference.

The graphs are ONNX models fissioned by korch, so the chain is the one fission really writes
(Softmax as max, sub, exp, sum, reciprocal, mul). Each matched kernel is run under torch.profiler to
check that the fused flash kernel ran, not torch's unfused fallback, and compared with the reference
on fresh random inputs.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

torch = pytest.importorskip("torch")

from korch.backends.base import CompileOptions  # noqa: E402
from korch.backends.inductor import InductorBackend  # noqa: E402
from korch.backends.inductor.attention import find_attention  # noqa: E402
from korch.backends.reference import run_graph  # noqa: E402
from korch.ir.graph import Graph  # noqa: E402
from korch.pipeline import run_fission  # noqa: E402

RTOL = 1e-5
FLASH = "aten::_scaled_dot_product_flash_attention_for_cpu"
F = TensorProto.FLOAT


def _model(inputs: dict[str, list[int]], nodes: list[onnx.NodeProto], outputs: dict[str, list[int]],
           constants: dict[str, np.ndarray]) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes, "attention",
        [helper.make_tensor_value_info(n, F, s) for n, s in inputs.items()],
        [helper.make_tensor_value_info(n, F, s) for n, s in outputs.items()],
        [onnx.numpy_helper.from_array(a, n) for n, a in constants.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def heads(probs_output: bool = False, axis: int = -1) -> onnx.ModelProto:
    """An exported model's attention: k arrives [B, S, H, E] and is transposed to kT [B, H, E, S]."""
    nodes = [helper.make_node("Transpose", ["k"], ["kT"], perm=[0, 2, 3, 1]),
             helper.make_node("MatMul", ["q", "kT"], ["s"]),
             helper.make_node("Mul", ["s", "scale"], ["scaled"]),
             helper.make_node("Softmax", ["scaled"], ["p"], axis=axis),
             helper.make_node("MatMul", ["p", "v"], ["o"])]
    outputs = {"o": [1, 2, 24, 16]} | ({"p": [1, 2, 24, 40]} if probs_output else {})
    return _model({"q": [1, 2, 24, 16], "k": [1, 40, 2, 16], "v": [1, 2, 40, 16]}, nodes, outputs,
                  {"scale": np.array(0.25, np.float32)})


def stored_kt_masked(v_width: int = 8) -> onnx.ModelProto:
    """Rank 3, kT stored as it is used, the scale a division, and an additive mask."""
    nodes = [helper.make_node("MatMul", ["q", "kT"], ["s"]),
             helper.make_node("Div", ["s", "root"], ["scaled"]),
             helper.make_node("Add", ["scaled", "mask"], ["masked"]),
             helper.make_node("Softmax", ["masked"], ["p"], axis=-1),
             helper.make_node("MatMul", ["p", "v"], ["o"])]
    mask = np.where(np.tril(np.ones((20, 20), bool)), 0.0, -1e4).astype(np.float32)
    return _model({"q": [3, 20, 8], "kT": [3, 8, 20], "v": [3, 20, v_width]}, nodes, {"o": [3, 20, v_width]},
                  {"root": np.array(np.sqrt(8.0), np.float32), "mask": mask})


def causal_filled(whole_row: bool = False) -> onnx.ModelProto:
    """gpt2's export: the scaled scores filled with -inf above the diagonal (Where), as a masked_fill."""
    nodes = [helper.make_node("MatMul", ["q", "kT"], ["s"]),
             helper.make_node("Mul", ["s", "scale"], ["scaled"]),
             helper.make_node("Where", ["upper", "ninf", "scaled"], ["filled"]),
             helper.make_node("Softmax", ["filled"], ["p"], axis=-1),
             helper.make_node("MatMul", ["p", "v"], ["o"])]
    upper = np.triu(np.ones((16, 16), bool), 1)
    if whole_row:
        upper[3] = True
    return _model({"q": [1, 2, 16, 8], "kT": [1, 2, 8, 16], "v": [1, 2, 16, 8]}, nodes, {"o": [1, 2, 16, 8]},
                  {"scale": np.array(0.3, np.float32), "ninf": np.array(-np.inf, np.float32), "upper": upper})


def _graph(model: onnx.ModelProto) -> Graph:
    return run_fission(model, strict=True).graph


def _feeds(graph: Graph, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {n: (rng.standard_normal(graph.types[n].shape) * 2).astype(np.float32) for n in graph.inputs}


def _check(graph: Graph, kernel, seed: int) -> list[str]:
    """Compare the kernel with the reference on fresh inputs; return the ops torch ran for it."""
    feeds = _feeds(graph, seed)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        actual = kernel.run([feeds[n] for n in graph.inputs])
    expected = run_graph(graph, feeds)
    for name, got in zip(graph.outputs, actual):
        want = expected[name]
        nan = np.isnan(want)          # a row masked whole is NaN in the reference: so must it be here
        assert np.array_equal(np.isnan(got), nan), f"{graph.name} {name}: NaN where the reference has none"
        error = float(np.max(np.abs(got[~nan].astype(np.float64) - want[~nan])))
        scale = float(np.max(np.abs(want[~nan])))
        assert error <= RTOL * scale, f"{graph.name} {name}: error {error:.3g} (seed {seed})"
    return [e.key for e in prof.key_averages()]


@pytest.mark.parametrize("build,mask", [(heads, None), (stored_kt_masked, "added"), (causal_filled, "filled")])
def test_attention_runs_fused_and_matches_the_reference(build, mask: str | None) -> None:
    graph = _graph(build())
    chains = find_attention(graph)
    assert len(chains) == 1
    assert (chains[0].mask is not None, chains[0].masked_out) == (mask is not None, mask == "filled")
    assert len(chains[0].nodes) == len(graph.nodes) - (1 if build is heads else 0)   # all but the Transpose
    kernel = InductorBackend().compile(graph, CompileOptions(threads=1))
    for seed in (1, 2):
        assert FLASH in _check(graph, kernel, seed)


@pytest.mark.parametrize("model,why", [(heads(probs_output=True), "the probabilities are an output"),
                                       (heads(axis=2), "softmax over another axis"),
                                       (stored_kt_masked(v_width=12), "values wider than the keys"),
                                       (causal_filled(whole_row=True), "a whole row masked (NaN, not zeros)")])
def test_a_chain_that_is_not_exactly_attention_is_lowered_as_it_is(model: onnx.ModelProto, why: str) -> None:
    graph = _graph(model)
    assert find_attention(graph) == [], why
    kernel = InductorBackend().compile(graph, CompileOptions(threads=1))
    assert FLASH not in _check(graph, kernel, 3), why


def test_a_saved_attention_kernel_loads_to_the_same_outputs(tmp_path: Path) -> None:
    graph = _graph(stored_kt_masked())
    backend = InductorBackend()
    kernel = backend.compile(graph, CompileOptions(threads=1))
    backend.save_kernel(kernel, graph, tmp_path / "k")
    loaded = backend.load_kernel(tmp_path / "k", graph, CompileOptions(threads=1))
    feeds = _feeds(graph, 4)
    inputs = [feeds[n] for n in graph.inputs]
    for want, got in zip(kernel.run(inputs), loaded.run(inputs)):
        assert float(np.max(np.abs(got - want))) <= 1e-6 * float(np.max(np.abs(want)))
    assert FLASH in _check(graph, loaded, 5)
