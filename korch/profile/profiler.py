"""Profile candidate kernels: compile on each backend, check against the reference, time, store.

Kernels are fed the values they would see in the model: one reference run of the primitive graph
on random model inputs, streamed in topological order, so intermediate tensors are freed once no
remaining work needs them, or read back from where an optimize keeps them across the profiler's
calls (reference_values.py). A kernel whose outputs disagree with the reference by more than the
accuracy policy allows (korch/settings.py: the same rule as the whole-plan check) is rejected with
the reason and its error stored, and never chosen. A stored rejection is trusted only by the korch
code that made it (korch/version.py); a kernel that failed for a transient reason (out of memory, a
killed or missing compiler: profile/failures.py) is not chosen in this run and not stored, so the
next run profiles it again.
"""

from __future__ import annotations

import logging
import math
import random
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol

import numpy as np

from korch import OPENBLAS_QUIET
from korch.backends import Backend, CompileOptions, Kernel, get_backend
from korch.backends.placement import pinned, placement
from korch.candidates import Candidate, extract_subgraph
from korch.frontend.regions import OnnxSource, region_model, region_model_sharing
from korch.heap import keep_freed_blocks, release_freed_heap
from korch.ir.graph import Graph
from korch.profile import link
from korch.profile.ahead import Ahead, AheadJob, compile_ahead, constant_bytes, scratch_directory
from korch.profile.database import ProfileDB, Record, Rejection, Status
from korch.profile.failures import classify_failure
from korch.profile.reference_values import ReferenceValues, reference_run
from korch.profile.speed import SpeedWatch
from korch.profile.timing import CacheSweep, PlanEviction, measure, measure_beside, summarize
from korch.settings import AccuracyPolicy, ProfileSettings
from korch.verify import diff_outputs, fp32_errors, random_feeds
from korch.version import code_version

log = logging.getLogger("korch.profile")

# The reason of a rejection for accuracy starts with this; such a rejection is retried when the
# accuracy policy allows more than the kernel's recorded error (see `profile`).
ACCURACY_REJECTION = "disagrees with reference"


class Progress(Protocol):
    """Called as each item of long work is done: `done` of `total`, `what` it was (the backend
    profiled), and `part`, when the caller knows it: (done, total) of the items like this one, whose
    rate says how long they have left (an Inductor kernel takes seconds to profile, an onnxruntime
    one tens of milliseconds). `work`: (done, total) of those items' estimated work (`job_work`), when
    their sizes differ too much for a count to say what is left. `done` 0: the items start now (a step
    whose first item may take a minute: compiling ahead)."""

    def __call__(self, done: int, total: int, what: str, part: tuple[int, int] | None = None,
                 work: tuple[float, float] | None = None) -> None: ...


def job_work(size: int) -> float:
    """A profile job's time relative to a one-primitive kernel's on the same backend, from its size in
    primitives: its square root. Replayed over cold optimizes' profile records (the time between
    consecutive records; benchmarks/progress_eta.py, BENCHMARKS.md), the bar's ETA at 50% and 90% of
    the jobs read 162 and 71 s where 145 and 65 were left (yolox-nano), 106 and 41 for 101 and 37
    (efficientvit-b1), 84 and 58 for 172 and 131 (bert-base). Counting items it read 70 and 17, 51 and
    12, 43 and 13: Inductor's largest regions come last and take 15-130x a small kernel's time.
    Size ** 0.7 read about 2x high on the first two."""
    return math.sqrt(max(size, 1))


@dataclass(frozen=True)
class Job:
    candidate: Candidate          # the representative of its key
    backend: str


