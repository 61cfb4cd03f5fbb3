"""The primitive graph: immutable nodes and graphs, and the builder that makes them."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cached_property
from types import MappingProxyType
from typing import Any

import numpy as np

from korch.ir.ops import IRError, PrimClass, infer_type, op_spec
from korch.ir.types import DType, TensorType


class Attrs(Mapping[str, Any]):
    """A hashable, read-only attribute mapping. Values are ints, floats, strs, bools, DTypes or tuples."""

    __slots__ = ("_items",)

    def __init__(self, items: Mapping[str, Any] | None = None) -> None:
        self._items = tuple(sorted((k, _freeze(v)) for k, v in (items or {}).items()))

    def __getitem__(self, key: str) -> Any:
        for k, v in self._items:
            if k == key:
                return v
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return (k for k, _ in self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return hash(self._items)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Attrs) and self._items == other._items

    def __repr__(self) -> str:
        return ", ".join(f"{k}={_fmt(v)}" for k, v in self._items)


def _freeze(value: Any) -> Any:
    if isinstance(value, (list, tuple, np.ndarray)):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value)
    if isinstance(value, (str, DType)):
        return value
    raise TypeError(f"attribute value {value!r} of type {type(value).__name__} is not allowed")


def _fmt(value: Any) -> str:
    if isinstance(value, DType):
        return value.value
    if isinstance(value, tuple):
        return "(" + ",".join(_fmt(v) for v in value) + ")"
    return repr(value) if isinstance(value, str) else str(value)


@dataclass(frozen=True)
class Node:
    """One primitive: `output = op[attrs](*inputs)`. `origin` names the ONNX node it came from."""

    op: str
    inputs: tuple[str, ...]
    output: str
    attrs: Attrs = field(default_factory=Attrs)
    origin: str = ""

    @property
    def klass(self) -> PrimClass:
        return op_spec(self.op).klass

    @cached_property
    def signature(self) -> str:
        """`op[attrs]` as text: what a candidate's key says of this node besides its values."""
        return f"{self.op}[{self.attrs!r}]"


@dataclass(frozen=True)
class Value:
    """A handle on a value while a graph is being built: its name and static type."""

    name: str
    type: TensorType

    @property
    def shape(self) -> tuple[int, ...]:
        return self.type.shape

    @property
    def dtype(self) -> DType:
        return self.type.dtype

    @property
    def rank(self) -> int:
        return self.type.rank


@dataclass(frozen=True)
class Graph:
    """A primitive graph. Nodes are in topological order; every value has a static type.

    Constants are read-only arrays; a value is exactly one of: graph input, constant, node output.
    """

    name: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    nodes: tuple[Node, ...]
    types: Mapping[str, TensorType]
    constants: Mapping[str, np.ndarray]

    @cached_property
    def producers(self) -> Mapping[str, Node]:
        return MappingProxyType({n.output: n for n in self.nodes})

    @cached_property
    def positions(self) -> Mapping[str, int]:
        """Each node's output -> the node's index in `nodes`."""
        return MappingProxyType({n.output: k for k, n in enumerate(self.nodes)})

    @cached_property
    def consumers(self) -> Mapping[str, tuple[Node, ...]]:
        users: dict[str, list[Node]] = {}
        for n in self.nodes:
            for i in dict.fromkeys(n.inputs):
                users.setdefault(i, []).append(n)
        return MappingProxyType({k: tuple(v) for k, v in users.items()})

    def __reduce__(self) -> tuple[Callable[..., Graph], tuple[Any, ...]]:
        """Pickled (to a compile worker, korch/profile/ahead.py) as its fields, the read-only mappings
        as dicts: a mappingproxy does not pickle."""
        return _unpickle_graph, (self.name, self.inputs, self.outputs, self.nodes, dict(self.types),
                                 dict(self.constants))

    def class_counts(self) -> dict[PrimClass, int]:
        counts = {k: 0 for k in PrimClass}
        for n in self.nodes:
            counts[n.klass] += 1
        return counts

    def constants_digest(self, names: Iterable[str] | None = None) -> str:
        """SHA-256 over the constants `names` (all of them by default): each one's name and digest
        (`constant_digest`). What candidate keys leave out, so that two models of one architecture with
        other weights can be told apart; save_graph also uses it to keep an unchanged constants file."""
        chosen = sorted(self.constants if names is None else names)
        digests = self._constant_digests
        missing = [n for n in chosen if n not in digests]
        arrays = [self.constants[n] for n in missing]          # (read here: a lazy mapping is not shared)
        small = [k for k, a in enumerate(arrays) if a.nbytes < _HASH_IN_THREAD_BYTES]
        large = [k for k, a in enumerate(arrays) if a.nbytes >= _HASH_IN_THREAD_BYTES]
        for k in small:
            digests[missing[k]] = constant_digest(arrays[k])
        if large:       # hashlib lets go of the GIL: the large ones are hashed on every core
            with ThreadPoolExecutor(max(1, min(len(large), os.cpu_count() or 1))) as pool:
                for k, digest in zip(large, pool.map(constant_digest, [arrays[k] for k in large])):
                    digests[missing[k]] = digest
        h = hashlib.sha256()
        for name in chosen:
            h.update(f"{name}|{digests[name]}|".encode())
        return h.hexdigest()

    @cached_property
    def _constant_digests(self) -> dict[str, str]:
        """Each constant's digest once computed (constants never change: they are read-only)."""
        return {}


