"""Load an ONNX model, check it, and fix every input to a static shape.

All user-facing problems (unreadable file, missing external data, checker failure, opset out of
range, symbolic dims) become a ModelLoadError or ShapeError that names the file, input and dim; ops
no ONNX engine defines, an UnsupportedError naming every such node. Model-local functions are
inlined. After loading, node keys
(name, else first output) are unique, and every value an ONNX engine's shape inference can type
has its type.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import onnx
from google.protobuf.message import DecodeError

from korch.errors import ModelLoadError, ShapeError
from korch.frontend.engines import is_standard, node_key, unrunnable_error, unrunnable_nodes
from korch.ir.onnx_source import copy_fields
from korch.ir.types import DType

log = logging.getLogger("korch.frontend")

MIN_OPSET = 11
MAX_OPSET = 21
ModelSource = str | os.PathLike | onnx.ModelProto


def parse_input_shape(text: str) -> tuple[str, tuple[int, ...]]:
    """'name=1x3x224x224' -> ('name', (1, 3, 224, 224)). A scalar input is 'name=' (empty)."""
    name, sep, dims = text.rpartition("=")
    try:
        if not sep or not name:
            raise ValueError
        shape = tuple(int(d) for d in dims.split("x")) if dims else ()
        if any(d < 1 for d in shape):
            raise ValueError
    except ValueError:
        raise ShapeError(f"--input-shape {text!r}: expected NAME=D1xD2x... with positive integer dims") from None
    return name, shape


def _read(source: ModelSource) -> tuple[onnx.ModelProto, str]:
    if isinstance(source, onnx.ModelProto):
        return source, "<model>"
    path = Path(source)
    label = str(path)
    if not path.is_file():
        raise ModelLoadError(f"{label}: no such file")
    try:
        model = onnx.load(str(path), load_external_data=False)
    except (DecodeError, RuntimeError, ValueError, OSError) as e:
        raise ModelLoadError(f"{label}: not a readable ONNX model ({type(e).__name__}: {e})") from None
    if not model.graph.node and not model.graph.output:
        raise ModelLoadError(f"{label}: not an ONNX model (empty or truncated file)")
    try:
        onnx.load_external_data_for_model(model, str(path.parent))
    except (FileNotFoundError, OSError) as e:
        raise ModelLoadError(f"{label}: missing external data file: {e}") from None
    except Exception as e:  # onnx raises several types for bad external-data records
        raise ModelLoadError(f"{label}: cannot load external data ({type(e).__name__}: {e})") from None
    return model, label


def read_model(source: ModelSource) -> onnx.ModelProto:
    """The model as its file declares it (external data loaded), not checked or shape-fixed; a
    ModelLoadError names a file that cannot be read."""
    return _read(source)[0]


def _check(model: onnx.ModelProto, label: str, path: Path | None = None) -> None:
    """The onnx checker, given the file when there is one: checking a ModelProto serializes it again
    (bert-base: 3.1 s from the proto, 0.4 s from its file)."""
    try:
        onnx.checker.check_model(str(path) if path is not None else model)
    except (onnx.checker.ValidationError, ValueError) as e:
        _refuse_unrunnable(model)
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ModelLoadError(f"{label}: the ONNX checker rejects the model: {first}") from None
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    if opset is None or not MIN_OPSET <= opset <= MAX_OPSET:
        raise ModelLoadError(
            f"{label}: default-domain opset {opset} is outside the supported range {MIN_OPSET}..{MAX_OPSET}; "
            "convert it with onnx.version_converter.convert_version first")


def _fix_inputs(model: onnx.ModelProto, label: str, input_shapes: Mapping[str, Sequence[int]]) -> None:
    initializers = {i.name for i in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in initializers]
    names = [i.name for i in inputs]
    unknown = sorted(set(input_shapes) - set(names))
    if unknown:
        raise ShapeError(f"{label}: --input-shape names {unknown}, but the model's inputs are {names}")
    problems = []
    for inp in inputs:
        if not inp.type.HasField("tensor_type"):
            raise ModelLoadError(f"{label}: input {inp.name!r} is not a tensor")
        tt = inp.type.tensor_type
        try:
            DType.from_onnx(tt.elem_type)
        except ValueError as e:
            raise ModelLoadError(f"{label}: input {inp.name!r}: {e}") from None
        dims = tt.shape.dim
        if inp.name in input_shapes:
            shape = tuple(int(d) for d in input_shapes[inp.name])
            if tt.HasField("shape") and len(dims) != len(shape):
                raise ShapeError(f"{label}: input {inp.name!r} has rank {len(dims)}, --input-shape gives {shape}")
            for k, (d, v) in enumerate(zip(dims, shape)):
                if d.HasField("dim_value") and d.dim_value != v:
                    raise ShapeError(f"{label}: input {inp.name!r} dim {k} is fixed at {d.dim_value}, --input-shape gives {v}")
            tt.shape.ClearField("dim")
            for v in shape:
                tt.shape.dim.add().dim_value = v
            continue
        if not tt.HasField("shape"):
            problems.append(f"input {inp.name!r} has unknown rank")
        for k, d in enumerate(dims):
            if not d.HasField("dim_value") or d.dim_value < 1:
                what = f"symbolic dim {d.dim_param!r}" if d.dim_param else "unknown dim"
                problems.append(f"input {inp.name!r} dim {k} is a {what}")
    if problems:
        hint = ", ".join(f"{i.name}=" + "x".join(str(d.dim_value or "?") for d in i.type.tensor_type.shape.dim)
                         for i in inputs)
        raise ShapeError(f"{label}: korch needs static shapes: " + "; ".join(problems)
                         + f". Optimize a plan per shape with --shapes NAME=D1xD2,D1xD2,... (e.g. --shapes "
                         f"{hint}; shapes= in the API), or fix one shape with --input-shape (input_shapes=)")


def load_model(source: ModelSource, input_shapes: Mapping[str, Sequence[int]] | None = None) -> onnx.ModelProto:
    """Read, check and shape-fix a model. Returns a copy; the caller's ModelProto is not changed."""
    model, label = _read(source)
    model = onnx.ModelProto.FromString(model.SerializeToString()) if model is source else model
    _check(model, label, None if isinstance(source, onnx.ModelProto) else Path(source))
    model = _inline_functions(model, label)
    _fix_inputs(model, label, input_shapes or {})
    _unique_node_keys(model)
    del model.graph.value_info[:]
    try:
        _infer_shapes(model)
    except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError, RuntimeError) as e:
        _refuse_unrunnable(model)
        first = str(e).strip().splitlines()[0]
        raise ModelLoadError(f"{label}: shape inference fails: {first}") from None
    _type_onnxruntime_ops(model, label)
    _check_input_types(model, label)
    return model


