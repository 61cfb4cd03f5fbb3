"""What a kernel boundary costs a running plan, calibrated on this machine, per engine pair and layout.

A kernel's profile is its time alone, called again and again on the same inputs. In a plan the same
kernel runs right after another one: its inputs were just written by another kernel (maybe another
engine, maybe out of cache), its thread pool was parked while that kernel ran, and the other engine's
pool may still be spinning on the cores. What the plan pays beyond the sum of its kernels' profiles
is the boundary cost, and it is measured, not assumed:

    a chain of `blocks` one-block kernels on a [1, 32, H, H] float tensor, run as a plan by korch's
    runtime, engines alternating producer, consumer, producer, ...;
    boundary(H) = (plan time - sum of each kernel timed alone, as the profiler times it) / (blocks - 1)

each timed as korch times kernels and plans (back-to-back calls after warm-up; kernels alone after a
cache sweep only if the profiler sweeps, ProfileSettings.cold_cache, off by default), in rounds of
rotating order. Two block kinds stand for
two layouts: `blocked` (a 1x1 Conv + Relu, which onnxruntime and OpenVINO run in their blocked
channel layouts, converting at every kernel edge) for 4-D tensors, and `plain` (Mul + Relu) for the
rest. Per (producer, consumer, layout) a least-squares line gives fixed seconds plus seconds per byte;
for two different engines the chain alternates, so the line is the mean of both directions.

Besides the hand-off, a kernel pays to start when the plan reaches it: its engine's run path, its
session's state and its code were evicted by the kernels before it, which the chains of tiny
identical kernels above never show (their whole plan stays in cache). On this project's VM an
onnxruntime kernel of Mul + Relu on 32 KiB took 34 us back to back and 152 us right after a 2-thread
onnxruntime kernel of 3.8 ms, with one thread as with two, so not a pool waking; a numpy add over
256 KiB 16 and 79 us (benchmarks/kernel_start.py, BENCHMARKS.md). Per engine:

    start = median over rounds of (a one-block kernel right after an onnxruntime kernel of a few ms
            (6 blocks of 1x1 Conv + Relu on 4.5 MiB, the plan's threads) - the same kernel back to back)

The start grows with what ran before: after 6 such blocks on 1.1 MiB (1.1 ms) that kernel started
25 us slower, after 24 of them (3.2 ms) 39 us, after 6 on 4.5 MiB (3.8 ms) 118 us. The last stands
for a zoo model's kernel (yolox-nano's early tensors are 2.7 MiB); measured selection
corrects it with each plan it times (korch/select/measured.py, the start cost).

The selection (korch/select/blp.py) adds, for every tensor a chosen kernel reads from another chosen
kernel, `cost(producer engine, consumer engine, tensor)`, and for every chosen kernel its engine's
`start`. Calibrations are stored per machine, threads and engine versions in the profile database
(one engine's start and same-engine lines under that engine, two engines' lines under the pair) and
made once, each engine's when an optimize first needs it (Boundaries).
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from korch.backends import get_backend
from korch.heap import keep_freed_blocks
from korch.ir.types import TensorType

if TYPE_CHECKING:
    import onnx

    from korch.backends.base import Kernel

log = logging.getLogger("korch.profile")

# Changes when the calibration procedure changes: stored calibrations of another procedure are redone.
PROCEDURE = "chain-v5-kernel-start"
BLOCKED, PLAIN = "blocked", "plain"
# A kernel's start cost is stored as a line (engine, engine, KERNEL_START), fixed seconds only.
KERNEL_START = "start"
LAYOUTS = (BLOCKED, PLAIN)
CHANNELS = 32
_OPSET = 17
# What a chain plan pays to hand its caller the last kernel's output, timed apart (measure_chain).
_OUTPUT_COPY = "output copy"


@dataclass(frozen=True)
class Line:
    """Seconds = fixed_s + s_per_byte * bytes, never below zero."""

    fixed_s: float
    s_per_byte: float

    def __call__(self, nbytes: int) -> float:
        return max(0.0, self.fixed_s + self.s_per_byte * nbytes)


@dataclass(frozen=True)
class CalibrationSettings:
    """Tensor sides H of the [1, 32, H, H] chains (32 KiB and 1.1 MiB by default: within and beyond
    a core's L2), blocks per chain, side-by-side rounds, and how long each timing of a plan or kernel
    runs back to back (after warm-up calls).

    Four rounds, not seven: over three calibrations at each (benchmarks/calibration_rounds.py, run
    twice), the fitted costs spread 1.35x and 0.83x as wide as with seven, 1.1x over both runs; what
    spreads them is a slow spell of the machine during one chain (OpenVINO's plain boundary: 34, 267
    and 34 us), which lasts through either count. Seven took 4-8 s more of a new machine's first
    optimize (BENCHMARKS.md)."""

    sides: tuple[int, ...] = (16, 96)
    blocks: int = 6
    rounds: int = 4
    measure_seconds: float = 0.03
    start_rounds: int = 40            # calls of each engine's kernel after the evicting kernel (measure_start)
    start_side: int = 192             # the evicting kernel's tensor side: [1, 32, 192, 192], 4.5 MiB


@dataclass(frozen=True)
class Sample:
    layout: str
    producer: str
    consumer: str
    nbytes: int
    boundary_s: float
    plan_s: float
    plan_p10_s: float
    plan_p90_s: float
    sum_alone_s: float


@dataclass(frozen=True)
class BoundaryModel:
    """Fitted boundary costs per (producer, consumer, layout); an unknown pair costs nothing (so the
    empty model prices every boundary at zero)."""

    lines: Mapping[tuple[str, str, str], Line] = field(default_factory=dict)

    def cost(self, producer: str, consumer: str, t: TensorType) -> float:
        layout = BLOCKED if len(t.shape) == 4 else PLAIN
        line = self.lines.get((producer, consumer, layout)) or self.lines.get((consumer, producer, layout))
        # A data-dependent size is unknown before the run: its fixed cost only.
        nbytes = t.nbytes if t.is_static else 0
        return 0.0 if line is None else line(nbytes)

    def start(self, engine: str) -> float:
        """What a kernel of `engine` pays to start inside a plan beyond its profile (module doc); 0.0
        if not calibrated."""
        line = self.lines.get((engine, engine, KERNEL_START))
        return 0.0 if line is None else max(0.0, line.fixed_s)

    def ensure(self, engines: Iterable[str]) -> bool:
        """A fixed model calibrates nothing (Boundaries.ensure): False."""
        return False

    def calibrated(self, engine: str) -> bool:
        """Whether `engine`'s costs are this model's to give (a fixed model: all it has, taken as final)."""
        return True


def versions(engines: Iterable[str], cold_cache: bool = False) -> str:
    """What a stored calibration is keyed by besides machine and threads: one engine's start and
    same-engine boundaries are stored under its own, a pair of engines' boundaries under the pair's."""
    timing = "cold-cache" if cold_cache else "hot"
    heap = f"heap-{keep_freed_blocks()}"        # sets the policy the boundaries are then timed under
    return "|".join([PROCEDURE, timing, heap] + [f"{e}={get_backend(e).version}" for e in sorted(engines)])


def chain_model(layout: str, blocks: int, side: int, seed: int = 0) -> onnx.ModelProto:
    """`blocks` blocks (Conv 1x1 + Relu for BLOCKED, Mul + Relu for PLAIN) on a [1, 32, side, side] tensor."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    nodes, inits = [], []
    x = "x"
    for b in range(blocks):
        if layout == BLOCKED:
            w = (rng.standard_normal((CHANNELS, CHANNELS, 1, 1)) / np.sqrt(CHANNELS)).astype(np.float32)
            inits.append(numpy_helper.from_array(w, f"w{b}"))
            nodes.append(helper.make_node("Conv", [x, f"w{b}"], [f"t{b}"], name=f"op{b}"))
        else:
            s = rng.uniform(0.5, 1.5, (1, CHANNELS, 1, 1)).astype(np.float32)
            inits.append(numpy_helper.from_array(s, f"s{b}"))
            nodes.append(helper.make_node("Mul", [x, f"s{b}"], [f"t{b}"], name=f"op{b}"))
        nodes.append(helper.make_node("Relu", [f"t{b}"], [f"y{b}"], name=f"relu{b}"))
        x = f"y{b}"
    shape = [1, CHANNELS, side, side]
    graph = helper.make_graph(nodes, f"{layout}_chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT, shape)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", _OPSET)])
    model.ir_version = 9
    return model


