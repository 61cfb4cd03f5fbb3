"""`korch diff`: what changed between two plans (kernels added, removed or moved to another backend; times).

Kernels are matched by the values their primitives compute (fission names values deterministically,
so two plans of one model share names); a kernel in both plans with the same primitives is the same
kernel, possibly on another backend or with another measured time.
"""

from __future__ import annotations

from dataclasses import dataclass

from korch.report.facts import Kernel, PlanFacts

# Summary entries compared side by side, with their display names.
SUMMARY_FIELDS = (("primitives", "primitives"), ("candidates", "candidates"), ("profiled_new", "profiled new"),
                  ("profiled_cached", "profiled cached"), ("solve_seconds", "solver s"), ("gap", "gap"),
                  ("max_rel_error", "check error"), ("optimize_seconds", "optimize s"))


@dataclass(frozen=True)
class KernelChange:
    kind: str                      # "added", "removed", "backend", "time"
    values: tuple[str, ...]        # the values its primitives compute
    before: Kernel | None
    after: Kernel | None


@dataclass(frozen=True)
class PlanDiff:
    a: PlanFacts
    b: PlanFacts
    same_graph: bool
    unchanged: int
    changes: tuple[KernelChange, ...]


def _signature(facts: PlanFacts, kernel: Kernel) -> tuple[str, ...]:
    return tuple(sorted(facts.graph.nodes[i].output for i in kernel.nodes))


def _same_graph(a: PlanFacts, b: PlanFacts) -> bool:
    return ([(n.op, n.inputs, n.output) for n in a.graph.nodes] == [(n.op, n.inputs, n.output) for n in b.graph.nodes]
            and a.graph.outputs == b.graph.outputs)


def diff_plans(a: PlanFacts, b: PlanFacts) -> PlanDiff:
    before = {_signature(a, k): k for k in a.kernels}
    after = {_signature(b, k): k for k in b.kernels}
    changes: list[KernelChange] = []
    unchanged = 0
    for sig, k in before.items():
        other = after.get(sig)
        if other is None:
            changes.append(KernelChange("removed", sig, k, None))
        elif other.backend != k.backend or other.is_region != k.is_region:
            changes.append(KernelChange("backend", sig, k, other))
        elif other.cost_s != k.cost_s:
            changes.append(KernelChange("time", sig, k, other))
        else:
            unchanged += 1
    changes += [KernelChange("added", sig, None, k) for sig, k in after.items() if sig not in before]
    return PlanDiff(a, b, _same_graph(a, b), unchanged, tuple(changes))


def _kernel(facts: PlanFacts, k: Kernel) -> str:
    ops = [facts.graph.nodes[i].op for i in k.nodes]
    shown = " ".join(ops[:5]) + (f" ... (+{len(ops) - 5})" if len(ops) > 5 else "")
    return f"{k.id} {k.label} {k.cost_s * 1e3:.4f} ms [{shown}]"


def _value(v: object) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return "-" if v is None else str(v)


def format_diff(d: PlanDiff) -> str:
    a, b = d.a, d.b
    total_a, total_b = a.total_s * 1e3, b.total_s * 1e3
    lines = [f"A {a.path}: {len(a.kernels)} kernels, predicted {total_a:.4f} ms, {_backends(a)}",
             f"B {b.path}: {len(b.kernels)} kernels, predicted {total_b:.4f} ms, {_backends(b)}",
             f"predicted time {total_b - total_a:+.4f} ms ({(total_b / total_a - 1) * 100 if total_a else 0:+.1f}%)"]
    if not d.same_graph:
        lines.append("note: the plans have different primitive graphs (another model or korch version); "
                     "kernels are matched by value names")
    lines.append(f"kernels: {d.unchanged} unchanged, " + ", ".join(
        f"{sum(c.kind == kind for c in d.changes)} {kind}" for kind in ("time", "backend", "removed", "added")))
    for c in sorted(d.changes, key=lambda c: ("removed", "added", "backend", "time").index(c.kind)):
        if c.kind == "removed":
            assert c.before is not None
            lines.append(f"  - {_kernel(a, c.before)}")
        elif c.kind == "added":
            assert c.after is not None
            lines.append(f"  + {_kernel(b, c.after)}")
        else:
            assert c.before is not None and c.after is not None
            delta = (c.after.cost_s - c.before.cost_s) * 1e3
            lines.append(f"  ~ {_kernel(a, c.before)} -> {c.after.id} {c.after.label} "
                         f"{c.after.cost_s * 1e3:.4f} ms ({delta:+.4f} ms)")
    rows = [(label, a.plan.summary.get(key), b.plan.summary.get(key)) for key, label in SUMMARY_FIELDS]
    rows.append(("side by side", _side_by_side(a), _side_by_side(b)))
    rows = [r for r in rows if r[1] is not None or r[2] is not None]
    if rows:
        lines.append("summary:")
        lines += [f"  {label:<16} {_value(x):>12} {_value(y):>12}" for label, x, y in rows]
    return "\n".join(lines)


def _side_by_side(facts: PlanFacts) -> int:
    """Kernels the plan's schedule runs beside another lane (0: one after another)."""
    return facts.plan.schedule.concurrent_steps if facts.plan.schedule is not None else 0


def _backends(facts: PlanFacts) -> str:
    return ", ".join(f"{name} {n}" for name, n in sorted(facts.plan.kernels_by_backend().items()))
