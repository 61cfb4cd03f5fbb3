"""The OpenVINO backend agrees with the reference and onnxruntime: regions of original ONNX nodes,
primitive graphs, int64/bool I/O, Identity-copy outputs, external weights of a saved plan, plans
mixing engines; a model it cannot compile is a rejection with OpenVINO's reason."""

from __future__ import annotations

import json
import mmap
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

pytest.importorskip("openvino")

import korch  # noqa: E402
from korch import __version__  # noqa: E402
from korch.backends import CompileOptions, get_backend  # noqa: E402
from korch.backends.openvino import OpenVinoError  # noqa: E402
from korch.backends.openvino.pages import dropping_pages, dropping_ranges, read_only_maps  # noqa: E402
from korch.backends.reference import run_graph  # noqa: E402
from korch.candidates import Candidate, RegionLimits, region_candidates  # noqa: E402
from korch.frontend.regions import OnnxSource, region_model  # noqa: E402
from korch.ir.check import check_graph  # noqa: E402
from korch.ir.graph import Graph, GraphBuilder  # noqa: E402
from korch.ir.types import DType, TensorType  # noqa: E402
from korch.pipeline import run_fission  # noqa: E402
from korch.plan import Plan, Step, order_steps  # noqa: E402
from korch.profile.database import ProfileDB, Status, machine_fingerprint  # noqa: E402
from korch.profile.profiler import compile_candidate, profile  # noqa: E402
from korch.runtime import compile_plan  # noqa: E402
from korch.verify import diff_outputs, random_feeds, run_onnxruntime  # noqa: E402
from tests.backends.graphs import conv_bias_relu, mlp_gelu  # noqa: E402

# Max |openvino - expected| over max |expected|, per float output (fp32 kernels with their own
# summation order); integer and bool outputs must be equal.
RTOL = 1e-5
# Whole plans against onnxruntime on a whole model: korch's bar for a plan (pipeline.PLAN_RTOL).
PLAN_RTOL = 1e-4
F32 = np.float32


def _seed() -> int:
    return int(np.random.default_rng().integers(2**31))


def _assert_close(actual: list[np.ndarray], expected: list[np.ndarray], what: str, rtol: float = RTOL) -> None:
    assert len(actual) == len(expected), what
    for k, (got, want) in enumerate(zip(actual, expected)):
        assert got.dtype == want.dtype and got.shape == want.shape, f"{what} output {k}: {got.dtype}{got.shape}"
        if want.dtype.kind != "f":
            assert np.array_equal(got, want), f"{what} output {k} differs"
            continue
        scale = float(np.abs(want).max())
        assert scale > 0, f"{what} output {k} is all zeros: the comparison would prove nothing"
        error = float(np.abs(got.astype(np.float64) - want).max())
        assert error <= rtol * scale, f"{what} output {k}: error {error:.3g} at scale {scale:.3g}"


def _block_model(seed: int) -> onnx.ModelProto:
    """A transformer-ish block in original ONNX ops with random weights (each >= 1 KB, so a saved plan
    keeps them in its external weights file): MatMul+Add, LayerNormalization, Gelu-by-Erf, Softmax,
    a residual, and two outputs."""
    rng = np.random.default_rng(seed)

    def init(name: str, *shape: int) -> onnx.TensorProto:
        return numpy_helper.from_array((rng.standard_normal(shape) / np.sqrt(shape[0])).astype(F32), name)

    n = helper.make_node
    nodes = [
        n("MatMul", ["x", "w1"], ["h0"], name="mm1"), n("Add", ["h0", "b1"], ["h1"], name="bias1"),
        n("LayerNormalization", ["h1", "gamma", "beta"], ["ln"], name="ln", axis=-1),
        n("Div", ["ln", "sqrt2"], ["d"], name="div"), n("Erf", ["d"], ["e"], name="erf"),
        n("Add", ["e", "one"], ["e1"], name="add1"), n("Mul", ["ln", "e1"], ["g0"], name="mul"),
        n("Mul", ["g0", "half"], ["g"], name="half"),
        n("MatMul", ["g", "w2"], ["h2"], name="mm2"), n("Softmax", ["h2"], ["p"], name="softmax", axis=-1),
        n("Add", ["p", "x"], ["y"], name="residual"), n("Relu", ["h1"], ["r"], name="relu"),
    ]
    scalars = [numpy_helper.from_array(np.array(v, F32), k) for k, v in (("sqrt2", np.sqrt(2)), ("one", 1.0),
                                                                          ("half", 0.5))]
    graph = helper.make_graph(
        nodes, "block", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 8, 32])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 8, 32]),
         helper.make_tensor_value_info("r", onnx.TensorProto.FLOAT, [1, 8, 64])],
        initializer=[init("w1", 32, 64), init("b1", 64), numpy_helper.from_array(1 + rng.random(64).astype(F32), "gamma"),
                     init("beta", 64), init("w2", 64, 32), *scalars])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 10
    return model


