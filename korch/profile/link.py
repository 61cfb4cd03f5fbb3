"""The round trip of one cache line between two of the machine's CPUs: which state the host is in.

A virtual machine's vCPUs are threads on its host, placed by the host's scheduler. On this project's
AMD EPYC (Zen 4) VM the round trip between its two vCPUs read 52-75 ns for minutes at a time, then
325-735 ns (the host had put them apart, likely on core complexes that share no L3), and back, with
no change inside the VM. Work split over two threads pays the far link at every hand-off: OpenVINO's
yolov4 with its 3x3 convolutions in Winograd's form (1,900 small nodes) ran 225 ms [224-229] in 145
blocks read near and 274 ms [271-278] in 229 read far, within one process (correlation 0.95 between
the model's block medians and the link's; benchmarks/machine_drift.py, BENCHMARKS.md 2026-12-05).
Within one state its time moved by 2%. So a time taken at 2 threads belongs to the link state it was
taken in, and `korch bench` reads the link between rounds and reports each system in each state.

The probe is a small C program (below) built with the system's C compiler (`CC`, else cc or gcc) on
first use into `<cache>/tools/`; without a compiler or a second CPU there is no reading (None).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import shutil
import statistics
import subprocess
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

log = logging.getLogger("korch.profile.link")

T = TypeVar("T")

# Far: a round trip at least this many times the nearest read in the same run (52-75 ns near against
# 325-735 ns far on the host above).
FAR_RATIO = 2.0
# StateProbe.around's states besides "near" and "far": the host moved the vCPUs during the timing,
# or the probe read nothing (a reading can fail, and a probe that never reads says so of every timing).
MOVING, UNREAD = "moving", "unread"
TRIPS, REPS = 2000, 3          # one reading: 3 x 2000 round trips, ~0.4 ms near and ~5 ms far

SOURCE = r"""
/* One cache line passed back and forth between two threads pinned to two CPUs; prints the median
 * over `reps` runs of `trips` round trips, in ns.  usage: core_link trips reps cpu_a cpu_b */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static _Atomic int ball __attribute__((aligned(64)));
static int trips, reps, cpu_b;

