"""Logging helpers shared by korch's stages."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def only_errors(name: str) -> Iterator[None]:
    """Only errors from the logger `name` (a library's) while the block runs; its level is restored after."""
    logger = logging.getLogger(name)
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


class ElapsedFormatter(logging.Formatter):
    """`korch -v`'s format: each line starts with the seconds since korch started, so a long optimize's
    log shows where its time went ("  41.9s korch.select: side by side: ...")."""

    def __init__(self) -> None:
        super().__init__("%(elapsed)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        record.elapsed = f"{record.relativeCreated / 1e3:7.1f}s"
        return super().format(record)