# Constants at least this large are hashed on a pool of threads (gpt2-small's 479 MB: 0.9 s -> 0.2 s).
_HASH_IN_THREAD_BYTES = 1 << 20


def constant_digest(array: np.ndarray) -> str:
    """SHA-256 of an array's dtype, shape and values in row-major order. An array stored column-major
    (a transposed weight, such as gpt2's tied embedding read as its transpose) is hashed as its
    transpose, marked as such, instead of copied: equal digests still mean equal arrays."""
    h = hashlib.sha256(f"{array.dtype.str}|{array.shape}|".encode())
    if not array.flags.c_contiguous and array.flags.f_contiguous:
        h.update(b"T|")
        array = array.T
    array = np.ascontiguousarray(array)
    h.update(memoryview(array.reshape(-1)).cast("B"))
    return h.hexdigest()


def _unpickle_graph(name: str, inputs: tuple[str, ...], outputs: tuple[str, ...], nodes: tuple[Node, ...],
                    types: dict[str, TensorType], constants: dict[str, np.ndarray]) -> Graph:
    for array in constants.values():
        array.flags.writeable = False          # constants are read-only, as the builder leaves them
    return Graph(name, inputs, outputs, nodes, MappingProxyType(types), MappingProxyType(constants))


def _array_key(array: np.ndarray) -> tuple[str, tuple[int, ...], str]:
    return (array.dtype.str, array.shape, hashlib.sha1(np.ascontiguousarray(array).tobytes()).hexdigest())


FoldFn = Callable[[Node, Sequence[np.ndarray]], np.ndarray]

# The origin of the copy build() adds for an output that is an input, a constant or another output.
OUTPUT_COPY = "output-copy"
# Constants at most this large are shared by content; larger ones (weights) keep their own name.
SHARE_CONSTANT_MAX_ELEMENTS = 64


