"""A plan: the primitive graph, the chosen kernels (steps) in topological order, and how it was made.

On disk a plan is a directory: plan.json (steps, settings, summary), the primitive graph
(graph.json + constants.npz), and, when a step runs original ONNX nodes (a region in onnxruntime),
original.onnx with the map from its values to the primitive graph's (value_map.json).
It is written to a temporary directory beside the target and renamed into place.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import onnx

from korch.errors import KorchError, OutputError
from korch.frontend.regions import OnnxSource
from korch.ir.graph import Graph
from korch.ir.serialize import load_graph, save_graph

PLAN_FORMAT = 2


class PlanError(KorchError):
    """A plan directory that is missing, damaged, or made by another korch version or machine."""


@dataclass(frozen=True)
class Step:
    backend: str
    nodes: tuple[int, ...]            # indices into the plan graph's nodes (topological order)
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    key: str
    cost_s: float
    onnx_nodes: tuple[str, ...] = ()  # a region run as these original ONNX nodes; () runs primitives


@dataclass(frozen=True)
class Plan:
    graph: Graph
    steps: tuple[Step, ...]
    threads: int
    machine: str
    korch_version: str
    source: OnnxSource | None = None          # the original model, when some step runs ONNX nodes
    summary: Mapping[str, Any] = field(default_factory=dict)

    def kernels_by_backend(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for s in self.steps:
            counts[s.backend] = counts.get(s.backend, 0) + 1
        return counts


def order_steps(steps: Iterable[Step], available: Iterable[str]) -> tuple[Step, ...]:
    """Topological order: a step runs once all its inputs exist. Ties keep the given order."""
    pending = list(steps)
    ready = set(available)
    ordered: list[Step] = []
    while pending:
        for k, step in enumerate(pending):
            if all(i in ready for i in step.inputs):
                ordered.append(pending.pop(k))
                ready.update(step.outputs)
                break
        else:
            missing = sorted({i for s in pending for i in s.inputs if i not in ready})
            raise PlanError(f"steps cannot be ordered: values {missing[:5]} are never produced")
    return tuple(ordered)


def save_plan(plan: Plan, directory: str | os.PathLike) -> Path:
    target = Path(directory)
    parent = target.parent
    if not parent.is_dir():
        raise OutputError(f"{target}: directory {parent} does not exist")
    if target.exists() and not (target / "plan.json").is_file():
        raise OutputError(f"{target}: exists and is not a korch plan; refusing to replace it")
    try:
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=parent))
    except OSError as e:
        raise OutputError(f"{target}: cannot write here ({e.strerror})") from None
    try:
        save_graph(plan.graph, tmp)
        if plan.source is not None:
            onnx.save(plan.source.model, tmp / "original.onnx")
            (tmp / "value_map.json").write_text(json.dumps(dict(plan.source.value_map)))
        meta = {"format": PLAN_FORMAT, "korch_version": plan.korch_version, "machine": plan.machine,
                "threads": plan.threads, "steps": [asdict(s) for s in plan.steps], "summary": dict(plan.summary)}
        (tmp / "plan.json").write_text(json.dumps(meta, indent=1))
        old = None
        if target.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{target.name}.old.", dir=parent))
            os.replace(target, old / "plan")
        os.replace(tmp, target)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except OSError as e:
        raise OutputError(f"{target}: cannot write the plan ({e.strerror or e})") from None
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def load_plan(directory: str | os.PathLike, korch_version: str, machine: str, check_origin: bool = True) -> Plan:
    path = Path(directory)
    meta_path = path / "plan.json"
    if not meta_path.is_file():
        raise PlanError(f"{path}: not a korch plan directory (no plan.json)")
    try:
        meta = json.loads(meta_path.read_text())
        graph = load_graph(path)
        source = None
        if (path / "original.onnx").exists():
            source = OnnxSource(onnx.load(str(path / "original.onnx")),
                                json.loads((path / "value_map.json").read_text()))
    except (OSError, ValueError, KeyError) as e:
        raise PlanError(f"{path}: damaged plan ({type(e).__name__}: {e})") from None
    if meta.get("format") != PLAN_FORMAT:
        raise PlanError(f"{path}: plan format {meta.get('format')} is not {PLAN_FORMAT}; re-run korch optimize")
    if check_origin and meta["korch_version"] != korch_version:
        raise PlanError(f"{path}: made by korch {meta['korch_version']}, this is {korch_version}; re-run korch optimize")
    if check_origin and meta["machine"] != machine:
        raise PlanError(f"{path}: made on another machine ({meta['machine']}); kernels were chosen by timings "
                        "there, so re-run korch optimize here")
    steps = tuple(Step(s["backend"], tuple(s["nodes"]), tuple(s["inputs"]), tuple(s["outputs"]), s["key"],
                       s["cost_s"], tuple(s["onnx_nodes"])) for s in meta["steps"])
    return Plan(graph, steps, meta["threads"], meta["machine"], meta["korch_version"], source, meta["summary"])
