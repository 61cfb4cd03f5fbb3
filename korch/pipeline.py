"""The korch pipeline, one named stage per step. Stages beyond fission arrive with orchestration."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import onnx

from korch.errors import ModelLoadError
from korch.frontend import fission_graph, load_model
from korch.ir.graph import Graph
from korch.verify import VerifyReport, verify_graph

log = logging.getLogger("korch.pipeline")


@dataclass(frozen=True)
class FissionResult:
    model: onnx.ModelProto          # the checked, shape-fixed ONNX model
    graph: Graph                    # its primitive graph
    load_seconds: float
    fission_seconds: float
    verify: VerifyReport | None = None


def resolve_model(spec: str | os.PathLike | onnx.ModelProto) -> str | os.PathLike | onnx.ModelProto:
    """A ModelProto, an existing file, or the name of a zoo model (built on the spot)."""
    if isinstance(spec, onnx.ModelProto) or Path(spec).exists():
        return spec
    from korch import zoo

    names = [m.name for m in zoo.list_models()]
    if str(spec) in names:
        log.info("building zoo model %s", spec)
        return zoo.to_model_proto(str(spec))
    raise ModelLoadError(f"{spec}: no such file, and not a zoo model (zoo: {', '.join(names)})")


def run_fission(source: str | os.PathLike | onnx.ModelProto, input_shapes: Mapping[str, Sequence[int]] | None = None,
                verify: bool = False, seed: int = 0) -> FissionResult:
    t0 = time.perf_counter()
    model = load_model(resolve_model(source), input_shapes)
    t1 = time.perf_counter()
    graph = fission_graph(model)
    t2 = time.perf_counter()
    report = verify_graph(model, graph, seed=seed) if verify else None
    return FissionResult(model, graph, t1 - t0, t2 - t1, report)
