"""The plan runtime: a session whose `run(output_names, feeds)` has onnxruntime's shape.

The dispatch loop is precomputed: per step, the kernel's bound `run`, the input names, the output
names and the values whose last use it is (freed right after), so a step costs a few dict
operations on top of the kernel's own call.

A plan with a schedule (korch/plan/schedule.py) runs its stages in turn; a stage of several lanes
runs them side by side on a fixed pool of threads made with the session (runtime/lanes.py), each
kernel compiled for its lane's threads, and frees what the stage was the last to read once all its
lanes are done.
"""

from __future__ import annotations

import functools
import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from korch.backends import CompileOptions, Kernel, get_backend
from korch.backends.placement import Placement, pinned, placement
from korch.errors import ExitCode, KorchError, UsageError
from korch.heap import keep_freed_blocks, release_freed_heap
from korch.ir.types import TensorType
from korch.plan import Plan, PlanError, Step, load_plan
from korch.plan.plan import step_graph, step_onnx_nodes
from korch.plan.schedule import sequential
from korch.runtime.lanes import LanePool

log = logging.getLogger("korch.runtime")


class RunError(UsageError):
    """Bad feeds or output names given to Session.run."""


class KernelRunError(KorchError):
    """A plan's kernel raised while running. The message names the step, its engine and ONNX nodes;
    the session holds no state from the failed run, so the next `run` starts clean."""

    exit_code = ExitCode.RUN


# ONNX nodes named when a step fails: enough to find it, short enough to read.
_NAMED_ONNX_NODES = 5


@dataclass(frozen=True)
class _Op:
    run: object
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    free: tuple[str, ...]
    step: int


@dataclass(frozen=True)
class _Fork:
    """A stage of several lanes, each a chain of ops run in order; `free` goes once all are done."""

    lanes: tuple[tuple[_Op, ...], ...]
    free: tuple[str, ...]


def plan_placement(plan: Plan) -> Placement | None:
    """Where a plan's threads run (backends/placement.py): only a plan of several kernels is pinned;
    one engine running the whole model keeps its pool spinning and runs as its users run it."""
    return placement(plan.threads) if len(plan.steps) > 1 else None


def compile_step(plan: Plan, step: Step, threads: int | None = None) -> Kernel:
    """The step's kernel, for `threads` threads (None: the plan's): loaded as the plan saved it
    compiled (plan.artifacts, for the threads the plan gives the step), from the ready ONNX model a
    saved plan holds for it (read as bytes; nothing parses it but the engine), else cut from the
    source or built from the primitive graph."""
    threads = plan.threads if threads is None else threads
    where = plan_placement(plan)
    workers = where.workers[: threads - 1] if where is not None else ()
    options = CompileOptions(threads=threads, runs_alone=len(plan.steps) == 1, worker_cpus=workers)
    saved = plan.artifacts.get(step)
    k = plan.steps.index(step) if saved is not None else -1
    if saved is not None and threads == plan.step_threads()[k]:
        from korch.backends.base import SavedKernelError

        try:
            return get_backend(step.backend).load_kernel(saved, step_graph(plan, step, read_constants=False), options)
        except SavedKernelError as e:
            raise PlanError(f"step {k + 1}'s saved {step.backend} kernel: {e}") from None
    model = plan.models.get(step)
    if model is not None:
        weights = plan.source.weights_dir if plan.source is not None else None
        dtypes = [plan.graph.types[name].dtype.numpy for name in step.outputs]
        return get_backend(step.backend).compile_onnx_file(model, step.inputs, step.outputs, dtypes, options, weights)
    from korch.candidates import Candidate
    from korch.profile.profiler import compile_candidate

    candidate = Candidate(step.nodes, step.inputs, step.outputs, step.key, step.onnx_nodes)
    return compile_candidate(plan.graph, candidate, step.backend, options, plan.source)


def compile_plan(plan: Plan) -> Session:
    kernels = []
    for step, threads in zip(plan.steps, plan.step_threads()):
        kernels.append(compile_step(plan, step, threads))
        release_freed_heap()
    return Session(plan, kernels)