def chain_plan(model: onnx.ModelProto, engines: Sequence[str], threads: int):
    """A plan of one kernel per block (its ONNX nodes as a region for an ONNX engine, its primitives
    otherwise), the engines taken in turn."""
    from korch.candidates.candidate import boundary
    from korch.frontend.regions import OnnxSource
    from korch.pipeline import run_fission
    from korch.plan import Plan, Step, order_steps

    fissioned = run_fission(model)
    graph = fissioned.graph
    source = OnnxSource(fissioned.model, dict(fissioned.value_map or {}))
    by_block: dict[int, list[int]] = {}
    for i, node in enumerate(graph.nodes):
        by_block.setdefault(int("".join(ch for ch in node.origin if ch.isdigit())), []).append(i)
    steps = []
    for block, members in sorted(by_block.items()):
        nodes = tuple(sorted(members))
        inputs, outputs = boundary(graph, nodes)
        engine = engines[block % len(engines)]
        onnx_nodes = (f"op{block}", f"relu{block}") if get_backend(engine).accepts_onnx else ()
        steps.append(Step(engine, nodes, inputs, outputs, f"block{block}", 0.0, onnx_nodes))
    return Plan(graph, order_steps(steps, graph.inputs), threads, "calibration", "calibration", source)


def measure_chain(layout: str, producer: str, consumer: str, side: int, blocks: int, threads: int,
                  rounds: int, cold_cache: bool = False, measure_seconds: float = CalibrationSettings.measure_seconds,
                  kernels: dict[tuple[str, int, int, str], Kernel] | None = None) -> Sample:
    """One chain, timed as a plan and kernel by kernel (the same compiled kernels), each as korch times
    it (korch.profile.timing.measure: warm-up calls, then back-to-back calls for at least
    `measure_seconds`), in `rounds` rounds of rotating order; medians over the rounds. Turns of a few
    calls after a pause (side_by_side) would time thread pools waking, not kernels: an Inductor
    kernel read 0.7 ms alone that way and 0.1 ms inside the chain.

    `kernels`: compiled block kernels by (layout, side, block, engine), taken from and added to. A
    block's kernel is the same in every chain of its layout and side (its weights are seeded by its
    index, and a chain's kernels are all placed alike: runtime.plan_placement), so the chains of one
    calibration compile each once (Inductor 25 times, not 49)."""
    from korch.backends.placement import pinned
    from korch.profile.timing import CacheSweep, measure, summarize
    from korch.runtime.session import Session, compile_step, plan_placement

    sweep = CacheSweep() if cold_cache else None

    model = chain_model(layout, blocks, side)
    x = np.random.default_rng(1).standard_normal((1, CHANNELS, side, side)).astype(np.float32)
    plan = chain_plan(model, (producer, consumer), threads)
    compiled = {} if kernels is None else kernels
    steps = []
    for block, step in enumerate(plan.steps):
        key = (layout, side, block, step.backend)
        if key not in compiled:
            compiled[key] = compile_step(plan, step)
        steps.append(compiled[key])
    session = Session(plan, steps)
    fns: dict[str, Callable[[], object]] = {"plan": lambda: session.run(None, {"x": x})}
    value = x
    for step, kernel in zip(plan.steps, steps):
        inputs = [np.ascontiguousarray(value)]
        value = kernel.run(inputs)[0]
        # One kernel per engine timed alone on a fixed input, as profiled: the blocks differ only in weights.
        fns.setdefault(f"alone:{step.backend}", lambda k=kernel, i=inputs: k.run(i))
    if getattr(steps[-1], "reuses_outputs", False):
        # The plan hands its caller a copy of the last kernel's buffer (Session.run): a cost of
        # returning the output, not of a boundary, so it is timed alone too
        fns[_OUTPUT_COPY] = lambda v=value: v.copy()
    names = list(fns)
    samples: dict[str, list[float]] = {name: [] for name in names}
    where = plan_placement(plan)          # kernels alone with their threads placed as in the plan (and profiled)
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            alone = name.startswith("alone:")
            with pinned(where.caller if alone and where is not None else None):
                samples[name].append(measure(fns[name], min_seconds=measure_seconds,
                                             before=sweep if alone else None).median_s)
    timings = {name: summarize(values) for name, values in samples.items()}
    sum_alone = sum(timings[f"alone:{step.backend}"].median_s for step in plan.steps)
    if _OUTPUT_COPY in timings:
        sum_alone += timings[_OUTPUT_COPY].median_s
    p = timings["plan"]
    return Sample(layout, producer, consumer, x.nbytes, (p.median_s - sum_alone) / (blocks - 1), p.median_s,
                  p.p10_s, p.p90_s, sum_alone)