# Float initializers of more elements than this are given to onnx's shape inference without their bytes (below).
_SHAPELESS_ELEMENTS = 1024


def _infer_shapes(model: onnx.ModelProto) -> None:
    """onnx's strict shape inference: the value types it infers and the outputs it completes, in place.

    onnx serializes the model to infer and parses the result back: 1.8 s of a warm bert-base optimize,
    most of it copying weights. It is given a copy of the model without the bytes of large float
    initializers instead: shapes never depend on a float weight's values (shape-like inputs are
    integer tensors, all kept), only on its declared type and dims, which stay. The copy is built
    without reading those bytes (reading a bytes field copies it: 0.3 s of gpt2-small's 479 MB)."""
    float_types = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16, onnx.TensorProto.DOUBLE}
    light = onnx.ModelProto(ir_version=model.ir_version)
    light.opset_import.extend(model.opset_import)
    light.functions.extend(model.functions)
    graph = light.graph
    graph.name = model.graph.name
    for field in ("node", "input", "output", "sparse_initializer"):
        getattr(graph, field).extend(getattr(model.graph, field))
    for t in model.graph.initializer:
        if t.data_type in float_types and t.HasField("raw_data") and math.prod(t.dims) > _SHAPELESS_ELEMENTS:
            graph.initializer.add(name=t.name, dims=t.dims, data_type=t.data_type)
        else:
            graph.initializer.append(t)
    inferred = onnx.shape_inference.infer_shapes(light, strict_mode=True)
    model.graph.value_info.extend(inferred.graph.value_info)
    for output, typed in zip(model.graph.output, inferred.graph.output):
        output.type.CopyFrom(typed.type)


def model_digest(model: onnx.ModelProto) -> str:
    """SHA-256 over a model: the model without its initializers' raw bytes, serialized, then each such
    initializer's name and the digest of its bytes (the large ones hashed on every core). As telling
    as hashing the serialized model, without writing the weights out once more, nor copying them to
    clear them (yolov4 as given, 246 MB: that copy was 1.2 s of the digest's 1.5 s in a cProfiled warm
    optimize; alone, 0.34 -> 0.19-0.21 s)."""
    light = _without_raw_data(model)
    raw = [t for t in model.graph.initializer if t.HasField("raw_data")]
    with ThreadPoolExecutor(max(1, min(len(raw), os.cpu_count() or 1))) as pool:
        digests = list(pool.map(lambda t: hashlib.sha256(t.raw_data).hexdigest(), raw))
    h = hashlib.sha256(light.SerializeToString(deterministic=True))
    for t, d in zip(raw, digests):
        h.update(f"|{t.name}|{d}".encode())
    return h.hexdigest()


