"""Attention in a primitive graph, found so the Inductor backend can hand it to torch's fused
scaled-dot-product attention instead of lowering it primitive by primitive.

Fission writes `softmax(q @ kT * scale [+ mask]) @ v` as nine primitives (two matmuls, the scale,
and softmax as max, sub, exp, sum, reciprocal, mul). Lowered one by one, Inductor materialises the
score matrix, and its post-grad pass that moves the scale past the row max adds an inf/NaN guard
(eq, abs, ne, an `any` over each row) that reads the scores once more. torch.compile of the same
model sees `torch.softmax` and calls `_scaled_dot_product_flash_attention_for_cpu`, which never
writes the scores. On segformer-b0 (2 threads, benchmarks/inductor_vs_torch_compile.py --kernels)
korch's softmax kernels alone took 7.9 ms of a 94 ms call.

`find_attention` returns each such chain whose inner values nothing else reads, so replacing it
with one call changes no other step. Only what is exactly attention is matched: float32, the
softmax over the last axis, identical batch dims on q, kT and v (no broadcasting), a scale that is
one constant number, and a mask that is added or fills scores with -inf. One case differs: a row
whose every score is masked to -inf is NaN in the reference's softmax and zeros from torch's fused
kernel. A constant mask that masks a whole row is therefore not matched (a causal mask never does);
a mask computed at run time is, and would differ only on such a row.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from korch.ir.graph import Graph, Node
from korch.ir.types import DType


@dataclass(frozen=True)
class Attention:
    """output = softmax(q @ kt * scale + mask) @ v over the last axis; `nodes`: the primitives it replaces
    (indices into graph.nodes), the last of which writes `output`."""

    q: str
    kt: str
    v: str
    mask: str | None
    scale: float
    output: str
    nodes: tuple[int, ...]
    # The mask is added to the scaled scores (float), or, if `masked_out`, it is a bool that is True
    # where a score is replaced by -inf (where(mask, -inf, scores): a masked_fill, as gpt2's causal mask
    # exports); fused attention then takes its negation, the scores kept.
    masked_out: bool = False


def find_attention(graph: Graph) -> list[Attention]:
    """Every attention chain in `graph` that can be replaced whole, in graph order."""
    found = []
    for node in graph.nodes:
        if node.op == "matmul":
            match = _match(graph, node)
            if match is not None:
                found.append(match)
    return found


def _match(graph: Graph, out: Node) -> Attention | None:
    """`out` = matmul(probs, v): follow probs back through softmax, mask and scale to q @ kT."""
    probs, v = out.inputs
    rank = len(graph.types[out.output].shape)
    last = (rank - 1,)
    chain: list[Node] = [out]

    mul = _producer(graph, probs, "mul")
    if mul is None:
        return None
    recip = next((n for i in mul.inputs if (n := _producer(graph, i, "reciprocal")) is not None), None)
    if recip is None:
        return None
    exp_name = mul.inputs[1] if mul.inputs[0] == recip.output else mul.inputs[0]
    exp = _producer(graph, exp_name, "exp")
    total = _producer(graph, recip.inputs[0], "reduce_sum")
    if exp is None or total is None or total.inputs[0] != exp.output or not _over(total, last):
        return None
    shifted = _producer(graph, exp.inputs[0], "sub")
    if shifted is None:
        return None
    logits, row_max_name = shifted.inputs
    row_max = _producer(graph, row_max_name, "reduce_max")
    if row_max is None or row_max.inputs[0] != logits or not _over(row_max, last):
        return None
    chain += [mul, recip, exp, total, shifted, row_max]

    mask = None
    masked_out = False
    masking = graph.producers.get(logits)
    if masking is not None and masking.op == "where":          # where(mask, -inf, scores)
        cond, value, kept = masking.inputs
        if _number(graph, value) != float("-inf") or _scores(graph, kept) is None:
            return None
        logits, mask, masked_out = kept, cond, True
        chain.append(masking)
    elif masking is not None and masking.op == "add":          # scores + mask, in either order
        k = next((k for k in (0, 1) if _scores(graph, masking.inputs[k]) is not None), None)
        if k is None:
            return None
        logits, mask = masking.inputs[k], masking.inputs[1 - k]
        chain.append(masking)
    scored = _scores(graph, logits)
    if scored is None:
        return None
    scores, scale, scale_node = scored
    if scale_node is not None:
        chain.append(scale_node)
    chain.append(scores)
    q, kt = scores.inputs

    if not _shapes_fit(graph, q, kt, v, mask, masked_out, out.output):
        return None
    if not _private(graph, chain, out.output):
        return None
    positions = sorted(graph.positions[n.output] for n in chain)
    return Attention(q, kt, v, mask, scale, out.output, tuple(positions), masked_out)


def _scores(graph: Graph, name: str) -> tuple[Node, float, Node | None] | None:
    """(q @ kT, scale, the node applying the scale) if `name` is q @ kT, or q @ kT times or over one
    constant number."""
    node = graph.producers.get(name)
    if node is None:
        return None
    if node.op == "matmul":
        return node, 1.0, None
    if node.op not in ("mul", "div"):
        return None
    for k in ((0, 1) if node.op == "mul" else (0,)):
        scores = _producer(graph, node.inputs[k], "matmul")
        number = _number(graph, node.inputs[1 - k])
        if scores is not None and number is not None and number != 0.0:
            return scores, (number if node.op == "mul" else 1.0 / number), node
    return None


def _number(graph: Graph, name: str) -> float | None:
    array = graph.constants.get(name)
    if array is None or array.size != 1 or not graph.types[name].dtype.is_float:
        return None
    return float(array.reshape(()))


def _producer(graph: Graph, name: str, op: str) -> Node | None:
    node = graph.producers.get(name)
    return node if node is not None and node.op == op else None


def _over(node: Node, axes: tuple[int, ...]) -> bool:
    return tuple(node.attrs["axes"]) == axes and bool(node.attrs["keepdims"])


def _shapes_fit(graph: Graph, q: str, kt: str, v: str, mask: str | None, masked_out: bool, output: str) -> bool:
    """float32 throughout; q [*b, L, E], kT [*b, E, S], v [*b, S, E] with the same batch dims b (rank
    3 or 4) and a mask broadcastable to the scores [*b, L, S]: what torch's fused CPU kernel takes
    (values as wide as the keys; it falls back to unfused math otherwise)."""
    types = [graph.types[n] for n in (q, kt, v, output)]
    if any(t.dtype != DType.FLOAT32 or not t.is_static for t in types):
        return False
    if mask is not None:
        mask_type = graph.types[mask]
        if mask_type.dtype != (DType.BOOL if masked_out else DType.FLOAT32) or not mask_type.is_static:
            return False
    qs, ks, vs = (graph.types[n].shape for n in (q, kt, v))
    if not 3 <= len(qs) <= 4 or not len(qs) == len(ks) == len(vs):
        return False
    batch = qs[:-2]
    if ks[:-2] != batch or vs[:-2] != batch or qs[-1] != ks[-2] or ks[-1] != vs[-2] or vs[-1] != qs[-1]:
        return False
    if min(qs + ks + vs) == 0:
        return False
    if mask is not None:
        scores = batch + (qs[-2], ks[-1])
        if not _broadcasts(graph.types[mask].shape, scores):
            return False
        constant = graph.constants.get(mask)
        if constant is not None:
            masked = constant if masked_out else np.isneginf(constant)
            if np.broadcast_to(masked, scores).all(axis=-1).any():
                return False          # a whole row masked: see the module's doc
    return True


def _broadcasts(shape: Sequence[int], to: Sequence[int]) -> bool:
    if len(shape) > len(to):
        return False
    return all(s in (1, t) for s, t in zip(reversed(shape), reversed(to)))


def _private(graph: Graph, chain: Sequence[Node], output: str) -> bool:
    """Nothing outside the chain reads its inner values, and none of them is a graph output."""
    inner = {n.output for n in chain} - {output}
    if inner & set(graph.outputs):
        return False
    ids = {id(n) for n in chain}
    return all(id(user) in ids for name in inner for user in graph.consumers.get(name, ()))