def _program(plan: Plan, ops: Sequence[_Op]) -> tuple[_Op | _Fork, ...]:
    """The dispatch program: an op per step that runs alone (each step of a one-lane stage), a _Fork per
    stage of several lanes. Each unit frees the values it is the last to read, and those it makes
    that nothing later reads, except the graph's outputs."""
    stages = (plan.schedule or sequential(len(ops), plan.threads)).stages
    units: list[tuple[tuple[int, ...], ...]] = []          # per unit, its lanes' step indices
    for stage in stages:
        if len(stage) == 1:
            units.extend(((k,),) for k in stage[0].steps)
        else:
            units.append(tuple(lane.steps for lane in stage))
    last: dict[str, int] = {}
    for u, lanes in enumerate(units):
        for k in (k for lane in lanes for k in lane):
            for v in plan.steps[k].inputs:
                last[v] = u
    keep = set(plan.graph.outputs)
    program: list[_Op | _Fork] = []
    for u, lanes in enumerate(units):
        steps = [plan.steps[k] for lane in lanes for k in lane]
        read = [v for st in steps for v in st.inputs if last[v] == u]
        unused = [v for st in steps for v in st.outputs if last.get(v, -1) <= u]
        free = tuple(v for v in dict.fromkeys(read + unused) if v not in keep)
        if len(lanes) == 1:
            program.append(replace(ops[lanes[0][0]], free=free))
        else:
            program.append(_Fork(tuple(tuple(ops[k] for k in lane) for lane in lanes), free))
    return tuple(program)


