"""Which candidates are worth profiling on an expensive backend: heuristics, free to tune.

Compiling a candidate with Inductor costs about a second, so it sees few of them. Profiled after
the other backends (profile/guided.py: profile_last), it compiles the fused candidates a split-plan
solve would choose if each ran at `floor_seconds`, an estimated floor under any kernel of it built
from those backends' profiles and from its own time for each linear primitive alone. It is not a
proven bound: its memory term moves the kernel's tensors at DRAM bandwidth, and a chain of
reductions and elementwise ops whose tensors stay in the last-level cache runs below it (candy: 18
of 37 measured fused Inductor kernels, down to 0.16x; segformer-b0: 29 of 36,
benchmarks/inductor_floors.py, BENCHMARKS.md, 2026-12-07). A bound that held would price such bytes
at the cache's bandwidth, lowering every small kernel's floor and so compiling more of them: not
done, the cold optimize's time being the scarcer. Profiled with them (guided
by its cost model, or before any profile exists), it takes `worth_profiling`: every linear primitive
alone first, then the fused candidates that keep the most intermediate bytes out of memory. On yolox-nano, efficientvit-b1 and segformer-b0 at 2 threads,
0, 1 and 1 of the 40 kernels that chose ran faster than onnxruntime on the same candidate: for a conv
alone Inductor calls a library, 2-5x slower than onnxruntime's here (benchmarks/inductor_headroom.py,
BENCHMARKS.md; timed then with Inductor's OpenMP workers free, which read some 20x slow: held, the
exhaustive database's single convs ran a median 1.5x onnxruntime's, p10-p90 1.0-3.3x, 2026-12-07).
Legality is not decided here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from korch.candidates import Candidate
from korch.ir.graph import Graph
from korch.ir.ops import PrimClass
from korch.profile.database import Record
from korch.profile.profiler import accepted


def saved_bytes(graph: Graph, candidate: Candidate) -> int:
    """Bytes a fused kernel does not write and read back: its internal (non-output) tensors, twice."""
    outputs = set(candidate.outputs)
    total = 0
    for i in candidate.nodes:
        out = graph.nodes[i].output
        if out not in outputs:
            total += 2 * graph.types[out].nbytes
    return total


def worth_profiling(graph: Graph, candidates: Sequence[Candidate], budget: int) -> list[Candidate]:
    """At most `budget` unique keys: linear primitives alone first, then by bytes saved (ties: order)."""
    unique: dict[str, Candidate] = {}
    for c in candidates:
        unique.setdefault(c.key, c)
    linear_alone = [c for c in unique.values() if c.size == 1 and graph.nodes[c.nodes[0]].klass == PrimClass.LINEAR]
    fused = sorted((c for c in unique.values() if c.size > 1), key=lambda c: -saved_bytes(graph, c))
    chosen = {c.key for c in (linear_alone + [c for c in fused if saved_bytes(graph, c) > 0])[:budget]}
    return [c for c in candidates if c.key in chosen]


def floor_seconds(graph: Graph, candidate: Candidate, single: Mapping[int, float], bytes_per_s: float,
                  own: Mapping[int, float] | None = None) -> float:
    """An estimated floor under any kernel of `candidate` on this machine (not a proven bound: module
    doc): its linear primitives as fast as the
    fastest kernel measured for each alone (`single`: node index -> seconds; a fused kernel still
    calls a matmul/conv library for them), and at least its input and output bytes moved once at
    memory bandwidth. Linear primitives with no single measured count as free.

    `own`: the kernel's backend's own time for some linear primitives alone; the floor is at least
    the largest of its linear primitives' (the library that backend calls for one runs in any of its
    kernels that holds it; not their sum, since layout conversions at a kernel's edges are paid once)."""
    lin = [i for i in candidate.nodes if graph.nodes[i].klass == PrimClass.LINEAR]
    linear = sum(single.get(i, 0.0) for i in lin)
    alone = max((own[i] for i in lin if i in own), default=0.0) if own else 0.0
    io = sum(graph.types[v].nbytes for v in (*candidate.inputs, *candidate.outputs) if graph.types[v].is_static)
    return max(linear, alone, io / bytes_per_s)


def single_times(candidates: Sequence[Candidate], best: Mapping[str, float]) -> dict[int, float]:
    """`floor_seconds`'s `single`: node index -> the best time of its candidate alone, for every node of
    `candidates`, not one per key: primitives of the same shapes share a key (yolox-nano's 113 linear
    primitives have 41), and a floor that misses one counts it free."""
    return {c.nodes[0]: best[c.key] for c in candidates if c.size == 1 and c.key in best}


def best_times(candidates: Sequence[Candidate], records: Mapping[tuple[str, str], Record],
               tolerance: float) -> dict[str, float]:
    """The fastest accepted profile of each candidate key, over the backends in `records`."""
    keys = {c.key for c in candidates}
    best: dict[str, float] = {}
    for (key, _), r in records.items():
        if key in keys and accepted(r, tolerance) and r.median_s:
            best[key] = min(best.get(key, r.median_s), r.median_s)
    return best