def _fissioned(model: onnx.ModelProto) -> tuple[Graph, OnnxSource]:
    result = run_fission(model)
    return result.graph, OnnxSource(result.model, dict(result.value_map or {}))


def _region_chain(graph: Graph) -> list[Candidate]:
    """Regions that cover the graph one after another, as many as possible (shortest first)."""
    by_start: dict[int, list[Candidate]] = {}
    for r in region_candidates(graph, RegionLimits()):
        if r.size < len(graph.nodes):
            by_start.setdefault(r.nodes[0], []).append(r)
    chain, position = [], 0
    while position < len(graph.nodes):
        r = min(by_start[position], key=lambda c: c.size)
        chain.append(r)
        position = r.nodes[-1] + 1
    return chain


def _inputs(graph: Graph, names: tuple[str, ...], rng: np.random.Generator) -> list[np.ndarray]:
    return [rng.standard_normal(graph.types[n].shape).astype(graph.types[n].dtype.numpy) for n in names]


def test_region_of_original_nodes_matches_onnxruntime() -> None:
    seed = _seed()
    rng = np.random.default_rng(seed)
    graph, source = _fissioned(_block_model(seed))
    regions = [r for r in region_candidates(graph, RegionLimits()) if len(r.onnx_nodes) >= 3]
    assert regions, "the block has multi-node regions"
    options = CompileOptions(threads=2)
    for region in regions:
        kernel = compile_candidate(graph, region, "openvino", options, source)
        reference = compile_candidate(graph, region, "onnxruntime", options, source)
        previous = None
        for _ in range(2):                               # fresh inputs each time, same kernel
            inputs = _inputs(graph, region.inputs, rng)
            copies = [x.copy() for x in inputs]
            ov = kernel.run(inputs)
            _assert_close(ov, reference.run(inputs), f"region {region.onnx_nodes} (seed {seed})")
            assert all(np.array_equal(x, c) for x, c in zip(inputs, copies)), "the kernel modified an input"
            assert previous is None or not np.allclose(ov[0], previous[0]), "the output ignores the inputs"
            previous = [y.copy() for y in ov]       # (the kernel's buffers: the next call overwrites them)


@pytest.mark.parametrize("backend", ["openvino", "onnxruntime"])
def test_regions_take_the_graphs_weights_beside_the_model_not_embedded(backend: str) -> None:
    """A region compiled for an ONNX engine leaves its weights' data out of the model it serialises:
    each is an EXTERNAL initializer at SHARED_LOCATION, its data the primitive graph's own constant,
    handed to the engine beside the model. The kernel matches the region with its weights embedded,
    on fresh inputs, and running it leaves the graph's constants as they were."""
    seed = _seed()
    rng = np.random.default_rng(seed)
    graph, source = _fissioned(_block_model(seed))
    from korch.frontend.engines import node_key
    from korch.frontend.regions import is_shared, region_model_sharing

    whole = Candidate(tuple(range(len(graph.nodes))), tuple(graph.inputs), tuple(graph.outputs), "whole",
                      tuple(node_key(n) for n in source.model.graph.node))
    model, shared = region_model_sharing(source, graph, whole)
    weights = {"w1", "w2"}                  # (the 64-element vectors are below FOLDED_WEIGHT_MIN_BYTES)
    assert set(shared) == weights, set(shared)
    assert all(shared[w] is graph.constants[source.value_map[w]] for w in weights), "not the graph's own arrays"
    in_model = {t.name: t for t in model.graph.initializer}
    assert all(is_shared(in_model[w]) and not in_model[w].raw_data for w in weights), "a shared weight is embedded"
    before = {name: a.copy() for name, a in graph.constants.items()}
    options = CompileOptions(threads=2)
    kernel = compile_candidate(graph, whole, backend, options, source)
    embedded = get_backend("onnxruntime").compile_onnx(region_model(source, graph, whole), whole.inputs,
                                                       whole.outputs, options)
    previous = None
    for _ in range(2):
        inputs = _inputs(graph, whole.inputs, rng)
        got = kernel.run(inputs)
        _assert_close(got, embedded.run(inputs), f"whole block on {backend} (seed {seed})")
        assert previous is None or not np.allclose(got[0], previous[0]), "the output ignores the inputs"
        previous = [y.copy() for y in got]       # (an OpenVINO kernel's buffers: the next call overwrites them)
    assert all(np.array_equal(graph.constants[name], a) for name, a in before.items()), "a constant changed"


