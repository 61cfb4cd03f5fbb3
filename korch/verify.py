"""Compare a primitive graph with onnxruntime on fresh random inputs."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass

import numpy as np
import onnx

from korch.backends.reference import run_graph
from korch.heap import blocks_returned
from korch.ir.graph import Graph
from korch.ir.types import DType

# fp32 target: max |korch - onnxruntime| over max |onnxruntime|, per output.
DEFAULT_RTOL = 1e-4
# Integer inputs that feed no gather get values in [0, this): small, valid for masks and ids.
DEFAULT_INT_HIGH = 2


def integer_input_bounds(graph: Graph) -> dict[str, int]:
    """For integer inputs used as gather indices: the exclusive bound that keeps them in range."""
    bounds: dict[str, int] = {}
    for node in graph.nodes:
        if node.op != "gather":
            continue
        source = node.inputs[1]
        while source in graph.producers and graph.producers[source].op in ("reshape", "cast", "expand", "transpose"):
            source = graph.producers[source].inputs[0]
        if source in graph.inputs:
            dim = graph.types[node.inputs[0]].shape[node.attrs["axis"]]
            bounds[source] = min(bounds.get(source, dim), dim)
    return bounds


def random_feeds(graph: Graph, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    bounds = integer_input_bounds(graph)
    feeds = {}
    for name in graph.inputs:
        t = graph.types[name]
        if t.dtype.is_float:
            feeds[name] = rng.standard_normal(t.shape).astype(t.dtype.numpy)
        elif t.dtype == DType.BOOL:
            feeds[name] = rng.random(t.shape) < 0.5
        else:
            feeds[name] = rng.integers(0, bounds.get(name, DEFAULT_INT_HIGH), t.shape).astype(t.dtype.numpy)
    return feeds


def onnxruntime_runner(model: onnx.ModelProto | str | os.PathLike, threads: int = 0,
                       shared: Mapping[str, np.ndarray] | None = None,
                       ) -> Callable[[Mapping[str, np.ndarray]], dict[str, np.ndarray]]:
    """One onnxruntime session over `model` (a ModelProto, or an ONNX file onnxruntime reads itself),
    as a function feeds -> {output name: array}. `shared`: the data of the model's stand-in
    initializers, by name (OnnxSource.arrays)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.log_severity_level = 3
    if shared:
        from korch.backends.onnxruntime import add_shared_initializers

        add_shared_initializers(options, shared)
    # (a file is read by onnxruntime: no ModelProto in Python, nor its serialized copy)
    data = str(model) if isinstance(model, (str, os.PathLike)) else model.SerializeToString()
    session = ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    wanted = {i.name for i in session.get_inputs()}

    def run(feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        return dict(zip(names, session.run(names, {k: v for k, v in feeds.items() if k in wanted})))

    return run


def run_onnxruntime(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray], threads: int = 0,
                    shared: Mapping[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    return onnxruntime_runner(model, threads, shared)(feeds)


@dataclass(frozen=True)
class OutputDiff:
    name: str
    max_abs: float
    scale: float          # max |expected|; the error is relative to this
    # Set when the values cannot be compared at all: shapes that differ (possible when an output's
    # shape depends on the data, as NonMaxSuppression's does); max_abs is then infinite.
    mismatch: str = ""

    @property
    def rel(self) -> float:
        return self.max_abs / self.scale if self.scale > 0 else self.max_abs


@dataclass(frozen=True)
class VerifyReport:
    seed: int
    outputs: tuple[OutputDiff, ...]
    rtol: float

    @property
    def max_rel(self) -> float:
        return max((o.rel for o in self.outputs), default=0.0)

    @property
    def ok(self) -> bool:
        return self.max_rel <= self.rtol

    def summary(self) -> str:
        worst = max(self.outputs, key=lambda o: o.rel, default=None)
        where = f" (output {worst.name!r}, scale {worst.scale:.3g})" if worst else ""
        if worst is not None and worst.mismatch:
            where = f" (output {worst.name!r}: {worst.mismatch})"
        verdict = "OK" if self.ok else "FAILED"
        return f"max relative error vs onnxruntime {self.max_rel:.2e}{where}, tolerance {self.rtol:.0e}: {verdict}"


def _sentinel_bound(dtype: np.dtype) -> float:
    """Magnitudes from here up are mask sentinels (the dtype's lowest value, or past it), not data."""
    return float(np.finfo(dtype).max) / 2 if np.issubdtype(dtype, np.floating) else np.inf


def diff_outputs(actual: Mapping[str, np.ndarray], expected: Mapping[str, np.ndarray]) -> tuple[OutputDiff, ...]:
    """Per expected output: the largest absolute error and the scale it is relative to.

    IEEE semantics: NaN matches NaN and an infinity matches the same infinity (a masked attention
    score of -inf is right when both sides say -inf); a NaN or infinity on one side only, or of the
    opposite sign, is an infinite error. Values of at least half the dtype's largest magnitude are
    mask sentinels (attention masks of the dtype's lowest value, which fp32 arithmetic may push to
    -inf): they match any sentinel or infinity of the same sign. The scale is the largest |expected|
    over the other entries, so a -inf or a -3.4e38 in a mask neither hides nor inflates the error of
    the real scores. A shape mismatch is an infinite error.
    """
    diffs = []
    for name, want in expected.items():
        got = np.asarray(actual[name])
        want = np.asarray(want)
        if got.shape != want.shape:
            mismatch = f"shape {got.shape}, expected {want.shape}"
            diffs.append(OutputDiff(name, float("inf"), 1.0, mismatch))
            continue
        if want.size == 0:
            diffs.append(OutputDiff(name, 0.0, 0.0))
            continue
        bound = _sentinel_bound(want.dtype)
        if np.issubdtype(want.dtype, np.floating) and got.dtype == want.dtype:
            want_abs = np.abs(want)
            if want_abs.max() < bound and np.abs(got).max() < bound:     # NaN fails both: not this path
                # no specials: one pass in the output's own precision (a difference of close values is exact)
                diffs.append(OutputDiff(name, float(np.abs(got - want).max()), float(want_abs.max())))
                continue
        want64, got64 = want.astype(np.float64), got.astype(np.float64)
        with np.errstate(invalid="ignore"):
            want_big, got_big = np.abs(want64) >= bound, np.abs(got64) >= bound     # inf included, NaN not
            ordinary = ~(want_big | got_big | np.isnan(want64) | np.isnan(got64))
            matched = ((np.isnan(want64) & np.isnan(got64))
                       | (want_big & got_big & (np.sign(want64) == np.sign(got64))))
        if not np.all(ordinary | matched):
            max_abs = float("inf")
        else:
            max_abs = float(np.abs(got64[ordinary] - want64[ordinary]).max(initial=0.0))
        data = np.abs(want64[~want_big & ~np.isnan(want64)])
        diffs.append(OutputDiff(name, max_abs, float(data.max(initial=0.0))))
    return tuple(diffs)


def verify_graph(model: onnx.ModelProto, graph: Graph, seed: int = 0, rtol: float = DEFAULT_RTOL) -> VerifyReport:
    """Run the ONNX model in onnxruntime and the primitive graph in the reference backend on the same
    random inputs (seeded), and report the error of each output relative to its scale."""
    feeds = random_feeds(graph, seed)
    expected = run_onnxruntime(model, feeds)
    actual = run_graph(graph, feeds)
    return VerifyReport(seed, diff_outputs(actual, expected), rtol)


def fp32_errors(model: onnx.ModelProto, graph: Graph, feeds: Mapping[str, np.ndarray],
                expected: Mapping[str, np.ndarray] | None = None,
                shared: Mapping[str, np.ndarray] | None = None) -> dict[str, float]:
    """Per output, onnxruntime's own error against korch's float64-accumulating reference: how far
    fp32 rounding alone takes a good engine from exact on this model and these inputs.
    `expected`: onnxruntime's outputs when the caller already has them. `shared`: as onnxruntime_runner's."""
    expected = run_onnxruntime(model, feeds, shared=shared) if expected is None else expected
    return {d.name: d.rel for d in diff_outputs(expected, run_graph(graph, feeds))}


@dataclass(frozen=True)
class OutputCheck:
    """One output of one random input, and the error it was judged by.

    An output within the policy's rtol of onnxruntime passes. One that is not is judged against the
    float64 reference instead, within the tolerance that onnxruntime's own error against that
    reference earns (AccuracyPolicy.tolerance): kernels are accepted by their error against that
    reference, and where onnxruntime is e from exact, a plan as accurate as onnxruntime can be up to
    2e from onnxruntime, so onnxruntime cannot arbitrate errors of that size."""

    seed: int
    diff: OutputDiff                     # the plan against onnxruntime
    tolerance: float                     # rtol (against onnxruntime), or what fp32_error earns (against the reference)
    fp32_error: float | None = None      # onnxruntime against the reference, when the tolerance needed it
    exact_error: float | None = None     # the plan against the reference, when it was judged by it

    @property
    def error(self) -> float:
        """The error this output was judged by."""
        return self.exact_error if self.exact_error is not None else self.diff.rel

    @property
    def ok(self) -> bool:
        return self.error <= self.tolerance


@dataclass(frozen=True)
class PlanCheck:
    """A plan run on several fresh random inputs and compared with onnxruntime (and, where onnxruntime's
    own fp32 error is too large to judge by, with the float64 reference), output by output."""

    checks: tuple[OutputCheck, ...]

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    @property
    def max_rel(self) -> float:
        return max((c.diff.rel for c in self.checks), default=0.0)

    @property
    def tolerance(self) -> float:
        """The tolerance of the output that came closest to (or past) its own."""
        worst = self._worst()
        return worst.tolerance if worst else 0.0

    def _worst(self) -> OutputCheck | None:
        return max(self.checks, key=lambda c: c.error / c.tolerance if c.tolerance > 0 else c.error, default=None)

    def worst(self) -> str:
        """The output that came closest to (or past) its tolerance, in a few words."""
        worst = self._worst()
        if worst is None:
            return "no outputs checked"
        if worst.diff.mismatch:
            what = worst.diff.mismatch
        elif worst.exact_error is not None:
            what = (f"{worst.diff.rel:.2e} from onnxruntime, {worst.exact_error:.2e} from the float64 reference "
                    f"against tolerance {worst.tolerance:.2e}")
        else:
            what = f"{worst.diff.rel:.2e} against tolerance {worst.tolerance:.2e}"
        floor = (f"; onnxruntime itself is {worst.fp32_error:.2e} from the float64 reference"
                 if worst.fp32_error is not None else "")
        return f"output {worst.diff.name!r}: {what}{floor}"

    def to_json(self) -> list[dict]:
        return [asdict(c) for c in self.checks]

    @classmethod
    def from_json(cls, rows: Sequence[Mapping]) -> PlanCheck:
        """Inverse of to_json; KeyError/TypeError/ValueError on anything else."""
        return cls(tuple(OutputCheck(int(r["seed"]), OutputDiff(**r["diff"]), float(r["tolerance"]),
                                     r.get("fp32_error"), r.get("exact_error")) for r in rows))

    def summary(self) -> str:
        if not self.checks:
            return "no outputs checked"
        seeds = sorted({c.seed for c in self.checks})
        return (f"max relative error vs onnxruntime {self.max_rel:.2e} over {len(seeds)} random inputs, "
                f"worst {self.worst()}: {'OK' if self.ok else 'FAILED'}")


class PlanChecker:
    """Checks plans of one model on the same fresh random inputs (one per seed): onnxruntime's outputs
    are computed once per input, the float64 reference's only for inputs where some plan misses
    `rtol`, so several contending plans cost one onnxruntime session between them.

    Per output, a plan passes within `rtol` of onnxruntime; an output that is not is judged by its
    error against the float64 reference, within `tolerance(e)` where e is onnxruntime's own error
    against that reference on those inputs (OutputCheck)."""

    def __init__(self, graph: Graph, model: onnx.ModelProto | str | os.PathLike | Callable[[], onnx.ModelProto],
                 seeds: Sequence[int], rtol: float, tolerance: Callable[[float], float],
                 shared: Mapping[str, np.ndarray] | None = None) -> None:
        """`model`: the model onnxruntime runs, its ONNX file (read by onnxruntime when a plan is first
        checked), or a function reading it, called only then (a model read from a file is then not held
        through profiling). `shared`: the data of the model's stand-in initializers (OnnxSource.arrays)."""
        self.graph, self.model, self.seeds, self.rtol, self.tolerance = graph, model, tuple(seeds), rtol, tolerance
        self.shared = shared
        self._feeds: dict[int, dict[str, np.ndarray]] = {}
        self._expected: dict[int, dict[str, np.ndarray]] = {}
        self._exact: dict[int, dict[str, np.ndarray]] = {}

    def feeds(self, seed: int) -> dict[str, np.ndarray]:
        if seed not in self._feeds:
            self._feeds[seed] = random_feeds(self.graph, seed)
        return self._feeds[seed]

    def expected(self, seed: int) -> dict[str, np.ndarray]:
        if seed not in self._expected:
            # Every seed's outputs in one go, and the session goes with this call: kept for later
            # plans, a whole-model session held the model's weights again (and its packed copies)
            # through all of measured selection, when optimize's memory peaks.
            with blocks_returned():     # its copies of the weights given back: not the next plan's floor
                run = onnxruntime_runner(self.model() if callable(self.model) else self.model, shared=self.shared)
                for s in dict.fromkeys((*self.seeds, seed)):
                    if s not in self._expected:
                        self._expected[s] = run(self.feeds(s))
                del run
        return self._expected[seed]

    def exact(self, seed: int) -> dict[str, np.ndarray]:
        if seed not in self._exact:
            self._exact[seed] = run_graph(self.graph, self.feeds(seed))
        return self._exact[seed]

    def __call__(self, run: Callable[[Mapping[str, np.ndarray]], Mapping[str, np.ndarray]]) -> PlanCheck:
        """Check `run(feeds) -> {output name: array}` on every seed's inputs."""
        checks: list[OutputCheck] = []
        for seed in self.seeds:
            checks += judge_outputs(seed, run(self.feeds(seed)), self.expected(seed),
                                    lambda seed=seed: self.exact(seed), self.rtol, self.tolerance)
        return PlanCheck(tuple(checks))


def judge_outputs(seed: int, actual: Mapping[str, np.ndarray], expected: Mapping[str, np.ndarray],
                  exact: Callable[[], Mapping[str, np.ndarray]], rtol: float,
                  tolerance: Callable[[float], float]) -> list[OutputCheck]:
    """One input's outputs under the accuracy policy (OutputCheck): within `rtol` of onnxruntime's
    `expected`, else judged against the float64 reference `exact()` (called only then)."""
    diffs = diff_outputs(actual, expected)
    if all(d.rel <= rtol for d in diffs):
        return [OutputCheck(seed, d, rtol) for d in diffs]
    reference = exact()
    floors = {d.name: d.rel for d in diff_outputs(expected, reference)}
    errors = {d.name: d.rel for d in diff_outputs(actual, reference)}
    return [OutputCheck(seed, d, rtol) if d.rel <= rtol else
            OutputCheck(seed, d, tolerance(floors[d.name]), floors[d.name], errors[d.name]) for d in diffs]