@dataclass(frozen=True)
class ProfileOutcome:
    """A record for every (candidate key, backend) pair asked for, and how they were obtained."""

    records: Mapping[tuple[str, str], Record]
    measured: int                 # pairs measured now
    stored: int                   # pairs read from the database
    tolerance: float              # kernels within this error of the reference were accepted
    fp32_error: float | None      # onnxruntime's own error on the model, which set the tolerance
    # Where the time went: "reference" (computing the values kernels are fed and checked against),
    # and "<backend> compile" / "<backend> check" / "<backend> timing".
    seconds: Mapping[str, float] = field(default_factory=dict)
    retimed: int = 0              # kernels timed again because the machine was slow when they were first timed
    slowest: float | None = None  # the machine's slowest speed reading over its fastest (None: not watched)
    ahead: int = 0                # kernels compiled ahead in worker processes and loaded (profile/ahead.py)
    link: tuple[float, float] | None = None   # nearest and farthest core link read beside the speed (ns)
    # backend -> the core link read right before its whole model was last timed here (after its
    # compile) and right after (ns; none at one thread, or without the probe; the speed is read at
    # both points too): the link state that whole model's profile, a one-kernel plan's prediction,
    # is for. Every backend whose whole model was profiled here is a key.
    whole_links: Mapping[str, tuple[float, ...]] = field(default_factory=dict)
    # backends whose whole model was profiled here with the machine's speed watched and found normal
    # (not in a slow spell, or timed again out of it): a profile only the core link can have moved
    whole_at_speed: frozenset[str] = frozenset()
    # pair -> its median back to back, timed in turn with its record's calls after a sweep (a retimed
    # pair with an eviction, `profile(..., evict=...)`): the two sides of its refill, taken together
    hot_beside: Mapping[tuple[str, str], float] = field(default_factory=dict)

    def whole_state(self, backend: str, threads: int) -> str | None:
        """The machine's state while `backend`'s whole model was profiled in this run: "near" or "far"
        (the core link right before and after its timing, korch/profile/link.py, judged against the
        nearest link read in the run), "one thread" (no link to cross), or None where it cannot be
        said: not profiled here, the speed not watched or slow, the link not read or changing state
        during the profile.
        Two whole models profiled in one state compare by their profiles (measured selection's
        second look is for those that do not)."""
        if backend not in self.whole_at_speed:
            return None
        if threads <= 1:
            return "one thread"
        return link.state(self.whole_links.get(backend, ()), self.nearest_link())

    def nearest_link(self) -> float | None:
        """The nearest core link read in this run, around a whole model's profile or beside the speed
        (ns; None: none read), which a reading is judged far against (link.state)."""
        return min((*(x for v in self.whole_links.values() for x in v), *(self.link or ())), default=None)

    def merged(self, more: ProfileOutcome) -> ProfileOutcome:
        """This outcome and `more`, a later profile of other pairs at the same tolerance: their records,
        counts and seconds by phase together."""
        seconds = dict(self.seconds)
        for phase, sec in more.seconds.items():
            seconds[phase] = seconds.get(phase, 0.0) + sec
        slowest = max((x for x in (self.slowest, more.slowest) if x is not None), default=None)
        ends = [x for pair in (self.link, more.link) if pair is not None for x in pair]
        return ProfileOutcome({**self.records, **more.records}, self.measured + more.measured,
                              self.stored + more.stored, self.tolerance, self.fp32_error, seconds,
                              self.retimed + more.retimed, slowest, self.ahead + more.ahead,
                              (min(ends), max(ends)) if ends else None,
                              {**self.whole_links, **more.whole_links},       # (a later profile's record is kept)
                              (self.whole_at_speed - set(more.whole_links)) | more.whole_at_speed,
                              {**self.hot_beside, **more.hot_beside})


    def kernels_of(self, candidates: Iterable[Candidate], backends: Iterable[str]) -> dict[str, list[Candidate]]:
        """Backend -> those of `candidates` it has an accepted kernel of: what a plan can be made of."""
        cands = list(candidates)
        return {name: [c for c in cands if (r := self.records.get((c.key, name))) is not None
                       and accepted(r, self.tolerance)] for name in backends}


def accepted(record: Record, tolerance: float) -> bool:
    """A kernel usable in a plan: timed, and within `tolerance` of the reference."""
    return record.status is Status.OK and (record.error is None or record.error <= tolerance)


def _retry(record: Record, tolerance: float) -> bool:
    """A stored rejection for accuracy that the current tolerance may accept (or of unknown error)."""
    return (record.status is Status.REJECTED and record.kind is Rejection.INACCURATE
            and (record.error is None or record.error <= tolerance))


def trusted(record: Record) -> bool:
    """A stored record this korch may reuse: any timing (keyed by the backend's version), and a
    rejection made by this very korch code (a change to korch may have fixed what failed)."""
    return record.status is Status.OK or record.code == code_version()


def in_stream_order(jobs: Sequence[Job]) -> list[Job]:
    """The order `_streamed_values` yields jobs in: by each job's last node (stable)."""
    return sorted(jobs, key=lambda j: max(j.candidate.nodes))


def _streamed_values(graph: Graph, feeds: Mapping[str, np.ndarray], jobs: Sequence[Job]):
    """Yield (job, values) in order of each job's last node, computing reference values lazily and
    dropping each one as soon as no later node or job needs it."""
    needed_until: dict[str, int] = {}
    for job in jobs:
        # a job runs after its last node is computed: its values must outlive that node
        end = max(job.candidate.nodes) + 1
        for v in job.candidate.inputs + job.candidate.outputs:
            needed_until[v] = max(needed_until.get(v, -1), end)
    run = reference_run(graph, feeds, needed_until)
    position, env = -1, {}
    for job in in_stream_order(jobs):
        while position < max(job.candidate.nodes):
            position, env = next(run)
        yield job, env


def _model_fp32_error(graph: Graph, source: OnnxSource | None, feeds: Mapping[str, np.ndarray],
                      stored: Mapping[tuple[str, str], Record], whole_model_key: str | None) -> float | None:
    """onnxruntime's error against the reference on this model and these inputs: the error of its
    whole-model kernel when that was profiled (it is exactly this), else one run of each."""
    if whole_model_key is not None:
        known = stored.get((whole_model_key, "onnxruntime"))
        if known is not None and known.error is not None:
            return known.error
    if source is None:
        return None
    return max(fp32_errors(source.model, graph, feeds, shared=source.arrays).values(), default=0.0)


