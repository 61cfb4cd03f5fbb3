"""How well the optimize progress bar's ETA predicts the time left, replayed over the profile records
of cold optimizes.

    python benchmarks/progress_eta.py PROFILES.sqlite [PROFILES.sqlite ...] [--threads 2]

A cold optimize stores one record per (candidate, backend) as each profile job ends, so the time
between consecutive records (in the order stored) is each job's time, and the features table gives
each candidate's size. The replay feeds korch's own ProgressBar (korch/cli.py) the jobs in that order
on a fake clock, once as the profiler calls it (each backend's count and its estimated work,
korch.profile.profiler.job_work) and once with counts alone, and prints the ETA each showed at 50%
and 90% of the jobs against the time that was actually left. Use a database that one cold optimize
filled: records timed again later (the speed watch's second pass, a later run) replace the first
ones and move them to the end.
"""

from __future__ import annotations

import argparse
import io
import json
import re
import sqlite3

from korch.cli import ProgressBar
from korch.profile.profiler import job_work


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def jobs(path: str, threads: int) -> list[tuple[str, int, float]]:
    """(backend, candidate size, seconds) per profile job, in the order stored."""
    db = sqlite3.connect(path)
    size = {key: int(json.loads(vector)[0]) for key, vector in db.execute("select candidate_key, vector from features")}
    rows = sorted(db.execute("select created_at, backend, candidate_key from profiles where threads = ?", (threads,)))
    rows = [r for r in rows if r[2] in size]
    return [(backend, size[key], t1 - t0) for (t0, _, _), (t1, backend, key) in zip(rows, rows[1:])]


def replay(done_jobs: list[tuple[str, int, float]], with_work: bool) -> dict[int, tuple[float, float]]:
    """Percent -> (ETA shown, seconds actually left) at 50% and 90% of the jobs."""
    clock, out = Clock(), io.StringIO()
    bar = ProgressBar("profiling", True, stream=out, clock=clock, quiet_s=1e9)
    count, work = {}, {}
    for backend, size, _ in done_jobs:
        count[backend] = count.get(backend, 0) + 1
        work[backend] = work.get(backend, 0.0) + job_work(size)
    seen, worked, total_s = {}, {}, sum(s for _, _, s in done_jobs)
    left_at: dict[int, float] = {}
    marks = {int(0.5 * len(done_jobs)): 50, int(0.9 * len(done_jobs)): 90}
    for k, (backend, size, seconds) in enumerate(done_jobs, 1):
        clock.now += seconds
        seen[backend] = seen.get(backend, 0) + 1
        worked[backend] = worked.get(backend, 0.0) + job_work(size)
        bar(k, len(done_jobs), backend, (seen[backend], count[backend]),
            (worked[backend], work[backend]) if with_work else None)
        if k in marks:
            left_at[marks[k]] = total_s - clock.now
            bar.last_decile = -1            # print this call's line even off a decile
            bar(k, len(done_jobs), backend, (seen[backend], count[backend]),
                (worked[backend], work[backend]) if with_work else None)
    shown = {}
    for line in out.getvalue().splitlines():
        m = re.match(r"profiling (\d+)/\d+ .*ETA (-?\d+)s", line)
        if m and int(m.group(1)) in marks:
            shown[marks[int(m.group(1))]] = float(m.group(2))
    return {p: (shown[p], left_at[p]) for p in sorted(left_at)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("databases", nargs="+")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    print("| database | jobs | at | ETA by work | ETA by count | left |")
    print("|---|---:|---:|---:|---:|---:|")
    for path in args.databases:
        done_jobs = jobs(path, args.threads)
        by_work, by_count = replay(done_jobs, True), replay(done_jobs, False)
        for p, (eta, left) in by_work.items():
            print(f"| {path} | {len(done_jobs)} | {p}% | {eta:.0f} s | {by_count[p][0]:.0f} s | {left:.0f} s |")


if __name__ == "__main__":
    main()
