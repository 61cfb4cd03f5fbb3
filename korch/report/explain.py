"""`korch explain`: in the terminal, why a primitive ended up in its kernel, and what each kernel beat."""

from __future__ import annotations

import difflib
from collections import Counter

from korch.errors import UsageError
from korch.plan.schedule import narrow_threads
from korch.report.alternatives import Outcome, ProfileIndex, Rival
from korch.report.facts import Kernel, PlanFacts

# Rivals listed per primitive or kernel before "... N more"; the rest are summarised by outcome.
DEFAULT_LIMIT = 12


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.4f} ms"


def _ops(facts: PlanFacts, nodes: tuple[int, ...], limit: int = 6) -> str:
    ops = [facts.graph.nodes[i].op for i in nodes]
    return " ".join(ops[:limit]) + (f" ... (+{len(ops) - limit})" if len(ops) > limit else "")


def kernel_line(facts: PlanFacts, kernel: Kernel) -> str:
    where = ""
    if facts.plan.schedule is not None:           # its threads, and its lane where it runs beside others
        slot = facts.slots[kernel.index]
        lanes = len(facts.plan.schedule.stages[slot.stage])
        where = f" [{slot.threads}t" + (f", lane {slot.lane + 1}/{lanes}]" if lanes > 1 else "]")
    return (f"{kernel.id:<5} {kernel.label:<12} {_ms(kernel.cost_s):>12}  {len(kernel.nodes):>3} primitives: "
            f"{_ops(facts, kernel.nodes)}{where}")


def _rival_lines(facts: PlanFacts, rivals: list[Rival], limit: int) -> list[str]:
    """A table of candidates, with the costs on every backend, and the verdict per backend."""
    lines = []
    for r in rivals[:limit]:
        nodes = ",".join(map(str, r.candidate.nodes))
        mark = "*" if r.outcome is Outcome.CHOSEN else " "
        if getattr(r.candidate, "onnx_nodes", ()):
            first, last = r.candidate.nodes[0], r.candidate.nodes[-1]
            lines.append(f"  {mark} region of {len(r.candidate.onnx_nodes)} ONNX nodes, primitives {first}..{last}")
        else:
            lines.append(f"  {mark} [{nodes}] {_ops(facts, r.candidate.nodes, 4)}")
        lines.append(f"      {r.backend:<12} {_ms(r.cost_s):>12}  {r.reason}")
    hidden = rivals[limit:]
    if hidden:
        counts = Counter(r.outcome.value for r in hidden)
        lines.append(f"    ... {len(hidden)} more: " + ", ".join(f"{v} {k}" for k, v in sorted(counts.items()))
                     + " (--limit N shows more)")
    return lines


def explain_node(facts: PlanFacts, index: ProfileIndex, node: int, limit: int = DEFAULT_LIMIT) -> str:
    n = facts.graph.nodes[node]
    owners = [facts.kernels[k] for k in facts.kernels_of[node]]
    lines = [f"primitive #{node} {n.output} = {n.op}({', '.join(n.inputs)})  {facts.graph.types[n.output]}",
             f"  from ONNX node {n.origin or '-'}; class {n.klass.value}"]
    for k in owners:
        lines.append("  computed by " + kernel_line(facts, k))
    if len(owners) > 1:
        lines.append(f"  recomputed: {len(owners)} kernels compute it (cheaper than writing and reading it back)")
    lines += [f"  note: {note}" for note in index.notes]
    rivals = index.rivals((node,))
    measured = sum(r.outcome not in (Outcome.UNMEASURED,) for r in rivals)
    lines.append(f"  {len(index.by_node[node])} candidates contain it; {measured} (candidate, backend) pairs "
                 f"have a profile on {', '.join(index.backends)} (* = in the plan):")
    lines += _rival_lines(facts, [r for r in rivals if r.outcome is not Outcome.UNMEASURED], limit)
    unmeasured = Counter(r.backend for r in rivals if r.outcome is Outcome.UNMEASURED)
    if unmeasured:
        lines.append("    not profiled: " + ", ".join(f"{v} on {b}" for b, v in sorted(unmeasured.items()))
                     + f" ({rivals[-1].reason if rivals else ''})")
    return "\n".join(lines)


