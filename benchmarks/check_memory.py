"""What a plan check's reference costs in memory: onnxruntime on the model as given, and the float32
reference run over korch's graph, each measured alone in a fresh process after fission.

    python benchmarks/check_memory.py MODEL CACHE_DIR {model,file,reference}

model: the model loaded into Python (frontend.load_model) and serialized for onnxruntime, as the
check did before e9f92b3; file: onnxruntime reading the model's file itself; reference: the float32
reference backend over the fissioned graph (run where onnxruntime's own error exceeds rtol). Prints
resident memory (MiB, from /proc/self/statm) after fission, after the step, and after a heap trim,
and the process's peak (ru_maxrss). CACHE_DIR: a profile cache that holds the zoo model's export.
"""

from __future__ import annotations

import os
import resource
import sys

from korch.backends.reference import run_graph
from korch.frontend import load_model
from korch.heap import keep_freed_blocks, release_freed_heap
from korch.pipeline import resolve_model, run_fission
from korch.verify import onnxruntime_runner, random_feeds


def resident_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def report_after(step: str, before: float) -> None:
    """Resident memory now and what it added over `before`, after a heap trim, and the peak."""
    after = resident_mib()
    release_freed_heap()
    print(f"after {step}: resident {after:.0f} MiB (+{after - before:.0f}), trimmed {resident_mib():.0f} MiB, "
          f"peak {peak_mib():.0f} MiB (+{peak_mib() - before:.0f} over the resident memory before it)", flush=True)


def main() -> None:
    if len(sys.argv) != 4 or sys.argv[3] not in ("model", "file", "reference"):
        sys.exit(__doc__.split("\n\n")[1])
    name, cache, step = sys.argv[1:]
    keep_freed_blocks()                  # as korch's CLI runs
    resolved = resolve_model(name, cache)
    graph = run_fission(resolved, None, cache_dir=cache, rewrite=True).graph
    release_freed_heap()
    before = resident_mib()
    print(f"after fission: resident {before:.0f} MiB, peak {peak_mib():.0f} MiB", flush=True)
    feeds = random_feeds(graph, 1)
    if step == "reference":
        run_graph(graph, feeds)
    else:
        run = onnxruntime_runner(load_model(resolved, None) if step == "model" else resolved)
        run(feeds)
        del run
    report_after(step, before)


if __name__ == "__main__":
    main()
