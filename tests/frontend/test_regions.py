"""Region models: values fission folded enter a region as the nodes computing them from weights, or embedded."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from korch.backends import CompileOptions
from korch.candidates import RegionLimits, region_candidates
from korch.frontend.regions import FOLDED_WEIGHT_MIN_BYTES, OnnxSource, region_model
from korch.pipeline import run_fission
from korch.profile.profiler import compile_candidate
from korch.verify import diff_outputs, random_feeds, run_onnxruntime

# The region runs the model's own nodes in onnxruntime, like the reference it is compared with;
# only a folded value computed differently could move an output by more than rounding.
RTOL = 1e-5


def _model(seed: int) -> onnx.ModelProto:
    """y = x @ w.T (the Transpose of an initializer: weight preprocessing); z = x + expand(c, shape(x))
    (a large value that reads the input's shape). Fission folds both Transpose and Expand."""
    rng = np.random.default_rng(seed)
    w = numpy_helper.from_array(rng.standard_normal((32, 64)).astype(np.float32), "w")
    c = numpy_helper.from_array(np.array(rng.standard_normal(), np.float32), "c")
    n = helper.make_node
    graph = helper.make_graph(
        [n("Transpose", ["w"], ["wt"], name="transpose", perm=[1, 0]), n("MatMul", ["x", "wt"], ["y"], name="mm"),
         n("Shape", ["x"], ["s"], name="shape"), n("Expand", ["c", "s"], ["e"], name="expand"),
         n("Add", ["x", "e"], ["z"], name="add")],
        "folds", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [4, 64])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [4, 32]),
         helper.make_tensor_value_info("z", onnx.TensorProto.FLOAT, [4, 64])], initializer=[w, c])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 10
    return model


def test_a_large_folded_weight_is_left_to_the_engine_a_folded_shape_value_is_embedded() -> None:
    seed = int(np.random.default_rng().integers(2**31))
    model = _model(seed)
    fissioned = run_fission(model)
    graph = fissioned.graph
    source = OnnxSource(fissioned.model, dict(fissioned.value_map or {}))
    whole = next(r for r in region_candidates(graph, RegionLimits()) if r.size == len(graph.nodes))
    assert not {"transpose", "expand"} & set(whole.onnx_nodes), "fission no longer folds them: nothing is tested"
    assert 4 * 64 * 4 >= FOLDED_WEIGHT_MIN_BYTES, "the expanded value must be large enough to be a candidate"

    region = region_model(source, graph, whole)
    assert [(node.op_type, list(node.input)) for node in region.graph.node if node.op_type == "Transpose"] \
        == [("Transpose", ["w"])]
    assert not any(node.op_type in ("Shape", "Expand") for node in region.graph.node)
    embedded = {t.name for t in region.graph.initializer}
    assert "w" in embedded and "wt" not in embedded and "e" in embedded

    feeds = random_feeds(graph, seed)
    kernel = compile_candidate(graph, whole, "onnxruntime", CompileOptions(threads=1), source)
    got = dict(zip(whole.outputs, kernel.run([feeds[i] for i in whole.inputs])))
    for diff in diff_outputs(got, run_onnxruntime(model, feeds)):
        assert diff.rel <= RTOL, f"{diff} (seed {seed})"


def _two_layers(seed: int) -> onnx.ModelProto:
    """y = relu(x @ w1 + b) @ w2: two weights fission keeps as the same tensors, one small bias."""
    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)
             for name, shape in (("w1", (64, 48)), ("b", (48,)), ("w2", (48, 16)))]
    n = helper.make_node
    graph = helper.make_graph(
        [n("MatMul", ["x", "w1"], ["h"], name="mm1"), n("Add", ["h", "b"], ["hb"], name="add"),
         n("Relu", ["hb"], ["r"], name="relu"), n("MatMul", ["r", "w2"], ["y"], name="mm2")],
        "two", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [4, 64])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [4, 16])], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 10
    return model


