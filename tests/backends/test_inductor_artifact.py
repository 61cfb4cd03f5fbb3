"""A compiled Inductor kernel saved and loaded back without compiling (backends/inductor/artifact.py):
the same outputs as the kernel it was saved from, packed weights packed again, weights stored once,
and a damaged artifact refused by name."""

from __future__ import annotations

import gc
import json
import weakref
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from korch.backends.base import CompileOptions, SavedKernelError  # noqa: E402
from korch.backends.inductor import InductorBackend  # noqa: E402
from korch.backends.inductor.artifact import CHECK, META, TENSORS, load_kernel  # noqa: E402
from korch.ir.check import check_graph  # noqa: E402
from korch.ir.graph import Graph, GraphBuilder  # noqa: E402
from korch.ir.types import DType, TensorType  # noqa: E402
from tests.backends.graphs import conv_bias_relu, mlp_gelu  # noqa: E402

F32 = np.float32


def conv_transpose_relu(rng: np.random.Generator) -> Graph:
    b = GraphBuilder("conv_transpose_relu")
    x = b.add_input("x", TensorType((1, 4, 8, 8), DType.FLOAT32))
    w = b.add_constant(rng.standard_normal((4, 6, 3, 3)).astype(F32))
    y = b.emit("conv_transpose", [x, w], {"strides": (2, 2), "pads": (1, 1, 1, 1), "dilations": (1, 1), "group": 1,
                                          "output_padding": (1, 1)})
    return check_graph(b.build([("y", b.emit("relu", [y]))]))


def shared_weight_mlp(rng: np.random.Generator) -> Graph:
    """One weight read by two matmuls of the same batch (Inductor packs it once for both)."""
    b = GraphBuilder("shared_weight_mlp")
    x = b.add_input("x", TensorType((16, 48), DType.FLOAT32))
    w = b.add_constant(rng.standard_normal((48, 48)).astype(F32) / 7)
    h = b.emit("tanh", [b.emit("matmul", [x, w])])
    return check_graph(b.build([("y", b.emit("matmul", [h, w]))]))


def conv_sum(rng: np.random.Generator) -> Graph:
    """relu(conv3x3(relu(conv3x3(x))) + conv1x1(x)): the second 3x3 conv's output is added into the
    1x1 conv's, which nothing else reads, so Inductor fuses the add into that conv in place
    (mkldnn::_convolution_pointwise_, as in a conv net's residual blocks)."""
    b = GraphBuilder("conv_sum")
    x = b.add_input("x", TensorType((1, 8, 16, 16), DType.FLOAT32))
    same = {"strides": (1, 1), "pads": (1, 1, 1, 1), "dilations": (1, 1), "group": 1}
    h = b.emit("relu", [b.emit("conv", [x, b.add_constant(rng.standard_normal((8, 8, 3, 3)).astype(F32) / 9)], same)])
    other = b.emit("conv", [x, b.add_constant(rng.standard_normal((8, 8, 1, 1)).astype(F32) / 3)],
                   same | {"pads": (0, 0, 0, 0)})
    y = b.emit("add", [b.emit("conv", [h, b.add_constant(rng.standard_normal((8, 8, 3, 3)).astype(F32) / 9)], same),
                       other])
    return check_graph(b.build([("y", b.emit("relu", [y]))]))


# graph, and the op that must read one of its packed weights (else the case tests something else);
# korch's matmuls are oneDNN's linears (onednn.py), Inductor's own choice MKL's (onednn_linears=False)
GRAPHS = {
    "matmul packed for oneDNN, transposed weight": (lambda rng: mlp_gelu(rng, preactivation_output=True),
                                                    "mkldnn::_linear_pointwise"),
    "matmul packed for MKL, transposed weight": (lambda rng: mlp_gelu(rng, preactivation_output=True),
                                                 "mkl::_mkl_linear"),
    "conv packed for oneDNN": (conv_bias_relu, "mkldnn::_convolution_pointwise"),
    "one weight packed for two matmuls": (shared_weight_mlp, "mkldnn::_linear_pointwise"),
    "one weight packed for two matmuls by MKL": (shared_weight_mlp, "mkl::_mkl_linear"),
    "conv transpose packed for oneDNN": (conv_transpose_relu, "mkldnn::_convolution_transpose_pointwise"),
    "conv adding into another conv's output in place": (conv_sum, "mkldnn::_convolution_pointwise_"),
}


