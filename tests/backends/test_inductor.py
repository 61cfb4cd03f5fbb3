"""The Inductor backend agrees with the reference backend; unsupported primitives come with a reason.

Inductor compiles are slow (the first in a process ~10 s, then ~1 s), so every supported primitive
is checked inside ONE compiled graph rather than one compile per primitive.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest

torch = pytest.importorskip("torch")

from korch.backends.base import CompileOptions  # noqa: E402
from korch.backends.inductor import InductorBackend  # noqa: E402
from korch.backends.inductor.lowering import LOWERINGS  # noqa: E402
from korch.backends.inductor.provider import LOWERING, onednn_linears_here  # noqa: E402
from korch.backends.reference import run_graph  # noqa: E402
from korch.ir.check import check_graph  # noqa: E402
from korch.ir.graph import Graph, GraphBuilder, Value  # noqa: E402
from korch.ir.opaque import OPAQUE, opaque_attrs  # noqa: E402
from korch.ir.ops import OPS  # noqa: E402
from korch.ir.types import DType, TensorType  # noqa: E402
from tests.backends.graphs import conv_bias_relu, mlp_gelu, shuffle_edge_pad  # noqa: E402
from tests.backends.test_reference import CASES  # noqa: E402

# Max |inductor - reference| over max |reference|, per float output; integer and bool outputs must be equal.
RTOL = 1e-5
F32 = np.float32
Case = tuple[str, list[tuple[tuple[int, ...], str]], dict[str, Any]]

# Semantics the one-case-per-primitive table does not pin. Extra input kinds: "n" ints with negatives,
# "d" non-zero int divisors, "h" exact halves, "u" floats never chained, "ci" constant indices with
# negatives, "cw" constant floats, "c3" constant 3.0, "ce" a constant exponent in [0.5, 2.5).
EXTRA_CASES: list[Case] = [
    ("div", [((3, 4), "n"), ((4,), "d")], {}),                              # integer div truncates toward 0
    ("round", [((3, 4), "h")], {}),                                          # half to even
    ("reduce_sum", [((2, 3), "f")], {"axes": (), "keepdims": False}),        # no axes: identity
    ("reduce_max", [((2, 3), "f")], {"axes": (), "keepdims": True}),
    ("reduce_prod", [((2, 3, 4), "p")], {"axes": (0, 1, 2), "keepdims": False}),
    ("gather", [((5, 4), "f"), ((2, 3), "ci")], {"axis": 1}),                # negative constant indices
    ("matmul", [((3, 8), "f"), ((8, 5), "cw")], {}),                         # frozen weight
    ("conv", [((1, 3, 8, 8), "f"), ((4, 3, 3, 3), "cw")],
     {"strides": (1, 1), "pads": (0, 2, 1, 1), "dilations": (1, 1), "group": 1}),
    ("conv_transpose", [((1, 2, 4, 4), "f"), ((2, 3, 3, 3), "cw")],
     {"strides": (2, 2), "pads": (2, 0, 0, 1), "dilations": (1, 1), "group": 1, "output_padding": (0, 1)}),
    ("window_max", [((1, 2, 5, 5, 5), "f")], {"kernel": (2, 2, 2), "strides": (1, 2, 1), "dilations": (2, 1, 1)}),
    ("window_mean", [((1, 2, 6, 6, 6), "f")], {"kernel": (2, 2, 2), "strides": (2, 2, 2), "dilations": (1, 1, 1)}),
    ("pad", [((3, 4), "f")], {"pads": (2, 0, 1, 3), "mode": "edge", "value": 0.0}),
    ("pad", [((2, 3), "n")], {"pads": (1, 0, 0, 2), "mode": "constant", "value": -2.5}),
    ("pow", [((3, 4), "f"), ((), "c3")], {}),                               # scalar exponents go to torch
    ("pow", [((2, 3), "p"), ((1,), "ce")], {}),                              # as Python numbers
    ("pow", [((3,), "f"), ((1, 1), "c3")], {}),                              # ...unless they add dims
    ("sign", [((3, 4), "n")], {}),
    ("cast", [((3, 4), "n")], {"to": DType.FLOAT32}),
    ("cast", [((3, 4), "b")], {"to": DType.FLOAT32}),
    ("cast", [((5,), "u")], {"to": DType.FLOAT32}),                         # no-op ops on a graph input:
    ("reduce_min", [((5,), "u")], {"axes": (), "keepdims": False}),          # outputs must not alias it
    ("pad", [((5,), "u")], {"pads": (0, 0), "mode": "edge", "value": 0.0}),
]


def _array(rng: np.random.Generator, shape: tuple[int, ...], kind: str, index_bound: int) -> np.ndarray:
    if kind == "b":
        return rng.random(shape) < 0.5
    if kind in ("i", "ci"):
        return rng.integers(-index_bound, index_bound, shape).astype(np.int64)
    if kind == "n":
        return rng.integers(-9, 10, shape).astype(np.int64)
    if kind == "d":
        return (rng.integers(1, 4, shape) * rng.choice([-1, 1], shape)).astype(np.int64)
    if kind == "h":
        return (rng.integers(-4, 5, shape) + 0.5).astype(F32)
    if kind == "c3":
        return np.full(shape, 3.0, F32)
    if kind == "ce":
        return rng.uniform(0.5, 2.5, shape).astype(F32)
    x = rng.standard_normal(shape).astype(F32)
    return np.abs(x) + 0.5 if kind == "p" else x


def all_primitives_graph(rng: np.random.Generator) -> tuple[Graph, dict[str, np.ndarray]]:
    """Every table case in one graph with one output per case. A float input whose shape an earlier
    float result has is chained to it (x + tanh(earlier), or + sigmoid for positive inputs)."""
    cases: list[Case] = [(op, specs, attrs) for op, table in CASES.items() for specs, attrs in table
                         if op != OPAQUE] + EXTRA_CASES
    builder = GraphBuilder("all_primitives")
    feeds: dict[str, np.ndarray] = {}
    latest: dict[tuple[int, ...], Value] = {}
    outputs: list[tuple[str, Value]] = []
    for k, (op, specs, attrs) in enumerate(cases):
        args = []
        for j, (shape, kind) in enumerate(specs):
            bound = specs[0][0][attrs.get("axis", 0)] if kind in ("i", "ci") else 0
            array = _array(rng, shape, kind, bound)
            if kind.startswith("c"):
                args.append(builder.add_constant(array))
                continue
            value = builder.add_input(f"x{k}_{j}", TensorType(shape, DType.from_numpy(array.dtype)))
            feeds[value.name] = array
            if kind in ("f", "p") and shape in latest:
                squash = builder.emit("tanh" if kind == "f" else "sigmoid", [latest[shape]])
                value = builder.emit("add", [value, squash])
            args.append(value)
        y = builder.emit(op, args, attrs)
        outputs.append((f"y{k}_{op}", y))
        if y.dtype == DType.FLOAT32:
            latest[y.shape] = y
    # Outputs Inductor would hand back without a fresh buffer: a constant, and one value twice.
    outputs.append(("y_constant", builder.add_constant(_array(rng, (3, 2), "f", 0))))
    outputs.append(("y_again", outputs[-2][1]))
    return check_graph(builder.build(outputs)), feeds


def _assert_matches(graph: Graph, kernel_outputs: list[np.ndarray], expected: dict[str, np.ndarray], seed: int) -> None:
    for name, actual in zip(graph.outputs, kernel_outputs):
        want = expected[name]
        assert actual.dtype == want.dtype and actual.shape == want.shape, f"{name}: {actual.dtype}{actual.shape}"
        assert actual.flags.c_contiguous, f"{name} is not C-contiguous"
        if want.dtype.kind != "f":
            assert np.array_equal(actual, want), f"{name} differs (seed {seed})"
            continue
        scale = float(np.abs(want).max())
        error = float(np.abs(actual.astype(np.float64) - want).max())
        assert error <= RTOL * scale, f"{name}: error {error:.3g} at scale {scale:.3g} (seed {seed})"


def _run_and_compare(graph: Graph, kernel: Any, feeds: dict[str, np.ndarray], seed: int) -> None:
    inputs = [feeds[name] for name in graph.inputs]
    copies = [x.copy() for x in inputs]
    actual = kernel.run(inputs)
    for x, copy in zip(inputs, copies):
        assert np.array_equal(x, copy), "the kernel modified an input"
        assert not any(np.shares_memory(x, y) for y in actual), "an output aliases an input"
    _assert_matches(graph, actual, run_graph(graph, feeds), seed)
    for y in actual:          # the caller owns the outputs: scribbling on them must not change later calls
        y.fill(1)


def test_every_primitive_has_a_lowering() -> None:
    """Except opaque: an ONNX node kept whole runs only in an ONNX engine."""
    assert set(LOWERINGS) == set(OPS) - {OPAQUE}


def test_all_primitives_in_one_compiled_graph(caplog: pytest.LogCaptureFixture, tmp_path: Path) -> None:
    """Every primitive's lowering, in one compiled graph, against the reference; and the same kernel
    saved and loaded back without compiling (artifact.py), against the reference again."""
    seed = int(np.random.default_rng().integers(2**31))
    graph, feeds = all_primitives_graph(np.random.default_rng(seed))
    assert {n.op for n in graph.nodes} == set(OPS) - {OPAQUE}
    backend = InductorBackend()
    assert backend.supports(graph) is None
    with caplog.at_level(logging.WARNING, logger="korch.backends.inductor"):
        kernel = backend.compile(graph, CompileOptions(threads=1))
    assert not caplog.records, "fell back to compiling without freezing"
    _run_and_compare(graph, kernel, feeds, seed)
    _, fresh = all_primitives_graph(np.random.default_rng(seed + 1))          # same graph shape, new inputs
    _run_and_compare(graph, kernel, fresh, seed + 1)
    backend.save_kernel(kernel, graph, tmp_path / "saved")
    loaded = backend.load_kernel(tmp_path / "saved", graph, CompileOptions(threads=1))
    _, fresh = all_primitives_graph(np.random.default_rng(seed + 2))
    _run_and_compare(graph, loaded, fresh, seed + 2)


@pytest.mark.parametrize("make,threads", [(mlp_gelu, 1), (conv_bias_relu, 2), (shuffle_edge_pad, 1)])
def test_fused_candidate_matches_reference(make: Any, threads: int, caplog: pytest.LogCaptureFixture) -> None:
    seed = int(np.random.default_rng().integers(2**31))
    rng = np.random.default_rng(seed)
    graph = make(rng)
    with caplog.at_level(logging.WARNING, logger="korch.backends.inductor"):
        kernel = InductorBackend().compile(graph, CompileOptions(threads=threads))
    assert not caplog.records, "fell back to compiling without freezing"
    for _ in range(2):
        feeds = {name: rng.standard_normal(graph.types[name].shape).astype(F32) for name in graph.inputs}
        _run_and_compare(graph, kernel, feeds, seed)


@pytest.mark.parametrize("make", [mlp_gelu, conv_bias_relu])
def test_kernel_compiles_from_the_graphs_own_constants_and_leaves_them_unchanged(make: Any) -> None:
    """The module Inductor freezes reads the graph's constants in place (a copy of every weight per
    compile was the largest transient of a whole-model compile); the kernel keeps them alive, matches
    the reference on fresh inputs, and running it leaves them as they were."""
    from korch.backends.inductor.backend import CandidateModule

    seed = int(np.random.default_rng().integers(2**31))
    rng = np.random.default_rng(seed)
    graph = make(rng)
    module = CandidateModule(graph, "cpu")
    assert module.constant_buffers, "no constant: the test would prove nothing"
    for name, buffer in module.constant_buffers:
        assert getattr(module, buffer).data_ptr() == graph.constants[name].ctypes.data, f"{name} was copied"
    before = {name: a.copy() for name, a in graph.constants.items()}
    kernel = InductorBackend().compile(graph, CompileOptions(threads=1))
    assert all(any(k is a for k in kernel.constants) for a in graph.constants.values())
    for _ in range(2):
        feeds = {name: rng.standard_normal(graph.types[name].shape).astype(F32) for name in graph.inputs}
        _run_and_compare(graph, kernel, feeds, seed)
    assert all(np.array_equal(graph.constants[name], a) for name, a in before.items()), "a constant changed"


@pytest.mark.parametrize("make", [mlp_gelu, conv_bias_relu])
def test_a_kernel_of_a_loaded_graph_holds_the_constants_it_reads(make: Any, tmp_path: Path) -> None:
    """A loaded plan's graph reads its constants lazily and holds none (serialize.LazyConstants):
    the kernel must hold the arrays its frozen code shares, or their memory is freed and reused under
    it (a loaded resnet-50's whole graph computed NaN). Here the freed blocks are reused at once, by
    arrays of their sizes full of NaN."""
    import gc

    from korch.ir.serialize import load_graph, save_graph

    seed = int(np.random.default_rng().integers(2**31))
    rng = np.random.default_rng(seed)
    save_graph(make(rng), tmp_path)
    graph = load_graph(tmp_path)
    sizes = [a.shape for a in graph.constants.values()]
    kernel = InductorBackend().compile(graph, CompileOptions(threads=1))
    gc.collect()
    reuse = [np.full(shape, np.nan, F32) for shape in sizes for _ in range(50)]
    for _ in range(2):
        feeds = {name: rng.standard_normal(graph.types[name].shape).astype(F32) for name in graph.inputs}
        _run_and_compare(graph, kernel, feeds, seed)
    del reuse


def test_a_kernels_generated_code_and_constants_are_freed_with_it() -> None:
    """Inductor registers every module it loads (PyCodeCache.modules, sys.modules), and a frozen
    graph's module holds the prepacked constants: the kernel must own them, or every profiled
    candidate's weights stay in memory until exit."""
    import gc
    import sys
    import weakref

    from torch._inductor.codecache import PyCodeCache

    seed = int(np.random.default_rng().integers(2**31))
    rng = np.random.default_rng(seed)
    graph = mlp_gelu(rng)
    kernel = InductorBackend().compile(graph, CompileOptions(threads=1))
    frozen = [m for m in kernel.modules if any(isinstance(v, torch.Tensor) for v in vars(m).values())]
    assert frozen, "no module of the kernel holds its frozen constants"
    registered = [m for m in kernel.modules
                  if any(m is r for r in PyCodeCache.modules) or sys.modules.get(m.__name__) is m]
    assert not registered, "the kernel's modules are still in Inductor's registries"
    feeds = {"x": rng.standard_normal((8, 32)).astype(F32)}
    _run_and_compare(graph, kernel, feeds, seed)          # still runs, out of the registries
    alive = [weakref.ref(m) for m in frozen]
    del kernel, frozen
    gc.collect()
    assert all(ref() is None for ref in alive), "a kernel's frozen constants outlived it"


def test_tracing_holds_only_the_intermediates_still_to_be_read() -> None:
    """The module runs on real tensors while make_fx traces it: every intermediate it held to the end
    made a whole model's activations live at once (yolov4: 2.2 GiB of a compile's peak). A chain of
    twelve ops, with one value read again at its end, keeps at most that value, the step's input and
    its output alive; the traced graph computes the same as the reference."""
    import weakref

    from torch.fx.experimental.proxy_tensor import make_fx
    from torch.utils._python_dispatch import TorchDispatchMode

    from korch.backends.inductor.backend import CandidateModule, warmup_inputs

    seed = int(np.random.default_rng().integers(2**31))
    rng = np.random.default_rng(seed)
    b = GraphBuilder("chain")
    x = b.add_input("x", TensorType((4, 64), DType.FLOAT32))
    first = v = b.emit("tanh", [x])
    for op in ("relu", "sigmoid", "neg", "exp", "tanh", "abs", "relu", "sigmoid", "neg", "tanh"):
        v = b.emit(op, [v])
    graph = check_graph(b.build([("y", b.emit("add", [v, first]))]))

    class Live(TorchDispatchMode):
        """The most op results alive at once, made while tracing."""

        def __init__(self) -> None:
            super().__init__()
            self.made: list[weakref.ref] = []
            self.most = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):          # type: ignore[no-untyped-def]
            out = func(*args, **(kwargs or {}))
            if isinstance(out, torch.Tensor):
                self.made.append(weakref.ref(out))
            self.most = max(self.most, sum(ref() is not None for ref in self.made))
            return out

    module = CandidateModule(graph, "cpu").eval()
    example = [torch.from_numpy(a) for a in warmup_inputs(graph)]
    with torch.no_grad(), Live() as live:
        traced = make_fx(module)(*example)
    assert live.most <= 4, f"tracing held {live.most} results at once (seed {seed})"
    feed = rng.standard_normal((4, 64)).astype(F32)
    with torch.no_grad():
        got = traced(torch.from_numpy(feed))[0].numpy()
    np.testing.assert_allclose(got, run_graph(graph, {"x": feed})["y"], rtol=1e-5, atol=1e-6,
                               err_msg=f"seed {seed}")


