"""Atomic file output: write to a temporary name in the target directory, rename on success; and the
aging of a cache directory's entries (compiled kernels, prepared models): removed once unused for long."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from korch.errors import OutputError

log = logging.getLogger("korch.io")

# A store is scanned for entries unused for max_age_s at most once per max_age_s / PRUNE_SPLIT (its
# .pruned file says when it last was), not on every write: a cold optimize keeps hundreds of kernels.
PRUNE_SPLIT = 30
_PRUNED = ".pruned"


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


def touch(entry: Path) -> None:
    """Mark a store's entry used now (its modification time)."""
    with contextlib.suppress(OSError):       # (a read-only cache still serves its entries)
        os.utime(entry)


def prune(store: Path, max_age_s: float, now: float | None = None, what: str = "entries") -> int:
    """Remove the store's entries, refusal markers and stale temporary directories unused for
    `max_age_s`; returns how many went. One that cannot be removed is left."""
    now = time.time() if now is None else now
    removed = 0
    for path in store.iterdir() if store.is_dir() else ():
        if path.name == _PRUNED:
            continue
        try:
            if now - path.stat().st_mtime <= max_age_s:
                continue
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink()
            removed += 1
        except OSError:
            continue
    if removed:
        log.info("removed %d %s from %s unused for %.0f days", removed, what, store, max_age_s / 86400)
    return removed


def prune_now_and_then(store: Path, max_age_s: float, now: float | None = None, what: str = "entries") -> int:
    """`prune`, unless the store was pruned less than max_age_s / PRUNE_SPLIT ago."""
    now = time.time() if now is None else now
    stamp = store / _PRUNED
    with contextlib.suppress(OSError):
        if now - stamp.stat().st_mtime < max_age_s / PRUNE_SPLIT:
            return 0
    try:
        stamp.touch()
        os.utime(stamp, (now, now))
    except OSError:
        pass                    # (a read-only store: prune what can be pruned, every time)
    return prune(store, max_age_s, now, what)
