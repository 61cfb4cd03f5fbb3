"""The round trip of one cache line between the machine's two CPUs, in nanoseconds.

    python benchmarks/core_link.py [--seconds 0] [--every 1]

A virtual machine's vCPUs are threads on the host, placed by the host's scheduler. On the AMD EPYC
(Zen 4) VM of 2026-12-05 the two vCPUs' round trip read 52-75 ns for minutes at a time, then
325-354 ns (the host had put them apart, likely on different core complexes, which share no L3), and
back; while it was far, OpenVINO's yolov4 with Winograd's 3x3 convolutions (1,900 small nodes, a
hand-off between the two threads at each) ran ~275 ms instead of ~228 (BENCHMARKS.md). So a time
taken on this machine at 2 threads belongs to the link state it was taken in, and this is the probe
for it: `link_ns()` from other scripts, or this command to watch it.

core_link.c is compiled with the system's C compiler on first use into ~/.cache/korch/bench-tools.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import time
from pathlib import Path

SOURCE = Path(__file__).resolve().parent / "core_link.c"
# Far: a round trip this many times the nearest reading seen (52-75 ns against 325-354 on the host above).
FAR_RATIO = 2.0


def _binary() -> Path:
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:12]
    out = Path.home() / ".cache" / "korch" / "bench-tools" / f"core_link-{digest}"
    if not out.exists():
        cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
        if cc is None:
            raise SystemExit("core_link: no C compiler (set CC, or install gcc)")
        out.parent.mkdir(parents=True, exist_ok=True)
        partial = out.with_suffix(".partial")
        subprocess.run([cc, "-O2", "-pthread", str(SOURCE), "-o", str(partial)], check=True)
        partial.replace(out)
    return out


def link_ns(cpus: tuple[int, int] = (0, 1), trips: int = 20000, reps: int = 5) -> float:
    """The median round trip between `cpus`, over `reps` runs of `trips` (about 10 ms when near)."""
    done = subprocess.run([str(_binary()), str(trips), str(reps), str(cpus[0]), str(cpus[1])],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"core_link: {done.stderr.strip() or done.returncode}")
    return float(done.stdout)


def far(reading: float, nearest: float) -> bool:
    return reading >= FAR_RATIO * nearest


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=0.0, help="keep reading this long (0: one reading)")
    p.add_argument("--every", type=float, default=1.0, help="seconds between readings")
    args = p.parse_args(argv)
    end = time.monotonic() + args.seconds
    while True:
        print(time.strftime("%H:%M:%S"), f"{link_ns():.0f} ns", flush=True)
        if time.monotonic() + args.every > end:
            return 0
        time.sleep(args.every)


if __name__ == "__main__":
    raise SystemExit(main())