def _mlp_gelu(rng: np.random.Generator) -> Graph:
    return mlp_gelu(rng, preactivation_output=True)


@pytest.mark.parametrize("make,threads", [(_mlp_gelu, 1), (conv_bias_relu, 2)])
def test_primitive_graph_matches_reference(make, threads: int) -> None:
    seed = _seed()
    rng = np.random.default_rng(seed)
    graph = make(rng)
    backend = get_backend("openvino")
    assert backend.supports(graph) is None
    kernel = backend.compile(graph, CompileOptions(threads=threads))
    previous = None
    for _ in range(2):                                   # fresh inputs each time, same kernel
        inputs = _inputs(graph, graph.inputs, rng)
        copies = [x.copy() for x in inputs]
        actual = kernel.run(inputs)
        expected = run_graph(graph, dict(zip(graph.inputs, inputs)))
        _assert_close(actual, [expected[n] for n in graph.outputs], f"{graph.name} (seed {seed})")
        assert all(np.array_equal(x, c) for x, c in zip(inputs, copies)), "the kernel modified an input"
        assert not any(np.shares_memory(x, y) for x in inputs for y in actual), "an output aliases an input"
        assert previous is None or not np.allclose(actual[0], previous[0]), "the output ignores the inputs"
        previous = [y.copy() for y in actual]
        for y in actual:                                 # the caller owns the outputs:
            y.fill(7)                                    # scribbling on them changes nothing later
        _assert_close(kernel.run(inputs), previous, "second run on the same inputs", rtol=0.0)


def test_int64_and_bool_inputs_and_outputs_keep_their_types() -> None:
    seed = _seed()
    rng = np.random.default_rng(seed)
    b = GraphBuilder("typed")
    ids = b.add_input("ids", TensorType((2, 5), DType.INT64))
    mask = b.add_input("mask", TensorType((2, 5), DType.BOOL))
    table = b.add_constant(rng.standard_normal((7, 4)).astype(F32))
    emb = b.emit("gather", [table, ids], {"axis": 0})                                # int64 indices
    shifted = b.emit("add", [ids, b.add_constant(np.array(3, np.int64))])             # int64 arithmetic
    positive = b.emit("greater", [emb, b.add_constant(np.array(0.0, F32))])          # bool out
    kept = b.emit("and", [mask, b.emit("not", [mask])])                               # bool in, bool out
    masked = b.emit("where", [b.emit("reshape", [mask], {"shape": (2, 5, 1)}), emb,
                              b.add_constant(np.array(-1.0, F32))])
    graph = check_graph(b.build([("shifted", shifted), ("positive", positive), ("kept", kept),
                                 ("masked", masked)]))
    kernel = get_backend("openvino").compile(graph, CompileOptions(threads=1))
    feeds = {"ids": rng.integers(0, 7, (2, 5)).astype(np.int64), "mask": rng.random((2, 5)) < 0.5}
    actual = kernel.run([feeds["ids"], feeds["mask"]])
    expected = run_graph(graph, feeds)
    assert [y.dtype for y in actual] == [np.int64, np.bool_, np.bool_, np.float32]
    _assert_close(actual, [expected[n] for n in graph.outputs], f"typed graph (seed {seed})")