def _saved(graph: Graph, directory: Path, onednn_linears: bool = True):
    backend = InductorBackend(onednn_linears=onednn_linears)
    kernel = backend.compile(graph, CompileOptions(threads=1))
    backend.save_kernel(kernel, graph, directory)
    return kernel


@pytest.mark.parametrize("name", list(GRAPHS))
def test_a_saved_kernel_loads_to_the_same_outputs_with_its_weights_stored_once(name: str, tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    build, op = GRAPHS[name]
    graph = build(rng)
    kernel = _saved(graph, tmp_path / "k", onednn_linears=not op.startswith("mkl::"))
    meta = json.loads((tmp_path / "k" / META).read_text())
    packed = [p for p in meta["params"].values() if p["kind"] == "packed"]
    assert op in {p["op"] for p in packed}, f"{name}: no weight packed for {op} here, so it is not tested"
    loaded = InductorBackend().load_kernel(tmp_path / "k", graph, CompileOptions(threads=1))
    for _ in range(2):                                     # fresh inputs each time, never the saved ones
        inputs = [rng.standard_normal(graph.types[n].shape).astype(F32) for n in graph.inputs]
        for want, got in zip(kernel.run(inputs), loaded.run(inputs)):
            assert float(np.max(np.abs(got - want))) <= 1e-6 * max(1.0, float(np.max(np.abs(want)))), name
    # Each weight is stored once: the graph's own weights are read from the graph, not from tensors.npz.
    weights = sum(a.nbytes for a in graph.constants.values() if a.size > 1)
    with np.load(tmp_path / "k" / TENSORS) as stored:
        assert sum(stored[k].nbytes for k in stored.files) < weights / 2


def test_the_plain_copy_of_an_mkl_packed_weight_is_not_held_once_loaded(tmp_path: Path) -> None:
    """MKL's packed linear reads its plain weight only for the output width: a loaded kernel holds
    a one-element stand-in, not the weight (which freezing had kept beside the packed copy)."""
    graph = mlp_gelu(np.random.default_rng(8))
    kernel = _saved(graph, tmp_path / "k", onednn_linears=False)
    meta = json.loads((tmp_path / "k" / META).read_text())
    assert sorted(p["kind"] for p in meta["params"].values()) == ["constant", "packed", "shape"]
    weight = next(a for a in graph.constants.values() if a.ndim == 2)
    assert any(a is weight for a in kernel.constants), "the compiled kernel holds the plain weight"
    loaded = load_kernel(tmp_path / "k", graph, 1)
    assert not any(a is weight for a in loaded.constants)
    held = [t for m in loaded.modules for t in vars(m).values() if isinstance(t, torch.Tensor) and t.numel() > 1
            and not t.is_mkldnn and t.untyped_storage().nbytes() >= weight.nbytes]
    assert not held, "a tensor as large as the weight is still held"


class _ReadEachTime(Mapping):
    """Constants as a loaded plan gives them: a read-only array read on each access, freed when
    nobody holds it (LazyConstants), with a weak reference to every array handed out."""

    def __init__(self, constants: Mapping[str, np.ndarray]) -> None:
        self.constants = constants
        self.handed: dict[str, list[weakref.ref]] = {}

    def __getitem__(self, name: str) -> np.ndarray:
        array = np.array(self.constants[name], copy=True)
        array.setflags(write=False)
        self.handed.setdefault(name, []).append(weakref.ref(array))
        return array

    def __iter__(self):
        return iter(self.constants)

    def __len__(self) -> int:
        return len(self.constants)


def test_a_kernel_loaded_from_constants_read_on_demand_holds_what_its_views_read(tmp_path: Path) -> None:
    """The arrays a loaded kernel's constants are views of stay alive with it; the plain weight it
    packed again is read and let go (bert-base's plan then runs in onnxruntime's memory)."""
    graph = mlp_gelu(np.random.default_rng(10))
    kernel = _saved(graph, tmp_path / "k")
    lazy = _ReadEachTime(graph.constants)
    loaded = load_kernel(tmp_path / "k", replace(graph, constants=lazy), 1)
    gc.collect()
    meta = json.loads((tmp_path / "k" / META).read_text())
    viewed = {p["constant"] for p in meta["params"].values() if p["kind"] == "constant"}
    packed = {p["dense"]["constant"] for p in meta["params"].values() if p["kind"] == "packed"}
    assert viewed and packed and not viewed & packed
    for name in viewed:
        assert any(ref() is not None for ref in lazy.handed[name]), f"{name} was freed under a view of it"
    for name in packed:
        assert all(ref() is None for ref in lazy.handed[name]), f"the plain weight {name} is still held"
    rng = np.random.default_rng(11)
    inputs = [rng.standard_normal(graph.types[n].shape).astype(F32) for n in graph.inputs]
    for want, got in zip(kernel.run(inputs), loaded.run(inputs)):
        np.testing.assert_array_equal(got, want)


def test_a_damaged_saved_kernel_is_refused_by_name(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    graph = mlp_gelu(rng)
    _saved(graph, tmp_path / "k")
    options = CompileOptions(threads=1)
    InductorBackend().load_kernel(tmp_path / "k", graph, options)          # intact: loads

    meta_path = tmp_path / "k" / META
    meta = json.loads(meta_path.read_text())
    meta_path.write_text(json.dumps(meta | {"torch": "1.0.0"}))
    with pytest.raises(SavedKernelError, match=r"compiled with torch 1\.0\.0, this is torch"):
        load_kernel(tmp_path / "k", graph, 1)
    meta_path.write_text(json.dumps(meta | {"compiler_line": 3}))
    with pytest.raises(SavedKernelError, match="wrapper.py: line 3 is not the one korch saved"):
        load_kernel(tmp_path / "k", graph, 1)
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(SavedKernelError, match="compiled for 1 threads, asked for 2"):
        load_kernel(tmp_path / "k", graph, 2)

    # Weights that are not the ones it was saved with: the check run at load catches it.
    other = mlp_gelu(np.random.default_rng(4))
    with pytest.raises(SavedKernelError, match="output 0 differs from what the kernel gave when saved"):
        load_kernel(tmp_path / "k", other, 1)

    so = sorted((tmp_path / "k").glob("k*.so"))[0]
    so.unlink()
    with pytest.raises(SavedKernelError, match=so.name):
        load_kernel(tmp_path / "k", graph, 1)


def test_a_kernel_compiled_or_loaded_to_run_among_others_holds_its_openmp_workers(tmp_path: Path) -> None:
    """The CPUs a kernel holds its OpenMP workers to (placement.hold_openmp_workers) come with it from
    its CompileOptions, compiled or loaded: a saved split plan's Inductor kernels hold theirs as the
    profiled ones did; a kernel that runs alone (its plan's only one) leaves them to the engine."""
    graph = mlp_gelu(np.random.default_rng(5))
    backend = InductorBackend()
    among = CompileOptions(threads=2, worker_cpus=(1,))
    kernel = backend.compile(graph, among)
    backend.save_kernel(kernel, graph, tmp_path / "k")
    assert kernel.worker_cpus == (1,)
    assert backend.load_kernel(tmp_path / "k", graph, among).worker_cpus == (1,)
    assert backend.load_kernel(tmp_path / "k", graph, replace(among, runs_alone=True)).worker_cpus == ()
    assert backend.load_kernel(tmp_path / "k", graph, CompileOptions(threads=2)).worker_cpus == ()


def test_a_kernel_that_cannot_be_saved_says_why_and_leaves_nothing(tmp_path: Path) -> None:
    """A grouped transposed conv's packed weight unpacks in a layout korch does not know, so it cannot
    be packed again at load: the kernel is not saved (a plan compiles it at load instead)."""
    from korch.backends.base import KernelNotSaveable

    b = GraphBuilder("grouped_conv_transpose")
    x = b.add_input("x", TensorType((1, 4, 8, 8), DType.FLOAT32))
    w = b.add_constant(np.random.default_rng(5).standard_normal((4, 3, 3, 3)).astype(F32))
    y = b.emit("conv_transpose", [x, w], {"strides": (2, 2), "pads": (1, 1, 1, 1), "dilations": (1, 1), "group": 2,
                                          "output_padding": (1, 1)})
    graph = check_graph(b.build([("y", b.emit("relu", [y]))]))
    kernel = InductorBackend().compile(graph, CompileOptions(threads=1))
    with pytest.raises(KernelNotSaveable, match="cannot tell what mkldnn::_convolution_transpose_pointwise's weight"):
        InductorBackend().save_kernel(kernel, graph, tmp_path / "k")
    assert not (tmp_path / "k").exists()


def test_the_check_data_holds_what_the_kernel_gave(tmp_path: Path) -> None:
    """check.npz is the kernel's own output on its inputs (not zeros, not a constant)."""
    graph = conv_bias_relu(np.random.default_rng(9))
    kernel = _saved(graph, tmp_path / "k")
    with np.load(tmp_path / "k" / CHECK) as check:
        inputs, output = [check["in0"]], check["out0"]
    np.testing.assert_array_equal(kernel.run(inputs)[0], output)
    assert np.count_nonzero(output) > output.size // 4


@pytest.mark.parametrize("block", [1, 7, 64, 1 << 20])
def test_the_load_check_compares_blocks_as_it_compared_whole_arrays(block: int) -> None:
    """The tolerance is CHECK_RTOL of the largest finite magnitude anywhere in the output, even when it
    sits in another block than the difference; NaN matches NaN and infinities match their own sign."""
    from korch.backends.inductor.artifact import CHECK_RTOL, _differ

    rng = np.random.default_rng(11)
    want = rng.standard_normal(200).astype(F32)
    want[150] = 1e4                      # sets the tolerance for every block: 1e4 * CHECK_RTOL = 0.1
    want[3], want[90] = np.nan, np.inf
    near = want.copy()
    near[5] += 0.05                      # within 0.1, but not within 1.0 * CHECK_RTOL
    assert _differ([near.reshape(10, 20)], [want.reshape(10, 20)], block) is None
    assert 0.05 > CHECK_RTOL

    for index, value in [(199, want[199] + 0.2), (3, 0.0), (90, -np.inf), (90, 1e4)]:
        far = want.copy()
        far[index] = value
        assert _differ([want, far], [want, want], block) == 1, (index, value)
    assert _differ([want.astype(np.float64)], [want], block) == 0
    assert _differ([np.empty(0, F32)], [np.empty(0, F32)], block) is None


@pytest.mark.parametrize("onednn", [True, False])
def test_float32_linears_run_by_the_library_chosen_and_a_shared_weight_is_packed_once(onednn: bool) -> None:
    """onednn_linears: each matmul by a float32 constant is oneDNN's linear (korch's post-grad pass),
    else MKL's (Inductor's own); a weight two matmuls read is packed for oneDNN once (MKL's, by
    Inductor, twice), and the kernel computes the reference's outputs on fresh inputs. The two ways
    are profiled under different keys."""
    from korch.backends.reference import run_graph

    rng = np.random.default_rng()
    graph = shared_weight_mlp(rng)
    kernel = InductorBackend(onednn_linears=onednn).compile(graph, CompileOptions(threads=1))
    code = "\n".join(Path(m.__file__).read_text() for m in kernel.modules if getattr(m, "__file__", None))
    assert ("mkldnn._linear_pointwise" in code) == onednn and ("mkl._mkl_linear" in code) == (not onednn)
    packed = {id(t) for m in kernel.modules for t in vars(m).values() if isinstance(t, torch.Tensor) and t.is_mkldnn}
    assert len(packed) == (1 if onednn else 2)
    x = rng.standard_normal(graph.types["x"].shape).astype(F32)
    want = run_graph(graph, {"x": x})[graph.outputs[0]]
    got = kernel.run([x])[0]
    assert float(np.max(np.abs(got - want))) <= 1e-5 * float(np.max(np.abs(want)))
    assert InductorBackend(onednn_linears=True).version != InductorBackend(onednn_linears=False).version
