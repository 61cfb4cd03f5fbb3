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
