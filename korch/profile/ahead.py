"""Slow compiles done ahead: a backend's kernels compiled in worker processes before any is timed.

Inductor takes 0.3-2 s to compile a small candidate and 10-35 s a whole-model region, most of it
in one Python process (its lowering) and one C++ compiler at a time: a one-process profiler leaves
the second core idle for most of it. So before the profiler times anything, `compile_ahead` hands
such a backend's kernels (`Backend.compiles_ahead`) to a few worker processes, largest first, each
taking the next as it finishes one; each writes its kernel with `Backend.save_kernel`. The profiler
then loads each saved kernel where it would have compiled it (yolox-nano's 44 in 1.4-2.8 s), and
checks and times it as before. Compiling and timing never overlap: a kernel timed beside a compile
reads slow.

From an empty Inductor cache, two workers made yolox-nano's 44 Inductor kernels runnable in 96.9 s
where compiling them in place took 123.0 s, segformer-b0's in 143.1 s against 174.5
(benchmarks/compile_ahead.py, BENCHMARKS.md).

Nothing here decides what a kernel is: a job a worker could not compile or save (or a worker that
died) is simply compiled by the profiler as before, which stores whatever failure it meets. A
kernel whose constants are larger than `ProfileSettings.compile_ahead_max_bytes` is compiled by the
profiler too: a worker holds its own copy of them while it compiles.

Workers are `python -m korch.profile.ahead` processes, not multiprocessing's: those start by
importing the caller's main module again, which runs the script of a user who calls
`korch.optimize` without a `__main__` guard (and `python -m korch` itself). A worker reads a job
number per line on stdin, compiles `job<n>.pickle` of the shared directory into `kernel<n>/`, and
answers with one JSON line.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import pickle
import selectors
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from korch.backends import CompileOptions, get_backend
from korch.ir.graph import Graph

log = logging.getLogger("korch.profile")


@dataclass(frozen=True)
class AheadJob:
    pair: tuple[str, str]          # (candidate key, backend)
    graph: Graph                   # the candidate's standalone graph, as the backend compiles it
    options: CompileOptions
    work: float                    # its estimated compile work (profiler.job_work): the largest first


@dataclass(frozen=True)
class Ahead:
    """What `compile_ahead` made: the saved kernel of each pair it compiled, and the wall time."""

    directory: Path                # holds the saved kernels
    saved: Mapping[tuple[str, str], Path]
    seconds: float
    failed: int                    # jobs no worker compiled and saved (the profiler compiles those)

    def release(self) -> None:
        """Remove the saved kernels once the profiler is done with them, all but their extension
        modules (`*.so`, small), which go with the directory when the process exits
        (`scratch_directory`): Python keeps a loaded extension module by name, and a kernel Inductor
        compiles later from the same source gets that module, whose file must still be there for a
        plan that saves the kernel to copy."""
        for path in list(self.directory.rglob("*")):
            if path.is_file() and path.suffix != ".so":
                path.unlink(missing_ok=True)


def scratch_directory() -> Path:
    """A new directory for `compile_ahead`, removed when the process exits."""
    directory = Path(tempfile.mkdtemp(prefix="korch-ahead-"))
    atexit.register(shutil.rmtree, directory, True)
    return directory


def constant_bytes(graph: Graph) -> int:
    return sum(int(a.nbytes) for a in graph.constants.values())


def compile_ahead(jobs: Sequence[AheadJob], workers: int, directory: Path,
                  progress: Callable[[int, int, float, float], None] | None = None) -> Ahead:
    """Compile and save every job's kernel in `workers` processes (at most one per job) into
    `directory` (the caller's, e.g. `scratch_directory()`). Returns when every job is done or failed.
    `progress(done, total, work done, work in all)` is called with done 0 as the workers start, then
    as each job ends."""
    t0 = time.perf_counter()
    order = sorted(range(len(jobs)), key=lambda k: -jobs[k].work)
    for k in order:
        with open(directory / f"job{k}.pickle", "wb") as f:
            pickle.dump((jobs[k].pair[1], jobs[k].graph, jobs[k].options), f, protocol=pickle.HIGHEST_PROTOCOL)
    todo = list(order)
    saved: dict[tuple[str, str], Path] = {}
    failures: list[str] = []
    pool = [_Worker(directory, n) for n in range(min(workers, len(jobs)))]
    selector = selectors.DefaultSelector()
    try:
        for worker in pool:
            selector.register(worker.out, selectors.EVENT_READ, worker)
            worker.give(todo.pop(0) if todo else None)
        busy = sum(w.job is not None for w in pool)
        done, work, total_work = 0, 0.0, sum(j.work for j in jobs)
        if progress is not None:
            progress(0, len(jobs), 0.0, total_work)
        while busy:
            for event, _ in selector.select():
                worker: _Worker = event.data
                line = worker.out.readline()
                job = worker.job
                assert job is not None
                done, work = done + 1, work + jobs[job].work
                if progress is not None:
                    progress(done, len(jobs), work, total_work)
                if not line:                          # the worker died mid-job
                    selector.unregister(worker.out)
                    busy -= 1
                    failures.append(f"worker {worker.number} exited with {worker.wait()} compiling "
                                    f"{jobs[job].pair[1]} {jobs[job].pair[0][:12]}{worker.stderr_tail()}")
                    continue
                answer = json.loads(line)
                if answer.get("saved"):
                    saved[jobs[job].pair] = directory / f"kernel{job}"
                else:
                    failures.append(f"{jobs[job].pair[1]} {jobs[job].pair[0][:12]}: {answer.get('reason')}")
                if todo:
                    worker.give(todo.pop(0))
                else:
                    worker.give(None)
                    selector.unregister(worker.out)
                    busy -= 1
    finally:
        selector.close()
        for worker in pool:
            worker.close()
    if failures:
        log.info("compile ahead: %d of %d kernel(s) not compiled ahead, the profiler compiles them (first: %s)",
                 len(failures), len(jobs), failures[0])
    return Ahead(directory, saved, time.perf_counter() - t0, len(jobs) - len(saved))


class _Worker:
    """One `python -m korch.profile.ahead` process and the job it is on."""

    def __init__(self, directory: Path, number: int) -> None:
        self.number = number
        self.job: int | None = None
        self._stderr = directory / f"worker{number}.log"
        # the worker imports this very korch, wherever the caller found it (a checkout put on sys.path)
        home = str(Path(__file__).resolve().parents[2])
        path = os.environ.get("PYTHONPATH")
        env = dict(os.environ, PYTHONPATH=home + (os.pathsep + path if path else ""))
        with open(self._stderr, "wb") as err:
            self.proc = subprocess.Popen([sys.executable, "-m", "korch.profile.ahead", str(directory)],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True,
                                         bufsize=1, env=env)
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self._in: IO[str] = self.proc.stdin
        self.out: IO[str] = self.proc.stdout

    def give(self, job: int | None) -> None:
        """Hand the worker a job, or None: no more (it exits)."""
        self.job = job
        try:
            if job is None:
                self._in.close()
            else:
                self._in.write(f"{job}\n")
                self._in.flush()
        except (BrokenPipeError, OSError):
            pass                              # it died: its stdout ends, and the caller sees that

    def wait(self) -> int | None:
        try:
            return self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            return None

    def stderr_tail(self) -> str:
        try:
            lines = self._stderr.read_text(errors="replace").strip().splitlines()
        except OSError:
            return ""
        return f" ({lines[-1][:200]})" if lines else ""

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self._in.close()
            except OSError:
                pass
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.out.close()


def _serve(directory: Path) -> None:
    """The worker's loop: compile and save each job number read from stdin, answer on stdout. What
    the compilers print goes to stderr: the answers keep a stdout of their own."""
    answers = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    for line in sys.stdin:
        k = int(line)
        try:
            with open(directory / f"job{k}.pickle", "rb") as f:
                name, graph, options = pickle.load(f)
            backend = get_backend(name)
            kernel = backend.compile(graph, options)
            backend.save_kernel(kernel, graph, directory / f"kernel{k}")
            del kernel
            answer = {"saved": True}
        except Exception as e:  # noqa: BLE001  (any failure: the profiler compiles the job itself)
            answer = {"saved": False, "reason": f"{type(e).__name__}: {str(e)[:300]}"}
        answers.write(json.dumps(answer) + "\n")
        answers.flush()


if __name__ == "__main__":
    logging.basicConfig(level=logging.ERROR)
    _serve(Path(sys.argv[1]))
