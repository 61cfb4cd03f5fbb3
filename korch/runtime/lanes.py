"""A fixed pool of worker threads for a schedule's concurrent lanes (korch/plan/schedule.py).

The calling thread runs a stage's first lane; worker k runs lane k + 1. The workers are made once,
with the session, and each is held to its own CPU for its life (backends/placement.py: the calling
thread is held to another while a plan runs), so a stage's lanes never share a core and a run
creates no threads. A hand-off is a pair of locks, released by one thread and acquired by the
other: no polling, and a worker waits in the kernel between stages.

Kernels release the GIL while they compute (onnxruntime's run does), so lanes run in parallel; what
holds the GIL is the few dict operations between kernels.

A lane that raises does not stop the others: the stage waits for every lane, then raises the first
lane's error in lane order, so no worker is left running into the next `run`. Callers on several
threads take turns: a pool runs one stage at a time.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable, Sequence


class _Worker:
    """One thread running the jobs handed to it, one at a time, until it is handed None."""

    def __init__(self, cpu: int | None, name: str) -> None:
        self._go = threading.Lock()
        self._done = threading.Lock()
        self._go.acquire()
        self._done.acquire()
        self._job: Callable[[], None] | None = None
        self._error: BaseException | None = None
        self.thread = threading.Thread(target=self._loop, args=(cpu,), name=name, daemon=True)
        self.thread.start()

    def _loop(self, cpu: int | None) -> None:
        if cpu is not None:
            try:
                os.sched_setaffinity(0, {cpu})        # this thread only (pid 0 is the calling thread)
            except OSError:
                pass                                  # the CPU went away: run unpinned
        while True:
            self._go.acquire()
            job = self._job
            if job is None:
                self._done.release()
                return
            try:
                job()
            except BaseException as e:  # noqa: BLE001  (handed to the caller, who raises it)
                self._error = e
            # (a job left in this frame while the thread waits would keep its session, and so this
            # pool and thread, alive for good)
            del job
            self._done.release()

    def start(self, job: Callable[[], None] | None) -> None:
        self._job, self._error = job, None
        self._go.release()

    def wait(self) -> BaseException | None:
        self._done.acquire()
        error, self._error, self._job = self._error, None, None
        return error


def _stop(workers: Sequence[_Worker]) -> None:
    for w in workers:
        w.start(None)
    for w in workers:
        w.wait()
        w.thread.join()


class LanePool:
    """`lanes - 1` workers (worker k on cpus[k], None: unpinned); `run` runs one stage's lanes."""

    def __init__(self, lanes: int, cpus: Sequence[int | None] = ()) -> None:
        cpus = list(cpus) + [None] * (lanes - 1 - len(cpus))
        self._workers = [_Worker(cpus[k], f"korch-lane-{k + 1}") for k in range(lanes - 1)]
        self._turn = threading.Lock()
        self._closer = weakref.finalize(self, _stop, self._workers)

    @property
    def lanes(self) -> int:
        return len(self._workers) + 1

    def run(self, lanes: Sequence[Callable[[], None]]) -> None:
        """Each lane on its own thread, the first on the caller's; returns when all are done, raising the
        first error in lane order."""
        if len(lanes) > self.lanes:
            raise ValueError(f"{len(lanes)} lanes given to a pool of {self.lanes}")
        started = self._workers[: len(lanes) - 1]
        first: BaseException | None = None
        with self._turn:
            for worker, job in zip(started, lanes[1:]):
                worker.start(job)
            try:
                lanes[0]()
            except BaseException as e:  # noqa: BLE001  (raised once every lane is done)
                first = e
            errors = [w.wait() for w in started]
        error = next((e for e in [first, *errors] if e is not None), None)
        del first, errors
        if error is not None:
            try:
                raise error
            finally:
                del error         # (this frame's reference would make a cycle through the traceback)

    def close(self) -> None:
        """Stop the workers (also done when the pool is collected)."""
        self._closer()
