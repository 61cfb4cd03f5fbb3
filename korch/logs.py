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
