"""How much memory saving a plan's source model takes above what the process already holds.

    python benchmarks/plan_save_memory.py MODEL [--cache DIR]

Reads MODEL (a zoo name or an .onnx file) as `korch optimize` does, then runs the two steps of
`save_plan` that handle every weight, into a temporary directory, while a thread samples the
process's resident memory every 5 ms:

- source:    the plan's copy of the source model, original.onnx and its weights file (_save_source);
- constants: finding which of the primitive graph's constants that weights file already holds, each
             compared byte for byte with what was written (_constants_in), so they are stored once.

Prints, per step, the resident memory before it, the peak during it and the difference, and its
seconds; then a SHA-256 of each file written and the number of constants found (two checkouts that
write the same files and find the same constants print the same).

A cold `korch optimize gpt2-small --threads 1` peaked at 4,224 MB while saving its plan, 830 MB above
the 3,391 MB it held through selection (sampled from outside, BENCHMARKS.md).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

PAGE = os.sysconf("SC_PAGE_SIZE")


def resident_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE / 2**20


class Sampler(threading.Thread):
    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.peak = resident_mb()
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            self.peak = max(self.peak, resident_mb())
            time.sleep(0.005)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model")
    parser.add_argument("--cache", help="where a zoo model's export is cached (as korch optimize --cache)")
    args = parser.parse_args()

    from korch.ir.onnx_source import OnnxSource
    from korch.pipeline import run_fission
    from korch.plan.plan import WeightsFile, _constants_in, _save_source

    fissioned = run_fission(args.model, cache_dir=args.cache)
    source = OnnxSource(fissioned.model, dict(fissioned.value_map or {}))

    def watched(step, fn):
        before = resident_mb()
        sampler = Sampler()
        sampler.start()
        t0 = time.perf_counter()
        result = fn()
        seconds = time.perf_counter() - t0
        sampler.done.set()
        sampler.join()
        peak = max(sampler.peak, resident_mb())
        print(f"{args.model}, {step}: resident {before:.0f} MB before, peak {peak:.0f} MB during it "
              f"(+{peak - before:.0f} MB), {seconds:.2f} s")
        return result

    with tempfile.TemporaryDirectory() as tmp:
        saved = watched("source", lambda: _save_source(source, Path(tmp)))
        mapped = watched("constants", lambda: _constants_in(fissioned.graph, WeightsFile.of(saved, Path(tmp)),
                                                            saved.value_map))
        digests = {p.name: hashlib.sha256(p.read_bytes()).hexdigest()[:16] for p in sorted(Path(tmp).iterdir())}
    for name, digest in digests.items():
        print(f"  {name}: sha256 {digest}")
    print(f"  {len(mapped)} constants found in the weights file")


if __name__ == "__main__":
    main()
