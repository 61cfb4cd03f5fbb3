"""What each part of the rewrite check costs in memory, measured alone in a fresh process.

    python benchmarks/rewrite_check_memory.py MODEL CACHE_DIR {none,rewritten,original-model,original-file,exact}

The rewrite check (frontend/rewrite_check.py rewrite_checked, cold runs only: a warm run remembers it) compares
onnxruntime's outputs of the rewritten model with its outputs of the model as given, and, where
they differ by more than rtol, with the float64 reference of the model as given, fissioned again
for it. After what run_fission holds by then (the model as given, the rewritten model and its
primitive graph), one part runs: `rewritten`, onnxruntime on the rewritten model (serialized, as the
check runs it); `original-model`, onnxruntime on the model as given, serialized from the loaded
proto (as the check runs it); `original-file`, onnxruntime reading the model's file itself;
`exact`, the model as given fissioned again and run by the float64 reference; `none`, nothing.
Prints resident memory (MiB) before and after the part, and the process's peak (ru_maxrss).
CACHE_DIR: a profile cache that holds the zoo model's export.
"""

from __future__ import annotations

import sys

from check_memory import peak_mib, report_after, resident_mib

from korch.backends.reference import run_graph
from korch.frontend import load_model
from korch.frontend.fission.driver import fission_model
from korch.frontend.rewrites import rewrite_model
from korch.heap import keep_freed_blocks, release_freed_heap
from korch.pipeline import resolve_model
from korch.verify import onnxruntime_runner, random_feeds

PARTS = ("none", "rewritten", "original-model", "original-file", "exact")


def main() -> None:
    if len(sys.argv) != 4 or sys.argv[3] not in PARTS:
        sys.exit(__doc__.split("\n\n")[1])
    name, cache, part = sys.argv[1:]
    keep_freed_blocks()                  # as korch's CLI runs
    resolved = resolve_model(name, cache)
    original = load_model(resolved, None)
    rewritten, notes = rewrite_model(original)
    if not notes:
        sys.exit(f"{name}: no rewrite applies; nothing is checked")
    graph = fission_model(rewritten).graph
    feeds = random_feeds(graph, 0)
    release_freed_heap()
    before = resident_mib()
    print(f"{name}: {len(notes)} rewrites; before the part: resident {before:.0f} MiB, peak {peak_mib():.0f} MiB",
          flush=True)
    if part == "rewritten":
        onnxruntime_runner(rewritten)(feeds)
    elif part in ("original-model", "original-file"):
        onnxruntime_runner(original if part == "original-model" else resolved)(feeds)
    elif part == "exact":
        run_graph(fission_model(original).graph, feeds)
    report_after(part, before)


if __name__ == "__main__":
    main()