class Session:
    def __init__(self, plan: Plan, kernels: Sequence[Kernel]) -> None:
        # The C heap's policy its kernels were profiled under (korch/heap.py), however they were compiled
        # or loaded (compile_plan, korch.load, or a benchmark's own kernels).
        keep_freed_blocks()
        self.plan = plan
        self.kernels = tuple(kernels)          # by step, as compiled (plan/store.py keeps them)
        graph = plan.graph
        self._input_types: dict[str, TensorType] = {n: graph.types[n] for n in graph.inputs}
        self._outputs = graph.outputs
        # Outputs made by a kernel that returns its own buffers (Kernel.reuses_outputs: the next run
        # overwrites them) are copied for the caller, who owns what run() returns.
        self._copied = frozenset(o for step, kernel in zip(plan.steps, kernels)
                                 if getattr(kernel, "reuses_outputs", False)
                                 for o in step.outputs if o in graph.outputs)
        ops = [_Op(kernel.run, step.inputs, step.outputs, (), k)
               for k, (step, kernel) in enumerate(zip(plan.steps, kernels))]
        self._program = _program(plan, ops)
        where = plan_placement(plan)
        self._caller_cpu = where.caller if where is not None else None      # held there while the plan runs
        self._lanes: LanePool | None = None         # the workers of concurrent stages (runtime/lanes.py)
        if plan.schedule is not None and plan.schedule.lanes > 1:
            self._lanes = LanePool(plan.schedule.lanes, where.workers if where is not None else ())

    def get_inputs(self) -> list[tuple[str, TensorType]]:
        return list(self._input_types.items())

    def get_outputs(self) -> list[tuple[str, TensorType]]:
        return [(n, self.plan.graph.types[n]) for n in self._outputs]

    def _check_feeds(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The feeds as the plan's inputs, by onnxruntime's rules: every input fed, no other name,
        each of exactly its shape and element type (a float64 array for a float input is an error,
        not a silent cast that would hide a caller's mistake and cost a copy on every run)."""
        missing = [n for n in self._input_types if n not in feeds]
        if missing:
            raise RunError(f"missing feeds for inputs {missing}; the plan's inputs are {self._expected()}")
        unknown = [n for n in feeds if n not in self._input_types]
        if unknown:
            raise RunError(f"unknown feeds {unknown}: not inputs of the plan, whose inputs are {self._expected()}")
        env = {}
        for name, t in self._input_types.items():
            array = np.asarray(feeds[name])
            if array.dtype != t.dtype.numpy:
                raise RunError(f"input {name!r}: element type {array.dtype} given, the plan needs {t}")
            if tuple(array.shape) != t.shape:
                raise RunError(f"input {name!r}: shape {tuple(array.shape)} given, the plan needs {t}")
            env[name] = np.asarray(array, order="C")      # (ascontiguousarray makes 0-d arrays 1-d)
        return env

    def _expected(self) -> str:
        """The plan's inputs, for an error message (not built on every run)."""
        return ", ".join(f"{n} {t}" for n, t in self._input_types.items())

    def run(self, output_names: Sequence[str] | None, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        names = list(output_names) if output_names else list(self._outputs)
        unknown = [n for n in names if n not in self._outputs]
        if unknown:
            raise RunError(f"unknown outputs {unknown}; the plan's outputs are {list(self._outputs)}")
        env = self._execute(self._check_feeds(feeds), self._program)
        return [env[n].copy() if n in self._copied else env[n] for n in names]

    def step_times(self, feeds: Mapping[str, np.ndarray]) -> list[float]:
        """One run with each step timed (seconds, by plan step): where a plan's time goes. The timing
        wraps each kernel's call, so `run` itself carries no clock reads; a step in a lane is timed
        on its lane's thread, while the other lanes run."""
        times = [0.0] * len(self.plan.steps)

        def timed(step: int, call, args):
            t0 = time.perf_counter()
            results = call(args)
            times[step] = time.perf_counter() - t0
            return results

        self._run_wrapped(feeds, timed)
        return times

    def step_inputs(self, feeds: Mapping[str, np.ndarray]) -> list[list[np.ndarray]]:
        """Each step's inputs as one run of the plan gives them, by plan step: copies, since a kernel
        may hand out buffers that its next call overwrites (for `alone_times`)."""
        inputs: list[list[np.ndarray]] = [[] for _ in self.plan.steps]

        def capture(step: int, call, args):
            inputs[step] = [np.array(a, copy=True, order="C") for a in args]
            return call(args)

        self._run_wrapped(feeds, capture)
        return inputs

    def _run_wrapped(self, feeds: Mapping[str, np.ndarray], wrap: Callable[[int, Callable, list], object]) -> None:
        """One run of the plan with each kernel's call made through `wrap(step, call, args)` (lanes too)."""
        def wrapped(op: _Op) -> _Op:
            call = op.run
            return replace(op, run=lambda args: wrap(op.step, call, args))

        program = [wrapped(u) if isinstance(u, _Op) else
                   replace(u, lanes=tuple(tuple(wrapped(op) for op in lane) for lane in u.lanes))
                   for u in self._program]
        self._execute(self._check_feeds(feeds), program)

    def alone_times(self, inputs: Sequence[Sequence[np.ndarray]],
                    before: Callable[[], object] | None = None) -> list[float]:
        """Each step's kernel timed on its own, on its `inputs` (from `step_inputs`), in plan order, as
        the profiler times kernels: after `before()` (a cache sweep) if given, else on its second call
        in a row: seconds by plan step. Timed in turn with `step_times`, this says how much of a step's
        time in the plan is the plan's doing and how much the machine's speed at that moment."""
        times = []
        with pinned(self._caller_cpu):
            for kernel, args in zip(self.kernels, inputs):
                if before is not None:
                    before()
                else:
                    kernel.run(list(args))
                t0 = time.perf_counter()
                kernel.run(list(args))
                times.append(time.perf_counter() - t0)
        return times

    def _execute(self, env: dict[str, np.ndarray], program: Sequence[_Op | _Fork]) -> dict[str, np.ndarray]:
        with pinned(self._caller_cpu):
            for unit in program:
                if isinstance(unit, _Op):
                    self._call(env, unit)
                else:
                    self._fork(env, unit)
                for name in unit.free:
                    del env[name]
        return env

    def _call(self, env: dict[str, np.ndarray], op: _Op) -> None:
        try:
            results = op.run([env[i] for i in op.inputs])   # type: ignore[operator]
        except Exception as e:
            raise KernelRunError(self._failure(op.step, e)) from e
        for name, value in zip(op.outputs, results):
            env[name] = value

    def _fork(self, env: dict[str, np.ndarray], fork: _Fork) -> None:
        """The stage's lanes side by side (each writes only its own steps' outputs into `env`)."""
        assert self._lanes is not None

        def lane(ops: tuple[_Op, ...]) -> None:
            for op in ops:
                self._call(env, op)

        self._lanes.run([functools.partial(lane, ops) for ops in fork.lanes])

    def _failure(self, k: int, error: Exception) -> str:
        step = self.plan.steps[k]
        nodes = step_onnx_nodes(self.plan.graph, step)
        shown = ", ".join(repr(n) for n in nodes[:_NAMED_ONNX_NODES])
        if len(nodes) > _NAMED_ONNX_NODES:
            shown += f", ... ({len(nodes)} in all)"
        detail = str(error).strip().splitlines()
        return (f"step {k + 1} of {len(self.plan.steps)}, the {step.backend} kernel of ONNX nodes [{shown}], "
                f"failed: {type(error).__name__}: {detail[0] if detail else ''}")


def load(plan_dir: str | os.PathLike, check_origin: bool = True) -> Session:
    """Load a saved plan and compile its kernels. Refuses plans from another korch version or machine.
    A bucketed plan (korch/plan/buckets.py) gives a BucketSession, which runs the same way."""
    from korch import __version__
    from korch.plan.buckets import is_bucketed
    from korch.profile.database import machine_fingerprint

    if is_bucketed(plan_dir):
        from korch.runtime.buckets import load_bucketed_session

        return load_bucketed_session(plan_dir, check_origin)  # type: ignore[return-value]

    plan = load_plan(plan_dir, __version__, machine_fingerprint(), check_origin=check_origin)
    return compile_plan(plan)