static int pin(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

static void *returner(void *unused) {
    (void)unused;
    if (pin(cpu_b) != 0) { fprintf(stderr, "cannot pin to CPU %d\n", cpu_b); exit(2); }
    for (long i = 0; i < (long)trips * reps; i++) {
        while (atomic_load_explicit(&ball, memory_order_acquire) != 1) { }
        atomic_store_explicit(&ball, 0, memory_order_release);
    }
    return NULL;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (argc != 5) { fprintf(stderr, "usage: core_link trips reps cpu_a cpu_b\n"); return 2; }
    trips = atoi(argv[1]);
    reps = atoi(argv[2]);
    int cpu_a = atoi(argv[3]);
    cpu_b = atoi(argv[4]);
    if (trips < 1 || reps < 1 || reps > 101 || cpu_a == cpu_b) { fprintf(stderr, "bad arguments\n"); return 2; }
    if (pin(cpu_a) != 0) { fprintf(stderr, "cannot pin to CPU %d\n", cpu_a); return 2; }
    pthread_t other;
    if (pthread_create(&other, NULL, returner, NULL) != 0) { fprintf(stderr, "no second thread\n"); return 2; }
    double ns[101];
    for (int r = 0; r < reps; r++) {
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (int i = 0; i < trips; i++) {
            atomic_store_explicit(&ball, 1, memory_order_release);
            while (atomic_load_explicit(&ball, memory_order_acquire) != 0) { }
        }
        clock_gettime(CLOCK_MONOTONIC, &t1);
        ns[r] = ((t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec)) / trips;
    }
    pthread_join(other, NULL);
    qsort(ns, reps, sizeof ns[0], by_value);
    printf("%.1f\n", ns[reps / 2]);
    return 0;
}
"""


def far(reading: float, nearest: float) -> bool:
    """Whether a reading is in the far state, given the nearest read in the same run."""
    return reading >= FAR_RATIO * nearest


def state(readings: Sequence[float], nearest: float | None = None) -> str | None:
    """"near" or "far" where `readings` (taken around one timing) all fall in one state, judged against
    the nearest of them and `nearest` (the nearest read earlier in the run); None where there is no
    reading or they fall on both sides (the host moved the vCPUs during the timing)."""
    if not readings:
        return None
    floor = min((*readings, *(() if nearest is None else (nearest,))))
    states = {far(x, floor) for x in readings}
    return None if len(states) > 1 else "far" if states.pop() else "near"


@dataclass(frozen=True)
class StateProbe:
    """Which core-link state a timing ran in: the link `read` right before it and right after, judged
    (`state`) against `nearest`, the nearest link read earlier in the run (ns)."""

    read: Callable[[], float | None]
    nearest: float | None = None

    def around(self, timing: Callable[[], T]) -> tuple[T, str]:
        """`timing()`'s result and the state it ran in: "near", "far", "moving" (the readings fell on
        both sides) or "unread" (the probe read nothing, before or after)."""
        before = self.read()
        result = timing()
        after = self.read()
        readings = [x for x in (before, after) if x is not None]
        if not readings:
            return result, UNREAD
        return result, state(readings, self.nearest) or MOVING


def state_probe(tools: Path, threads: int, nearest: float | None = None) -> StateProbe | None:
    """A StateProbe for timings at `threads` (`reader` in `tools`), or None: one thread has no link to
    cross, or there is no reader."""
    read = reader(tools) if threads > 1 else None
    return None if read is None else StateProbe(read, nearest)


def _build(tools: Path) -> Path | None:
    """The probe's binary, compiled into `tools` once per version of SOURCE (None: no C compiler, or
    it failed, with the reason logged)."""
    digest = hashlib.sha256(SOURCE.encode()).hexdigest()[:12]
    binary = tools / f"core_link-{digest}"
    if binary.exists():
        return binary
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        log.info("no core link readings: no C compiler (set CC)")
        return None
    try:
        tools.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=tools) as tmp:
            src, out = Path(tmp) / "core_link.c", Path(tmp) / "core_link"
            src.write_text(SOURCE)
            done = subprocess.run([cc, "-O2", "-pthread", str(src), "-o", str(out)], capture_output=True,
                                  text=True, timeout=120)
            if done.returncode != 0:
                log.info("no core link readings: %s failed: %s", cc, done.stderr.strip()[:300])
                return None
            out.replace(binary)          # (atomic: a reader never runs a half-written binary)
    except (OSError, subprocess.SubprocessError) as e:      # no compiler there, a read-only cache, a hang
        log.info("no core link readings: %s", e)
        return None
    return binary


@functools.cache
def reader(tools: Path, cpus: tuple[int, int] | None = None) -> Callable[[], float | None] | None:
    """A function reading the round trip (ns) between `cpus` (default: the first two this process may
    run on), or None where there is none to read: fewer than two CPUs, no compiler."""
    if cpus is None:
        allowed = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
        if len(allowed) < 2:
            return None
        cpus = (allowed[0], allowed[1])
    binary = _build(tools)
    if binary is None:
        return None
    argv = [str(binary), str(TRIPS), str(REPS), str(cpus[0]), str(cpus[1])]

    def read() -> float | None:
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.SubprocessError) as e:      # (a reading is never worth failing a run)
            log.info("core link not read: %s", e)
            return None
        if done.returncode != 0:
            log.info("core link not read: %s", done.stderr.strip())
            return None
        return float(done.stdout)
    return read


@dataclass(frozen=True)
class LinkStates:
    """Rounds of a side-by-side timing split by the link read before each: near (under FAR_RATIO
    times the nearest reading) and far. `near_ms`/`far_ms`: each system's median per state (absent
    for a state with no round)."""

    near_ns: float | None
    far_ns: float | None
    rounds_near: int
    rounds_far: int
    unread: int
    near_ms: Mapping[str, float]
    far_ms: Mapping[str, float]

    def line(self) -> str:
        """One line for a report."""
        if self.rounds_near + self.rounds_far == 0:
            return "core link: not read"
        if not self.rounds_far:
            return f"core link: near in all {self.rounds_near} rounds ({self.near_ns:.0f} ns)"

        def per(ms: Mapping[str, float]) -> str:
            return ", ".join(f"{name} {v:.2f}" for name, v in ms.items())
        near = (f"{self.rounds_near} near ({self.near_ns:.0f} ns): {per(self.near_ms)} ms; "
                if self.rounds_near else "")
        return (f"core link (the host moved the vCPUs apart): {near}{self.rounds_far} far "
                f"({self.far_ns:.0f} ns): {per(self.far_ms)} ms")


def split(readings: Sequence[float | None], samples_s: Mapping[str, Sequence[float]],
          nearest: float | None = None) -> LinkStates:
    """`readings[r]`: the link read before round r; `samples_s[name][r]`: that system's sample in
    round r (a timing that ended early has fewer rounds than readings). Each reading is judged against
    the nearest of them and `nearest` (the machine's nearest reading, ProfileDB.nearest_link): judged
    against its own readings alone, a timing that ran far throughout reads as near."""
    rounds = min((len(s) for s in samples_s.values()), default=0)
    read = [(r, x) for r, x in enumerate(readings[:rounds]) if x is not None]
    if not read:
        return LinkStates(None, None, 0, 0, rounds, {}, {})
    nearest = min([x for _, x in read] + ([] if nearest is None else [nearest]))
    near = [r for r, x in read if not far(x, nearest)]
    apart = [r for r, x in read if far(x, nearest)]

    def medians(rs: list[int]) -> dict[str, float]:
        return {name: statistics.median(s[r] for r in rs) * 1e3 for name, s in samples_s.items()} if rs else {}

    def typical(rs: list[int]) -> float | None:
        return statistics.median(readings[r] for r in rs) if rs else None   # type: ignore[type-var]
    return LinkStates(typical(near), typical(apart), len(near), len(apart), rounds - len(read), medians(near),
                      medians(apart))
