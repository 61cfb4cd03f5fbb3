"""Before solving: every primitive is computed by some kernel that can run, or the error says why not.

A primitive no usable option computes makes the BLP infeasible, and the solver could only name a
value. Here the error names the primitive (its op and output value), the ONNX node it came from,
and for each backend why the kernels computing it were dropped: the profile records' reasons.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from korch.candidates import Candidate
from korch.ir.graph import Graph
from korch.ir.ops import PrimClass
from korch.profile.database import Record, Status
from korch.profile.profiler import accepted
from korch.select.blp import Option, SelectionError, usable

# Primitives described in one error; its first line counts them all. One or two are the usual case.
DESCRIBED_PRIMITIVES = 3


def require_cover(graph: Graph, candidates: Sequence[Candidate], options: Sequence[Option],
                  records: Mapping[tuple[str, str], Record], tolerance: float, backends: Sequence[str]) -> None:
    """Raise a SelectionError, naming each primitive and why, if some primitive is computed by no option
    that can run. `records`: the profile record of each (candidate key, backend) pair profiled;
    `tolerance`: the error under which a kernel was accepted.

    The causes come first: primitives no accepted kernel computes, with each backend's reason. Others
    lose their kernels only because those read a value nothing that runs produces; they are listed
    after, by ONNX node."""
    runnable = usable(options, set(graph.inputs))
    covered = {p for o in runnable for p in o.nodes}
    missing = [p for p in range(len(graph.nodes)) if p not in covered]
    if not missing:
        return
    computed = {p for o in options for p in o.nodes}
    rejected = [p for p in missing if p not in computed]
    if rejected:
        lines = [f"{_name(graph, p)}:" + "".join(f"\n    {b}: {_why_not(graph, p, candidates, b, records, tolerance)}"
                                                 for b in backends) for p in rejected[:DESCRIBED_PRIMITIVES]]
        stranded = list(dict.fromkeys(graph.nodes[p].origin for p in missing if p in computed))
        if stranded:
            lines.append(f"so the kernels of ONNX nodes {stranded[:5]}{' ...' if len(stranded) > 5 else ''} "
                         "cannot run either: they read the values above")
        raise SelectionError(f"{len(rejected)} primitive(s) are computed by no accepted kernel{_more(rejected)}:\n  "
                             + "\n  ".join(lines))
    made = set(graph.inputs) | {t for o in runnable for t in o.outputs}
    lines = [f"{_name(graph, p)}: its accepted kernels read {_unmade(p, options, made)}, which no kernel that can "
             "run produces" for p in missing[:DESCRIBED_PRIMITIVES]]
    raise SelectionError(f"{len(missing)} primitive(s) are computed by no kernel that can run{_more(missing)}:\n  "
                         + "\n  ".join(lines))


def _more(primitives: Sequence[int]) -> str:
    return f" (the first {DESCRIBED_PRIMITIVES} below)" if len(primitives) > DESCRIBED_PRIMITIVES else ""


def _name(graph: Graph, p: int) -> str:
    node = graph.nodes[p]
    op = f"opaque {node.attrs['op_type']}" if node.klass == PrimClass.OPAQUE else node.op
    return f"primitive {p}, {op} -> {node.output!r}, of ONNX node {node.origin!r}"


def _unmade(p: int, options: Sequence[Option], made: set[str]) -> list[str]:
    return sorted({t for o in options if p in o.nodes for t in o.inputs - made})[:5]


def _why_not(graph: Graph, p: int, candidates: Sequence[Candidate], backend: str,
             records: Mapping[tuple[str, str], Record], tolerance: float) -> str:
    """Why no kernel of `backend` computes primitive p: the smallest profiled candidate's reason."""
    containing = sorted((c for c in candidates if p in c.nodes), key=lambda c: (c.size, c.nodes))
    profiled = [(c, records[(c.key, backend)]) for c in containing if (c.key, backend) in records]
    if not profiled:
        return f"not profiled (none of the {len(containing)} candidate(s) computing it is in its pool)"
    smallest, record = profiled[0]
    others = f" ({len(profiled) - 1} other candidate(s) computing it also rejected)" if len(profiled) > 1 else ""
    return f"candidate {list(smallest.nodes)} rejected: {_reason(record, tolerance)}{others}"


def _reason(record: Record, tolerance: float) -> str:
    if record.status is Status.REJECTED:
        return record.reason
    assert not accepted(record, tolerance) and record.error is not None
    return f"error {record.error:.2e} against the reference exceeds the tolerance {tolerance:.2e}"
