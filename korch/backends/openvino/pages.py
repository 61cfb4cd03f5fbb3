"""Dropping this process's resident pages of mapped weight files while OpenVINO compiles.

The plugin copies every weight it reads into its own layouts, and each page it read through a map
stays resident beside the copy (weights.py's module doc). Both maps here are read-only in practice
and never written, so a dropped page read again comes back from its file, unchanged: korch's own
copy-on-write maps of a plan's weights file (`dropping_pages`), and the maps OpenVINO's ONNX reader
makes itself of a model's external data file (`dropping_ranges`). Nothing here imports onnx: a
saved plan's OpenVINO kernels load without it (korch/plan/plan.py, PREBUILT_BACKENDS).
"""

from __future__ import annotations

import ctypes
import mmap
import os
import threading
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

# How often pages are dropped while OpenVINO compiles: what it read in the last interval is resident
# at once. bert-base's whole model peaked at 501 MB at 50 ms, 487 at 10 ms, 884 dropping only after.
# A small model reads its weights in well under 50 ms: efficientvit-b1's plan (OpenVINO's whole model,
# 35 MB of weights) peaked at 194 MB at 50 ms, 174 at 2 ms, with compile time and speed unchanged
# (benchmarks/openvino_rss.py, BENCHMARKS.md). A drop of pages not resident costs microseconds.
DROP_INTERVAL_S = 0.002

MAPS = Path("/proc/self/maps")


@contextmanager
def _dropping(drop: Callable[[], None], interval_s: float) -> Iterator[None]:
    """`drop()` every `interval_s` on a thread while the block runs (a compile, which releases the
    GIL), and once after it."""
    stop = threading.Event()

    def keep_dropping() -> None:
        while not stop.wait(interval_s):
            drop()

    thread = threading.Thread(target=keep_dropping, name="korch-openvino-drop-pages", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        drop()


@contextmanager
def dropping_pages(maps: Sequence[mmap.mmap], interval_s: float = DROP_INTERVAL_S) -> Iterator[None]:
    """Drop this process's pages of `maps` while the block runs and once after it. Only for maps
    nothing writes to: a written page would lose its changes."""
    if not maps or not hasattr(mmap, "MADV_DONTNEED"):      # not on every platform; the pages then stay
        yield
        return

    def drop() -> None:
        for m in maps:
            m.madvise(mmap.MADV_DONTNEED)

    with _dropping(drop, interval_s):
        yield


def read_only_maps(directory: str | os.PathLike) -> set[tuple[int, int]]:
    """(start, end) of this process's mappings of files in `directory` that cannot be written (none
    where /proc/self/maps is not)."""
    if not MAPS.exists():
        return set()
    inside = os.path.join(os.path.realpath(directory), "")
    found = set()
    with open(MAPS) as maps:
        for line in maps:
            fields = line.split(maxsplit=5)
            if len(fields) == 6 and "w" not in fields[1] and fields[5].rstrip("\n").startswith(inside):
                start, end = (int(x, 16) for x in fields[0].split("-"))
                found.add((start, end))
    return found


@contextmanager
def dropping_ranges(ranges: Collection[tuple[int, int]], interval_s: float = DROP_INTERVAL_S) -> Iterator[None]:
    """Drop this process's pages in the address ranges `ranges` (read-only maps of files, from
    `read_only_maps`: OpenVINO's of a model's weights file, made as it read the model) while the block
    runs and once after it."""
    if not ranges or not hasattr(mmap, "MADV_DONTNEED"):
        yield
        return
    libc = ctypes.CDLL(None, use_errno=True)
    libc.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)

    def drop() -> None:
        for start, end in ranges:
            libc.madvise(start, end - start, mmap.MADV_DONTNEED)

    with _dropping(drop, interval_s):
        yield
