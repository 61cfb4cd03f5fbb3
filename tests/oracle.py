"""Test helpers: build one-node ONNX models and check korch's fission against onnxruntime."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from korch.backends.reference import run_graph
from korch.frontend import fission
from korch.ir.check import check_graph
from korch.ir.graph import Graph
from korch.ir.types import DType
from korch.verify import diff_outputs, run_onnxruntime


def single_node_model(op_type: str, inputs: Mapping[str, np.ndarray | None], attrs: Mapping[str, Any] | None = None,
                      *, constants: Mapping[str, np.ndarray] | None = None, opset: int = 18,
                      num_outputs: int = 1, input_order: Sequence[str] | None = None) -> onnx.ModelProto:
    """A model with one `op_type` node. `inputs` are graph inputs (None = omitted optional input);
    `constants` become initializers. `input_order` lists the node's input names (default: inputs then constants)."""
    constants = dict(constants or {})
    order = list(input_order) if input_order is not None else list(inputs) + list(constants)
    node_inputs = [name if (name in constants or inputs.get(name) is not None) else "" for name in order]
    outputs = [f"y{k}" for k in range(num_outputs)]
    node = helper.make_node(op_type, node_inputs, outputs, name=f"{op_type}_0", **(attrs or {}))
    graph_inputs = [helper.make_tensor_value_info(n, DType.from_numpy(a.dtype).onnx, list(a.shape))
                    for n, a in inputs.items() if a is not None]
    graph = helper.make_graph([node], "test", graph_inputs,
                              [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outputs],
                              initializer=[numpy_helper.from_array(np.asarray(a), n) for n, a in constants.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    types = {v.name: v for v in inferred.graph.value_info} | {v.name: v for v in inferred.graph.output}
    del model.graph.output[:]
    model.graph.output.extend(types[o] for o in outputs)
    return model


def check_model(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray], rtol: float, strict: bool = False) -> Graph:
    """Fission `model`, check IR invariants, and assert every output is within `rtol` (relative to the
    output's max magnitude) of onnxruntime's on `feeds`. `strict`: refuse nodes korch cannot fission
    (what tests of a rule's refusals need) instead of keeping them whole."""
    graph = check_graph(fission(model, strict=strict))
    expected = run_onnxruntime(model, feeds)
    actual = run_graph(graph, feeds)
    for diff in diff_outputs(actual, expected):
        assert diff.rel <= rtol, f"output {diff.name}: relative error {diff.rel:.3g} > {rtol} (scale {diff.scale:.3g})"
    for name, want in expected.items():
        assert actual[name].dtype == want.dtype, f"output {name}: dtype {actual[name].dtype} != {want.dtype}"
    return graph


def check_op(op_type: str, inputs: Mapping[str, np.ndarray | None], attrs: Mapping[str, Any] | None = None, *,
             constants: Mapping[str, np.ndarray] | None = None, opset: int = 18, rtol: float = 1e-5,
             num_outputs: int = 1, input_order: Sequence[str] | None = None, strict: bool = False) -> Graph:
    """Build a one-node model, fission it and compare with onnxruntime. Returns the primitive graph."""
    model = single_node_model(op_type, inputs, attrs, constants=constants, opset=opset,
                              num_outputs=num_outputs, input_order=input_order)
    feeds = {n: a for n, a in inputs.items() if a is not None}
    return check_model(model, feeds, rtol, strict)


def ops_of(graph: Graph) -> list[str]:
    return [n.op for n in graph.nodes]