def test_a_source_sharing_the_graphs_weights_holds_them_once_and_computes_the_same() -> None:
    """share_weights: the weights become stand-ins whose data is the graph's own arrays (not copies);
    onnxruntime given them, a region cut for an engine that shares weights and one that embeds them
    all compute what the original model does, on fresh random inputs."""
    from korch.frontend.regions import is_shared, region_model_sharing, share_weights

    seed = int(np.random.default_rng().integers(2**31))
    model = _two_layers(seed)
    fissioned = run_fission(model)
    graph = fissioned.graph
    source = share_weights(OnnxSource(fissioned.model, dict(fissioned.value_map or {})), graph)
    stand_ins = {t.name for t in source.model.graph.initializer if is_shared(t)}
    assert stand_ins == {"w1", "w2"} == set(source.arrays), "the weights, not the small bias"
    for name in stand_ins:
        assert any(source.arrays[name] is a for a in graph.constants.values()), f"{name} is not the graph's array"
    assert not any(t.HasField("raw_data") for t in source.model.graph.initializer if is_shared(t))
    assert source.model.ByteSize() < 0.1 * model.ByteSize()            # (the weights are 97% of the model)

    feeds = random_feeds(graph, seed)
    expected = run_onnxruntime(model, feeds)
    for diff in diff_outputs(run_onnxruntime(source.model, feeds, shared=source.arrays), expected):
        assert diff.rel <= RTOL, f"{diff} (seed {seed})"
    whole = next(r for r in region_candidates(graph, RegionLimits()) if r.size == len(graph.nodes))
    embedded = region_model(source, graph, whole)
    assert not any(is_shared(t) for t in embedded.graph.initializer)
    sharing, arrays = region_model_sharing(source, graph, whole)
    assert set(arrays) == stand_ins
    for region, shared in ((embedded, None), (sharing, arrays)):
        got = run_onnxruntime(region, {i: feeds[i] for i in whole.inputs}, shared=shared)
        for diff in diff_outputs({o: got[o] for o in whole.outputs}, expected):
            assert diff.rel <= RTOL, f"{diff} (seed {seed})"


def _read_transposed(seed: int) -> onnx.ModelProto:
    """y = Gemm(x, w, transB=1) + x @ -(v.T): fission folds both weights to column-major constants of
    one shape, w.T and -(v.T); only the first holds an initializer's values."""
    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array(rng.standard_normal((32, 64)).astype(np.float32), name) for name in ("w", "v")]
    n = helper.make_node
    graph = helper.make_graph(
        [n("Gemm", ["x", "w"], ["g"], name="gemm", transB=1), n("Transpose", ["v"], ["vt"], name="t", perm=[1, 0]),
         n("Neg", ["vt"], ["nvt"], name="neg"), n("MatMul", ["x", "nvt"], ["m"], name="mm"),
         n("Add", ["g", "m"], ["y"], name="add")],
        "transposed", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [4, 64])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [4, 32])], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 10
    return model


def test_a_weight_fission_holds_only_transposed_is_shared_as_a_view_of_that_constant() -> None:
    """A Gemm's transB weight is held once: the initializer's data is the transposed constant's own
    memory seen as its transpose, matched by values, not by shape alone (v's folded -(v.T) has the same
    shape and stays embedded); onnxruntime given the arrays computes what the original model does."""
    from korch.frontend.regions import is_shared, share_weights

    seed = int(np.random.default_rng().integers(2**31))
    model = _read_transposed(seed)
    fissioned = run_fission(model)
    graph = fissioned.graph
    column_major = [a for a in graph.constants.values() if a.shape == (64, 32)]
    assert len(column_major) == 2 and all(a.flags.f_contiguous and not a.flags.c_contiguous for a in column_major), \
        "fission no longer folds both to column-major constants: nothing is tested"
    source = share_weights(OnnxSource(fissioned.model, dict(fissioned.value_map or {})), graph)
    stand_ins = {t.name for t in source.model.graph.initializer if is_shared(t)}
    assert stand_ins == {"w"} == set(source.arrays)
    w = source.arrays["w"]
    assert w.flags.c_contiguous and any(np.shares_memory(w, a) for a in column_major)
    np.testing.assert_array_equal(w, numpy_helper.to_array(model.graph.initializer[0]))

    feeds = random_feeds(graph, seed)
    for diff in diff_outputs(run_onnxruntime(source.model, feeds, shared=source.arrays), run_onnxruntime(model, feeds)):
        assert diff.rel <= RTOL, f"{diff} (seed {seed})"