# Called with (candidate key, its primitives, backend, kernel, the graph it was compiled from): plan/store.py's
# keep_compiled keeps a kernel that was slow to compile (each engine's whole model among them) for
# selection to load.
KeepKernel = Callable[[str, Sequence[int], str, Kernel, Graph], None]


def profile(graph: Graph, pools: Mapping[str, Iterable[Candidate]], db: ProfileDB, threads: int, machine: str,
            settings: ProfileSettings = ProfileSettings(), accuracy: AccuracyPolicy = AccuracyPolicy(),
            seed: int = 0, progress: Progress | None = None, source: OnnxSource | None = None,
            fp32_error: float | None = None, keep: KeepKernel | None = None,
            speed_reader: Callable[[], float] | None = None,
            reference: ReferenceValues | None = None,
            retime: Collection[tuple[str, str]] = (),
            evict: Mapping[tuple[str, str], int] | None = None) -> ProfileOutcome:
    """Ensure a record for every (candidate key, backend) pair of `pools` (backend -> candidates).

    Stored records are reused. A kernel is accepted when it is within the accuracy policy's tolerance
    of the reference, given onnxruntime's own fp32 error on this model (`fp32_error` when the caller
    knows it, else computed only when some kernel's acceptance depends on it). `keep` is handed each
    kernel accepted and timed that is a whole model, was compiled ahead or took
    `settings.keep_compiled_s` to compile, before it is dropped (selection loads those from the store).

    Kernels timed while the machine ran slow are timed again (korch/profile/speed.py): its speed is
    read by timing a small kernel again every `watch_interval_s`, or by `speed_reader` when given
    (seconds per reading: a test's stand-in for that kernel).

    `reference`: the graph's reference values, kept across calls (guided profiling's rounds); its
    random inputs replace those of `seed`. Without it, each call streams the reference run again.

    `retime`: (candidate key, backend) pairs whose stored accepted records are measured again, and
    the new record stored in their place (guided profiling's check of the winner's curse); where the
    new measurement fails, the stored record stays. `evict`: bytes to sweep before each timed call of
    a retimed pair, so that it is timed as it runs inside a plan (timing.PlanEviction); its calls
    alternate with calls back to back, whose median is its `ProfileOutcome.hot_beside`.
    """
    records: dict[tuple[str, str], Record] = {}
    jobs: list[Job] = []
    firsts: dict[tuple[str, str], Record] = {}     # a retimed pair's stored record
    whole_model_key: str | None = None
    for name, candidates in pools.items():
        backend = get_backend(name)
        reps: dict[str, Candidate] = {}
        for c in candidates:
            reps.setdefault(c.key, c)
            if c.size == len(graph.nodes):
                whole_model_key = c.key
        stored = db.get_many(list(reps), name, record_version(backend, settings), threads, machine)
        for key, cand in reps.items():
            if key in stored and (key, name) in retime and stored[key].status is Status.OK:
                firsts[(key, name)] = stored[key]
                jobs.append(Job(cand, name))
            elif key in stored and trusted(stored[key]):
                records[(key, name)] = stored[key]
            else:
                jobs.append(Job(cand, name))
    feeds = reference.feeds if reference is not None else random_feeds(graph, seed)
    doubtful = [r for r in records.values() if (r.error is not None and r.error > accuracy.rtol) or _retry(r, 0.0)]
    if fp32_error is None and (jobs or doubtful):
        fp32_error = _model_fp32_error(graph, source, feeds, records, whole_model_key)
    tolerance = accuracy.tolerance(fp32_error or 0.0)
    retried = [(key, name) for (key, name), r in records.items() if _retry(r, tolerance)]
    by_key = {c.key: c for candidates in pools.values() for c in candidates}
    for key, name in retried:
        del records[(key, name)]
        jobs.append(Job(by_key[key], name))
    stored_count = len(records)
    log.info("profile: %d pairs stored, %d to measure; kernels accepted within %.2e of the reference%s",
             stored_count, len(jobs), tolerance,
             f" (onnxruntime's own error {fp32_error:.2e})" if fp32_error is not None else "")
    where = placement(threads)           # kernels are timed with their threads placed as in a split plan
    options = CompileOptions(threads=threads, worker_cpus=where.workers if where is not None else ())
    seconds: dict[str, float] = {}
    sweep = CacheSweep() if settings.cold_cache else None
    evicting = {pair: n for pair, n in (evict or {}).items() if pair in firsts and n > 0}
    eviction = PlanEviction(max(evicting.values())) if evicting else None

    def sweep_of(job: Job) -> Callable[[], object] | None:
        n = evicting.get((job.candidate.key, job.backend))
        return sweep if eviction is None or n is None else eviction.sweep(n)

    hot: dict[tuple[str, str], float] = {}           # an evicted pair's time back to back, beside it
    hot_again: dict[tuple[str, str], float] = {}     # ... in its second profile (slow spells)

    transient: list[Record] = []
    watching = settings.watch_interval_s is not None and bool(jobs)
    watch = SpeedWatch(settings.watch_tolerance)
    reader: Callable[[], float] | None = speed_reader if watching else None
    read_link = link.reader(db.path.parent / "tools") if watching and threads > 1 else None
    order: list[Job] = []                 # jobs in the order done, over both passes (SpeedWatch positions)
    whole_links: dict[str, tuple[float, ...]] = {}
    links_again: dict[str, tuple[float, ...]] = {}   # ... read around a whole model's second profile
    last_read = 0.0

    def read_speed() -> None:
        nonlocal last_read
        assert reader is not None
        t0 = time.perf_counter()
        watch.read(len(order), reader(), read_link() if read_link is not None else None)
        last_read = time.perf_counter()
        seconds["speed watch"] = seconds.get("speed watch", 0.0) + last_read - t0

    def watch_after(job: Job, env: Mapping[str, np.ndarray], record: Record) -> None:
        """Choose the sentinel (the first small kernel timed), then read the machine's speed with it
        every `watch_interval_s` (korch/profile/speed.py)."""
        nonlocal reader
        if not watching:
            return
        if reader is None:
            # (never a kernel whose backend compiles slowly: the sentinel is compiled again, and an
            # Inductor region chosen so took 26 s of yolox-nano's cold optimize)
            if record.status is Status.OK and job.candidate.size < len(graph.nodes) and \
                    not get_backend(job.backend).compiles_ahead and \
                    settings.watch_sentinel_s[0] <= (record.median_s or 0.0) <= settings.watch_sentinel_s[1]:
                reader = _sentinel(graph, job, env, options, source, settings, sweep)
                if reader is not None:
                    read_speed()
            return
        assert settings.watch_interval_s is not None
        if time.perf_counter() - last_read >= settings.watch_interval_s:
            read_speed()

    second: dict[tuple[str, str], Record] = {}

    def run(todo: Sequence[Job], again: bool) -> None:
        """Profile `todo`; `again`: a second profile of kernels timed in a slow spell, set aside in
        `second` until the readings around it are known."""
        if not todo:                          # (a warm run: no reference needed, so none computed)
            return
        t0 = time.perf_counter()
        kept = reference is not None and reference.ready()      # computed on its first use
        seconds["reference"] = seconds.get("reference", 0.0) + time.perf_counter() - t0
        if kept:
            assert reference is not None
            stream = ((job, reference.values(job.candidate)) for job in in_stream_order(todo))
        else:
            stream = _streamed_values(graph, feeds, todo)
        ordered = in_stream_order(todo)
        compiled: dict[int, Future[Kernel]] = {}
        window_end = 0
        of_backend = Counter(job.backend for job in todo)
        work_of: dict[str, float] = {}
        for job in todo:
            work_of[job.backend] = work_of.get(job.backend, 0.0) + job_work(job.candidate.size)
        done_of: Counter[str] = Counter()
        worked: dict[str, float] = {}
        for done in range(1, len(todo) + 1):
            if pool is not None and done - 1 >= window_end:
                t0 = time.perf_counter()
                window_end = _compile_window(graph, ordered, done - 1, options, source, settings, pool, compiled)
                seconds["compile in threads"] = seconds.get("compile in threads", 0.0) + time.perf_counter() - t0
            t0 = time.perf_counter()
            job, env = next(stream)
            seconds["reference"] = seconds.get("reference", 0.0) + time.perf_counter() - t0
            assert job is ordered[done - 1]
            whole = job.candidate.size == len(graph.nodes)
            before: list[float | None] = []

            def before_timing() -> None:
                """The core link and the machine's speed read right before a whole model is timed, after
                its compile (Inductor's of yolov4 took 55 s, in which the host moved the vCPUs twice)."""
                before.append(read_link() if read_link is not None else None)
                if reader is not None:
                    read_speed()
            record = _measure_one(graph, job, env, options, threads, machine, source, settings, tolerance, seconds,
                                  sweep_of(job), keep,
                                  ahead.saved.get((job.candidate.key, job.backend)) if ahead else None,
                                  compiled.pop(done - 1, None), before_timing if whole else None,
                                  (hot_again if again else hot)
                                  if (job.candidate.key, job.backend) in evicting else None)
            if whole:                 # (a second profile's readings replace the first's if its record is kept)
                read = tuple(x for x in (*before, read_link() if read_link is not None else None) if x is not None)
                (links_again if again else whole_links)[job.backend] = read
                if read_link is not None:
                    log.info("profile: %s's whole model %s with the core link at %s ns", job.backend,
                             f"at {record.median_s * 1e3:.2f} ms" if record.median_s else "not timed",
                             " / ".join(f"{x:.0f}" for x in read) or "-")
            pair = (job.candidate.key, job.backend)
            if again:
                second[pair] = record
            elif record.kind is Rejection.TRANSIENT:
                transient.append(record)
                records[pair] = record
            else:
                db.put(record)
                records[pair] = record
            order.append(job)
            if whole and reader is not None:
                read_speed()                  # (right after it: the readings bracket its timing alone)
            else:
                watch_after(job, env, record)
            done_of[job.backend] += 1
            worked[job.backend] = worked.get(job.backend, 0.0) + job_work(job.candidate.size)
            if progress is not None:
                progress(done, len(todo), job.backend, (done_of[job.backend], of_backend[job.backend]),
                         (worked[job.backend], work_of[job.backend]))

    def both_passes() -> int:
        """Profile the jobs; time again the kernels timed in a slow spell. Returns how many were."""
        if reader is not None:                # a given reader (tests) reads before the first job
            read_speed()
        run(jobs, again=False)
        again: list[Job] = []
        if reader is not None:
            read_speed()
            spoiled = dict.fromkeys(order[k] for k in watch.suspects())
            # Whole models too, where their backend compiles in seconds: selection times the contenders
            # side by side, but decides which split plans are worth compiling by their profiles, and the
            # kept one's profile is the plan's prediction (candy at 1 thread on the Intel host: OpenVINO's
            # whole model profiled at 264 ms and ran at 149). Not those of a backend compiled ahead
            # (Inductor: a whole model takes 20-60 s to compile again).
            again = [j for j in spoiled if records[(j.candidate.key, j.backend)].status is Status.OK
                     and (j.candidate.size < len(graph.nodes) or not get_backend(j.backend).compiles_ahead)]
            if again:
                log.warning("profile: the machine ran up to %.2fx slower than its fastest while %d kernel(s) were "
                            "timed (read from a small kernel timed again every %.0f s: %.3f to %.3f ms over %d "
                            "readings); timing them again", watch.slowest_ratio(), len(again), settings.watch_interval_s,
                            watch.fastest() * 1e3, watch.fastest() * watch.slowest_ratio() * 1e3, len(watch.readings))
                first_pass = len(order)

                def ratios_of(jobs_: Iterable[Job]) -> list[float]:
                    """Each job's second profile over its first."""
                    out = []
                    for job in jobs_:
                        pair = (job.candidate.key, job.backend)
                        if second[pair].status is Status.OK and records[pair].median_s:
                            out.append((second[pair].median_s or 0.0) / records[pair].median_s)
                    return out

                if len(again) > settings.watch_check:
                    # A sample first: if the kernels timed in the slow readings' windows come back no
                    # faster, the sentinel was slow alone, or the machine is slow still and timing them
                    # again would gain nothing; either way the rest keep their profiles (the AMD host:
                    # passes of 2,285-2,504 of 2,717 kernels were timed again for a median 0.98-1.32x
                    # their first profile).
                    picked = set(random.Random(len(again)).sample(range(len(again)), settings.watch_check))
                    sample = [job for k, job in enumerate(again) if k in picked]
                    run(sample, again=True)
                    median = _spread(ratios_of(sample))[0]
                    if not median < (1 + settings.watch_tolerance) ** -0.5:
                        log.warning("profile: %d of those kernels, timed again first, measured a median %.3fx their "
                                    "first profile: the slow readings did not slow them; the other %d keep theirs",
                                    len(sample), median, len(again) - len(sample))
                        again = sample
                    else:
                        log.info("profile: %d of those kernels, timed again first, measured a median %.3fx their "
                                 "first profile: timing the other %d again", len(sample), median,
                                 len(again) - len(sample))
                        rest = [job for k, job in enumerate(again) if k not in picked]
                        run(rest, again=True)
                        again = sample + rest
                else:
                    run(again, again=True)
                read_speed()
                still = {order[k] for k in watch.suspects() if k >= first_pass}
                ratios = ratios_of(again)
                for job in again:
                    pair = (job.candidate.key, job.backend)
                    kept = _second_profile(records[pair], second[pair], job in still)
                    if kept is not records[pair]:
                        db.put(kept)
                        records[pair] = kept
                        if pair in hot_again:
                            hot[pair] = hot_again[pair]
                        if job.backend in links_again and job.candidate.size == len(graph.nodes):
                            whole_links[job.backend] = links_again[job.backend]
                log.info("profile: timed %d kernel(s) again, %d of them in a slow spell again (the faster profile kept "
                         "for those); second profile over first: median %.3f (p10-p90 %.3f-%.3f); the machine's slowest "
                         "reading was %.2fx its fastest", len(again), len(still), *_spread(ratios), watch.slowest_ratio())
        return len(again)

    ahead = _compile_ahead(graph, jobs, options, settings, source, progress)
    if ahead is not None:
        seconds["compile ahead"] = ahead.seconds
    threaded = settings.compile_threads >= 2 and any(get_backend(j.backend).compiles_in_threads for j in jobs)
    pool = ThreadPoolExecutor(settings.compile_threads, "korch-compile") if threaded else None
    try:
        retimed = both_passes()
    finally:
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
        if ahead is not None:
            ahead.release()
        if eviction is not None:
            eviction.close()
    for pair, first in firsts.items():
        if records[pair].status is not Status.OK:
            log.info("profile: %s's kernel %s failed when measured again (%s); its first record stays",
                     pair[1], pair[0][:12], records[pair].reason)
            db.put(first)
            records[pair] = first
            hot.pop(pair, None)
    if jobs:
        log.info("profile: seconds by phase: %s", ", ".join(f"{k} {v:.1f}" for k, v in sorted(seconds.items())))
        # Every kernel compiled here is gone, but glibc keeps the heap their compiles freed: 1.3 GB
        # after bert-base's profiles (3,301 -> 1,959 MB), under everything selection compiles next.
        release_freed_heap()
    if transient:
        log.warning("profile: %d kernel(s) failed for a reason of the machine, not the kernel (first: %s); "
                    "they are left out of this run's plan and profiled again next run",
                    len(transient), transient[0].reason)
    return ProfileOutcome(records, len(jobs), stored_count, tolerance, fp32_error, seconds, retimed,
                          watch.slowest_ratio() if watch.readings else None, len(ahead.saved) if ahead else 0,
                          watch.link_range(), whole_links, _whole_at_speed(graph, order, watch, records), hot)


