"""Watch the round trip of one cache line between the machine's first two CPUs (korch/profile/link.py).

    python benchmarks/core_link.py [--seconds 0] [--every 1] [--cache DIR]

On a VM the host may move the vCPUs apart and back (korch/profile/link.py has the measurements);
this prints one reading per `--every` seconds for `--seconds`. `link_ns()` gives other scripts one
reading, None where there is none (one CPU, no C compiler).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from korch.profile.link import reader  # noqa: E402

DEFAULT_CACHE = Path.home() / ".cache" / "korch"


def link_ns(cache: Path = DEFAULT_CACHE) -> float | None:
    read = reader(cache / "tools")
    return read() if read is not None else None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=0.0, help="keep reading this long (0: one reading)")
    p.add_argument("--every", type=float, default=1.0, help="seconds between readings")
    p.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    args = p.parse_args(argv)
    if reader(args.cache / "tools") is None:
        print("no reading: fewer than two CPUs, or no C compiler (korch/profile/link.py)", file=sys.stderr)
        return 1
    end = time.monotonic() + args.seconds
    while True:
        print(time.strftime("%H:%M:%S"), f"{link_ns(args.cache):.0f} ns", flush=True)
        if time.monotonic() + args.every > end:
            return 0
        time.sleep(args.every)


if __name__ == "__main__":
    raise SystemExit(main())