def _without_raw_data(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of `model` whose initializers hold no raw_data, built field by field: the weights are
    never copied. Serialized, it is the bytes of a full copy with each raw_data cleared."""
    light = copy_fields(model, onnx.ModelProto(), skip=("graph",))
    copy_fields(model.graph, light.graph, skip=("initializer",))
    for t in model.graph.initializer:
        copy_fields(t, light.graph.initializer.add(), skip=("raw_data",))
    return light


def _inline_functions(model: onnx.ModelProto, label: str) -> onnx.ModelProto:
    """Replace calls to model-local functions (torch's exporter writes some) by their bodies, so each
    body node is fissioned like any other. Left as calls, they would read as ops no engine defines."""
    if not model.functions:
        return model
    from onnx.inliner import inline_local_functions

    try:
        return inline_local_functions(model)
    except Exception as e:  # onnx's C++ inliner raises plain exceptions on a malformed function
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ModelLoadError(f"{label}: cannot inline the model's local functions: {first}") from None


def _refuse_unrunnable(model: onnx.ModelProto) -> None:
    """A checker or shape-inference failure caused by ops no engine knows (a custom domain without its
    opset import fails the checker): name those ops, the problem the user can act on."""
    unknown = unrunnable_nodes(model.graph.node)
    if unknown:
        raise unrunnable_error(unknown)


def _unique_node_keys(model: onnx.ModelProto) -> None:
    """Rename nodes whose key (node_key: the name, else the first output) repeats an earlier node's:
    primitives name their ONNX node by it, and regions find their nodes by it."""
    keys = {node_key(n) for n in model.graph.node}
    seen: set[str] = set()
    for node in model.graph.node:
        key = node_key(node)
        if key in seen:
            suffix = 1
            while f"{key}#{suffix}" in keys:
                suffix += 1
            node.name = key = f"{key}#{suffix}"
            keys.add(key)
        seen.add(key)


def _has_tensor_type(value: onnx.ValueInfoProto) -> bool:
    t = value.type
    return t.HasField("tensor_type") and bool(t.tensor_type.elem_type) and t.tensor_type.HasField("shape")


def _type_onnxruntime_ops(model: onnx.ModelProto, label: str) -> None:
    """ONNX shape inference does not know onnxruntime's own ops (com.microsoft ...) and leaves their
    outputs, and what follows them, untyped: type those values with onnxruntime's symbolic shape
    inference. Left untyped if that fails too; fission then names the node it cannot type."""
    g = model.graph
    typed = {v.name for v in list(g.input) + list(g.value_info) + list(g.output) if _has_tensor_type(v)}
    typed.update(i.name for i in g.initializer)
    foreign = [n for n in g.node if not is_standard(n)]
    if not foreign or unrunnable_nodes(foreign) or all(o in typed for n in g.node for o in n.output if o):
        return          # nothing to type, or fission refuses the model anyway
    try:
        from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference

        inferred = SymbolicShapeInference.infer_shapes(model, auto_merge=True, guess_output_rank=False)
    except Exception as e:   # it raises many types on ops it does not know; the driver reports what stays untyped
        log.info("%s: onnxruntime's shape inference fails (%s: %s)", label, type(e).__name__, e)
        return
    known_outputs = {o.name for o in g.output}
    for value in inferred.graph.value_info:
        if value.name not in typed and value.name not in known_outputs and _has_tensor_type(value):
            g.value_info.append(value)
    for output in g.output:
        if output.name not in typed:
            match = next((o for o in inferred.graph.output if o.name == output.name and _has_tensor_type(o)), None)
            if match is not None:
                output.type.CopyFrom(match.type)


_TYPE_NAMES = {v: k for k, v in onnx.TensorProto.DataType.items()}


def _type_str(tp: onnx.TypeProto) -> str | None:
    """'tensor(float)' for a tensor type, as in ONNX schemas' type constraints."""
    if tp.HasField("tensor_type") and tp.tensor_type.elem_type:
        return f"tensor({_TYPE_NAMES[tp.tensor_type.elem_type].lower()})"
    return None


def _check_input_types(model: onnx.ModelProto, label: str) -> None:
    """Every default-domain node's inputs have types its schema allows (onnx's checker does not check this)."""
    opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    g = model.graph
    types = {v.name: _type_str(v.type) for v in list(g.input) + list(g.value_info) + list(g.output)}
    types.update({i.name: _type_str(onnx.helper.make_tensor_type_proto(i.data_type, None)) for i in g.initializer})
    for node in g.node:
        if node.domain not in ("", "ai.onnx"):
            continue
        try:
            schema = onnx.defs.get_schema(node.op_type, opset, node.domain)
        except onnx.defs.SchemaError:
            continue  # unknown ops are reported by fission, all together
        allowed = {c.type_param_str: set(c.allowed_type_strs) for c in schema.type_constraints}
        for k, name in enumerate(node.input):
            formal = schema.inputs[min(k, len(schema.inputs) - 1)] if schema.inputs else None
            actual = types.get(name)
            if not name or formal is None or actual is None or formal.type_str not in allowed:
                continue
            if actual not in allowed[formal.type_str]:
                ok = ", ".join(sorted(t.removeprefix("tensor(").removesuffix(")") for t in allowed[formal.type_str]))
                got = actual.removeprefix("tensor(").removesuffix(")")
                raise ModelLoadError(f"{label}: node {node.name or node.output[0]!r} ({node.op_type}): input {name!r} "
                                     f"is {got}, but {node.op_type} takes {ok}")
