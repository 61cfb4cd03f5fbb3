"""Cut a region's original ONNX nodes out of the model, as a model an ONNX engine can run.

The region model's inputs and outputs carry the primitive-graph names of the candidate's boundary
values, so its kernel slots into a plan like any other. ONNX values that fission folded to constants
are embedded as initializers (shape arithmetic), except a large one that original nodes compute from
initializers alone (weight preprocessing, such as a transposed weight): those nodes go into the
region model, and the engine folds the value from the weights itself.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import onnx
from onnx import helper, numpy_helper

from korch.candidates import Candidate
from korch.frontend.engines import node_key
from korch.ir.graph import OUTPUT_COPY, Graph
from korch.ir.onnx_export import value_info
from korch.ir.onnx_source import OnnxSource, copy_fields

# A folded value at least this large is weight data, worth leaving to the engine to fold (see
# _weight_preprocessing); smaller ones (shapes, scalars) are embedded. The bound at which a saved plan
# moves an initializer into its weights file.
FOLDED_WEIGHT_MIN_BYTES = 1024
# The location of an EXTERNAL initializer whose data is not in a file: the array is passed beside
# the model (region_model_sharing). Not a valid file name, so it never names a real one.
SHARED_LOCATION = "korch:shared-array"


class RegionError(ValueError):
    """The region's ONNX nodes do not line up with its primitive boundary."""


def region_model(source: OnnxSource, graph: Graph, candidate: Candidate) -> onnx.ModelProto:
    return _region(source, graph, candidate, share=False)[0]


def region_model_sharing(source: OnnxSource, graph: Graph,
                         candidate: Candidate) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """The region model without the data of its large initializers that the primitive graph holds
    as constants: each is an EXTERNAL initializer at SHARED_LOCATION, its array (the graph's own, not
    a copy) in the mapping, for an engine that takes weights as arrays (`Backend.shares_weights`).
    Embedded, each weight was copied three times on its way into the engine (the region's protobuf,
    its bytes, the engine's parse) before the engine made its own: 1.5 GB above the 0.73 GB live of
    bert-base's whole model on OpenVINO."""
    return _region(source, graph, candidate, share=True)


def shared_initializer(name: str, array: np.ndarray) -> onnx.TensorProto:
    """An initializer whose data is `array`, handed to the engine beside the model (SHARED_LOCATION)."""
    tensor = onnx.TensorProto(name=name, data_type=helper.np_dtype_to_tensor_dtype(array.dtype),
                              dims=array.shape, data_location=onnx.TensorProto.EXTERNAL)
    for key, value in (("location", SHARED_LOCATION), ("offset", "0"), ("length", str(array.nbytes))):
        tensor.external_data.add(key=key, value=value)
    return tensor


def is_shared(tensor: onnx.TensorProto) -> bool:
    return tensor.data_location == onnx.TensorProto.EXTERNAL and any(
        e.key == "location" and e.value == SHARED_LOCATION for e in tensor.external_data)


def _shareable(tensor: onnx.TensorProto, prim: str | None, constants: Mapping[str, np.ndarray]) -> bool:
    """An embedded initializer of weight size whose graph constant is the same tensor, contiguous.
    (An EXTERNAL one is in a saved plan's weights file, which the engine maps itself: its constant is
    not even read, since a loaded plan reads constants from disk on first use.)"""
    if tensor.data_location == onnx.TensorProto.EXTERNAL or prim is None or prim not in constants:
        return False
    array = constants[prim]
    return (array.nbytes >= FOLDED_WEIGHT_MIN_BYTES and array.flags.c_contiguous
            and tuple(array.shape) == tuple(tensor.dims)
            and array.dtype == helper.tensor_dtype_to_np_dtype(tensor.data_type))


