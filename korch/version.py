"""Which korch code is running: a digest of the package's own sources.

A profile record's *timing* depends on the kernel provider's version (the backend's `version`,
part of every record's key), but a *rejection* can be korch's own doing: a lowering that did not
exist yet, a bug in one that made a kernel fail or disagree with the reference. Rejections are
therefore trusted only by the korch code that made them (profile/database.py `Record.code`); a
korch upgrade, or any change to its sources, tries them again. The package version string cannot
serve: it changes far less often than the code.
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

# Enough of the digest to tell versions apart; the full 64 hex digits would only lengthen every row.
CODE_VERSION_CHARS = 16


@functools.cache
def code_version() -> str:
    """The digest of every .py file of the korch package (relative path and bytes), computed once."""
    root = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        h.update(path.relative_to(root).as_posix().encode())
        h.update(b"\0")
        h.update(path.read_bytes())
        h.update(b"\0")
    return h.hexdigest()[:CODE_VERSION_CHARS]
