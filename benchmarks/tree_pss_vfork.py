"""Whether zoo_bench.py's memory sampler counts a process's memory twice while it starts a child.

    python benchmarks/tree_pss_vfork.py [--mib 1500] [--seconds 15]

A child process holds --mib MiB of touched memory and starts `true` by subprocess.run over and over
for --seconds (Python's subprocess starts a child by vfork where it can: the child runs in its
parent's address space until it execs). This process samples the child's tree with zoo_bench.py's
`_tree_mb`, as the zoo benchmark samples a `korch optimize`, and prints the largest tree PSS it read,
the members of that sample, and the memory held. A tree PSS near twice the memory held means a
vforked child was read before its exec and counted with its parent's memory: 3,049 MiB for 1,500
held before `_tree_mb` skipped a child in its parent's address space (kcmp), 1,525 after.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def hold_and_spawn(mib: int, seconds: float) -> None:
    import numpy as np

    held = np.ones(mib * 2**20 // 8)            # touched: resident
    end = time.time() + seconds
    while time.time() < end:
        subprocess.run(["true"], check=True)
    del held


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=1500)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--hold", action="store_true", help=argparse.SUPPRESS)      # the child's role
    args = parser.parse_args()
    if args.hold:
        hold_and_spawn(args.mib, args.seconds)
        return
    from zoo_bench import _tree_mb

    child = subprocess.Popen([sys.executable, __file__, "--hold", "--mib", str(args.mib),
                              "--seconds", str(args.seconds)])
    time.sleep(3)                                # its memory touched
    worst: tuple[float, float, list] = (0.0, 0.0, [])
    samples = 0
    while child.poll() is None:
        sample = _tree_mb(child.pid)
        samples += 1
        if sample[1] > worst[1]:
            worst = sample
    child.wait()
    print(f"held {args.mib} MiB; {samples} samples; largest tree PSS {worst[1]:.0f} MiB (tree RSS {worst[0]:.0f}); "
          f"its members: {worst[2][:3]}")


if __name__ == "__main__":
    main()