def share_weights(source: OnnxSource, graph: Graph) -> OnnxSource:
    """The source with each initializer that is one of the primitive graph's constants (the same
    tensor: `_shareable`) held as a stand-in at SHARED_LOCATION, its data the graph's array
    (OnnxSource.arrays): the model no longer holds a second copy of the weights while korch optimizes
    it (gpt2-small: 313 MB). Regions hand those arrays to the engines that share weights and embed
    them for the others; onnxruntime's reference runs and saved plans read them from `arrays` too.
    The copy is made field by field, without reading a stand-in's bytes."""
    model = copy_fields(source.model, onnx.ModelProto(), skip=("graph",))
    copy_fields(source.model.graph, model.graph, skip=("initializer",))
    arrays = dict(source.arrays)
    transposed = _transposed_constants(graph.constants)
    for tensor in source.model.graph.initializer:
        prim = source.value_map.get(tensor.name)
        array = None
        if not is_shared(tensor):
            if _shareable(tensor, prim, graph.constants):
                array = graph.constants[prim]
            else:
                array = _transpose_held(tensor, transposed)
        if array is not None:
            arrays[tensor.name] = array
            model.graph.initializer.append(shared_initializer(tensor.name, array))
        else:
            model.graph.initializer.append(tensor)
    return OnnxSource(model, source.value_map, source.weights_dir, arrays)


def _transposed_constants(constants: Mapping[str, np.ndarray]) -> dict[tuple[str, tuple[int, ...]], list[np.ndarray]]:
    """The graph's 2-D constants of weight size stored column-major, by dtype and the shape of their
    transpose: what fission folds a weight read transposed to (Gemm's transB, a MatMul of a
    Transpose), a copy of the initializer laid out as its transpose."""
    found: dict[tuple[str, tuple[int, ...]], list[np.ndarray]] = {}
    for array in constants.values():
        if array.ndim == 2 and array.nbytes >= FOLDED_WEIGHT_MIN_BYTES and array.flags.f_contiguous \
                and not array.flags.c_contiguous:
            found.setdefault((array.dtype.str, array.shape[::-1]), []).append(array)
    return found


def _transpose_held(tensor: onnx.TensorProto, transposed: Mapping[tuple[str, tuple[int, ...]], list[np.ndarray]]
                    ) -> np.ndarray | None:
    """An embedded 2-D initializer's data as a view of the graph constant that is its transpose, if one
    is (same dtype, equal values): the initializer need not be held a second time. VGG-16's classifier
    (Gemm with transB, 472 MiB) was held as the model's initializers and as fission's transposed
    constants through the whole optimize."""
    if tensor.data_location == onnx.TensorProto.EXTERNAL or len(tensor.dims) != 2:
        return None
    dtype = helper.tensor_dtype_to_np_dtype(tensor.data_type)
    matches = transposed.get((np.dtype(dtype).str, tuple(tensor.dims)), ())
    if not matches:
        return None
    data = numpy_helper.to_array(tensor)       # (one weight, read once to compare)
    for array in matches:
        if np.array_equal(array.T, data):
            return array.T                     # C-contiguous: the constant's own memory
    return None


