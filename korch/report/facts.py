"""What a saved plan says about itself: kernels with ids, which kernels compute each primitive, recomputation.

Shared by the HTML report, `korch explain` and `korch diff`. Kernel ids are `k0`, `k1`, ... in
execution order. A step may run a region: whole original ONNX nodes given to an engine as they are.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from korch.ir.graph import Graph, Node
from korch.ir.ops import PrimClass
from korch.plan import Plan, Step, load_plan
from korch.plan.schedule import sequential

# When a kernel mixes primitive classes, its time is attributed to the costliest class it holds.
# Opaque ONNX nodes (an LSTM, a NonMaxSuppression) may cost anything: after linear, before the rest.
CLASS_WEIGHT_ORDER = (PrimClass.LINEAR, PrimClass.OPAQUE, PrimClass.REDUCE, PrimClass.ELEMENTWISE,
                      PrimClass.LAYOUT)


@dataclass(frozen=True)
class Kernel:
    """One plan step with an id and the primitives it computes."""

    id: str
    index: int
    step: Step
    nodes: tuple[int, ...]

    @property
    def backend(self) -> str:
        return self.step.backend

    @property
    def cost_s(self) -> float:
        return self.step.cost_s

    @property
    def onnx_nodes(self) -> tuple[str, ...]:
        return tuple(getattr(self.step, "onnx_nodes", ()))

    @property
    def is_region(self) -> bool:
        """Runs original ONNX nodes (a region) rather than korch's primitives."""
        return bool(self.onnx_nodes)

    @property
    def label(self) -> str:
        return f"{self.backend} (ONNX region)" if self.is_region else self.backend


@dataclass(frozen=True)
class PlanFacts:
    plan: Plan
    path: Path

    @property
    def graph(self) -> Graph:
        return self.plan.graph

    @cached_property
    def kernels(self) -> tuple[Kernel, ...]:
        return tuple(Kernel(f"k{k}", k, s, tuple(s.nodes)) for k, s in enumerate(self.plan.steps))

    @cached_property
    def kernels_of(self) -> tuple[tuple[int, ...], ...]:
        """For each primitive, the indices of the kernels that compute it (more than one: recomputed)."""
        owners: list[list[int]] = [[] for _ in self.graph.nodes]
        for kernel in self.kernels:
            for i in kernel.nodes:
                owners[i].append(kernel.index)
        return tuple(tuple(o) for o in owners)

    @cached_property
    def recomputed(self) -> frozenset[int]:
        return frozenset(i for i, owners in enumerate(self.kernels_of) if len(owners) > 1)

    @cached_property
    def node_index(self) -> dict[str, int]:
        return {n.output: k for k, n in enumerate(self.graph.nodes)}

    @property
    def total_s(self) -> float:
        return sum(k.cost_s for k in self.kernels)

    @cached_property
    def slots(self) -> tuple[Slot, ...]:
        """Each kernel's place in the schedule (`timeline`)."""
        return timeline(self.plan)

    def kernel(self, ident: str) -> Kernel | None:
        text = ident.strip().lower().removeprefix("k")
        if text.isdigit() and int(text) < len(self.kernels):
            return self.kernels[int(text)]
        return None

    def find_nodes(self, name: str) -> tuple[int, ...]:
        """Primitives whose output is `name`, or that came from the ONNX node `name`."""
        if name in self.node_index:
            return (self.node_index[name],)
        return tuple(k for k, n in enumerate(self.graph.nodes) if n.origin == name)

    def origins(self, nodes: tuple[int, ...]) -> tuple[str, ...]:
        return tuple(dict.fromkeys(self.graph.nodes[i].origin for i in nodes if self.graph.nodes[i].origin))


@dataclass(frozen=True)
class Slot:
    """Where a kernel runs in the plan's schedule: its lane within its stage, when it starts (from the
    in-plan times the schedule was built from, else profiles), for how long, on how many threads."""

    stage: int
    lane: int
    start_s: float
    seconds: float
    threads: int
    wide_s: float | None = None          # its in-plan time on all the plan's threads
    narrow_s: float | None = None        # ... and on a lane's (None: not measured, or no lane can run it)


def timeline(plan: Plan) -> tuple[Slot, ...]:
    """Each step's Slot, by plan step; a plan without a schedule is one lane, a step after another."""
    scheduled = plan.summary.get("schedule") if isinstance(plan.summary, dict) else None
    measured = scheduled.get("step_ms") if isinstance(scheduled, dict) else None
    times: list[tuple[float | None, float | None]] = [(None, None)] * len(plan.steps)
    if isinstance(measured, list) and len(measured) == len(plan.steps):
        times = [(w * 1e-3 if w else None, n * 1e-3 if n is not None else None) for w, n in measured]
    threads = plan.step_threads()

    def seconds(k: int) -> float:
        wide, narrow = times[k]
        own = narrow if threads[k] < plan.threads else wide
        return own if own is not None else plan.steps[k].cost_s

    stages = (plan.schedule or sequential(len(plan.steps), plan.threads)).stages
    slots: list[Slot | None] = [None] * len(plan.steps)
    t = 0.0
    for s, stage in enumerate(stages):
        end = t
        for j, lane in enumerate(stage):
            start = t
            for k in lane.steps:
                slots[k] = Slot(s, j, start, seconds(k), threads[k], *times[k])
                start += seconds(k)
            end = max(end, start)
        t = end
    return tuple(slot for slot in slots if slot is not None)


def kernel_class(nodes: list[Node]) -> PrimClass:
    """The class a kernel's time is attributed to: the first of CLASS_WEIGHT_ORDER it contains."""
    present = {n.klass for n in nodes}
    return next((c for c in CLASS_WEIGHT_ORDER if c in present), PrimClass.LAYOUT)


def load_facts(directory: str | os.PathLike) -> PlanFacts:
    """Load a plan for inspection: any korch version or machine is accepted (nothing is run)."""
    from korch import __version__
    from korch.profile.database import machine_fingerprint

    return PlanFacts(load_plan(directory, __version__, machine_fingerprint(), check_origin=False), Path(directory))
