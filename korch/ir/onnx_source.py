"""The original ONNX model beside the primitive graph, and where each of its values went.

Kept apart from the ONNX code that reads it (no `import onnx` here), so that a saved plan whose
ONNX-engine kernels were written out whole can be loaded and run without parsing its original model:
a saved plan's source is read from disk only when something asks for its model.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    import onnx
    from google.protobuf.message import Message


class OnnxSource:
    """The loaded (shape-fixed) ONNX model and its value map (ONNX value -> primitive-graph value).

    `weights_dir`: the directory that the locations of the model's EXTERNAL initializers are
    relative to (a loaded plan keeps its weights in a file beside original.onnx); region models
    refer to the same file, and an engine reads from it directly.

    `arrays`: the data of the initializers the model holds as stand-ins at regions.SHARED_LOCATION,
    by name: the primitive graph's own constants (regions.share_weights), so that the model does not
    hold the weights a second time while korch optimizes it.

    Built from a model in memory, or with `OnnxSource.deferred`, from a loader called on the first
    use of `model` or `value_map` (a saved plan's original.onnx)."""

    __slots__ = ("_model", "_value_map", "_loader", "weights_dir", "arrays")

    def __init__(self, model: onnx.ModelProto, value_map: Mapping[str, str], weights_dir: Path | None = None,
                 arrays: Mapping[str, np.ndarray] | None = None) -> None:
        self._model: onnx.ModelProto | None = model
        self._value_map: Mapping[str, str] | None = value_map
        self._loader: Callable[[], tuple[onnx.ModelProto, Mapping[str, str]]] | None = None
        self.weights_dir = weights_dir
        self.arrays: Mapping[str, np.ndarray] = arrays or {}

    @classmethod
    def deferred(cls, loader: Callable[[], tuple[onnx.ModelProto, Mapping[str, str]]],
                 weights_dir: Path | None = None) -> OnnxSource:
        source = cls.__new__(cls)
        source._model = source._value_map = None
        source._loader = loader
        source.weights_dir = weights_dir
        source.arrays = {}
        return source

    def _load(self) -> None:
        if self._loader is not None:
            self._model, self._value_map = self._loader()
            self._loader = None

    @property
    def model(self) -> onnx.ModelProto:
        self._load()
        assert self._model is not None
        return self._model

    @property
    def value_map(self) -> Mapping[str, str]:
        self._load()
        assert self._value_map is not None
        return self._value_map


def copy_fields(source: Message, target: Message, skip: tuple[str, ...]) -> Message:
    """`target` given every field `source` has set, except those named in `skip`; returns `target`."""
    from google.protobuf.message import Message

    for descriptor, value in source.ListFields():
        if descriptor.name in skip:
            continue
        if isinstance(value, Message):
            getattr(target, descriptor.name).CopyFrom(value)
        elif isinstance(value, (bytes, str, int, float)):       # a scalar (bool and enums are ints)
            setattr(target, descriptor.name, value)
        else:                                                    # a repeated field
            getattr(target, descriptor.name).extend(value)
    return target
