"""Save and load a primitive graph exactly: structure as JSON, constants as one .npz.

A constant whose bytes are already in a file beside the graph (a saved plan's original.weights)
is not written again: constants.json records where it is, and it is memory-mapped from there when
first used.
"""

from __future__ import annotations

import json
import mmap
import os
import weakref
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
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


@dataclass(frozen=True)
class Mapped:
    """Where a constant's bytes are in another file of the graph's directory (C order, no header):
    an array of `shape` there is the constant, or, with `perm`, the constant is that array with its
    axes permuted (a weight fission transposed: the file holds it as the model had it)."""

    file: str
    offset: int
    dtype: str
    shape: tuple[int, ...]
    perm: tuple[int, ...] = ()

    @property
    def nbytes(self) -> int:
        return np.dtype(self.dtype).itemsize * int(np.prod(self.shape, dtype=np.int64))


class LazyConstants(Mapping[str, np.ndarray]):
    """Constants read from an .npz archive, or mapped from another file, on first use (read-only),
    so a loaded plan whose kernels carry their own weights (onnxruntime regions) never reads them.
    Keeps the archive and the mapped files open.

    An array read is shared while someone holds it and freed after: a kernel compiled from
    primitives keeps its own copy of its weights (onnxruntime's session, Inductor's frozen
    parameters), so a cache holding every array read would double them for the session's life. A
    mapped array costs no copy: its pages are the file's, shared with every engine that maps it (one
    whose axes the file holds permuted is copied when read)."""

    def __init__(self, path: Path, names: Sequence[str], mapped: Mapping[str, Mapped] | None = None) -> None:
        self._path = path
        self._archive = np.load(path, allow_pickle=False)
        self._members = {n: f"c{k}" for k, n in enumerate(names)}
        self._mapped = dict(mapped or {})
        self._maps: dict[str, mmap.mmap] = {}
        self._loaded: weakref.WeakValueDictionary[str, np.ndarray] = weakref.WeakValueDictionary()

    def __getitem__(self, name: str) -> np.ndarray:
        array = self._loaded.get(name)
        if array is None:
            array = self._map(name) if name in self._mapped else self._read(name)
            array.setflags(write=False)
            self._loaded[name] = array
        return array

    def _read(self, name: str) -> np.ndarray:
        try:
            return self._archive[self._members[name]]
        except KeyError:
            raise
        except Exception as e:   # zipfile and numpy raise several types for a damaged member
            raise ConstantsError(f"{self._path}: cannot read constant {name!r} ({type(e).__name__}: {e})") from None

    def _map(self, name: str) -> np.ndarray:
        where = self._mapped[name]
        path = self._path.parent / where.file
        if where.file not in self._maps:
            try:
                # Copy-on-write: reads share the file's pages; an engine handed writable memory it
                # should not write (backends.base.writable_alias) could never reach the file.
                with open(path, "rb") as f:
                    self._maps[where.file] = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
            except (OSError, ValueError) as e:
                raise ConstantsError(f"{path}: cannot map constant {name!r} ({e})") from None
        buffer = self._maps[where.file]
        if where.offset < 0 or where.offset + where.nbytes > len(buffer):
            raise ConstantsError(f"{path}: constant {name!r} lies outside the file (offset {where.offset}, "
                                 f"{where.nbytes} bytes, file size {len(buffer)})")
        count = where.nbytes // np.dtype(where.dtype).itemsize
        array = np.frombuffer(buffer, np.dtype(where.dtype), count, where.offset).reshape(where.shape)
        # a permuted constant is copied once read (C order, as every constant), and freed with its last user
        return np.ascontiguousarray(array.transpose(where.perm)) if where.perm else array

    def __iter__(self) -> Iterator[str]:
        yield from self._members
        yield from self._mapped

    def __len__(self) -> int:
        return len(self._members) + len(self._mapped)

    def __contains__(self, name: object) -> bool:
        return name in self._members or name in self._mapped


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


def save_graph(graph: Graph, directory: Path, mapped: Mapping[str, Mapped] | None = None,
               previous: Path | None = None) -> bool:
    """Write graph.json and constants.npz into `directory` (which must exist). `mapped`: constants
    whose bytes the caller has already written to a file in `directory`, recorded instead of stored.
    `previous`: an earlier save's directory (a plan being replaced). When its constants.json records
    the same stored constants (names in order, digest), its constants.npz is hard-linked, not written
    again (gpt2-small's 479 MB: 1.4 s); the caller checks the linked file is intact. Returns whether it was."""
    mapped = dict(mapped or {})
    (directory / "graph.json").write_text(json.dumps(graph_to_json(graph)))
    names = [n for n in graph.constants if n not in mapped]
    digest = graph.constants_digest(names)
    linked = previous is not None and _link_constants(previous, directory, names, digest)
    if not linked:
        np.savez(directory / CONSTANTS_FILE, **{f"c{k}": graph.constants[n] for k, n in enumerate(names)})
    (directory / "constants.json").write_text(json.dumps(
        {"stored": names, "digest": digest,
         "mapped": {n: [m.file, m.offset, m.dtype, list(m.shape), list(m.perm)] for n, m in mapped.items()}}))
    return linked


CONSTANTS_FILE = "constants.npz"


def _link_constants(previous: Path, directory: Path, names: list[str], digest: str) -> bool:
    try:
        index = json.loads((previous / "constants.json").read_text())
        if not isinstance(index, dict) or index.get("stored") != names or index.get("digest") != digest:
            return False
        os.link(previous / CONSTANTS_FILE, directory / CONSTANTS_FILE)
    except (OSError, ValueError):               # none there, damaged, or a file system without hard links
        return False
    return True


def load_graph(directory: Path) -> Graph:
    """The graph saved in `directory`; its constants are read (or mapped) when first used."""
    data = json.loads((directory / "graph.json").read_text())
    index = json.loads((directory / "constants.json").read_text())
    if isinstance(index, list):                    # written before constants could be mapped
        index = {"stored": index, "mapped": {}}
    mapped = {n: _mapped(entry) for n, entry in index["mapped"].items()}
    return graph_from_json(data, LazyConstants(directory / CONSTANTS_FILE, index["stored"], mapped))


def _mapped(entry: Sequence[Any]) -> Mapped:
    """A constants.json "mapped" entry: [file, offset, dtype, shape, perm] (no perm: written before
    permuted constants were mapped)."""
    file, offset, dtype, shape, *rest = entry
    shape = tuple(int(x) for x in shape)
    perm = tuple(int(x) for x in rest[0]) if rest else ()
    if perm and sorted(perm) != list(range(len(shape))):
        raise ValueError(f"axes {list(perm)} are not a permutation of a {len(shape)}-d array's")
    return Mapped(str(file), int(offset), str(dtype), shape, perm)