def test_identity_copy_outputs_are_mapped_by_position() -> None:
    """Outputs that copy another output or an input (OpenVINO may give them each other's names),
    asked for in an order that is not the model's."""
    seed = _seed()
    rng = np.random.default_rng(seed)
    n = helper.make_node
    graph = helper.make_graph(
        [n("Relu", ["x"], ["r"]), n("Identity", ["r"], ["r_copy"]), n("Identity", ["x"], ["x_copy"]),
         n("Neg", ["r_copy"], ["s"])], "copies", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [3, 4])],
        [helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, [3, 4]) for name in ("r", "r_copy", "x_copy", "s")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 10
    x = rng.standard_normal((3, 4)).astype(F32)
    order = ["x_copy", "s", "r_copy", "r"]
    kernel = get_backend("openvino").compile_onnx(model, ["x"], order, CompileOptions(threads=1))
    actual = kernel.run([x])
    _assert_close(actual, [x, -np.maximum(x, 0), np.maximum(x, 0), np.maximum(x, 0)], f"copies (seed {seed})")
    assert not np.shares_memory(actual[0], x), "the copy of an input aliases the input"


def test_an_input_nothing_reads_is_taken_and_ignored() -> None:
    """OpenVINO drops unused inputs from the compiled model; the kernel still takes every declared one."""
    seed = _seed()
    rng = np.random.default_rng(seed)
    graph = helper.make_graph(
        [helper.make_node("Sigmoid", ["b"], ["y"])], "unused",
        [helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, [5]) for name in ("a", "b")],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [5])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 10
    kernel = get_backend("openvino").compile_onnx(model, ["a", "b"], ["y"], CompileOptions(threads=1))
    a, b = rng.standard_normal(5).astype(F32), rng.standard_normal(5).astype(F32)
    _assert_close(kernel.run([a, b]), [(1 / (1 + np.exp(-b.astype(np.float64)))).astype(F32)], f"unused (seed {seed})")


