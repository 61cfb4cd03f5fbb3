"""Compare a primitive graph with onnxruntime on fresh random inputs."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import onnx

from korch.backends.reference import run_graph
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


def onnxruntime_runner(model: onnx.ModelProto, threads: int = 0) -> Callable[[Mapping[str, np.ndarray]], dict[str, np.ndarray]]:
    """One onnxruntime session over `model`, as a function feeds -> {output name: array}."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.log_severity_level = 3
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    wanted = {i.name for i in session.get_inputs()}

    def run(feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        return dict(zip(names, session.run(names, {k: v for k, v in feeds.items() if k in wanted})))

    return run


def run_onnxruntime(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray], threads: int = 0) -> dict[str, np.ndarray]:
    return onnxruntime_runner(model, threads)(feeds)


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
                expected: Mapping[str, np.ndarray] | None = None) -> dict[str, float]:
    """Per output, onnxruntime's own error against korch's float64-accumulating reference: how far
    fp32 rounding alone takes a good engine from exact on this model and these inputs.
    `expected`: onnxruntime's outputs when the caller already has them."""
    expected = run_onnxruntime(model, feeds) if expected is None else expected
    return {d.name: d.rel for d in diff_outputs(expected, run_graph(graph, feeds))}


@dataclass(frozen=True)
class OutputCheck:
    """One output of one random input: its error against onnxruntime and the tolerance it had."""

    seed: int
    diff: OutputDiff
    tolerance: float
    fp32_error: float | None = None      # onnxruntime vs the reference, when the tolerance needed it

    @property
    def ok(self) -> bool:
        return self.diff.rel <= self.tolerance


@dataclass(frozen=True)
class PlanCheck:
    """A plan run on several fresh random inputs and compared with onnxruntime, output by output."""

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
        return max(self.checks, key=lambda c: c.diff.rel / c.tolerance if c.tolerance > 0 else c.diff.rel,
                   default=None)

    def summary(self) -> str:
        worst = self._worst()
        if worst is None:
            return "no outputs checked"
        seeds = sorted({c.seed for c in self.checks})
        floor = (f"; onnxruntime itself is {worst.fp32_error:.2e} from the float64 reference"
                 if worst.fp32_error is not None else "")
        what = worst.diff.mismatch or f"{worst.diff.rel:.2e} against tolerance {worst.tolerance:.2e}"
        return (f"max relative error vs onnxruntime {self.max_rel:.2e} over {len(seeds)} random inputs, "
                f"worst output {worst.diff.name!r}: {what}{floor}: {'OK' if self.ok else 'FAILED'}")


def check_plan_outputs(run: Callable[[Mapping[str, np.ndarray]], Mapping[str, np.ndarray]], graph: Graph,
                       model: onnx.ModelProto, seeds: Sequence[int], rtol: float,
                       tolerance: Callable[[float], float]) -> PlanCheck:
    """Run `run(feeds) -> outputs` and onnxruntime on each seed's random inputs; per output, the error
    must be within `rtol`, or within `tolerance(e)` where e is onnxruntime's own error against the
    float64 reference on those inputs (computed only for inputs where some output misses `rtol`)."""
    checks: list[OutputCheck] = []
    reference = onnxruntime_runner(model)
    for seed in seeds:
        feeds = random_feeds(graph, seed)
        expected = reference(feeds)
        diffs = diff_outputs(run(feeds), expected)
        floors = fp32_errors(model, graph, feeds, expected) if any(d.rel > rtol for d in diffs) else None
        for d in diffs:
            floor = floors[d.name] if floors is not None else None
            checks.append(OutputCheck(seed, d, tolerance(floor) if floor is not None else rtol, floor))
    return PlanCheck(tuple(checks))
