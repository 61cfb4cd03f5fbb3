"""How much memory the profiler's streamed reference values hold at their peak, for a zoo model.

    python benchmarks/profile_reference_memory.py yolov4

The profiler (korch/profile/profiler.py `_streamed_values`) computes the reference once, in node
order, and keeps each value until the last node or job that reads it has run: a candidate's inputs
live from its first node to its last. This replays that bookkeeping over every (candidate, engine)
pair the pools hold, using value sizes only (nothing is computed), and prints the peak of live values
for the graph alone and with the candidates' demands, beside the sum of all activations. The figure in
parentheses is what the profiler held before 2026-11-26, when a value was dropped only as a node
read it, so one a job needed after its last consumer was never dropped.
"""

from __future__ import annotations

import sys

from korch.pipeline import enumerate_all, profile_pools, run_fission
from korch.settings import OptimizeSettings


def peak_live(graph, need_until, by_consumer: bool = False) -> int:
    """The peak of live activations when each value dies once the position passes `need_until`;
    `by_consumer`: the old bookkeeping, which looked at a value only when a node read it."""
    dies: dict[int, list[str]] = {}
    for k, node in enumerate(graph.nodes):
        dies.setdefault(max(need_until.get(node.output, -1), k) + 1, []).append(node.output)
    live: dict[str, int] = {}
    peak = 0
    for k, node in enumerate(graph.nodes):
        live[node.output] = graph.types[node.output].nbytes
        gone = [v for v in node.inputs if need_until.get(v, -1) < k + 1] if by_consumer else dies.get(k + 1, ())
        for v in gone:
            live.pop(v, None)
        peak = max(peak, sum(live.values()))
    return peak


def main(model: str) -> None:
    fissioned = run_fission(model, None)
    graph = fissioned.graph
    settings = OptimizeSettings(threads=2)
    pools = profile_pools(graph, enumerate_all(graph, settings), settings)
    jobs = [c for candidates in pools.values() for c in candidates]
    alone: dict[str, int] = {}
    for k, node in enumerate(graph.nodes):
        for v in node.inputs:
            alone[v] = max(alone.get(v, -1), k)
    with_jobs = dict(alone)
    for c in jobs:
        end = max(c.nodes) + 1
        for v in c.inputs + c.outputs:
            with_jobs[v] = max(with_jobs.get(v, -1), end)
    total = sum(graph.types[n.output].nbytes for n in graph.nodes)
    print(f"{model}: {len(jobs)} jobs; all activations {total >> 20} MB; live at peak: the graph alone "
          f"{peak_live(graph, alone) >> 20} MB, with the jobs' demands {peak_live(graph, with_jobs) >> 20} MB "
          f"(dropped only as a node reads them: {peak_live(graph, with_jobs, by_consumer=True) >> 20} MB)")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "yolov4")
