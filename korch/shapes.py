"""Shape buckets: the static input shapes a model with symbolic dims is optimized for.

A model whose inputs have symbolic dims (`batch`, `sequence`) is optimized once per bucket: one set
of static input shapes. The user names shapes for some inputs (`--shapes input_ids=1x32,1x64`); the
k-th shape of every named input makes bucket k, and the other inputs follow through the dims they
share by name (an attention mask [batch, sequence] takes input_ids' values). An input named with
one shape has it in every bucket.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from korch.errors import ShapeError, UsageError

if TYPE_CHECKING:
    import onnx

Shape = tuple[int, ...]
# An input's declared dims: an int where fixed, the dim's name where symbolic, None where unnamed.
Dims = tuple["int | str | None", ...]
FLAG = "--shapes"


def parse_shapes(specs: Sequence[str]) -> dict[str, list[Shape]]:
    """`["input_ids=1x32,1x64", "mask=1x32,1x64"]` -> {"input_ids": [(1, 32), (1, 64)], ...}."""
    shapes: dict[str, list[Shape]] = {}
    for spec in specs:
        name, sep, values = spec.partition("=")
        if not sep or not name.strip() or not values.strip():
            raise UsageError(f"{FLAG} {spec!r}: expected NAME=D1xD2[,D1xD2...], e.g. input_ids=1x32,1x64")
        if name.strip() in shapes:
            raise UsageError(f"{FLAG}: input {name.strip()!r} is given twice; list its shapes once, comma-separated")
        try:
            parsed = [tuple(int(d) for d in shape.strip().split("x")) for shape in values.split(",")]
        except ValueError:
            raise UsageError(f"{FLAG} {spec!r}: a shape is dims joined by 'x', e.g. 1x128") from None
        if any(d < 1 for shape in parsed for d in shape):
            raise UsageError(f"{FLAG} {spec!r}: every dim must be >= 1")
        shapes[name.strip()] = parsed
    return shapes


def dims_of(value: onnx.ValueInfoProto) -> Dims:
    """A value's declared dims: fixed ones as ints, symbolic ones by name, unnamed ones None."""
    return tuple(d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else (d.dim_param or None)
                 for d in value.type.tensor_type.shape.dim)


def model_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    """The graph's inputs a caller feeds (initializers listed as inputs are not inputs)."""
    initializers = {t.name for t in model.graph.initializer}
    return [value for value in model.graph.input if value.name not in initializers]


def input_dims(model: onnx.ModelProto) -> dict[str, Dims]:
    """Each fed input's declared dims."""
    return {value.name: dims_of(value) for value in model_inputs(model)}


def bucket_shapes(model: onnx.ModelProto, given: Mapping[str, Sequence[Sequence[int]]],
                  label: str = "model") -> list[dict[str, Shape]]:
    """Every input's static shape in each bucket. Errors name the input, the dim and the flag."""
    dims = input_dims(model)
    unknown = [name for name in given if name not in dims]
    if unknown:
        raise UsageError(f"{FLAG}: {label} has no input {unknown[0]!r}; its inputs are {', '.join(dims)}")
    counts = {name: len(shapes) for name, shapes in given.items() if len(shapes) != 1}
    if len(set(counts.values())) > 1:
        raise UsageError(f"{FLAG}: inputs give different numbers of shapes ("
                         + ", ".join(f"{n}: {c}" for n, c in counts.items()) + "); bucket k takes each input's k-th")
    count = next(iter(counts.values()), 1)
    buckets = []
    for k in range(count):
        bound: dict[str, int] = {}
        shapes: dict[str, Shape] = {}
        for name, options in given.items():
            shape = tuple(int(d) for d in options[k if len(options) > 1 else 0])
            declared = dims[name]
            if len(shape) != len(declared):
                raise ShapeError(f"{label}: input {name!r} has rank {len(declared)}, {FLAG} gives {shape}")
            for axis, (d, v) in enumerate(zip(declared, shape)):
                if isinstance(d, int) and d != v:
                    raise ShapeError(f"{label}: input {name!r} dim {axis} is fixed at {d}, {FLAG} gives {v}")
                if isinstance(d, str):
                    if bound.setdefault(d, v) != v:
                        raise ShapeError(f"{label}: symbolic dim {d!r} is {bound[d]} and {v} in one bucket "
                                         f"(input {name!r} dim {axis})")
            shapes[name] = shape
        for name, declared in dims.items():
            if name in shapes:
                continue
            missing = [f"dim {axis} ({d!r})" if d else f"dim {axis} (unnamed)"
                       for axis, d in enumerate(declared) if not isinstance(d, int) and (d is None or d not in bound)]
            if missing:
                raise ShapeError(f"{label}: input {name!r} {', '.join(missing)} is not set by the shapes given; "
                                 f"add {FLAG} {name}=" + "x".join(str(d) if isinstance(d, int) else "?" for d in declared))
            shapes[name] = tuple(d if isinstance(d, int) else bound[d] for d in declared)  # type: ignore[index]
        buckets.append(shapes)
    keys = [tuple(sorted(b.items())) for b in buckets]
    if len(set(keys)) != len(keys):
        raise UsageError(f"{FLAG}: two buckets have the same shapes")
    return buckets


def describe(shapes: Mapping[str, Shape]) -> str:
    """`input_ids=1x32 attention_mask=1x32`."""
    return " ".join(f"{name}=" + "x".join(map(str, shape)) for name, shape in shapes.items())
