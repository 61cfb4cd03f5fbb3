"""Run a command and report its peak resident memory: ru_maxrss of the largest child (exact, unlike
a sampler), its exit code and its wall time.

    python benchmarks/peak_rss.py python -m korch -v optimize gpt2-small -o PLAN --threads 1 --cache DIR

Prints "rc N wall S s peak M MB" on stderr (MB = MiB, as the zoo tables'); the command's own output
passes through.
"""

from __future__ import annotations

import resource
import subprocess
import sys
import time


def main() -> int:
    if len(sys.argv) < 2:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    start = time.time()
    rc = subprocess.run(sys.argv[1:]).returncode
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(f"rc {rc} wall {time.time() - start:.0f} s peak {peak:.0f} MB", file=sys.stderr)
    return rc


if __name__ == "__main__":
    sys.exit(main())
