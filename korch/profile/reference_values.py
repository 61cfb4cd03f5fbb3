"""The reference values a model's kernels are fed and checked against, computed once per optimize.

The profiler feeds each kernel the values it would see in the model: the primitive graph run by the
reference backend on random inputs (profiler.py). Streamed, that run is repeated for every call of
the profiler, up to the last node its kernels reach. Guided profiling calls it once a round, a few
dozen kernels anywhere in the model each time, and on segformer-b0 its 27 rounds spent 61 s
computing the same values again (BENCHMARKS.md).

`ReferenceValues` computes the graph once, on first use, in node order, writing each value to a
scratch directory under the profile cache (on disk, beside the database, not in memory: segformer-b0's
values are 1.5 GB) and freeing it once no later node reads it, as the streamed run does. A kernel's
inputs and outputs are then read back from disk, only for the kernels timed. The directory is
removed at the end of the optimize, or by the next one if its process was killed. If it cannot be
written (a full disk), that is said once and every call streams as before (`ready()` is False).
"""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import numpy as np

from korch.backends.reference import conform, evaluate
from korch.candidates import Candidate
from korch.ir.graph import Graph
from korch.verify import random_feeds

log = logging.getLogger("korch.profile")

PREFIX = "korch-reference-"          # then the pid of the optimize that writes it


class ReferenceValues:
    """One graph's reference values on the random inputs of `seed`, kept on disk under `parent`."""

    def __init__(self, graph: Graph, seed: int, parent: Path) -> None:
        self.graph = graph
        self.feeds: dict[str, np.ndarray] = random_feeds(graph, seed)
        self._parent = parent
        self._directory: Path | None = None
        self._files: dict[str, Path] = {}
        self._failed = False
        self.seconds = 0.0            # computing and writing the values (read back: in the profiler's phases)

    def ready(self) -> bool:
        """Computes the values on first use. False if they could not be kept (then stream instead)."""
        if self._directory is None and not self._failed:
            self._compute()
        return not self._failed

    def values(self, candidate: Candidate) -> dict[str, np.ndarray]:
        """The constants and model inputs, and the candidate's inputs and outputs, as the reference
        computes them (after `ready()` said True)."""
        env: dict[str, np.ndarray] = {**self.graph.constants, **self.feeds}
        for name in (*candidate.inputs, *candidate.outputs):
            if name not in env:
                env[name] = np.load(self._files[name], allow_pickle=False)
        return env

    def _compute(self) -> None:
        t0 = time.perf_counter()
        graph = self.graph
        try:
            remove_stale(self._parent)
            directory = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-", dir=self._parent))
            atexit.register(shutil.rmtree, directory, True)
            self._directory = directory
            for k, env in reference_run(graph, self.feeds):
                output = graph.nodes[k].output
                path = directory / f"{k}.npy"
                np.save(path, np.asarray(env[output]), allow_pickle=False)
                self._files[output] = path
        except OSError as e:
            self._failed = True
            self.close()
            log.warning("profile: cannot keep the reference values under %s (%s): they are computed again for "
                        "every round of profiling", self._parent, e)
        self.seconds += time.perf_counter() - t0

    def close(self) -> None:
        """Remove the values from disk."""
        if self._directory is not None:
            shutil.rmtree(self._directory, ignore_errors=True)
            self._files.clear()

    def __enter__(self) -> ReferenceValues:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def reference_run(graph: Graph, feeds: Mapping[str, np.ndarray], needed_until: Mapping[str, int] | None = None
                  ) -> Iterator[tuple[int, Mapping[str, np.ndarray]]]:
    """The graph run by the reference backend on `feeds`, node by node: yields (k, values) once node k's
    output is computed. A value is dropped once the run passes the last position that needs it:
    `needed_until` (value -> a node index, or one past it) where given, else its last reader; a value
    no node reads goes after the next node. The yielded mapping is the run's own: read it before the
    next step."""
    need = dict(needed_until or {})
    for k, node in enumerate(graph.nodes):
        for v in node.inputs:
            need[v] = max(need.get(v, -1), k)
    # A value dies when the position passes its last need. It is dropped by that schedule, not when a
    # consumer runs: a caller can need a value after its last consumer, and no node would drop it then
    # (yolov4 kept every activation, 1.7 GB, against a true peak of 0.3 GB).
    dies: dict[int, list[str]] = {}
    for k, node in enumerate(graph.nodes):
        dies.setdefault(max(need.get(node.output, -1), k) + 1, []).append(node.output)
    for name in feeds:
        if name not in graph.constants:
            dies.setdefault(need.get(name, -1) + 1, []).append(name)
    env: dict[str, np.ndarray] = {**graph.constants, **feeds}
    for v in dies.pop(0, ()):
        env.pop(v, None)
    for k, node in enumerate(graph.nodes):
        t = graph.types[node.output]
        env[node.output] = conform(evaluate(node, [env[i] for i in node.inputs], t.dtype.numpy), t)
        yield k, env
        for v in dies.pop(k + 1, ()):
            env.pop(v, None)


def remove_stale(parent: Path) -> None:
    """Remove the value directories of optimizes whose process is gone (killed before it could clean
    up: a directory can hold gigabytes). Those of live processes, which may share the cache, stay."""
    for directory in parent.glob(f"{PREFIX}*"):
        pid = directory.name[len(PREFIX):].split("-")[0]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(directory, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:       # another user's process
        return True
    return True