def _whole_at_speed(graph: Graph, order: Sequence[Job], watch: SpeedWatch,
                    records: Mapping[tuple[str, str], Record]) -> frozenset[str]:
    """Backends whose whole model was timed here, its record kept from a timing outside every slow
    spell the speed watch saw (a kernel timed again after one keeps its second profile, or the faster
    of two slow ones: then it is not at speed). Without readings, no profile is known to be at speed."""
    if not watch.readings:
        return frozenset()
    suspect = set(watch.suspects())
    clean: dict[tuple[str, str], bool] = {}
    for k, job in enumerate(order):
        if job.candidate.size == len(graph.nodes):
            pair = (job.candidate.key, job.backend)
            clean[pair] = clean.get(pair, False) or k not in suspect
    return frozenset(pair[1] for pair, ok in clean.items() if ok and records[pair].status is Status.OK)


def _spread(values: Sequence[float]) -> tuple[float, float, float]:
    """Median, 10th and 90th percentile (nan if empty)."""
    if not values:
        return math.nan, math.nan, math.nan
    t = summarize(values)
    return t.median_s, t.p10_s, t.p90_s


def _second_profile(first: Record, second: Record, second_slow: bool) -> Record:
    """Which profile of a kernel timed in a slow spell is kept: the second, taken when the machine ran
    at its speed (keeping the faster of two would favour these kernels over those timed once); if the
    second was taken in a slow spell too, the faster (a slow spell only slows a kernel); the first if
    the second failed."""
    if second.status is not Status.OK:
        return first
    if second_slow:
        return second if (second.median_s or 0.0) < (first.median_s or 0.0) else first
    return second


