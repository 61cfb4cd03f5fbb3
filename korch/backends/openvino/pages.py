"""Dropping this process's resident pages of mapped weight files while OpenVINO compiles.

The plugin copies every weight it reads into its own layouts, and each page it read through a map
stays resident beside the copy (weights.py's module doc). Both maps here are read-only in practice
and never written, so a dropped page read again comes back from its file, unchanged: korch's own
copy-on-write maps of a plan's weights file (`dropping_pages`), and the maps OpenVINO's ONNX reader
makes itself of a model's external data file (`dropping_file_pages`). Nothing here imports onnx: a
saved plan's OpenVINO kernels load without it (korch/plan/plan.py, PREBUILT_BACKENDS).
"""

from __future__ import annotations

import ctypes
import mmap
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

# How often pages are dropped while OpenVINO compiles: what it read in the last interval is resident
# at once. bert-base's whole model peaked at 501 MB at 50 ms, 487 at 10 ms, 884 dropping only after.
# A small model reads its weights in well under 50 ms: efficientvit-b1's plan (OpenVINO's whole model,
# 35 MB of weights) peaked at 194 MB at 50 ms, 174 at 2 ms, with compile time and speed unchanged
# (benchmarks/openvino_rss.py, BENCHMARKS.md). A drop of pages not resident costs microseconds.
DROP_INTERVAL_S = 0.002

MAPS = Path("/proc/self/maps")
# How often dropping_file_pages looks again for the maps the block made (seconds).
RESCAN_S = 0.05


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
    """(start, end) of this process's mappings of files in `directory` that cannot be written."""
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
def dropping_file_pages(directory: str | os.PathLike, interval_s: float = DROP_INTERVAL_S) -> Iterator[None]:
    """Drop this process's pages of the read-only maps of files in `directory` that the block makes
    (OpenVINO reading a model whose weights file is there) while it runs and once after it. Maps made
    before the block (another kernel's) are left alone."""
    if not MAPS.exists() or not hasattr(mmap, "MADV_DONTNEED"):
        yield
        return
    libc = ctypes.CDLL(None, use_errno=True)
    libc.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    before = read_only_maps(directory)
    found: set[tuple[int, int]] = set()
    looked = [0.0]

    def drop() -> None:
        # /proc/self/maps is read at most every RESCAN_S: a read took 0.9 ms with onnxruntime and OpenVINO
        # loaded (352 maps), half a core every 2 ms beside the compile; the maps found are dropped every call
        now = time.monotonic()
        if now - looked[0] >= RESCAN_S or not found:
            found.clear()
            found.update(read_only_maps(directory) - before)
            looked[0] = now
        for start, end in found:
            libc.madvise(start, end - start, mmap.MADV_DONTNEED)

    with _dropping(drop, interval_s):
        yield
