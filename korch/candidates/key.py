"""Canonical structural keys: equal for candidates that compute the same thing on the same shapes.

Node and value names do not enter the key. Constants enter by shape and dtype; scalars also by
value (a compiler may specialize on them: x ** 2 becomes x * x). Other constants are weights,
biases or index tables whose values do not change a kernel's speed, so the twelve blocks of a
transformer share one key and are profiled once.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from korch.ir.graph import Graph, Node

# Constants up to this many elements are part of the key by value (scalars only, see above).
KEY_CONSTANT_VALUE_MAX_ELEMENTS = 1


def structural_key(graph: Graph, nodes: Sequence[Node], inputs: Sequence[str], outputs: Sequence[str]) -> str:
    local = {name: f"i{k}:{graph.types[name]}" for k, name in enumerate(inputs)}
    parts = [f"in {' '.join(local[name] for name in inputs)}"]
    for k, node in enumerate(nodes):
        args = []
        for v in node.inputs:
            if v in local:
                args.append(local[v].split(":")[0])
            else:
                array = graph.constants[v]
                if array.size <= KEY_CONSTANT_VALUE_MAX_ELEMENTS:
                    args.append(f"c{graph.types[v]}={hashlib.sha1(array.tobytes()).hexdigest()[:16]}")
                else:
                    args.append(f"w{graph.types[v]}")
        local[node.output] = f"n{k}"
        parts.append(f"n{k}={node.signature}({','.join(args)}):{graph.types[node.output]}")
    parts.append(f"out {' '.join(local[o] for o in outputs)}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()
