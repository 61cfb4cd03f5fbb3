"""Where a split plan's threads run: the calling thread on one CPU, the engines' pool workers on others.

A kernel that runs among others parks its thread pool when its call returns (a spinning pool would
take the cores from the next kernel), and the next call wakes it. A scheduler may wake a parked
worker on the CPU its caller is running on rather than on an idle one: this project's VM does (its
kernel packs threads onto busy vCPUs, `sched_vcpu_pack` on its command line), and then an engine's
two threads take turns on one vCPU. A two-kernel onnxruntime plan of yolox-nano read 7.2 ms in some
stretches and 14-21 ms in others (2 threads, 2026-11-25); with the caller and the workers each held
to their own CPU it read 7.4-7.6 ms throughout, alone and side by side with other engines. A
whole-model kernel keeps its pool spinning, so its workers never leave their CPUs; it is left to the
engine, as its users run it.

So a plan of several kernels holds its calling thread to `caller` while it runs (`pinned`), and
compiles each onnxruntime kernel with its pool's workers held to `workers`, one CPU each
(onnxruntime's `session.intra_op_thread_affinities`). The profiler times kernels the same way.

Inductor's kernels run on an OpenMP pool (torch's libgomp), which has no such option, and korch has
its workers park at once (GOMP_SPINCOUNT, korch/__init__.py): with the caller held to its CPU, a
worker woken on that same CPU took turns with it until the scheduler moved it, and a 1x1 conv that
runs in 0.08 ms profiled at 1.6-2.2 ms in those stretches (a third of the exhaustive database's
single-conv Inductor profiles on yolox-nano; the caller and the worker read on one CPU for every
slow timing, on two for every fast one). `hold_openmp_workers` holds the calling thread's OpenMP
workers to `workers` as onnxruntime's are, once per thread.
"""

from __future__ import annotations

import ctypes
import functools
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass


@dataclass(frozen=True)
class Placement:
    """The CPU of the calling thread and one CPU per pool worker (threads - 1 of them)."""

    caller: int
    workers: tuple[int, ...]


@functools.cache
def placement(threads: int) -> Placement | None:
    """The first `threads` CPUs this process may run on, the first for the caller; None with one
    thread (nothing to keep apart), where threads cannot be pinned, or with fewer CPUs than threads.
    Read once per process, from the CPUs the process started with (not those of a pinned caller)."""
    if threads < 2 or not hasattr(os, "sched_getaffinity"):
        return None
    allowed = sorted(os.sched_getaffinity(os.getpid()))
    if len(allowed) < threads:
        return None
    return Placement(allowed[0], tuple(allowed[1:threads]))


@contextmanager
def pinned(cpu: int | None) -> Iterator[None]:
    """Hold the calling thread to `cpu` for the duration (None: leave it be), then restore its CPUs."""
    if cpu is None:
        yield
        return
    before = os.sched_getaffinity(0)          # on Linux, pid 0 is the calling thread
    os.sched_setaffinity(0, {cpu})
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


_held = threading.local()          # per thread: the CPUs its OpenMP workers were held to
_gomp: ctypes.CDLL | None = None
_REGION = ctypes.CFUNCTYPE(None, ctypes.c_void_p)      # a parallel region's body: void (*)(void *)


def _libgomp() -> ctypes.CDLL | None:
    """The GNU OpenMP runtime this process has loaded (torch's), or None while none is. Only a
    library already mapped is opened (it is then the same one, not a second copy)."""
    global _gomp
    if _gomp is None:
        try:
            with open("/proc/self/maps") as f:
                path = next((line.split()[-1] for line in f
                             if line.rstrip().rsplit("/", 1)[-1].startswith("libgomp")), None)
            if path is None:
                return None
            lib = ctypes.CDLL(path)
            lib.omp_get_thread_num.restype = ctypes.c_int
            lib.GOMP_parallel.argtypes = [_REGION, ctypes.c_void_p, ctypes.c_uint, ctypes.c_uint]
            lib.GOMP_parallel.restype = None
            _gomp = lib
        except (OSError, AttributeError):          # no /proc, or a runtime without these symbols
            return None
    return _gomp


def hold_openmp_workers(cpus: tuple[int, ...]) -> bool:
    """Hold the workers of the calling thread's OpenMP pool (libgomp keeps one per calling thread,
    and torch's ops and Inductor's kernels share it) to `cpus`, the k-th worker to cpus[k-1]: one
    parallel region of len(cpus) + 1 threads in which each worker sets its own CPU. Done once per
    thread and CPU tuple (later calls cost a lookup); False if no OpenMP runtime is loaded or `cpus`
    is empty. The workers stay held after the caller's kernels are done: any kernel on this
    thread's pool then runs its workers there, the caller on the CPU `placement` gives it."""
    if not cpus or getattr(_held, "cpus", None) == cpus:
        return bool(cpus)
    lib = _libgomp()
    if lib is None:
        return False

    def body(_: object) -> None:
        k = lib.omp_get_thread_num()
        if 1 <= k <= len(cpus):
            os.sched_setaffinity(0, {cpus[k - 1]})       # (0: the calling thread, this worker)

    lib.GOMP_parallel(_REGION(body), None, len(cpus) + 1, 0)    # (ctypes lets go of the GIL; each worker takes it)
    _held.cpus = cpus
    return True