class GraphBuilder:
    """Builds a Graph one primitive at a time, inferring types and folding constant primitives.

    `fold(node, input_arrays)` evaluates a primitive whose inputs are all constants; with it,
    shape arithmetic and weight-only subgraphs become constants as they are built.
    """

    def __init__(self, name: str, fold: FoldFn | None = None) -> None:
        self.name = name
        self._fold = fold
        self._inputs: list[str] = []
        self._nodes: list[Node] = []
        self._types: dict[str, TensorType] = {}
        self._constants: dict[str, np.ndarray] = {}
        self._shared: dict[tuple[str, tuple[int, ...], str], str] = {}
        self._counter = 0
        self.renamed: dict[str, str] = {}     # value renames made by build(): internal name -> public name

    def fresh_name(self, hint: str = "v") -> str:
        while True:
            self._counter += 1
            name = f"%{hint}{self._counter}"
            if name not in self._types:
                return name

    def value(self, name: str) -> Value:
        return Value(name, self._types[name])

    def has(self, name: str) -> bool:
        return name in self._types

    def add_input(self, name: str, type_: TensorType) -> Value:
        if name in self._types:
            raise IRError(f"value {name!r} defined twice")
        self._inputs.append(name)
        self._types[name] = type_
        return Value(name, type_)

    def add_constant(self, array: np.ndarray, name: str | None = None, owned: bool = False,
                     view: bool = False) -> Value:
        """`owned`: the caller hands `array` over (nobody else holds or writes it), so a C-contiguous
        one is kept as it is instead of copied (fission's initializers: copying bert-base's 435 MB
        again was 0.67 s of its warm optimize). `view`: `array` is a view of one of this builder's
        (read-only) constants, kept as it is."""
        if not (view or (owned and isinstance(array, np.ndarray) and array.flags.c_contiguous)):
            array = np.array(array, copy=True)
        array.setflags(write=False)
        small = array.size <= SHARE_CONSTANT_MAX_ELEMENTS
        if small and name is None:
            key = _array_key(array)
            if key in self._shared:
                return self.value(self._shared[key])
        if name is None or name in self._types:
            name = self.fresh_name("c")
        self._constants[name] = array
        self._types[name] = TensorType(tuple(int(d) for d in array.shape), DType.from_numpy(array.dtype))
        if small:
            self._shared.setdefault(_array_key(array), name)
        return Value(name, self._types[name])

    def constant_value(self, name: str) -> np.ndarray | None:
        return self._constants.get(name)

    def emit(self, op: str, inputs: Sequence[Value | str], attrs: Mapping[str, Any] | None = None,
             origin: str = "", foldable: bool = True) -> Value:
        """Add a primitive, or its value as a constant when its inputs are constants and `foldable`
        (False for primitives whose value is a random draw)."""
        names = tuple(i.name if isinstance(i, Value) else i for i in inputs)
        frozen = Attrs(attrs)
        out_type = infer_type(op, [self._types[n] for n in names], frozen)
        node = Node(op, names, "", frozen, origin)
        if foldable and self._fold is not None and all(n in self._constants for n in names):
            folded = np.asarray(self._fold(node, [self._constants[n] for n in names]), dtype=out_type.dtype.numpy)
            if not out_type.admits(folded.shape):
                folded = folded.reshape(out_type.shape)
            # A transposed constant is a view of it, not a copy: gpt2-small's logits read its 147 MB
            # token embedding transposed, held twice. (Its layout is what a copy in order K had.)
            return self.add_constant(folded, view=op == "transpose"
                                     and np.may_share_memory(folded, self._constants[names[0]]))
        name = self.fresh_name()
        self._nodes.append(Node(op, names, name, frozen, origin))
        self._types[name] = out_type
        return Value(name, out_type)

    def build(self, outputs: Sequence[tuple[str, Value | str]]) -> Graph:
        """Finish the graph. `outputs` pairs each graph output's public name with the value it is.

        Values are renamed to their public names; an output that is an input, a constant or
        another output's value gets a copy (a same-shape reshape). Dead primitives are dropped.
        """
        nodes = list(self._nodes)
        types = dict(self._types)
        producers = {n.output for n in nodes}
        rename: dict[str, str] = {}
        final: list[str] = []
        for public, value in outputs:
            vname = value.name if isinstance(value, Value) else value
            if public in final or (public in types and public != vname):
                raise IRError(f"graph output name {public!r} collides with another value")
            if vname in producers and vname not in rename:
                rename[vname] = public
            else:
                nodes.append(Node("reshape", (vname,), public, Attrs({"shape": types[vname].shape}), OUTPUT_COPY))
                types[public] = types[vname]
            final.append(public)
        nodes = [Node(n.op, tuple(rename.get(i, i) for i in n.inputs), rename.get(n.output, n.output), n.attrs, n.origin)
                 for n in nodes]
        for old, new in rename.items():
            types[new] = types.pop(old)
        self.renamed = dict(rename)
        nodes = _live_nodes(nodes, final)
        used = {i for n in nodes for i in n.inputs} | set(final)
        constants = {k: v for k, v in self._constants.items() if k in used}
        live_values = set(self._inputs) | set(constants) | {n.output for n in nodes}
        types = {k: v for k, v in types.items() if k in live_values}
        return Graph(self.name, tuple(self._inputs), tuple(final), tuple(nodes),
                     MappingProxyType(types), MappingProxyType(constants))


def _live_nodes(nodes: list[Node], outputs: Sequence[str]) -> list[Node]:
    needed = set(outputs)
    live: list[Node] = []
    for n in reversed(nodes):
        if n.output in needed:
            live.append(n)
            needed.update(n.inputs)
    return live[::-1]