def test_region_with_output_copies_from_fission_matches_reference() -> None:
    """The whole-model region of a model whose outputs repeat a value and an input: region_model
    writes them as Identity nodes."""
    seed = _seed()
    rng = np.random.default_rng(seed)
    n = helper.make_node
    w = numpy_helper.from_array(rng.standard_normal((4, 4)).astype(F32), "w")
    graph_proto = helper.make_graph(
        [n("MatMul", ["x", "w"], ["m"], name="mm"), n("Tanh", ["m"], ["t"], name="tanh"),
         n("Identity", ["t"], ["t_again"], name="again"), n("Identity", ["x"], ["x_again"], name="x_again")],
        "repeats", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, [2, 4]) for name in ("t", "m", "t_again", "x_again")],
        initializer=[w])
    model = helper.make_model(graph_proto, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 10
    graph, source = _fissioned(model)
    whole = next(r for r in region_candidates(graph, RegionLimits()) if r.size == len(graph.nodes))
    assert any(node.op_type == "Identity" for node in region_model(source, graph, whole).graph.node)
    feeds = random_feeds(graph, seed)
    actual = compile_candidate(graph, whole, "openvino", CompileOptions(threads=1), source).run(
        [feeds[i] for i in whole.inputs])
    expected = run_graph(graph, feeds)
    _assert_close(actual, [expected[o] for o in whole.outputs], f"output copies (seed {seed})")


def _conv6d_graph() -> Graph:
    """A convolution with four spatial dims: valid ONNX, and korch's reference runs it; OpenVINO's
    convolution takes at most three."""
    b = GraphBuilder("conv6d")
    x = b.add_input("x", TensorType((1, 1, 3, 3, 3, 3), DType.FLOAT32))
    w = b.add_constant(np.random.default_rng(0).standard_normal((1, 1, 2, 2, 2, 2)).astype(F32))
    y = b.emit("conv", [x, w], {"strides": (1,) * 4, "pads": (0,) * 8, "dilations": (1,) * 4, "group": 1})
    return check_graph(b.build([("y", y)]))


def test_a_model_openvino_cannot_compile_is_a_rejection_with_its_reason(tmp_path: Path) -> None:
    graph = _conv6d_graph()
    with pytest.raises(OpenVinoError, match="Expected a 3D, 4D or 5D tensor"):
        get_backend("openvino").compile(graph, CompileOptions(threads=1))
    whole = Candidate(tuple(range(len(graph.nodes))), graph.inputs, graph.outputs, "conv6d")
    with ProfileDB(tmp_path / "profiles.sqlite") as db:
        outcome = profile(graph, {"openvino": [whole]}, db, 1, machine_fingerprint())
    record = outcome.records[("conv6d", "openvino")]
    assert outcome.measured == 1 and record.status == Status.REJECTED
    assert "OpenVINO cannot read the model" in record.reason and "Expected a 3D, 4D or 5D tensor" in record.reason
    assert "src/" not in record.reason, "source-file trail left in the reason"


def test_float64_and_8_bit_arithmetic_are_refused_with_a_reason() -> None:
    b = GraphBuilder("f64")
    x = b.add_input("x", TensorType((4,), DType.FLOAT64))
    f64 = b.build([("y", b.emit("mul", [x, x]))])
    assert "float64 is computed in float32" in get_backend("openvino").supports(f64)
    b = GraphBuilder("u8")
    x = b.add_input("x", TensorType((4,), DType.UINT8))
    u8 = b.build([("y", b.emit("add", [x, x])), ("t", b.emit("reshape", [x], {"shape": (2, 2)}))])
    assert "saturates" in get_backend("openvino").supports(u8)


def _plan(graph: Graph, source: OnnxSource, steps: list[Step]) -> Plan:
    return Plan(graph, order_steps(steps, graph.inputs), 1, machine_fingerprint(), __version__, source, {})


def test_plan_mixing_openvino_and_onnxruntime_matches_onnxruntime(tmp_path: Path) -> None:
    """Regions alternate between the engines, one OpenVINO step runs primitives; the plan runs, and
    runs again after a save/load round trip with the weights external."""
    seed = _seed()
    model = _block_model(seed)
    graph, source = _fissioned(model)
    chain = _region_chain(graph)
    assert len(chain) >= 3
    steps = [Step("openvino" if k % 2 == 0 else "onnxruntime", r.nodes, r.inputs, r.outputs, r.key, 0.0,
                  () if k == 2 else r.onnx_nodes) for k, r in enumerate(chain)]
    assert {s.backend for s in steps} == {"openvino", "onnxruntime"}
    plan = _plan(graph, source, steps)
    feeds = {"x": np.random.default_rng(seed).standard_normal((1, 8, 32)).astype(F32)}
    expected = run_onnxruntime(model, feeds)
    session = compile_plan(plan)
    got = dict(zip(graph.outputs, session.run(None, feeds)))
    assert max(d.rel for d in diff_outputs(got, expected)) <= PLAN_RTOL
    korch.save(plan, tmp_path / "mixed.plan")
    assert (tmp_path / "mixed.plan" / "original.weights").stat().st_size > 0
    loaded = korch.load(tmp_path / "mixed.plan")
    for a, b in zip(loaded.run(None, feeds), session.run(None, feeds)):
        np.testing.assert_array_equal(a, b)


def test_openvino_kernels_hand_over_their_buffers_and_the_plan_copies_what_it_returns() -> None:
    """An OpenVINO kernel returns views of its request's buffers (no copy at a kernel boundary; the
    next call overwrites them), and the plan runtime copies the outputs it returns: a result the
    caller holds is not changed by the next run, whose feeds differ."""
    seed = _seed()
    model = _block_model(seed)
    graph, source = _fissioned(model)
    chain = _region_chain(graph)
    last = len(chain) - 1
    steps = [Step("openvino" if (last - k) % 2 == 0 else "onnxruntime", r.nodes, r.inputs, r.outputs, r.key, 0.0,
                  r.onnx_nodes) for k, r in enumerate(chain)]
    assert steps[-1].backend == "openvino" and "onnxruntime" in {s.backend for s in steps}
    session = compile_plan(_plan(graph, source, steps))
    k = max(i for i, st in enumerate(session.plan.steps) if st.backend == "openvino")
    kernel = session.kernels[k]
    assert kernel.reuses_outputs
    rng = np.random.default_rng(seed)
    inputs = [rng.standard_normal(graph.types[v].shape).astype(F32) for v in session.plan.steps[k].inputs]
    a, b = kernel.run(inputs)[0], kernel.run([v + 1 for v in inputs])[0]
    assert np.shares_memory(a, b)           # the same buffer, handed over twice
    x1, x2 = (rng.standard_normal((1, 8, 32)).astype(F32) for _ in range(2))
    first = session.run(None, {"x": x1})
    kept = [y.copy() for y in first]
    second = session.run(None, {"x": x2})
    expected = run_onnxruntime(model, {"x": x1})
    for name, y, y_kept, y2 in zip(graph.outputs, first, kept, second):
        np.testing.assert_array_equal(y, y_kept)
        assert not np.shares_memory(y, y2) and not np.array_equal(y, y2)
        assert max(d.rel for d in diff_outputs({name: y}, {name: expected[name]})) <= PLAN_RTOL


def _mappings_rss() -> list[tuple[int, str, int]]:
    """(start address, path or "", resident kB) of each of this process's mappings (/proc/self/smaps)."""
    found, start, path = [], 0, ""
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            fields = line.split()
            if not fields[0].endswith(":"):          # a mapping's header: address range ... [path]
                start, path = int(fields[0].split("-")[0], 16), fields[5] if len(fields) > 5 else ""
            elif fields[0] == "Rss:":
                found.append((start, path, int(fields[1])))
    return found


def _resident_kb(path: Path) -> int:
    """This process's resident memory in maps of `path`."""
    return sum(kb for _, mapped, kb in _mappings_rss() if mapped == str(path))


def test_saved_plan_on_openvino_reads_its_external_weights(tmp_path: Path) -> None:
    """korch.optimize with only OpenVINO (regions only), save, load: the weights are EXTERNAL in the
    plan's weights file, each region a ready model beside it that OpenVINO reads itself (loading and
    running the plan imports no onnx), loading writes nothing into the plan directory, and once
    compiled the process holds none of the weights file's pages (OpenVINO has its own copy)."""
    plan = korch.optimize("bert-mini", backends=["openvino"], threads=1, cache_dir=tmp_path / "cache")
    assert {s.backend for s in plan.steps} == {"openvino"} and all(s.onnx_nodes for s in plan.steps)
    directory = korch.save(plan, tmp_path / "bert.plan")
    saved = onnx.load(str(directory / "original.onnx"), load_external_data=False)
    assert any(t.data_location == onnx.TensorProto.EXTERNAL for t in saved.graph.initializer)
    ready = sorted(p.name for p in directory.glob("*.openvino.onnx"))
    assert len(ready) == len(plan.steps), ready
    region = onnx.load(str(directory / ready[0]), load_external_data=False)
    assert any(t.data_location == onnx.TensorProto.EXTERNAL for t in region.graph.initializer)   # the weights file's
    code = ("import sys, numpy as np, korch; s = korch.load(sys.argv[1]); "
            "s.run(None, {n: np.zeros(t.shape, t.dtype.numpy) for n, t in s.get_inputs()}); print('onnx' in sys.modules)")
    child = subprocess.run([sys.executable, "-c", code, str(directory)], capture_output=True, text=True)
    assert child.returncode == 0 and child.stdout.strip() == "False", child.stderr[-2000:]
    before = sorted(p.name for p in directory.iterdir())
    session = korch.load(directory)
    assert sorted(p.name for p in directory.iterdir()) == before
    if Path("/proc/self/smaps").exists():
        assert _resident_kb(directory / "original.weights") == 0
    model = onnx.load(str(next((tmp_path / "cache" / "zoo").glob("bert-mini-*.onnx"))))
    for seed in (1, 2):
        feeds = random_feeds(plan.graph, seed)
        assert feeds["input_ids"].dtype == np.int64 and len(np.unique(feeds["input_ids"])) > 1
        got = dict(zip(plan.graph.outputs, session.run(None, feeds)))
        assert max(d.rel for d in diff_outputs(got, run_onnxruntime(model, feeds))) <= PLAN_RTOL


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="resident pages are read from /proc/self/smaps")
def test_weight_pages_are_dropped_while_openvino_compiles_and_read_back_unchanged(tmp_path: Path) -> None:
    """dropping_pages drops the map's pages while its block runs (the compile), not only after it, and a
    page read again holds the file's bytes."""
    data = np.random.default_rng().standard_normal(64 * 1024).astype(F32)
    path = tmp_path / "weights.bin"
    data.tofile(path)
    with open(path, "rb") as f:
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
    view = np.frombuffer(mapped, dtype=F32)
    with dropping_pages([mapped], interval_s=0.01):
        assert np.array_equal(view, data)               # reads every page
        deadline = time.monotonic() + 10.0              # generous: a busy machine delays the dropping thread
        while _resident_kb(path) > 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert _resident_kb(path) == 0
        assert np.array_equal(view, data)
    assert _resident_kb(path) == 0