def _sentinel(graph: Graph, job: Job, env: Mapping[str, np.ndarray], options: CompileOptions,
              source: OnnxSource | None, settings: ProfileSettings,
              sweep: CacheSweep | None) -> Callable[[], float] | None:
    """A reading of the machine's speed: `job`'s kernel, compiled again and kept with a copy of its
    inputs, timed after cache sweeps as the profiler times a kernel, for `watch_read_seconds` (None if
    it does not compile again)."""
    try:
        kernel = compile_candidate(graph, job.candidate, job.backend, options, source)
    except Exception as e:  # the watch is a safeguard: without it profiling goes on as before
        log.debug("no speed watch: %s's kernel %s does not compile again (%s)", job.backend, job.candidate.key[:12], e)
        return None
    inputs = [np.array(env[i], copy=True, order="C") for i in job.candidate.inputs]
    where = placement(options.threads)

    def read() -> float:
        with pinned(where.caller if where is not None else None):
            return measure(lambda: kernel.run(inputs), warmup=settings.warmup, repeats=settings.repeats,
                           min_seconds=settings.watch_read_seconds, before=sweep).median_s
    return read


def _compile_window(graph: Graph, ordered: Sequence[Job], start: int, options: CompileOptions,
                    source: OnnxSource | None, settings: ProfileSettings, pool: ThreadPoolExecutor,
                    compiled: dict[int, Future[Kernel]]) -> int:
    """Compile the kernels of `ordered[start:]` whose backend compiles in threads, up to
    `compile_window` of them and `compile_window_bytes` of their constants (at least one), in
    `pool`, into `compiled` (by position); wait for all of them, so that none compiles while a kernel
    is timed. Returns the end of the window. Whole models are left out (compiled where timed: one
    runs alone, with other options, and may be large). (No backend both compiles in threads and
    compiles ahead: Inductor's kernels are compiled ahead, OpenVINO's in threads.)"""
    whole = len(graph.nodes)
    taken = held = 0
    end = start
    while end < len(ordered) and taken < settings.compile_window:
        job = ordered[end]
        cand = job.candidate
        if get_backend(job.backend).compiles_in_threads and cand.size < whole:
            size = constant_bytes(extract_subgraph(graph, cand))
            if taken and held + size > settings.compile_window_bytes:
                break
            compiled[end] = pool.submit(compile_candidate, graph, cand, job.backend, options, source)
            taken += 1
            held += size
        end += 1
    wait(compiled[k] for k in range(start, end) if k in compiled)
    return end



