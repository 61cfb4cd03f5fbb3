"""How fast the machine runs while kernels are profiled, and which profiles a slow spell spoiled.

A virtual machine slows down in bursts: for seconds to a minute every kernel runs 1.4-1.6x its usual
time (segformer-b0's first split plan, timed in one, BENCHMARKS.md). A kernel profiled in a burst
looks slow and the BLP leaves it out, and nothing later corrects that: selection re-times only the
kernels it chose. So the profiler keeps one small kernel it has already timed (the sentinel) and
times it again, the same way, every `ProfileSettings.watch_interval_s`. The kernels profiled between
two readings are suspect when either reading is more than `watch_tolerance` slower than the fastest
reading of the run; they are profiled once more at the end. The second profile is kept, unless it
too was taken in a slow spell: then the faster of the two (a burst only ever makes a kernel slower).
When more than `watch_check` kernels are suspect, a random sample of that many is profiled again
first, and the rest only if the sample came back faster: the sentinel can run slow alone (on the
AMD host whole passes were flagged, and their kernels timed again measured what they had).

With 2+ threads each reading also reads the core link (korch/profile/link.py): on a VM whose host
moves the vCPUs apart and back, a profile belongs to the link state it was taken in, and the optimize
summary says which states its profiles saw (`link_range`).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class SpeedWatch:
    """The sentinel's readings during one profiling pass: (jobs done when read, its median seconds)."""

    tolerance: float
    readings: list[tuple[int, float]] = field(default_factory=list)
    links: list[float] = field(default_factory=list)          # core link round trips read beside them, ns

    def read(self, done: int, seconds: float, link_ns: float | None = None) -> None:
        self.readings.append((done, seconds))
        if link_ns is not None:
            self.links.append(link_ns)

    def link_range(self) -> tuple[float, float] | None:
        """The nearest and farthest core link read (None: not read)."""
        return (min(self.links), max(self.links)) if self.links else None

    def fastest(self) -> float:
        return min(s for _, s in self.readings)

    def slowest_ratio(self) -> float:
        """The slowest reading over the fastest (1.0 with fewer than two readings)."""
        return max(s for _, s in self.readings) / self.fastest() if len(self.readings) > 1 else 1.0

    def slow(self, seconds: float) -> bool:
        return seconds > (1 + self.tolerance) * self.fastest()

    def suspects(self) -> list[int]:
        """Positions (0-based, in the order jobs were done) of the jobs done in a window between two
        readings of which either is slow. The jobs before the first reading (done before there was a
        sentinel) are judged by that reading alone."""
        out: list[int] = []
        readings = list(self.readings)
        if readings and readings[0][0] > 0:
            readings.insert(0, (0, readings[0][1]))
        for (before, first), (after, second) in zip(readings, readings[1:]):
            if self.slow(first) or self.slow(second):
                out.extend(range(before, after))
        return out
