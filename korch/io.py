"""Atomic file output: write to a temporary name in the target directory, rename on success."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from korch.errors import OutputError


def atomic_write(path: str | os.PathLike, write: Callable[[Path], None]) -> Path:
    """Call `write(tmp_path)`, then move tmp_path to `path`. On any failure nothing is left behind."""
    target = Path(path)
    directory = target.parent if str(target.parent) else Path(".")
    if not directory.is_dir():
        raise OutputError(f"{target}: directory {directory} does not exist")
    if target.is_dir():
        raise OutputError(f"{target}: is a directory")
    try:
        fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=directory)
    except OSError as e:
        raise OutputError(f"{target}: cannot write here ({e.strerror})") from None
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        write(tmp)
        os.replace(tmp, target)
    except OSError as e:
        raise OutputError(f"{target}: cannot write ({e.strerror or e})") from None
    finally:
        if tmp.exists():
            tmp.unlink()
    return target


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    return atomic_write(path, lambda tmp: tmp.write_bytes(data))