def _compile_ahead(graph: Graph, jobs: Sequence[Job], options: CompileOptions, settings: ProfileSettings,
                   source: OnnxSource | None, progress: Progress | None) -> Ahead | None:
    """The kernels of backends that compile slowly, compiled ahead in worker processes (profile/ahead.py),
    or None when there are too few of them or workers are off (ProfileSettings.compile_workers)."""
    if settings.compile_workers < 2:
        return None
    whole = len(graph.nodes)
    todo = []
    for job in jobs:
        sub = _worker_graph(graph, job.candidate, get_backend(job.backend), settings, source)
        if sub is None:
            continue
        mine = replace(options, runs_alone=True) if job.candidate.size == whole else options
        todo.append(AheadJob((job.candidate.key, job.backend), sub, mine, job_work(job.candidate.size)))
    if sum(job.work for job in todo) < settings.compile_ahead_min_work:
        return None
    log.info("profile: compiling %d kernel(s) ahead in %d worker processes", len(todo), settings.compile_workers)
    # The workers' memory adds to this process's: give back the heap freed since the last trim first
    # (yolov4's guided solves had left this process at 3.9 GB while two workers took 1.9 GB more).
    release_freed_heap()

    def told(done: int, total: int, work: float, all_work: float) -> None:
        if progress is not None:
            progress(done, total, "compiling ahead", (done, total), (work, all_work))
    ahead = compile_ahead(todo, settings.compile_workers, scratch_directory(), told)
    log.info("profile: compiled %d of %d kernel(s) ahead in %.1f s", len(ahead.saved), len(todo), ahead.seconds)
    return ahead


