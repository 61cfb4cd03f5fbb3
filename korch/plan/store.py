"""Compiled kernels kept in the profile cache, so that a plan saved after a warm optimize (a
remembered selection, not compiled) holds its kernels compiled without compiling them again.

A kernel is kept under cache/kernels/<digest>, the digest of everything its code and constants
depend on: korch's code (version.py code_version), the machine, the engine and its version, the
candidate (its structure), the model's weights (its constants), and the thread count. Entries are
written whole (a temporary directory renamed into place) and never changed; a plan copies the one
it uses.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shutil
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from korch.backends import get_backend
from korch.plan.plan import Plan, Step, step_graph
from korch.version import code_version

if TYPE_CHECKING:
    from korch.runtime.session import Session

log = logging.getLogger("korch.plan")

STORE_DIR = "kernels"


def kernel_digest(plan: Plan, step: Step, threads: int, weights: str) -> str:
    backend = get_backend(step.backend)
    # korch's code version, not its package version: the graph a kernel is compiled from is korch's
    # lowering, which can change (be fixed) without a release
    parts = (code_version(), plan.machine, step.backend, backend.version, step.key, str(threads), weights)
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:40]


def keep_kernels(plan: Plan, session: Session | None, cache_dir: Path, weights: str) -> Plan:
    """`plan` with `artifacts` for each step whose engine saves kernels: the stored one, or else the
    session's kernel, or (a remembered plan that was not compiled, first seen without its kernels
    here) the kernel compiled now, stored. A plan is optimized to be run, so the compile is not
    wasted, and it is paid once: later runs, and the plan's save and load, compile nothing."""
    from korch.runtime.session import compile_step

    artifacts = dict(plan.artifacts)
    for k, (step, threads) in enumerate(zip(plan.steps, plan.step_threads())):
        backend = get_backend(step.backend)
        if not backend.saves_kernels or step in artifacts:
            continue
        entry = cache_dir / STORE_DIR / kernel_digest(plan, step, threads, weights)
        if not entry.is_dir() and not _refused(entry).is_file():
            if session is not None:
                kernel = session.kernels[k]
            else:
                log.info("compiling step %d (%s) to keep it compiled", k + 1, step.backend)
                kernel = compile_step(plan, step, threads)
            _store(plan, step, kernel, entry)
        if entry.is_dir():
            artifacts[step] = entry
    return replace(plan, artifacts=artifacts)


def _refused(entry: Path) -> Path:
    """Where the reason a kernel cannot be kept compiled is written."""
    return entry.with_suffix(".not-saveable")


def _store(plan: Plan, step: Step, kernel: object, entry: Path) -> None:
    from korch.backends.base import KernelNotSaveable

    entry.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=entry.parent))
    try:
        get_backend(step.backend).save_kernel(kernel, step_graph(plan, step), tmp / "k")       # type: ignore[arg-type]
        os.replace(tmp / "k", entry)
    except KernelNotSaveable as e:
        log.info("the %s kernel of step %s is not kept compiled: %s", step.backend, step.key[:12], e)
        with contextlib.suppress(OSError):
            _refused(entry).write_text(f"{e}\n")         # not compiled again to find that out
    except OSError as e:
        if not entry.is_dir():          # (another process may have stored it first)
            log.warning("cannot keep a compiled kernel in %s: %s", entry.parent, e)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