def test_bench_lists_the_openvino_peer(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from korch.cli import main

    model_path, out = tmp_path / "block.onnx", tmp_path / "bench.json"
    onnx.save(_block_model(_seed()), model_path)
    assert main(["bench", str(model_path), "--backends", "onnxruntime", "--threads", "1", "--rounds", "3", "--no-rss",
                 "--cache", str(tmp_path / "cache"), "--json", str(out)]) == 0
    table = capsys.readouterr().out
    assert "\nopenvino " in table and "vs best" in table
    result = json.loads(out.read_text())
    openvino = result["systems"]["openvino"]
    assert openvino["median_ms"] > 0 and openvino["p10_ms"] <= openvino["median_ms"] <= openvino["p90_ms"]
    assert openvino["max_rel_error"] <= PLAN_RTOL
    assert result["vs_best"]["peer"] in set(result["systems"]) - {"korch"}
    assert "intra_op_num_threads=1" in result["onnxruntime_settings"]
    assert result["disagree"] == {} and result["rtol"] == 1e-4      # judged by the plans' accuracy policy


def _resident_kb_of(start: int) -> int:
    """This process's resident memory in the mapping that starts at `start`."""
    (kb,) = [kb for mapped_at, _, kb in _mappings_rss() if mapped_at == start]
    return kb


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="resident pages are read from /proc/self/smaps")
def test_pages_of_maps_made_since_a_point_are_dropped_and_older_maps_left_alone(tmp_path: Path) -> None:
    """dropping_ranges over the read-only maps of a plan's weights file made since a point (OpenVINO
    reading a ready model maps the file itself): those maps lose their pages and read back unchanged;
    a map made before (another kernel's) keeps its pages."""
    data = np.random.default_rng().standard_normal(64 * 1024).astype(F32)
    path = tmp_path / "original.weights"
    data.tofile(path)
    with open(path, "rb") as f:
        older = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        old_view = np.frombuffer(older, dtype=F32)
        assert np.array_equal(old_view, data)             # resident
        (old_start,) = before = read_only_maps(tmp_path)
        newer = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)       # as OpenVINO's reader maps it
        new_view = np.frombuffer(newer, dtype=F32)
        with dropping_ranges(read_only_maps(tmp_path) - before, interval_s=0.01):
            assert np.array_equal(new_view, data)
            (new_start,) = {start for start, _ in read_only_maps(tmp_path)} - {old_start[0]}
    assert _resident_kb_of(new_start) == 0
    assert _resident_kb_of(old_start[0]) > 0
    assert np.array_equal(new_view, data) and np.array_equal(old_view, data)


def test_a_kernel_that_runs_alone_keeps_openvinos_pinned_threads_and_one_among_others_does_not(tmp_path: Path) -> None:
    """One engine running the whole model keeps the plugin's own default (pinned workers: unpinned, a
    model of many nodes ran 1.2x slower in half of fresh processes); a kernel among other engines'
    does not pin (module doc, THREAD POOL). The bench's peer is compiled as OpenVINO's users do."""
    graph = conv_bias_relu(np.random.default_rng(_seed()))
    backend = get_backend("openvino")
    alone = backend.compile(graph, CompileOptions(threads=2, runs_alone=True))
    among = backend.compile(graph, CompileOptions(threads=2))
    assert alone.compiled.get_property("ENABLE_CPU_PINNING") is True
    assert among.compiled.get_property("ENABLE_CPU_PINNING") is False
    from korch.ir.onnx_export import to_onnx

    path = tmp_path / "model.onnx"
    onnx.save(to_onnx(graph), path)
    peer, _ = backend.compile_file(path, 2)
    assert peer.compiled.get_property("ENABLE_CPU_PINNING") is True
