"""Save and load a primitive graph exactly: structure as JSON, constants as one .npz."""

from __future__ import annotations

import json
import weakref
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

from korch.errors import KorchError
from korch.ir.graph import Attrs, Graph, Node
from korch.ir.types import DType, TensorType

FORMAT_VERSION = 1


def _attr_to_json(value: Any) -> Any:
    if isinstance(value, DType):
        return {"dtype": value.value}
    if isinstance(value, tuple):
        return {"tuple": [_attr_to_json(v) for v in value]}
    return value


def _attr_from_json(value: Any) -> Any:
    if isinstance(value, dict):
        if "dtype" in value:
            return DType(value["dtype"])
        return tuple(_attr_from_json(v) for v in value["tuple"])
    return value


def graph_to_json(graph: Graph) -> dict[str, Any]:
    return {
        "format": FORMAT_VERSION,
        "name": graph.name,
        "inputs": list(graph.inputs),
        "outputs": list(graph.outputs),
        "types": {k: [list(t.shape), t.dtype.value] for k, t in graph.types.items()},
        "constants": list(graph.constants),
        "nodes": [{"op": n.op, "inputs": list(n.inputs), "output": n.output, "origin": n.origin,
                   "attrs": {k: _attr_to_json(v) for k, v in n.attrs.items()}} for n in graph.nodes],
    }


class ConstantsError(KorchError):
    """A saved graph's constants file is damaged."""


class LazyConstants(Mapping[str, np.ndarray]):
    """Constants read from an .npz archive on first use (read-only), so a loaded plan whose kernels
    carry their own weights (onnxruntime regions) never reads them. Keeps the archive open.

    An array read is shared while someone holds it and freed after: a kernel compiled from
    primitives keeps its own copy of its weights (onnxruntime's session, Inductor's frozen
    parameters), so a cache holding every array read would double them for the session's life."""

    def __init__(self, path: Path, names: Sequence[str]) -> None:
        self._path = path
        self._archive = np.load(path, allow_pickle=False)
        self._members = {n: f"c{k}" for k, n in enumerate(names)}
        self._loaded: weakref.WeakValueDictionary[str, np.ndarray] = weakref.WeakValueDictionary()

    def __getitem__(self, name: str) -> np.ndarray:
        array = self._loaded.get(name)
        if array is None:
            try:
                array = self._archive[self._members[name]]
            except KeyError:
                raise
            except Exception as e:   # zipfile and numpy raise several types for a damaged member
                raise ConstantsError(f"{self._path}: cannot read constant {name!r} "
                                     f"({type(e).__name__}: {e})") from None
            array.setflags(write=False)
            self._loaded[name] = array
        return array

    def __iter__(self) -> Iterator[str]:
        return iter(self._members)

    def __len__(self) -> int:
        return len(self._members)

    def __contains__(self, name: object) -> bool:
        return name in self._members


def graph_from_json(data: dict[str, Any], constants: Mapping[str, np.ndarray]) -> Graph:
    if data.get("format") != FORMAT_VERSION:
        raise ValueError(f"graph format {data.get('format')} is not {FORMAT_VERSION}")
    if set(constants) != set(data["constants"]):
        raise ValueError("the constants stored do not match the graph's")
    if not isinstance(constants, LazyConstants):
        for array in constants.values():
            array.setflags(write=False)
        constants = {k: constants[k] for k in data["constants"]}
    nodes = tuple(Node(n["op"], tuple(n["inputs"]), n["output"],
                       Attrs({k: _attr_from_json(v) for k, v in n["attrs"].items()}), n["origin"])
                  for n in data["nodes"])
    types = {k: TensorType(tuple(shape), DType(dtype)) for k, (shape, dtype) in data["types"].items()}
    return Graph(data["name"], tuple(data["inputs"]), tuple(data["outputs"]), nodes,
                 MappingProxyType(types), MappingProxyType(constants))


def save_graph(graph: Graph, directory: Path) -> None:
    """Write graph.json and constants.npz into `directory` (which must exist)."""
    (directory / "graph.json").write_text(json.dumps(graph_to_json(graph)))
    names = list(graph.constants)
    np.savez(directory / "constants.npz", **{f"c{k}": graph.constants[n] for k, n in enumerate(names)})
    (directory / "constants.json").write_text(json.dumps(names))


def load_graph(directory: Path) -> Graph:
    """The graph saved in `directory`; its constants are read when first used."""
    data = json.loads((directory / "graph.json").read_text())
    names = json.loads((directory / "constants.json").read_text())
    return graph_from_json(data, LazyConstants(directory / "constants.npz", names))