def plan_kernel(layout: str, blocks: int, side: int, engine: str, threads: int):
    """One kernel of `blocks` blocks of `chain_model(layout, ..., side)` on `engine`, compiled as a
    kernel of a plan of several (to run among others, its threads placed: runtime.compile_step), and
    that plan (its `plan_placement` is where to hold the caller)."""
    from korch.plan import Plan, Step
    from korch.runtime.session import compile_step

    plan = chain_plan(chain_model(layout, blocks + 1, side), (engine,), threads)
    first, last = plan.steps[:blocks], plan.steps[blocks]
    nodes = tuple(sorted(i for st in first for i in st.nodes))
    onnx_nodes = tuple(n for st in first for n in st.onnx_nodes)
    step = Step(engine, nodes, first[0].inputs, first[-1].outputs, f"{blocks} blocks", 0.0, onnx_nodes)
    plan = Plan(plan.graph, (step, last), threads, plan.machine, plan.korch_version, plan.source)
    return compile_step(plan, step), plan


def measure_start(engine: str, threads: int, rounds: int, side: int = CalibrationSettings.start_side) -> float:
    """A kernel's start cost on `engine` (module doc): seconds, the median over `rounds` of one call
    right after the evicting onnxruntime kernel less one call right after itself."""
    from korch.backends.placement import pinned
    from korch.runtime.session import plan_placement

    evictor, plan = plan_kernel(BLOCKED, 6, side, "onnxruntime", threads)
    small, _ = plan_kernel(PLAIN, 1, 16, engine, threads)
    big_x = [np.random.default_rng(2).standard_normal((1, CHANNELS, side, side)).astype(np.float32)]
    small_x = [np.random.default_rng(3).standard_normal((1, CHANNELS, 16, 16)).astype(np.float32)]
    where = plan_placement(plan)
    after_evictor, back_to_back = [], []
    with pinned(where.caller if where is not None else None):
        for _ in range(3):
            evictor.run(big_x)
            small.run(small_x)
        for _ in range(rounds):
            evictor.run(big_x)
            t0 = time.perf_counter()
            small.run(small_x)
            t1 = time.perf_counter()
            small.run(small_x)
            t2 = time.perf_counter()
            after_evictor.append(t1 - t0)
            back_to_back.append(t2 - t1)
    return float(np.median(np.array(after_evictor) - np.array(back_to_back)))