def explain_kernel(facts: PlanFacts, index: ProfileIndex, kernel: Kernel, limit: int = DEFAULT_LIMIT) -> str:
    lines = [kernel_line(facts, kernel)]
    if len(facts.kernels) == 1 and facts.plan.summary.get("why"):      # one engine runs the whole model
        lines.append(f"  why: {facts.plan.summary['why']}")
    lines += thread_lines(facts, kernel)
    lines += [f"  ONNX nodes: {', '.join(facts.origins(kernel.nodes)) or '-'}",
              f"  inputs {', '.join(kernel.step.inputs)} -> outputs {', '.join(kernel.step.outputs)}"]
    for i in kernel.nodes:
        n = facts.graph.nodes[i]
        again = " (recomputed)" if i in facts.recomputed else ""
        lines.append(f"    #{i:<4} {n.output} = {n.op}({', '.join(n.inputs)}){again}")
    if kernel.is_region:
        lines.append(f"  a region: {kernel.backend} runs its {len(kernel.onnx_nodes)} original ONNX nodes as they are")
    lines += [f"  note: {note}" for note in index.notes]
    rivals = [r for r in index.rivals(kernel.nodes) if r.outcome not in (Outcome.UNMEASURED,)]
    lines.append(f"  candidates it beat (sharing its primitives; {len(rivals)} measured):")
    lines += _rival_lines(facts, rivals, limit)
    return "\n".join(lines)


def thread_lines(facts: PlanFacts, kernel: Kernel) -> list[str]:
    """The thread count the schedule gave the kernel, beside which kernels it runs, and why."""
    plan, slot = facts.plan, facts.slots[kernel.index]
    if plan.schedule is None:
        return [f"  threads: all {plan.threads}, one kernel after another (no schedule: "
                f"{_schedule_why(facts) or 'the plan was not co-scheduled'})"] if len(facts.kernels) > 1 else []
    stage = plan.schedule.stages[slot.stage]
    beside = [facts.kernels[k].id for j, lane in enumerate(stage) if j != slot.lane for k in lane.steps]
    where = (f"lane {slot.lane + 1} of {len(stage)} in stage {slot.stage + 1}, beside {', '.join(beside)}"
             if beside else f"alone in stage {slot.stage + 1}")
    lines = [f"  threads: {slot.threads} of {plan.threads}, {where}"]
    if slot.wide_s is not None:
        narrow = f", on {narrow_threads(plan.threads)}: {_ms(slot.narrow_s)}" if slot.narrow_s is not None else \
            " (its engine runs in no lane)"
        lines.append(f"  in the plan, timed one step at a time: on {plan.threads} threads {_ms(slot.wide_s)}{narrow}")
    why = _schedule_why(facts)
    return lines + ([f"  schedule: {why}"] if why else [])


def _schedule_why(facts: PlanFacts) -> str:
    scheduled = facts.plan.summary.get("schedule")
    return str(scheduled.get("why", "")) if isinstance(scheduled, dict) else ""


def plan_verdict(facts: PlanFacts) -> list[str]:
    """The plan's measured time and why it is this plan (split or one engine's whole model)."""
    summary = facts.plan.summary
    lines = []
    if summary.get("measured_ms") is not None:
        lines.append(f"measured {summary['measured_ms']:.4f} ms per run end to end "
                     f"(predicted {facts.total_s * 1e3:.4f} ms, the sum of its kernels' profiles)")
    if summary.get("why"):
        lines.append(f"why: {summary['why']}")
    why = _schedule_why(facts)
    if why:
        lines.append(f"schedule: {why}")
    gap = summary.get("gap")
    if gap:
        lines.append(f"the solver stopped at a relative gap of {gap:.1%} (not proven optimal)")
    return lines


def overview(facts: PlanFacts) -> str:
    lines = [f"plan {facts.path}: {len(facts.graph.nodes)} primitives in {len(facts.kernels)} kernels, "
             f"predicted {facts.total_s * 1e3:.4f} ms"]
    lines += plan_verdict(facts)
    lines += [kernel_line(facts, k) for k in facts.kernels]
    lines.append("korch explain PLAN --node NAME (a value or ONNX node name) or --kernel ID explains one")
    return "\n".join(lines)


def explain(facts: PlanFacts, index: ProfileIndex | None, node: str | None = None, kernel: str | None = None,
            limit: int = DEFAULT_LIMIT) -> str:
    if node is None and kernel is None:
        return overview(facts)
    assert index is not None
    if kernel is not None:
        found = facts.kernel(kernel)
        if found is None:
            raise UsageError(f"--kernel {kernel}: no such kernel; this plan has k0..k{len(facts.kernels) - 1}")
        return explain_kernel(facts, index, found, limit)
    assert node is not None
    nodes = facts.find_nodes(node)
    if not nodes:
        names = list(facts.node_index) + list(dict.fromkeys(n.origin for n in facts.graph.nodes))
        close = difflib.get_close_matches(node, names, n=5)
        raise UsageError(f"--node {node}: no primitive output or ONNX node of that name"
                         + (f"; did you mean {', '.join(close)}?" if close else ""))
    head = [f"ONNX node {node} became {len(nodes)} primitives"] if facts.graph.nodes[nodes[0]].output != node else []
    return "\n\n".join(head + [explain_node(facts, index, i, limit) for i in nodes])
