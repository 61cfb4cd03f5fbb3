"""What a kernel pays inside a split plan for the caches its plan's other kernels took: its refill.

Kernels are profiled back to back, and on a machine whose last-level cache holds a kernel's whole
working set (the model-167 Xeon host reports 480 MiB) the second call finds all of it there. Inside
a split plan the other kernels touch hundreds of MiB in between, and each kernel pays to bring its
inputs, weights and its engine's own buffers and code back: 0.2-0.7 ms on the smallest kernels,
0.5-1.3 ms at 16-256 MiB touched, 1.5-2.5 ms beyond (benchmarks/refill_sample.py). Priced at their
back-to-back profiles, split plans read 5-11% under what they run at, and the guided loop explores
plans that cannot win.

A `RefillSample` is one kernel timed both ways, call by call in turn: back to back and after a
sweep of what a plan's other kernels touch (profile.profile's `evict`, timing.measure_beside; its
first profile instead, taken minutes earlier, let the machine's slow spells and core-link moves in
between read as refills of either sign). The profile database keeps them
per machine, threads and backend version (ProfileDB.put_refills), from guided profiling's sample
of random kernels and from its second timing of the best split plan's kernels (profile/guided.py).
A kernel so timed has its in-plan time as its record; any other split kernel is priced at its
profile plus `RefillModel.predict`: the median refill of the `neighbours` samples of its backend
nearest in (log touched bytes, log bytes evicted). Nearest neighbours, not a fitted line: the
refill grows with the bytes touched but not along any line in them (it depends on the engine's
resident working set, which korch cannot see), and the median keeps one odd reading (a kernel that
read faster after the sweep) from moving it. No sample of a backend: no refill (its profile).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np


@dataclass(frozen=True)
class RefillSample:
    """One kernel timed back to back (`hot_s`) and after a sweep of `evict_bytes` (`evicted_s`)."""

    candidate_key: str
    backend: str
    touched_bytes: int
    evict_bytes: int
    hot_s: float
    evicted_s: float

    def __post_init__(self) -> None:
        if self.touched_bytes < 0 or self.evict_bytes < 0:
            raise ValueError(f"a refill sample's bytes are >= 0: {self}")
        if not (self.hot_s > 0 and self.evicted_s > 0 and math.isfinite(self.hot_s) and math.isfinite(self.evicted_s)):
            raise ValueError(f"a refill sample's times are finite and > 0: {self}")

    @property
    def refill_s(self) -> float:
        """What the sweep added (negative when the kernel read faster after it: noise)."""
        return self.evicted_s - self.hot_s


@dataclass(frozen=True)
class RefillModel:
    """Each backend's refill samples (module doc); `predict` is a kernel's expected refill in a plan."""

    samples: Mapping[str, Sequence[RefillSample]] = field(default_factory=dict)
    neighbours: int = 5

    @classmethod
    def of(cls, samples: Iterable[RefillSample], neighbours: int = 5) -> RefillModel:
        if neighbours < 1:
            raise ValueError(f"a refill model takes >= 1 neighbour, got {neighbours}")
        by_backend: dict[str, dict[str, RefillSample]] = {}
        for s in samples:                                   # the latest sample of a kernel wins
            by_backend.setdefault(s.backend, {})[s.candidate_key] = s
        return cls({name: tuple(own.values()) for name, own in by_backend.items()}, neighbours)

    def count(self, backend: str) -> int:
        return len(self.samples.get(backend, ()))

    @cached_property
    def _arrays(self) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Per backend: log2 touched, log2 evicted, refill of its samples."""
        return {name: (np.log2(np.array([s.touched_bytes for s in own], dtype=float) + 1),
                       np.log2(np.array([s.evict_bytes for s in own], dtype=float) + 1),
                       np.array([s.refill_s for s in own])) for name, own in self.samples.items() if own}

    def predict(self, backend: str, touched_bytes: int, evict_bytes: int) -> float:
        """The median refill of the nearest samples of `backend` (distance: |log2 touched| + |log2
        evicted| apart), at least 0; 0 without samples, or when nothing is evicted."""
        arrays = self._arrays.get(backend)
        if arrays is None or evict_bytes <= 0:
            return 0.0
        touched, evicted, refill = arrays
        distance = np.abs(touched - math.log2(touched_bytes + 1)) + np.abs(evicted - math.log2(evict_bytes + 1))
        k = min(self.neighbours, len(refill))
        nearest = np.argpartition(distance, k - 1)[:k] if k < len(refill) else np.arange(len(refill))
        return max(0.0, float(np.median(refill[nearest])))

    def refills(self, kernels: Mapping[tuple[str, str], tuple[int, int]]) -> dict[tuple[str, str], float]:
        """(candidate key, backend) -> expected refill, for kernels given as (touched bytes, bytes the
        rest of a plan evicts); each distinct (backend, touched, evict) predicted once."""
        memo: dict[tuple[str, int, int], float] = {}
        out = {}
        for (key, name), (touched, evict) in kernels.items():
            at = (name, touched, evict)
            if at not in memo:
                memo[at] = self.predict(name, touched, evict)
            out[(key, name)] = memo[at]
        return out
