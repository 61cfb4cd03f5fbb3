"""Compare a primitive graph with onnxruntime on fresh random inputs."""

from __future__ import annotations

from collections.abc import Mapping
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


def run_onnxruntime(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray], threads: int = 0) -> dict[str, np.ndarray]:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.log_severity_level = 3
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    wanted = {i.name for i in session.get_inputs()}
    return dict(zip(names, session.run(names, {k: v for k, v in feeds.items() if k in wanted})))


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


def diff_outputs(actual: Mapping[str, np.ndarray], expected: Mapping[str, np.ndarray]) -> tuple[OutputDiff, ...]:
    diffs = []
    for name, want in expected.items():
        got = np.asarray(actual[name])
        if got.shape != want.shape:
            mismatch = f"shape {got.shape}, expected {want.shape}"
            diffs.append(OutputDiff(name, float("inf"), 1.0, mismatch))
            continue
        want64, got64 = want.astype(np.float64), got.astype(np.float64)
        if want64.size == 0:
            diffs.append(OutputDiff(name, 0.0, 0.0))
            continue
        both_nan = np.isnan(want64) & np.isnan(got64)
        err = np.where(both_nan, 0.0, np.abs(got64 - want64))
        diffs.append(OutputDiff(name, float(np.nan_to_num(err, nan=np.inf).max()), float(np.nanmax(np.abs(want64)))))
    return tuple(diffs)


def verify_graph(model: onnx.ModelProto, graph: Graph, seed: int = 0, rtol: float = DEFAULT_RTOL) -> VerifyReport:
    """Run the ONNX model in onnxruntime and the primitive graph in the reference backend on the same
    random inputs (seeded), and report the error of each output relative to its scale."""
    feeds = random_feeds(graph, seed)
    expected = run_onnxruntime(model, feeds)
    actual = run_graph(graph, feeds)
    return VerifyReport(seed, diff_outputs(actual, expected), rtol)
