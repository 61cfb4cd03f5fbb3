"""The report's data: one JSON-ready dict with the drawing, the kernels, what they beat, and the stats."""

from __future__ import annotations

import json
import logging
import math
from collections import Counter
from pathlib import Path
from typing import Any

from korch.candidates import Candidate
from korch.ir.text import attrs_text
from korch.report.alternatives import Outcome, ProfileIndex
from korch.report.facts import PlanFacts, kernel_class
from korch.report.layout import Layout

log = logging.getLogger("korch.report")

# Candidates shown per kernel in the page ("the candidates it beat"); the rest are counted by outcome.
RIVALS_PER_KERNEL = 12
BENCH_FILE = "bench.json"
# Primitive ops listed per candidate row; longer candidates end with "+N".
OPS_SHOWN = 8


def _num(value: Any) -> Any:
    """JSON has no NaN or infinity: such numbers become null (inside mappings too)."""
    if isinstance(value, dict):
        return {k: _num(v) for k, v in value.items()}
    return None if isinstance(value, float) and not math.isfinite(value) else value


def _rivals(facts: PlanFacts, index: ProfileIndex, nodes: tuple[int, ...]) -> tuple[list[dict], dict[str, int]]:
    rivals = [r for r in index.rivals(nodes) if r.outcome is not Outcome.CHOSEN or r.candidate.nodes != nodes]
    counts = Counter(r.outcome.value for r in rivals)
    shown = [r for r in rivals if r.outcome not in (Outcome.UNMEASURED, Outcome.CHOSEN)][:RIVALS_PER_KERNEL]
    rows = [{"nodes": list(r.candidate.nodes), "ops": _ops(facts, r.candidate), "size": r.candidate.size,
             "backend": r.backend, "ms": None if r.cost_s is None else r.cost_s * 1e3, "outcome": r.outcome.value,
             "reason": r.reason} for r in shown]
    return rows, dict(counts)


def _ops(facts: PlanFacts, candidate: Candidate) -> list[str]:
    ops = [facts.graph.nodes[i].op for i in candidate.nodes]
    if getattr(candidate, "onnx_nodes", ()):
        return [f"region: {len(candidate.onnx_nodes)} ONNX nodes"]
    return ops[:OPS_SHOWN] + ([f"+{len(ops) - OPS_SHOWN}"] if len(ops) > OPS_SHOWN else [])


def _kernels(facts: PlanFacts, index: ProfileIndex | None) -> list[dict]:
    out = []
    for k in facts.kernels:
        nodes = [facts.graph.nodes[i] for i in k.nodes]
        entry: dict[str, Any] = {
            "id": k.id, "backend": k.backend, "label": k.label, "ms": k.cost_s * 1e3, "nodes": list(k.nodes),
            "inputs": list(k.step.inputs), "outputs": list(k.step.outputs), "origins": list(facts.origins(k.nodes)),
            "cls": kernel_class(nodes).value if nodes else "", "key": k.step.key, "region": len(k.onnx_nodes),
        }
        if index is not None:
            entry["rivals"], entry["rival_counts"] = _rivals(facts, index, k.nodes)
        out.append(entry)
    return out


def _breakdowns(facts: PlanFacts) -> dict[str, Any]:
    by_backend: dict[str, dict[str, float]] = {}
    by_class: dict[str, dict[str, float]] = {}
    for k in facts.kernels:
        b = by_backend.setdefault(k.label, {"ms": 0.0, "kernels": 0})
        b["ms"] += k.cost_s * 1e3
        b["kernels"] += 1
        nodes = [facts.graph.nodes[i] for i in k.nodes]
        if nodes:
            c = by_class.setdefault(kernel_class(nodes).value, {"ms": 0.0, "kernels": 0, "primitives": 0})
            c["ms"] += k.cost_s * 1e3
            c["kernels"] += 1
    for cls, n in facts.graph.class_counts().items():
        by_class.setdefault(cls.value, {"ms": 0.0, "kernels": 0, "primitives": 0})["primitives"] = n
    return {"backend": by_backend, "class": by_class}


def read_bench(directory: Path) -> dict[str, Any] | None:
    path = directory / BENCH_FILE
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
        return data if isinstance(data.get("systems"), dict) else None
    except (OSError, ValueError) as e:
        log.warning("%s: cannot read (%s); the benchmark is not shown", path, e)
        return None


def _primitive(facts: PlanFacts, k: int) -> list[Any]:
    n = facts.graph.nodes[k]
    consts = [f"{v}: {facts.graph.types[v]}" for v in n.inputs if v in facts.graph.constants]
    return [n.op, n.output, str(facts.graph.types[n.output]), n.origin, n.klass.value,
            list(facts.kernels_of[k]), [v for v in n.inputs if v not in facts.graph.constants], consts,
            attrs_text(n)]


def _schedule(facts: PlanFacts) -> dict[str, Any] | None:
    """The plan's schedule as lanes over time (facts.timeline), in ms; None without one."""
    schedule = facts.plan.schedule
    if schedule is None:
        return None
    slots = [[x.stage, x.lane, x.start_s * 1e3, x.seconds * 1e3, x.threads] for x in facts.slots]
    return {"lanes": schedule.lanes, "stages": len(schedule.stages), "concurrent": schedule.concurrent_steps,
            "slots": slots}


def build_payload(facts: PlanFacts, layout: Layout, index: ProfileIndex | None, db_note: str) -> dict[str, Any]:
    graph = facts.graph
    return {
        "title": graph.name or facts.path.name, "plan": str(facts.path), "machine": facts.plan.machine,
        "threads": facts.plan.threads, "version": facts.plan.korch_version,
        "inputs": list(graph.inputs), "outputs": list(graph.outputs),
        "prims": [_primitive(facts, k) for k in range(len(graph.nodes))],
        "primFields": ["op", "output", "type", "origin", "cls", "kernels", "inputs", "consts", "attrs"],
        "boxes": [[b.id, b.kind, b.label, round(b.x, 1), round(b.y, 1), b.w, b.h, b.ref] for b in layout.boxes],
        "edges": [[e.source, e.target, e.value, [round(c, 1) for p in e.points for c in p]] for e in layout.edges],
        "size": [layout.width, layout.height],
        "kernels": _kernels(facts, index),
        "recomputed": sorted(facts.recomputed),
        "totalMs": facts.total_s * 1e3,
        "breakdown": _breakdowns(facts),
        "summary": {k: _num(v) for k, v in facts.plan.summary.items()},
        "bench": read_bench(facts.path),
        "schedule": _schedule(facts),
        "db": db_note,
    }
