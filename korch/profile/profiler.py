"""Profile candidate kernels: compile on each backend, check against the reference, time, store.

Kernels are fed the values they would see in the model: one reference run of the primitive graph
on random model inputs, streamed in topological order, so intermediate tensors are freed once no
remaining work needs them. A kernel whose outputs disagree with the reference is rejected with the
reason stored, and never chosen.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from korch.backends import CompileOptions, Kernel, get_backend
from korch.backends.reference import conform, evaluate
from korch.candidates import Candidate, extract_subgraph
from korch.frontend.regions import OnnxSource, region_model
from korch.ir.graph import Graph
from korch.profile.database import ProfileDB, Record
from korch.profile.timing import measure
from korch.verify import diff_outputs, random_feeds

log = logging.getLogger("korch.profile")

# A kernel must match the reference within this error relative to each output's scale.
KERNEL_RTOL = 1e-4
# Kernel timing: the median over at least this many runs and this much time. Small kernels (µs) get
# hundreds of runs from the time floor; a whole-model region of yolov4 (~0.4 s) gets 2 + 5 runs.
PROFILE_WARMUP = 2
PROFILE_REPEATS = 5
PROFILE_MIN_SECONDS = 0.05

Progress = Callable[[int, int, str], None]


@dataclass(frozen=True)
class Job:
    candidate: Candidate          # the representative of its key
    backend: str


def _streamed_values(graph: Graph, feeds: Mapping[str, np.ndarray], jobs: Sequence[Job]):
    """Yield (job, values) in order of each job's last node, computing reference values lazily and
    dropping those no later node or job needs."""
    need_until: dict[str, int] = {}
    for k, node in enumerate(graph.nodes):
        for v in node.inputs:
            need_until[v] = max(need_until.get(v, -1), k)
    for job in jobs:
        # a job runs after its last node is computed: its values must outlive that node
        end = max(job.candidate.nodes) + 1
        for v in job.candidate.inputs + job.candidate.outputs:
            need_until[v] = max(need_until.get(v, -1), end)
    env: dict[str, np.ndarray] = {**graph.constants, **feeds}
    position = 0
    for job in sorted(jobs, key=lambda j: max(j.candidate.nodes)):
        end = max(job.candidate.nodes)
        while position <= end:
            node = graph.nodes[position]
            t = graph.types[node.output]
            env[node.output] = conform(evaluate(node, [env[i] for i in node.inputs], t.dtype.numpy), t)
            position += 1
            for v in node.inputs:
                if need_until.get(v, -1) < position and v not in graph.constants and v in env:
                    del env[v]
        yield job, env


def profile(graph: Graph, candidates: Iterable[Candidate], backends: Sequence[str], db: ProfileDB, threads: int,
            machine: str, seed: int = 0, progress: Progress | None = None, source: OnnxSource | None = None,
            ) -> tuple[dict[tuple[str, str], Record], int]:
    """Ensure a record for every (candidate key, backend) pair. Returns them all (stored ones are
    reused) and how many were measured now."""
    reps: dict[str, Candidate] = {}
    for c in candidates:
        reps.setdefault(c.key, c)
    records: dict[tuple[str, str], Record] = {}
    jobs: list[Job] = []
    for name in backends:
        backend = get_backend(name)
        stored = db.get_many(list(reps), name, backend.version, threads, machine)
        for key, cand in reps.items():
            if key in stored:
                records[(key, name)] = stored[key]
            else:
                jobs.append(Job(cand, name))
    log.info("profile: %d pairs stored, %d to measure", len(records), len(jobs))
    feeds = random_feeds(graph, seed)
    options = CompileOptions(threads=threads)
    for done, (job, env) in enumerate(_streamed_values(graph, feeds, jobs), start=1):
        record = _measure_one(graph, job, env, options, threads, machine, source)
        db.put(record)
        records[(job.candidate.key, job.backend)] = record
        if progress is not None:
            progress(done, len(jobs), job.backend)
    return records, len(jobs)


def compile_candidate(graph: Graph, cand: Candidate, backend_name: str, options: CompileOptions,
                      source: OnnxSource | None) -> Kernel:
    """A region goes to an ONNX engine as its original nodes; everything else as primitives."""
    backend = get_backend(backend_name)
    if cand.onnx_nodes and backend.accepts_onnx and source is not None:
        model = region_model(source, graph, cand)
        return backend.compile_onnx(model, cand.inputs, cand.outputs, options, source.weights_dir)
    return backend.compile(extract_subgraph(graph, cand), options)


def _measure_one(graph: Graph, job: Job, env: Mapping[str, np.ndarray], options: CompileOptions, threads: int,
                 machine: str, source: OnnxSource | None) -> Record:
    backend = get_backend(job.backend)
    cand = job.candidate

    def rejected(reason: str) -> Record:
        return Record.rejected(cand.key, job.backend, backend.version, threads, machine, reason)

    sub = extract_subgraph(graph, cand)
    reason = backend.supports(sub)
    if reason is not None:
        return rejected(f"unsupported: {reason}")
    try:
        kernel = compile_candidate(graph, cand, job.backend, options, source)
        inputs = [np.asarray(env[i], order="C") for i in cand.inputs]   # (ascontiguousarray makes 0-d 1-d)
        outputs = kernel.run(inputs)
    except Exception as e:  # a backend failing on one candidate must not stop the optimizer
        log.debug("%s failed on %s", job.backend, cand.key[:12], exc_info=True)
        return rejected(f"compile/run failed: {type(e).__name__}: {str(e)[:200]}")
    diffs = diff_outputs(dict(zip(cand.outputs, outputs)), {o: env[o] for o in cand.outputs})
    worst = max((d.rel for d in diffs), default=0.0)
    if not worst <= KERNEL_RTOL:
        return rejected(f"disagrees with reference: relative error {worst:.2e} > {KERNEL_RTOL:.0e}")
    timing = measure(lambda: kernel.run(inputs), warmup=PROFILE_WARMUP, repeats=PROFILE_REPEATS,
                     min_seconds=PROFILE_MIN_SECONDS)
    return Record.ok(cand.key, job.backend, backend.version, threads, machine, timing)
