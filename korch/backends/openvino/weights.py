"""EXTERNAL initializers for OpenVINO: constants over a copy-on-write map of the weights file.

A saved plan keeps the original model's weights in one file (`original.weights`) and a region model
refers to it by a location relative to the plan directory. OpenVINO's ONNX reader only follows such
locations from a model *file*, inside that file's own directory: a model given as bytes resolves them
against the current directory, and a symlink or an absolute path out of a temporary directory is
refused ("resolves to ... which is outside the base directory"). Writing a model file into the plan
directory would need it to be writable. So the external initializers become graph inputs of the
model OpenVINO reads, and each of those inputs is then replaced by a Constant sharing the memory of
a numpy view of the mapped file: nothing is written, nothing is read until the plugin needs it.

Measured on bert-base (436 MB of weights, whole model, 2 threads, peak RSS of a fresh process):
this way 885 MB; the same model from its .onnx file with embedded weights 936 MB; the weights
read into the ModelProto and passed as bytes (inlined) 1779 MB. The plugin keeps its own copy of
the weights in its layouts, so ~2x the weights is OpenVINO's floor either way.

That floor is the end of the compile: the plugin has copied each weight into its layouts, and every
page it read through the map is still resident beside the copies, though few are read again (an
embedding's rows). `pages.dropping_pages` drops this process's pages of the map while the plugin compiles
and once after: the map is private and never written (OpenVINO maps its own IR weights read-only,
PROT_READ in src/common/util/src/os/lin/lin_mmap_object.cpp, and shares them the same way), so a
page read again comes back from the file, unchanged. Peak RSS of a fresh process (korch.bench_rss,
whole-model plans, 2 threads), not dropping -> dropping: bert-base 888 -> 527 MB, vit-b16 810 -> 525,
gpt2-small 810 -> 515 (onnxruntime from the .onnx file: 720, 517-663, 706); compile times unchanged.
"""

from __future__ import annotations

import mmap
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import onnx
import openvino as ov
from onnx import helper

from korch.backends.base import writable_alias
from korch.frontend.regions import is_shared


def external_initializers(model: onnx.ModelProto) -> list[onnx.TensorProto]:
    return [t for t in model.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL]


def detach_external(model: onnx.ModelProto, directory: Path | None,
                    shared: Mapping[str, np.ndarray]) -> tuple[onnx.ModelProto, dict[str, np.ndarray], list[mmap.mmap]]:
    """A copy of `model` whose EXTERNAL initializers are graph inputs, their data as read-only-in-
    practice views of the mapped files (copy-on-write maps: OpenVINO's Constant wants writable memory
    and never writes to it), or, at SHARED_LOCATION, the arrays in `shared`; and the maps."""
    external = external_initializers(model)
    names = {t.name for t in external}
    maps: dict[str, mmap.mmap] = {}
    arrays: dict[str, np.ndarray] = {}
    for tensor in external:
        if is_shared(tensor):
            if tensor.name not in shared:
                raise ValueError(f"initializer {tensor.name!r} is a shared array, but none was given")
            arrays[tensor.name] = shared[tensor.name]
            continue
        info = {e.key: e.value for e in tensor.external_data}
        location, offset = info.get("location", ""), int(info.get("offset", 0))
        if directory is None:
            raise ValueError(f"initializer {tensor.name!r} is in {location}, but no directory was given")
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tensor.data_type))
        count = int(np.prod(tuple(tensor.dims), dtype=np.int64))
        if location not in maps:
            with open(directory / location, "rb") as f:
                maps[location] = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
        whole = np.frombuffer(maps[location], dtype=np.uint8)
        if offset + count * dtype.itemsize > whole.size:
            raise ValueError(f"initializer {tensor.name!r} lies past the end of {location}")
        arrays[tensor.name] = whole[offset:offset + count * dtype.itemsize].view(dtype).reshape(tuple(tensor.dims))
    detached = onnx.ModelProto()
    detached.CopyFrom(model)
    kept = [t for t in detached.graph.initializer if t.name not in names]
    del detached.graph.initializer[:]
    detached.graph.initializer.extend(kept)
    declared = {i.name for i in detached.graph.input}
    detached.graph.input.extend(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
                                for t in external if t.name not in declared)
    return detached, arrays, list(maps.values())


def bind_constants(model: ov.Model, arrays: Mapping[str, np.ndarray]) -> None:
    """Replace the model's parameters named in `arrays` by constants sharing those arrays' memory.
    The caller keeps the arrays alive as long as the model or anything compiled from it: OpenVINO
    does not hold a reference to memory it shares."""
    for parameter in list(model.get_parameters()):
        names = parameter.output(0).get_names() & arrays.keys()
        if not names:
            continue
        constant = ov.op.Constant(writable_alias(arrays[next(iter(names))]), shared_memory=True)
        parameter.output(0).replace(constant.output(0))
        model.remove_parameter(parameter)
    model.validate_nodes_and_infer_types()
