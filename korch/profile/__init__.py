"""Profiling: the timing harness and the profile database that keeps measurements across runs."""

from korch.profile.database import (
    DB_FILENAME,
    ProfileDB,
    ProfileDBError,
    Record,
    Status,
    default_cache_dir,
    machine_fingerprint,
)
from korch.profile.timing import Timing, interleaved, measure

__all__ = ["DB_FILENAME", "ProfileDB", "ProfileDBError", "Record", "Status", "Timing", "default_cache_dir",
           "interleaved", "machine_fingerprint", "measure"]
