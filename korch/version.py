"""Which korch is running: the installed package's version, and a digest of its own sources.

The package version (`package_version`, `korch.__version__`) is read from the installed package's
metadata, so pyproject.toml is its one source; saved plans and remembered selections are keyed by
it, and `korch --version` prints it with the engines' versions (`describe`).

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
import sys
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


# What `package_version` answers when korch runs from a source tree that was never installed.
UNINSTALLED = "0+uninstalled"
# The engines and libraries `korch --version` names (distribution names on PyPI).
ENGINES = ("onnxruntime", "openvino", "torch", "onnx", "numpy")


@functools.cache
def package_version() -> str:
    """The installed korch distribution's version (pyproject.toml), without importing anything heavy."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("korch")
    except PackageNotFoundError:
        return UNINSTALLED


def describe() -> str:
    """korch's version and code digest, Python's, and each engine's installed version (read from
    package metadata: nothing is imported, so it is instant and works where an engine is broken)."""
    from importlib.metadata import PackageNotFoundError, version

    def installed(name: str) -> str:
        try:
            return version(name)
        except PackageNotFoundError:
            return "not installed"

    engines = ", ".join(f"{name} {installed(name)}" for name in ENGINES)
    python = ".".join(map(str, sys.version_info[:3]))
    return f"korch {package_version()} (code {code_version()}); python {python}; {engines}"