def fit(samples: Sequence[Sample]) -> Line:
    """Least squares over the samples of one (layout, pair): boundary = fixed + bytes * slope."""
    b = np.array([s.nbytes for s in samples], float)
    y = np.array([s.boundary_s for s in samples], float)
    if len(samples) == 1:
        return Line(float(y[0]), 0.0)
    (fixed, slope), *_ = np.linalg.lstsq(np.stack([np.ones_like(b), b], axis=1), y, rcond=None)
    return Line(float(fixed), float(slope))


def calibrate(engines: Sequence[str], threads: int, settings: CalibrationSettings = CalibrationSettings(),
              report: Callable[[Sample], None] | None = None,
              cold_cache: bool = False, progress: Callable[[int, int, str], None] | None = None,
              pairs: Iterable[tuple[str, str]] | None = None, starts: Iterable[str] | None = None,
              ) -> tuple[BoundaryModel, list[Sample]]:
    """Measure every engine pair (same-engine pairs included) at each size and layout, and fit; then
    each engine's kernel start (`measure_start`, as lines (engine, engine, KERNEL_START)). `pairs`
    (sorted (producer, consumer) pairs) and `starts` (engines): only those (default: all of `engines`').
    `cold_cache`: kernels alone are timed as the profiler times them (ProfileSettings.cold_cache).
    `progress(done, total, what)` is called before each chain is measured, as the profiler calls it."""
    samples: list[Sample] = []
    all_pairs = list(itertools.combinations_with_replacement(sorted(engines), 2))
    wanted = None if pairs is None else set(pairs)
    chosen = all_pairs if wanted is None else [pair for pair in all_pairs if pair in wanted]
    start_engines = sorted(engines) if starts is None else sorted(set(starts))
    chains = [(layout, producer, consumer, side) for layout in LAYOUTS for side in settings.sides
              for producer, consumer in chosen]
    total = len(chains) + len(start_engines)
    kernels: dict[tuple[str, int, int, str], Kernel] = {}     # of one layout and side at a time
    for done, (layout, producer, consumer, side) in enumerate(chains, 1):
        if progress is not None:
            progress(done, total, f"boundary {producer}->{consumer}")
        if any(key[:2] != (layout, side) for key in kernels):
            kernels.clear()
        s = measure_chain(layout, producer, consumer, side, settings.blocks, threads, settings.rounds,
                          cold_cache, settings.measure_seconds, kernels)
        samples.append(s)
        if report is not None:
            report(s)
    del kernels                       # the chains' kernels go before the starts' are compiled
    lines = {}
    for (layout, producer, consumer), group in itertools.groupby(
            sorted(samples, key=lambda s: (s.layout, s.producer, s.consumer)),
            key=lambda s: (s.layout, s.producer, s.consumer)):
        lines[(producer, consumer, layout)] = fit(list(group))
    for done, engine in enumerate(start_engines, len(chains) + 1):
        if progress is not None:
            progress(done, total, f"boundary start {engine}")
        start = measure_start(engine, threads, settings.start_rounds, settings.start_side)
        log.info("calibration: a %s kernel starts %.1f us slower in a plan than back to back", engine, start * 1e6)
        lines[(engine, engine, KERNEL_START)] = Line(start, 0.0)
    return BoundaryModel(lines), samples