@pytest.mark.parametrize("exponent,scalar", [(np.float32(3.0), True), (np.full((1, 1), 3.0, F32), True),
                                            (np.full((1, 1, 1), 3.0, F32), False), (np.array([2.0, 3.0], F32), False)])
def test_a_one_element_exponent_is_traced_as_a_number(exponent: np.ndarray, scalar: bool) -> None:
    """As a frozen tensor, Inductor computes x ** 3.0 with exp and log per element; as a number it
    multiplies. An exponent that adds dims by broadcasting, or has more than one value, stays a tensor."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from korch.backends.inductor.backend import CandidateModule

    graph = _one_op("pow", [TensorType((4, 2), DType.FLOAT32)], {}, exponent)
    traced = make_fx(CandidateModule(graph, "cpu").eval())(torch.zeros(4, 2))
    targets = {n.target for n in traced.graph.nodes if n.op == "call_function"}
    aten = torch.ops.aten.pow
    assert (aten.Tensor_Scalar in targets, aten.Tensor_Tensor in targets) == (scalar, not scalar), targets


def _one_op(op: str, inputs: list[TensorType], attrs: dict[str, Any], constant: np.ndarray | None = None) -> Graph:
    b = GraphBuilder(op)
    args = [b.add_input(f"x{k}", t) for k, t in enumerate(inputs)]
    if constant is not None:
        args.append(b.add_constant(constant))
    return b.build([("y", b.emit(op, args, attrs))])


def _opaque_det() -> Graph:
    """An ONNX node korch keeps whole (Det, from the ONNX node det_0) after a primitive Inductor runs."""
    b = GraphBuilder("opaque")
    x = b.emit("exp", [b.add_input("x", TensorType((2, 3, 3), DType.FLOAT32))])
    attrs = opaque_attrs(onnx.helper.make_node("Det", ["a"], ["d"]), 0, {"": 17}, TensorType((2,), DType.FLOAT32))
    return b.build([("y", b.emit(OPAQUE, [x], attrs, origin="det_0"))])


UNSUPPORTED: list[tuple[Graph, str]] = [
    (_one_op("conv", [TensorType((1, 1, 3, 3, 3, 3), DType.FLOAT32), TensorType((1, 1, 2, 2, 2, 2), DType.FLOAT32)],
             {"strides": (1,) * 4, "pads": (0,) * 8, "dilations": (1,) * 4, "group": 1}), "4 spatial dims"),
    (_one_op("conv", [TensorType((1, 2, 5), DType.INT64), TensorType((1, 2, 3), DType.INT64)],
             {"strides": (1,), "pads": (0, 0), "dilations": (1,), "group": 1}), "float only"),
    (_one_op("pad", [TensorType((2, 3, 4, 5), DType.FLOAT32)],
             {"pads": (1, 0, 0, 1, 1, 0, 0, 1), "mode": "reflect", "value": 0.0}), "last 4 dims"),
    (_one_op("exp", [TensorType((4,), DType.INT64)], {}), "int64 input"),
    (_one_op("window_mean", [TensorType((1, 1, 4, 4), DType.INT32)],
             {"kernel": (2, 2), "strides": (1, 1), "dilations": (1, 1)}), "float only"),
    (_one_op("gather", [TensorType((3, 4), DType.FLOAT32)], {"axis": 1}, np.array([1, -5], np.int64)), "out of range"),
    (_opaque_det(), "opaque ONNX node det_0 (Det): only an ONNX engine runs it"),
]


@pytest.mark.parametrize("graph,reason", UNSUPPORTED, ids=[g.name for g, _ in UNSUPPORTED])
def test_unsupported_graph_gets_a_reason(graph: Graph, reason: str) -> None:
    backend = InductorBackend()
    found = backend.supports(graph)
    assert found is not None and reason in found, found
    with pytest.raises(ValueError, match="inductor cannot compile"):
        backend.compile(graph, CompileOptions())          # refused before any tracing


def test_the_backend_version_is_read_without_importing_torch() -> None:
    """Profile records are keyed by the backend's version: a warm optimize reads them without torch
    (1.5 s to import), and the key is the one torch itself reports, so stored records stay valid."""
    import subprocess
    import sys

    code = ("import sys; from korch.backends import get_backend; b = get_backend('inductor'); "
            "print(b.version); print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    linears = "-onednn" if onednn_linears_here() else ""
    assert out == [f"torch-{torch.__version__}-standalone-{LOWERING}{linears}", "False"]


def token_maps_concat(rng: np.random.Generator) -> Graph:
    """Two token maps [1, 64, 16] seen as images [1, 16, 8, 8] (transposed, then reshaped: a
    channels-last view) and concatenated on channels, as segformer-b0's decoder does: Inductor writes
    the concat channels-last."""
    b = GraphBuilder("token_maps_concat")
    x = b.add_input("x", TensorType((1, 64, 16), DType.FLOAT32))
    tokens = [b.emit("add", [x, b.add_constant(rng.standard_normal(16).astype(F32))]) for _ in range(2)]
    images = [b.emit("reshape", [b.emit("transpose", [t], {"perm": (0, 2, 1)})], {"shape": (1, 16, 8, 8)})
              for t in tokens]
    return check_graph(b.build([("y", b.emit("concat", images, {"axis": 1}))]))


def test_an_output_inductor_lays_out_as_it_likes_is_written_contiguous_by_the_kernel() -> None:
    """Else the kernel's caller copies it strided (segformer-b0's decoder region: 126 ms for 64 MiB)."""
    from korch.backends.inductor.backend import _compile_kernel, strided_outputs, warmup_inputs

    rng = np.random.default_rng(5)
    graph = token_maps_concat(rng)
    example = [torch.from_numpy(x) for x in warmup_inputs(graph)]
    fn, _ = _compile_kernel(graph, CompileOptions(threads=1), example, "cpu", frozenset(), onednn_linears_here())
    assert strided_outputs(fn, example) == {0}, "Inductor laid this output out contiguous: nothing is tested"
    kernel = InductorBackend().compile(graph, CompileOptions(threads=1))
    assert kernel.copies == ()                 # a fresh contiguous buffer: run hands it over as it is
    for seed in (1, 2):
        feeds = {"x": np.random.default_rng(seed).standard_normal((1, 64, 16)).astype(F32)}
        _run_and_compare(graph, kernel, feeds, seed)