def _worker_graph(graph: Graph, cand: Candidate, backend: Backend, settings: ProfileSettings,
                  source: OnnxSource | None) -> Graph | None:
    """The candidate's graph, if a compile worker may build its kernel (`_compile_ahead`); None if the
    profiler compiles it in place: workers off, an engine that compiles quickly, an ONNX region, a
    graph the backend refuses, or constants too large (a worker holds its own copy of them)."""
    if settings.compile_workers < 2 or not backend.compiles_ahead or _from_onnx(cand, backend, source):
        return None
    sub = extract_subgraph(graph, cand)
    if constant_bytes(sub) > settings.compile_ahead_max_bytes or backend.supports(sub) is not None:
        return None
    return sub


def compiled_in_place(graph: Graph, cand: Candidate, backend_name: str, settings: ProfileSettings,
                      source: OnnxSource | None) -> bool:
    """Whether the profiler compiles this (candidate, backend) where it times it, never in a worker."""
    return _worker_graph(graph, cand, get_backend(backend_name), settings, source) is None


def _from_onnx(cand: Candidate, backend: Backend, source: OnnxSource | None) -> bool:
    """Whether `compile_candidate` gives `backend` the candidate's ONNX nodes rather than its primitives."""
    return bool(cand.onnx_nodes) and backend.accepts_onnx and source is not None


def compile_candidate(graph: Graph, cand: Candidate, backend_name: str, options: CompileOptions,
                      source: OnnxSource | None) -> Kernel:
    """A region goes to an ONNX engine as its original nodes; everything else as primitives."""
    backend = get_backend(backend_name)
    if _from_onnx(cand, backend, source):
        if backend.shares_weights:
            model, shared = region_model_sharing(source, graph, cand)
            return backend.compile_onnx(model, cand.inputs, cand.outputs, options, source.weights_dir, shared)
        model = region_model(source, graph, cand)
        return backend.compile_onnx(model, cand.inputs, cand.outputs, options, source.weights_dir)
    return backend.compile(extract_subgraph(graph, cand), options)


