"""Arrays in one file, mapped back as they were: same dtypes, shapes and strides, and arrays that
shared memory (a transposed weight held once as a view of its constant) share it again.

Each span of memory an array occupies is written once, in memory order; an array is recorded as an
offset into the file and its strides, so every view of a written span is that span read with its
own strides. An array whose memory is not one dense block (holes, negative strides) is written as a
C-ordered copy. The file is mapped copy-on-write: its pages are the page cache's until written, and
an engine handed memory it should not write could never reach the file.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

try:
    from numpy.lib.array_utils import byte_bounds
except ImportError:                     # numpy < 2
    from numpy import byte_bounds

from korch.errors import KorchError

# Where each span starts: a multiple of the widest vector load, as a weights file aligns them.
ALIGN = 64


class PackedError(KorchError):
    """A packed arrays file or its index is damaged or does not fit each other."""


@dataclass(frozen=True)
class Placed:
    """Where an array is in a packed file: its first element's byte offset (-1: an empty array, no
    bytes) and the dtype, shape and byte strides it is read with."""

    offset: int
    dtype: str
    shape: tuple[int, ...]
    strides: tuple[int, ...]

    def to_json(self) -> list[Any]:
        return [self.offset, self.dtype, list(self.shape), list(self.strides)]

    @classmethod
    def from_json(cls, entry: Any) -> Placed:
        try:
            offset, dtype, shape, strides = entry
            placed = cls(int(offset), str(dtype), tuple(int(x) for x in shape), tuple(int(x) for x in strides))
            kind = np.dtype(placed.dtype)
        except (TypeError, ValueError) as e:
            raise PackedError(f"a packed array's entry {entry!r} is not [offset, dtype, shape, strides] ({e})") from None
        if kind.hasobject or len(placed.shape) != len(placed.strides) or min(placed.shape, default=0) < 0:
            raise PackedError(f"a packed array's entry {entry!r} does not describe an array of numbers")
        return placed

    def extent(self) -> tuple[int, int]:
        """The bytes [low, high) of the file the array reads, relative to `offset`."""
        low = sum((n - 1) * s for n, s in zip(self.shape, self.strides) if s < 0)
        high = sum((n - 1) * s for n, s in zip(self.shape, self.strides) if s > 0) + np.dtype(self.dtype).itemsize
        return low, high


def span(array: np.ndarray) -> tuple[int, int]:
    """The bytes [low, high) of memory an array occupies: arrays of one span are views of one block."""
    return byte_bounds(array)


def _memory_order(array: np.ndarray) -> np.ndarray | None:
    """`array` with its axes permuted into memory order, where that view is C-contiguous (its bytes
    are then exactly the span the array occupies); None where the array has holes or runs backwards."""
    if any(s < 0 for s in array.strides):
        return None
    view = array.transpose(sorted(range(array.ndim), key=lambda k: -array.strides[k]))
    return view if view.flags.c_contiguous else None


def write_arrays(path: Path, arrays: Mapping[str, np.ndarray]) -> dict[str, Placed]:
    """Write `arrays` to `path`, each span of memory once; where each one is, by name."""
    placed: dict[str, Placed] = {}
    written: dict[tuple[int, int], int] = {}      # a span [low, high) of memory -> its file offset
    offset = 0
    with open(path, "wb") as f:
        for name, array in arrays.items():
            if array.dtype.hasobject:
                raise PackedError(f"{name}: an array of Python objects ({array.dtype}) cannot be packed")
            if array.size == 0:
                placed[name] = Placed(-1, array.dtype.str, tuple(array.shape), (0,) * array.ndim)
                continue
            block = span(array)
            start = written.get(block)
            if start is None:
                dense = _memory_order(array)
                copied = dense is None
                if copied:                        # (a copy's span is never looked up: its memory is freed)
                    array = dense = np.ascontiguousarray(array)
                    block = span(array)
                pad = -offset % ALIGN
                f.write(b"\0" * pad)
                start = offset + pad
                f.write(memoryview(dense.reshape(-1)).cast("B"))
                offset = start + dense.nbytes
                if not copied:
                    written[block] = start
            first = array.__array_interface__["data"][0]
            placed[name] = Placed(start + first - block[0], array.dtype.str, tuple(array.shape),
                                  tuple(array.strides))
    return placed


def map_arrays(path: Path, placed: Mapping[str, Placed]) -> dict[str, np.ndarray]:
    """The arrays `write_arrays` wrote to `path`, read-only views of one copy-on-write mapping of it.
    Raises PackedError where an entry reads outside the file or the file cannot be mapped."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            buffer = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY) if size else None
    except (OSError, ValueError) as e:
        raise PackedError(f"{path}: cannot map it ({e})") from None
    arrays: dict[str, np.ndarray] = {}
    for name, p in placed.items():
        if p.offset < 0:
            array = np.zeros(p.shape, np.dtype(p.dtype))
            if array.size:
                raise PackedError(f"{path}: array {name!r} of shape {p.shape} has no bytes recorded")
        else:
            low, high = p.extent()
            if buffer is None or p.offset + low < 0 or p.offset + high > size:
                raise PackedError(f"{path}: array {name!r} lies outside the file (offset {p.offset}, bytes "
                                  f"[{low}, {high}) from there, file size {size})")
            array = np.ndarray(p.shape, np.dtype(p.dtype), buffer, p.offset, p.strides)
        array.setflags(write=False)
        arrays[name] = array
    return arrays