class Boundaries:
    """A machine's boundary costs for the engines of one optimize, calibrated when first needed.

    `ensure(engines)` reads back from the profile database, or else measures and stores, each pair
    among the engines ensured so far and each one's kernel start. Calibrations are stored per engine
    pair (keyed by `versions` of its engines), so a machine calibrated for two engines calibrates only
    a third one's pairs when that one is first needed. An engine not ensured costs nothing (`cost`,
    `start`: BoundaryModel's unknown pair), which is a lower bound on what its boundaries cost: a
    solve over it may choose too much of that engine, never too little. So a solve that chooses none
    of its kernels, or costs too much to matter even so, needs no calibration; one that chooses some
    is solved again once it is calibrated (korch/profile/guided.py before a round measures them,
    korch/select/measured.py before a split plan is compiled). On the AMD host Inductor's pairs
    were 16 of the 22 s a new machine's calibration took (its 25 chain kernels compiled, its first
    compile in the process among them; benchmarks/calibration_time.py), and no zoo plan there has an
    Inductor split kernel.

    `ensure_starts(engines)` measures only each engine's kernel start (one kernel of the engine
    compiled), its pairs still free: a lower bound still (a crossing costs at least nothing), and
    a tighter one, since every kernel of the engine pays its start. `ensure_by_stages` takes that
    step first and the pairs only when a solve at the starts still wants the engine's kernels:
    Inductor's fused candidates at their floors are often ruled out by their starts alone
    (profile/guided.py profile_last)."""

    def __init__(self, db, threads: int, machine: str, settings: CalibrationSettings = CalibrationSettings(),
                 cold_cache: bool = False, progress: Callable[[int, int, str], None] | None = None) -> None:
        self._db, self._threads, self._machine = db, threads, machine
        self._settings, self._cold_cache, self._progress = settings, cold_cache, progress
        self.engines: tuple[str, ...] = ()
        self.lines: dict[tuple[str, str, str], Line] = {}
        self._now = BoundaryModel(self.lines)        # (the same dict: it prices what is ensured by now)
        self.seconds = 0.0            # spent in ensure: reading back, or measuring

    @property
    def model(self) -> BoundaryModel:
        """The costs of the engines ensured so far (a copy: later calibrations do not change it)."""
        return BoundaryModel(dict(self.lines))

    def cost(self, producer: str, consumer: str, t: TensorType) -> float:
        return self._now.cost(producer, consumer, t)

    def start(self, engine: str) -> float:
        return self._now.start(engine)

    def calibrated(self, engine: str) -> bool:
        """Whether `engine` was ensured (else its boundaries cost nothing here, a lower bound)."""
        return engine in self.engines

    def ensure(self, engines: Iterable[str]) -> bool:
        """Calibrate `engines` beside those ensured before (module doc): True if that changed the costs
        (an engine new to this optimize), False if all were ensured already."""
        return self._ensure_timed(sorted(set(engines) - set(self.engines)), with_pairs=True)

    def ensure_starts(self, engines: Iterable[str]) -> bool:
        """Each engine's kernel start, measured if not stored; its pairs stay free unless all of them
        are stored too (then it is calibrated, as by `ensure`). True if that changed the costs."""
        new = sorted(e for e in set(engines) - set(self.engines) if (e, e, KERNEL_START) not in self.lines)
        return self._ensure_timed(new, with_pairs=False)

    def ensure_by_stages(self, engines: Iterable[str]) -> bool:
        """`ensure_starts` where an engine has no start yet, else `ensure` (module doc). True if that
        changed the costs: a solve that chose the engines' kernels is then solved again."""
        engines = sorted(set(engines))
        return self.ensure_starts(engines) or self.ensure(engines)

    def _ensure_timed(self, new: Sequence[str], with_pairs: bool) -> bool:
        if not new:
            return False
        t0 = time.perf_counter()
        try:
            self._ensure(new, with_pairs)
        finally:
            self.seconds += time.perf_counter() - t0
        return True

    def _ensure(self, new: Sequence[str], with_pairs: bool) -> None:
        """Read back what is stored of the `new` engines' starts and pairs (with each other and those
        ensured so far), and measure what is missing: the starts, and the pairs too if `with_pairs`.
        An engine is calibrated once all its pairs are known."""
        everyone = sorted({*self.engines, *new})
        pairs = [(p, c) for p, c in itertools.combinations_with_replacement(everyone, 2) if p in new or c in new]
        missing_pairs, missing_starts = [], []
        for p, c in pairs:
            stored = _stored_lines(self._db, self._machine, self._threads, p, c, self._cold_cache)
            got = {k: v for k, v in stored.items() if k[2] in LAYOUTS}
            if len(got) == len(LAYOUTS):
                self.lines.update(got)
            else:
                missing_pairs.append((p, c))
        for e in new:
            stored = _stored_lines(self._db, self._machine, self._threads, e, e, self._cold_cache)
            if (line := stored.get((e, e, KERNEL_START))) is not None:
                self.lines[(e, e, KERNEL_START)] = line
            else:
                missing_starts.append(e)
        if with_pairs:
            calibrated = everyone
        else:                         # the starts alone: an engine whose pairs are all stored is calibrated
            calibrated = sorted({*self.engines, *(e for e in new if not any(e in pair for pair in missing_pairs))})
            missing_pairs = []
        if not missing_pairs and not missing_starts:
            self.engines = tuple(calibrated)
            return
        others = sorted(set(everyone) - set(new))
        if with_pairs:
            log.info("calibrating kernel-boundary costs of %s%s at %d threads (once per machine)", ", ".join(new),
                     f" (with {', '.join(others)})" if others else "", self._threads)
        else:
            log.info("calibrating the kernel start of %s at %d threads (once per machine; its boundaries with "
                     "other engines when a plan still wants its kernels)", ", ".join(missing_starts), self._threads)
        t0 = time.perf_counter()
        measured, _ = calibrate(everyone, self._threads, self._settings, cold_cache=self._cold_cache,
                                progress=self._progress, pairs=missing_pairs, starts=missing_starts)
        by_key: dict[str, dict[tuple[str, str, str], Line]] = {}
        for (p, c, layout), line in measured.lines.items():
            by_key.setdefault(versions({p, c}, self._cold_cache), {})[(p, c, layout)] = line
        for key, lines in by_key.items():
            self._db.put_boundaries(self._machine, self._threads, key, lines)
        self.lines.update(measured.lines)
        self.engines = tuple(calibrated)
        log.info("boundary calibration took %.0f s", time.perf_counter() - t0)