def _measure_one(graph: Graph, job: Job, env: Mapping[str, np.ndarray], options: CompileOptions, threads: int,
                 machine: str, source: OnnxSource | None, settings: ProfileSettings, tolerance: float,
                 seconds: dict[str, float] | None = None, sweep: Callable[[], object] | None = None,
                 keep: KeepKernel | None = None, saved: Path | None = None,
                 compiled: Future[Kernel] | None = None, before_timing: Callable[[], None] | None = None,
                 beside: dict[tuple[str, str], float] | None = None) -> Record:
    """Compile, check and time one (candidate, backend). `sweep`: run before every timed call of a
    kernel other than the whole model (ProfileSettings.cold_cache, or a retimed kernel's eviction).
    `saved`: the kernel, compiled ahead (profile/ahead.py), to load instead of compiling. `compiled`:
    its compile, done in a thread (`_compile_window`): its kernel, or the error it raised, as if
    compiled here. `before_timing`: called once compiled and checked, right before it is timed.
    `beside` (with a `sweep`): its calls after the sweep alternate with calls back to back
    (timing.measure_beside), whose median goes into `beside` under its pair."""
    backend = get_backend(job.backend)
    cand = job.candidate
    seconds = {} if seconds is None else seconds
    clock = time.perf_counter()

    def lap(phase: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        key = f"{job.backend} {phase}"
        seconds[key] = seconds.get(key, 0.0) + now - clock
        clock = now

    def rejected(reason: str, kind: Rejection, error: float | None = None) -> Record:
        return Record.rejected(cand.key, job.backend, record_version(backend, settings), threads, machine, reason,
                               kind, code_version(), error)

    sub = extract_subgraph(graph, cand)
    reason = backend.supports(sub)
    if reason is not None:
        return rejected(f"unsupported: {reason}", Rejection.UNSUPPORTED)
    whole = cand.size == len(graph.nodes)
    if whole:        # the whole model: as a plan of one kernel runs it
        options = replace(options, runs_alone=True)
    compile_start = time.perf_counter()       # (load or compile, and the first run)
    try:
        kernel = _load(backend, saved, sub, options) if saved is not None else None
        if kernel is None and compiled is not None:
            kernel = compiled.result()
        if kernel is None:
            kernel = compile_candidate(graph, cand, job.backend, options, source)
        inputs = [np.asarray(env[i], order="C") for i in cand.inputs]   # (ascontiguousarray makes 0-d 1-d)
        outputs = kernel.run(inputs)
    except Exception as e:  # a backend failing on one candidate must not stop the optimizer
        log.debug("%s failed on %s", job.backend, cand.key[:12], exc_info=True)
        lap("compile")
        kind = classify_failure(e)
        prefix = "compile/run failed" if kind is Rejection.FAILED else "transient failure"
        return rejected(f"{prefix}: {type(e).__name__}: {str(e)[:200]}", kind)
    compile_s = time.perf_counter() - compile_start
    lap("compile")
    diffs = diff_outputs(dict(zip(cand.outputs, outputs)), {o: env[o] for o in cand.outputs})
    worst = max((d.rel for d in diffs), default=0.0)
    lap("check")
    if not worst <= tolerance:
        return rejected(f"{ACCURACY_REJECTION}: relative error {worst:.2e} > {tolerance:.2e}", Rejection.INACCURATE,
                        worst)
    if before_timing is not None:
        before_timing()
        clock = time.perf_counter()     # (not this kernel's time: a speed reading counts its own)
    where = None if options.runs_alone else placement(threads)
    extend = settings.whole_model_max_seconds if whole and settings.precision else None
    with pinned(where.caller if where is not None else None):
        if beside is not None and sweep is not None and not options.runs_alone:
            back, timing = measure_beside(lambda: kernel.run(inputs), sweep, warmup=settings.warmup,
                                          repeats=settings.repeats, min_seconds=settings.min_seconds)
            beside[(cand.key, job.backend)] = back.median_s
        else:
            timing = measure(lambda: kernel.run(inputs), warmup=settings.warmup, repeats=settings.repeats,
                             min_seconds=settings.min_seconds, before=None if options.runs_alone else sweep,
                             precision=settings.precision,
                             max_seconds=None if extend is None else max(extend, settings.min_seconds))
    lap("timing")
    # compiled ahead (`saved`): its engine compiles slowly enough to compile in worker processes
    if keep is not None and (whole or saved is not None or compile_s >= settings.keep_compiled_s):
        keep(cand.key, cand.nodes, job.backend, kernel, sub)
        lap("keep")
    return Record.ok(cand.key, job.backend, record_version(backend, settings), threads, machine, timing, worst,
                     code_version())


def _load(backend: Backend, saved: Path, graph: Graph, options: CompileOptions) -> Kernel | None:
    """A kernel compiled ahead, or None if it does not load (it is compiled again)."""
    try:
        return backend.load_kernel(saved, graph, options)
    except Exception as e:  # noqa: BLE001  (compiling it here says what is wrong, if anything is)
        log.warning("profile: a kernel compiled ahead did not load (%s: %s); compiling it again", type(e).__name__, e)
        return None


def record_version(backend: Backend, settings: ProfileSettings) -> str:
    """What profile records are keyed by besides candidate, threads and machine: the backend's
    versions and how kernels were timed (ProfileSettings.cold_cache; whether numpy's OpenBLAS workers
    sleep between calls, korch.OPENBLAS_QUIET: the reference values a kernel is checked against are
    computed just before it is timed, and a kernel timed beside a spinning worker ran up to 2.2x
    slow, so records taken before they slept are taken again; and the C heap's policy: a kernel
    whose large blocks are mapped afresh every call ran 1.19x slower, korch/heap.py). Asking
    sets that policy for the process, so kernels are timed under the policy their records name."""
    blas = "quiet" if OPENBLAS_QUIET else "spinning"
    return f"{backend.version}|{'cold-cache' if settings.cold_cache else 'hot'}|blas-{blas}|heap-{keep_freed_blocks()}"
