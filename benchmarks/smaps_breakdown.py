"""A running process's resident memory by what it maps: heap, anonymous mappings, each Python
package's libraries, Inductor's files. Where an optimize's memory sits at a moment.

    python benchmarks/smaps_breakdown.py PID [--top 14]

Reads /proc/PID/smaps (Linux) and sums the Rss of each mapping by group: "[heap]" (the C heap: what
malloc serves below its mmap threshold, Python objects and protobuf among them), "[anon]" (anonymous
mappings: large arrays, engine arenas, thread stacks), "<package> (libs)" for files under
site-packages, "inductor files" for Inductor's compiled kernels, else the file's path.
"""

from __future__ import annotations

import argparse
import collections


def breakdown(pid: int) -> collections.Counter[str]:
    groups: collections.Counter[str] = collections.Counter()
    current = "[anon]"
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            parts = line.split()
            if not parts:
                continue
            if "-" in parts[0] and not parts[0].endswith(":"):        # a mapping's header line
                name = parts[5] if len(parts) >= 6 else "[anon]"
                if "/site-packages/" in name:
                    name = name.split("/site-packages/")[1].split("/")[0] + " (libs)"
                elif "torchinductor" in name or "inductor-cache" in name:
                    name = "inductor files"
                current = name
            elif parts[0] == "Rss:":
                groups[current] += int(parts[1])
    return groups


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("pid", type=int)
    parser.add_argument("--top", type=int, default=14)
    args = parser.parse_args()
    groups = breakdown(args.pid)
    print(f"total {sum(groups.values()) // 1024} MB")
    for name, kb in groups.most_common(args.top):
        print(f"{kb // 1024:7d} MB  {name}")


if __name__ == "__main__":
    main()
