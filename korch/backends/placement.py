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
"""

from __future__ import annotations

import functools
import os
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
