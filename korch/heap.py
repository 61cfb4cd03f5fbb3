"""Giving the C heap's freed memory back to the OS, where korch makes and drops large transient
copies (compiles, loads, duels)."""

from __future__ import annotations

import ctypes
import functools


@functools.cache
def _malloc_trim():
    try:
        return ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):        # not glibc: nothing to do
        return None


def release_freed_heap() -> None:
    """Give the C heap's free memory back to the OS (glibc's malloc_trim; elsewhere nothing). A kernel's
    compile makes transient copies of its weights (the ONNX proto, its bytes, the engine's parse)
    that glibc keeps in the heap once freed, so each compile raised the next one's floor: on a
    92-kernel onnxruntime plan of efficientvit-b1, peak RSS 212 -> 186 MB trimming after each kernel,
    on its OpenVINO whole model 195 -> 188 (2 threads, 2026-11-25). Loading a saved Inductor kernel
    reads each weight it packs again and drops it once packed (vit-b16: 705 -> 600 MB trimming after
    each, 2026-11-26)."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