def _stored_lines(db, machine: str, threads: int, producer: str, consumer: str,
                  cold_cache: bool) -> dict[tuple[str, str, str], Line]:
    """The stored lines of one sorted engine pair (for an engine with itself, its start among them)."""
    stored = db.get_boundaries(machine, threads, versions({producer, consumer}, cold_cache)) or {}
    return {k: v for k, v in stored.items() if k[:2] == (producer, consumer)}


def stored_model(db, engines: Sequence[str], threads: int, machine: str, cold_cache: bool = False) -> BoundaryModel:
    """What the profile database holds of these engines' calibration, measuring nothing: each pair's
    lines and each engine's start that are stored (a missing one costs nothing)."""
    lines: dict[tuple[str, str, str], Line] = {}
    for p, c in itertools.combinations_with_replacement(sorted(engines), 2):
        lines.update(_stored_lines(db, machine, threads, p, c, cold_cache))
    return BoundaryModel(lines)


def boundary_model(db, engines: Sequence[str], threads: int, machine: str,
                   settings: CalibrationSettings = CalibrationSettings(), cold_cache: bool = False,
                   progress: Callable[[int, int, str], None] | None = None) -> BoundaryModel:
    """The stored calibration for these engines, threads and machine; what is missing of it measured
    and stored (Boundaries). `cold_cache`: as the profiles were timed (ProfileSettings.cold_cache);
    `progress`: see calibrate."""
    boundaries = Boundaries(db, threads, machine, settings, cold_cache, progress)
    boundaries.ensure(engines)
    return boundaries.model
