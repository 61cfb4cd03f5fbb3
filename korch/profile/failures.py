"""Whether a kernel's failure to compile or run says something about the kernel, or about the machine.

A kernel that fails because its code is wrong, or its backend cannot handle it, fails the same way
next time: its rejection is stored (for the korch code that made it). A kernel that fails because the
machine ran out of memory, a compiler process was killed, or no compiler was installed may well work
next time: such a failure is `Rejection.TRANSIENT` and never stored, so the next optimize profiles
the kernel again instead of ruling it out for good.
"""

from __future__ import annotations

import errno
import subprocess
from collections.abc import Iterator

from korch.profile.database import Rejection

# OS errors of a machine short of something, not of a kernel.
_TRANSIENT_ERRNOS = frozenset({errno.ENOMEM, errno.ENOSPC, errno.EAGAIN, errno.EMFILE, errno.ENFILE, errno.EDQUOT})
# Exception classes by name, from libraries korch does not import to classify (torch, concurrent.futures).
_TRANSIENT_CLASSES = frozenset({"InvalidCxxCompiler", "BrokenProcessPool", "BrokenExecutor"})
# What engines and compilers print when memory ran out or the compiler was killed (lower case).
_TRANSIENT_MESSAGES = ("bad_alloc", "failed to allocate memory", "cannot allocate memory", "out of memory",
                       "killed signal terminated program", "no space left on device")
# How deep to follow an exception's causes: wrappers nest a few levels, a cycle must not loop.
_MAX_CHAIN = 16


def classify_failure(error: BaseException) -> Rejection:
    """TRANSIENT if anything in the error's chain of causes is the machine's doing, else FAILED."""
    return Rejection.TRANSIENT if any(_transient(e) for e in _chain(error)) else Rejection.FAILED


def _transient(e: BaseException) -> bool:
    if isinstance(e, MemoryError):
        return True
    if isinstance(e, FileNotFoundError):             # a program (the C++ compiler) or a file that is not there
        return True
    if isinstance(e, OSError) and e.errno in _TRANSIENT_ERRNOS:
        return True
    if isinstance(e, subprocess.CalledProcessError) and e.returncode < 0:     # killed by a signal (OOM killer)
        return True
    if any(c.__name__ in _TRANSIENT_CLASSES for c in type(e).__mro__):
        return True
    text = str(e).lower()
    return any(m in text for m in _TRANSIENT_MESSAGES)


def _chain(error: BaseException) -> Iterator[BaseException]:
    """The error, its causes and contexts, and the `inner_exception` a compiler wrapper may hold."""
    seen: set[int] = set()
    todo = [error]
    while todo and len(seen) < _MAX_CHAIN:
        e = todo.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        yield e
        for nxt in (e.__cause__, e.__context__, getattr(e, "inner_exception", None)):
            if isinstance(nxt, BaseException):
                todo.append(nxt)
