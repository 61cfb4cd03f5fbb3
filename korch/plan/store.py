"""Compiled kernels kept in the profile cache, so that a plan saved after a warm optimize (a
remembered selection, not compiled) holds its kernels compiled without compiling them again.

A kernel is kept under cache/kernels/<digest>, the digest of everything its code and constants
depend on: korch's code (version.py code_version), the machine, the engine and its version, the
candidate (its structure), the model's weights (its constants), and the thread count. Entries are
written whole (a temporary directory renamed into place) and never changed; a plan copies the one
it uses.

An entry's modification time is when it was last used (found or written). Writing a new entry
removes those unused for `max_age_s` (OptimizeSettings.kept_kernel_days): entries of an older korch,
torch or model are never found again, and nothing else would remove them. The store is scanned for
them at most once per `max_age_s / PRUNE_SPLIT` (its `.pruned` file says when it last was), not on
every write: a cold optimize keeps hundreds of kernels. A removed entry that was still wanted is
compiled again by the next optimize that needs it.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from korch.backends import get_backend
from korch.io import prune_now_and_then, touch
from korch.ir.graph import Graph
from korch.plan.plan import Plan, step_graph
from korch.version import code_version

if TYPE_CHECKING:
    from korch.runtime.session import Session

log = logging.getLogger("korch.plan")

STORE_DIR = "kernels"
# An entry outlives max_age_s by at most max_age_s / korch.io.PRUNE_SPLIT (a day, at the default 30 days).


def kernel_digest(machine: str, backend: str, key: str, nodes: Sequence[int], threads: int, weights: str) -> str:
    # korch's code version, not its package version: the graph a kernel is compiled from is korch's
    # lowering, which can change (be fixed) without a release. The candidate's primitives besides its
    # key: candidates of equal structure share a key, not their weights (vit-b16's twelve layers).
    parts = (code_version(), machine, backend, get_backend(backend).version, key, ",".join(map(str, nodes)),
             str(threads), weights)
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:40]


def _entry(cache_dir: Path, machine: str, backend: str, key: str, nodes: Sequence[int], threads: int,
           weights: str) -> Path:
    return cache_dir / STORE_DIR / kernel_digest(machine, backend, key, nodes, threads, weights)


def stored_kernels(plan: Plan, cache_dir: Path, weights: str) -> Plan:
    """`plan` with `artifacts` for the steps whose kernels the store holds; compiles nothing."""
    artifacts = dict(plan.artifacts)
    for step, threads in zip(plan.steps, plan.step_threads()):
        if step not in artifacts and get_backend(step.backend).saves_kernels:
            entry = _entry(cache_dir, plan.machine, step.backend, step.key, step.nodes, threads, weights)
            if entry.is_dir():
                artifacts[step] = entry
                touch(entry)
    return replace(plan, artifacts=artifacts)


def keep_kernels(plan: Plan, session: Session | None, cache_dir: Path, weights: str, max_age_s: float) -> Plan:
    """`plan` with `artifacts` for each step whose engine saves kernels: the stored one, or else the
    session's kernel, or (a remembered plan that was not compiled, first seen without its kernels
    here) the kernel compiled now, stored. A plan is optimized to be run, so the compile is not
    wasted, and it is paid once: later runs, and the plan's save and load, compile nothing."""
    from korch.runtime.session import compile_step

    plan = stored_kernels(plan, cache_dir, weights)
    artifacts = dict(plan.artifacts)
    for k, (step, threads) in enumerate(zip(plan.steps, plan.step_threads())):
        if step in artifacts or not get_backend(step.backend).saves_kernels:
            continue
        entry = _entry(cache_dir, plan.machine, step.backend, step.key, step.nodes, threads, weights)
        if _refused(entry).is_file():
            continue
        if session is not None:
            kernel = session.kernels[k]
        else:
            log.info("compiling step %d (%s) to keep it compiled", k + 1, step.backend)
            kernel = compile_step(plan, step, threads)
        keep_kernel(kernel, step_graph(plan, step), step.backend, entry, max_age_s)
        if entry.is_dir():
            artifacts[step] = entry
    return replace(plan, artifacts=artifacts)


def keep_compiled(cache_dir: Path, machine: str, weights: str, threads: int, max_age_s: float
                  ) -> Callable[[str, Sequence[int], str, object, Graph], None]:
    """A profiler's `keep` (profile/profiler.py): stores a kernel it compiled and timed (each engine's
    whole model, and any kernel slow to compile), so that selection, which compiles the whole models
    again for its duels and the kernels of each split plan it times, loads it."""
    def keep(key: str, nodes: Sequence[int], backend: str, kernel: object, graph: Graph) -> None:
        if get_backend(backend).saves_kernels:
            entry = _entry(cache_dir, machine, backend, key, nodes, threads, weights)
            if not entry.is_dir() and not _refused(entry).is_file():
                keep_kernel(kernel, graph, backend, entry, max_age_s)
    return keep


def _refused(entry: Path) -> Path:
    """Where the reason a kernel cannot be kept compiled is written."""
    return entry.with_suffix(".not-saveable")


def keep_kernel(kernel: object, graph: Graph, backend: str, entry: Path, max_age_s: float) -> None:
    """Save `kernel`, compiled from `graph`, as the store's `entry`; a kernel its engine cannot save
    is marked so (never compiled again to find out). Failing to write only logs. Then removes the
    entries unused for `max_age_s` (module doc)."""
    from korch.backends.base import KernelNotSaveable

    entry.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=entry.parent))
    try:
        get_backend(backend).save_kernel(kernel, graph, tmp / "k")       # type: ignore[arg-type]
        os.replace(tmp / "k", entry)
    except KernelNotSaveable as e:
        log.info("the %s kernel %s is not kept compiled: %s", backend, entry.name[:12], e)
        with contextlib.suppress(OSError):
            _refused(entry).write_text(f"{e}\n")         # not compiled again to find that out
    except OSError as e:
        if not entry.is_dir():          # (another process may have stored it first)
            log.warning("cannot keep a compiled kernel in %s: %s", entry.parent, e)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    prune_now_and_then(entry.parent, max_age_s, what="kernel(s)")
