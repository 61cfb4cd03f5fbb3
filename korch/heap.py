"""The C heap under korch's kernels: large blocks kept for reuse while plans run, and freed memory
given back to the OS where korch makes and drops large transient copies (compiles, loads, duels).

glibc serves a block above its mmap threshold with fresh pages and unmaps them when it is freed, so
every call that allocates such a block again pays a page fault per 4 KiB and the zeroing of each page.
The threshold starts at 128 KiB and rises only as the process frees larger mapped blocks (up to
32 MiB), so the same kernel runs at different speeds in different processes: segformer-b0's Inductor
whole model, loaded from its saved plan in fresh processes, took 26,183 minor faults a call and ran at
255.6 ms; with the thresholds below set, 0 faults and 214.8 ms (medians of three processes, 2 threads,
2026-11-28, benchmarks/heap_faults.py). The optimizing process, whose compiles had freed large blocks,
had timed it at 200 ms in selection's duel, kept it over OpenVINO's, and the user's process ran it at
0.73x the best peer. `keep_freed_blocks` fixes both thresholds for the process, so the profiler, selection
and every plan's user run kernels alike; onnxruntime's and OpenVINO's own arenas did this for their
own buffers already, not for the arrays they return.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import logging
import os
import resource
from collections.abc import Iterator

log = logging.getLogger("korch.heap")

# Blocks up to this size come from the heap and go back to it (glibc's M_MMAP_THRESHOLD), and free
# memory at the heap's top is kept up to this much (M_TRIM_THRESHOLD). segformer-b0's decoder makes
# 64 MiB tensors: at a 32 or 64 MiB threshold its Inductor kernel still took 16,385 faults a call
# (benchmarks/heap_faults.py --thresholds-mib 32,64).
# Memory korch frees in bulk is still given back explicitly (release_freed_heap).
KEEP_BLOCKS_BYTES = 1 << 30
# Set to 0 to leave the process's malloc settings as they are (an application that tunes its own).
ENV_SWITCH = "KORCH_KEEP_FREED_BLOCKS"
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3


@functools.cache
def _libc():
    try:
        libc = ctypes.CDLL("libc.so.6")
        return libc if hasattr(libc, "malloc_trim") and hasattr(libc, "mallopt") else None
    except OSError:        # not glibc: nothing to do
        return None


def release_freed_heap() -> None:
    """Give the C heap's free memory back to the OS (glibc's malloc_trim; elsewhere nothing). A kernel's
    compile makes transient copies of its weights (the ONNX proto, its bytes, the engine's parse)
    that glibc keeps in the heap once freed, so each compile raised the next one's floor: on a
    92-kernel onnxruntime plan of efficientvit-b1, peak RSS 212 -> 186 MB trimming after each kernel,
    on its OpenVINO whole model 195 -> 188 (2 threads, 2026-11-25). Loading a saved Inductor kernel
    reads each weight it packs again and drops it once packed (vit-b16: 705 -> 600 MB trimming after
    each, 2026-11-26)."""
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)


@functools.cache
def keep_freed_blocks() -> str:
    """Fix glibc's mmap and trim thresholds at KEEP_BLOCKS_BYTES for this process (module doc), once.
    Returns the policy in effect, a part of profile keys: "kept" or "system" (not glibc, or turned
    off by KORCH_KEEP_FREED_BLOCKS=0)."""
    if _libc() is None or os.environ.get(ENV_SWITCH, "1") == "0":
        return "system"
    if not set_thresholds(KEEP_BLOCKS_BYTES, KEEP_BLOCKS_BYTES):
        log.warning("glibc refused mallopt: large blocks are mapped and unmapped on every call")
        return "system"
    return "kept"


# glibc's own starting thresholds (its mmap threshold then rises as mapped blocks are freed; set
# explicitly, it stays here)
SYSTEM_MMAP_BYTES = SYSTEM_TRIM_BYTES = 128 << 10


@contextlib.contextmanager
def blocks_returned() -> Iterator[None]:
    """Large blocks mapped and unmapped as glibc does by default, inside: for a one-off step that makes
    and drops transient copies of a model's weights (a reference session reading the model's file),
    whose freed blocks kept in the heap only raise the process's peak. VGG-16's rewrite check reading
    its 528 MiB file: +1,591 MiB peak with the blocks kept, +1,209 returned. Nothing is timed inside."""
    # (only where keep_freed_blocks set them already: asking it here would set them)
    if not keep_freed_blocks.cache_info().currsize or keep_freed_blocks() != "kept":
        yield
        return
    set_thresholds(SYSTEM_MMAP_BYTES, SYSTEM_TRIM_BYTES)
    try:
        yield
    finally:
        set_thresholds(KEEP_BLOCKS_BYTES, KEEP_BLOCKS_BYTES)
        release_freed_heap()


def set_thresholds(mmap_bytes: int, trim_bytes: int) -> bool:
    """Set glibc's M_MMAP_THRESHOLD and M_TRIM_THRESHOLD (which ends its dynamic threshold for good);
    False where there is no glibc or it refuses. keep_freed_blocks is korch's use; benchmarks try others."""
    libc = _libc()
    return libc is not None and bool(libc.mallopt(_M_MMAP_THRESHOLD, ctypes.c_int(mmap_bytes))
                                     and libc.mallopt(_M_TRIM_THRESHOLD, ctypes.c_int(trim_bytes)))


def peak_rss_mib() -> float:
    """This process's peak resident set so far (MiB, 2**20 bytes; getrusage's ru_maxrss, in KiB on
    Linux): read at the end of each stage of an optimize, it says which stage set the peak."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