def _region(source: OnnxSource, graph: Graph, candidate: Candidate,
            share: bool) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    wanted = set(candidate.onnx_nodes) - {OUTPUT_COPY}
    copies = [graph.nodes[i] for i in candidate.nodes if graph.nodes[i].origin == OUTPUT_COPY]
    copied = {c.output for c in copies}
    nodes = [n for n in source.model.graph.node if node_key(n) in wanted]
    if len(nodes) != len(wanted):
        raise RegionError(f"{len(wanted) - len(nodes)} region nodes are not in the model")
    produced = {o for n in nodes for o in n.output if o}
    initializers = {i.name: i for i in source.model.graph.initializer}
    folding = _weight_preprocessing(source, graph, nodes, produced, initializers)
    if folding:
        nodes = [n for n in source.model.graph.node if node_key(n) in wanted or node_key(n) in folding]
        produced = {o for n in nodes for o in n.output if o}
    boundary_in = set(candidate.inputs)
    rename: dict[str, str] = {}
    by_prim: dict[str, str] = {}
    for name in sorted(produced):
        prim = source.value_map.get(name)
        if prim is not None:
            by_prim.setdefault(prim, name)
    for prim in candidate.outputs:
        if prim in copied:
            continue
        if prim not in by_prim:
            raise RegionError(f"region output {prim!r} is not an ONNX value of the region")
        rename[by_prim[prim]] = prim
    new_initializers: list[onnx.TensorProto] = []
    shared: dict[str, np.ndarray] = {}
    for node in nodes:
        for name in node.input:
            if not name or name in produced or name in rename:
                continue
            prim = source.value_map.get(name)
            if name in initializers:
                if is_shared(initializers[name]):            # a stand-in (share_weights): the data is the source's
                    array = source.arrays[name]
                    if share:
                        shared[name] = array
                        new_initializers.append(initializers[name])
                    else:
                        new_initializers.append(numpy_helper.from_array(array, name))
                elif share and _shareable(initializers[name], prim, graph.constants):
                    shared[name] = graph.constants[prim]
                    new_initializers.append(shared_initializer(name, shared[name]))
                else:
                    new_initializers.append(initializers[name])
                rename[name] = name
            elif prim is not None and prim in graph.constants:
                new_initializers.append(numpy_helper.from_array(graph.constants[prim], name))
                rename[name] = name
            elif prim in boundary_in:
                rename[name] = prim
            elif prim in by_prim:
                # the output of a no-op node left out of the region (identity Transpose, Reshape to the
                # same shape): fission gave it no primitive, it is the region value it copies
                rename[name] = rename.get(by_prim[prim], by_prim[prim])
            else:
                raise RegionError(f"ONNX value {name!r} enters the region but is not a boundary input")

    # a graph output that is an input, a constant or another output: an Identity of that value
    identities = []
    for copy in copies:
        (prim,) = copy.inputs
        if prim in boundary_in:
            source_name = prim
        elif prim in graph.constants:
            if prim not in {t.name for t in new_initializers}:
                new_initializers.append(numpy_helper.from_array(graph.constants[prim], prim))
            source_name = prim
        elif prim in by_prim:
            source_name = rename.get(by_prim[prim], by_prim[prim])
        else:
            raise RegionError(f"output copy of {prim!r} reads a value that is not in the region")
        identities.append(helper.make_node("Identity", [source_name], [copy.output], name=f"copy:{copy.output}"))

    def renamed(node: onnx.NodeProto) -> onnx.NodeProto:
        copy = onnx.NodeProto()
        copy.CopyFrom(node)
        copy.input[:] = [rename.get(i, i) for i in node.input]
        copy.output[:] = [rename.get(o, o) for o in node.output]
        return copy

    g = helper.make_graph([renamed(n) for n in nodes] + identities, "region",
                          [value_info(i, graph.types[i]) for i in candidate.inputs],
                          [value_info(o, graph.types[o]) for o in candidate.outputs], initializer=new_initializers)
    model = helper.make_model(g, opset_imports=list(source.model.opset_import), producer_name="korch-region")
    model.ir_version = source.model.ir_version
    return model, shared


def _weight_preprocessing(source: OnnxSource, graph: Graph, nodes: list[onnx.NodeProto], produced: set[str],
                          initializers: Mapping[str, onnx.TensorProto]) -> set[str]:
    """Keys of the original nodes outside the region that compute, from initializers alone, a large
    value the region reads. Fission folded that value to a constant; embedded in the region model it
    would be a second copy of the weight, copied again on its way into the engine (the protobuf, its
    serialization, the engine's reader), and a saved plan would read it from its constants instead of
    mapping its weights file. With these nodes the engine folds it from the (mapped) weights once, as
    it does running the whole model. gpt2-small's tied logits read token.weight transposed (147 MB):
    its whole model on OpenVINO peaked at 1274 MB embedded, 757 MB folded by OpenVINO."""
    producers = {o: n for n in source.model.graph.node for o in n.output if o}
    keys: set[str] = set()
    for node in nodes:
        for name in node.input:
            prim = source.value_map.get(name)
            if not name or name in produced or name in initializers or prim not in graph.constants:
                continue
            t = graph.types[prim]
            if t.nbytes < FOLDED_WEIGHT_MIN_BYTES:
                continue
            keys.update(_nodes_from_initializers(name, producers, initializers) or ())
    return keys


def _nodes_from_initializers(name: str, producers: Mapping[str, onnx.NodeProto],
                             initializers: Mapping[str, onnx.TensorProto]) -> set[str] | None:
    """Keys of the original nodes that compute ONNX value `name` from initializers alone, or None if
    they read anything else (a graph input, through its shape)."""
    keys: set[str] = set()
    pending = [name]
    while pending:
        value = pending.pop()
        if value in initializers:
            continue
        node = producers.get(value)
        if node is None:
            return None
        if node_key(node) not in keys:
            keys.add(node_key(node))
            pending.extend(i for i in node.input if i)
    return keys
