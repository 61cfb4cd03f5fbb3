"""The profiler's speed watch on a slow spell made on purpose: a cold optimize with busy processes
competing for the cores for a while in the middle of its profiling.

    python benchmarks/speed_watch.py MODEL [--threads 2] [--after 120] [--for 15] [--hogs 1] [--work DIR]

Runs `korch -v optimize MODEL` on an empty profile cache and Inductor cache (under --work, default a
temporary directory), starts `--hogs` busy processes `--after` seconds in and stops them `--for`
seconds later (a stand-in for the VM's neighbours, which slow every kernel 1.4-2x in bursts), and
prints the profiler's speed-watch lines: how many kernels it timed again, the sentinel's readings,
and the second profile of each over its first. If the watch works, the kernels it timed again ran
slower the first time (second over first well under 1). Nothing else is written.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--after", type=float, default=120.0, help="seconds after the start when the busy processes start")
    p.add_argument("--for", dest="duration", type=float, default=15.0, help="seconds they run")
    p.add_argument("--hogs", type=int, default=1)
    p.add_argument("--work", type=Path, default=None)
    args = p.parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="korch-speed-watch-"))
    work.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(work / "inductor-cache"))
    cmd = [sys.executable, "-m", "korch", "-v", "optimize", args.model, "--threads", str(args.threads),
           "--cache", str(work / "profile-cache"), "-o", str(work / "plan")]
    log_path = work / "optimize.log"
    start = time.perf_counter()
    hogs: list[subprocess.Popen] = []
    started = False
    with open(log_path, "w") as log:
        optimize = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
        try:
            while optimize.poll() is None:
                now = time.perf_counter() - start
                if not started and now >= args.after:
                    started = True
                    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.hogs)]
                    print(f"{now:.0f} s: {args.hogs} busy process(es) started", flush=True)
                if hogs and now >= args.after + args.duration:
                    _stop(hogs)
                    print(f"{now:.0f} s: stopped", flush=True)
                time.sleep(0.2)
        finally:
            _stop(hogs)
    print(f"optimize exited {optimize.returncode} after {time.perf_counter() - start:.0f} s (log: {log_path})")
    shown = ("slower than its fastest", "kernel(s) again", "seconds by phase")
    for line in log_path.read_text().splitlines():
        if any(s in line for s in shown) or line.startswith(("stages", "kernels", "why")):
            print(line)
    return optimize.returncode


def _stop(procs: list[subprocess.Popen]) -> None:
    while procs:
        proc = procs.pop()
        proc.kill()
        proc.wait()


if __name__ == "__main__":
    sys.exit(main())
