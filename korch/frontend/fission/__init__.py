"""Operator fission: rewrite each ONNX node into primitives, by rules registered per op type.

A rule is `fn(ctx, node) -> outputs`: it reads the node's typed inputs and attributes, emits
primitives through `ctx`, and returns one Value per ONNX output (None for an unused optional one).
A rule that cannot handle an attribute value raises FissionError with the reason.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import helper

from korch.errors import UnsupportedError
from korch.ir.graph import GraphBuilder, Value
from korch.ir.types import DType


class FissionError(UnsupportedError):
    """A rule cannot handle this node (an attribute value, a non-constant shape input, ...)."""


_REQUIRED = object()


@dataclass(frozen=True)
class OnnxNode:
    """The ONNX node a rule rewrites, with its inputs already typed (None = omitted optional input)."""

    proto: onnx.NodeProto
    opset: int
    inputs: tuple[Value | None, ...]

    @property
    def name(self) -> str:
        return self.proto.name

    @property
    def op_type(self) -> str:
        return self.proto.op_type

    @property
    def num_outputs(self) -> int:
        return len(self.proto.output)

    def input(self, index: int) -> Value | None:
        return self.inputs[index] if index < len(self.inputs) else None

    def attr(self, name: str, default: Any = _REQUIRED) -> Any:
        for a in self.proto.attribute:
            if a.name == name:
                value = helper.get_attribute_value(a)
                if isinstance(value, bytes):
                    return value.decode()
                if isinstance(value, list) and value and isinstance(value[0], bytes):
                    return [v.decode() for v in value]
                return value
        if default is _REQUIRED:
            raise FissionError(f"missing required attribute {name!r}")
        return default


class FissionContext:
    """What a rule uses to emit primitives. Primitives with constant inputs fold as they are emitted."""

    def __init__(self, builder: GraphBuilder, origin: str) -> None:
        self._builder = builder
        self.origin = origin

    def emit(self, op: str, *inputs: Value, **attrs: Any) -> Value:
        return self._builder.emit(op, inputs, attrs, self.origin)

    def const(self, array: Any, dtype: DType | None = None) -> Value:
        array = np.asarray(array, dtype=dtype.numpy if dtype else None)
        return self._builder.add_constant(array)

    def scalar(self, value: float | int | bool, dtype: DType) -> Value:
        """A 0-d constant, broadcast against anything."""
        return self.const(np.array(value, dtype=dtype.numpy))

    def constant_value(self, value: Value | None) -> np.ndarray | None:
        return None if value is None else self._builder.constant_value(value.name)

    def require_constant(self, value: Value | None, what: str) -> np.ndarray:
        array = self.constant_value(value)
        if array is None:
            raise FissionError(f"{what} must be a constant (or computable from shapes), but it depends on graph inputs")
        return array

    # ---- small compositions shared by many rules -------------------------------------------

    def reshape(self, x: Value, shape: Sequence[int]) -> Value:
        shape = tuple(int(d) for d in shape)
        return x if x.shape == shape else self.emit("reshape", x, shape=shape)

    def transpose(self, x: Value, perm: Sequence[int]) -> Value:
        perm = tuple(int(p) for p in perm)
        return x if perm == tuple(range(x.rank)) else self.emit("transpose", x, perm=perm)

    def cast(self, x: Value, dtype: DType) -> Value:
        return x if x.dtype == dtype else self.emit("cast", x, to=dtype)

    def reduce_mean(self, x: Value, axes: Sequence[int], keepdims: bool = True) -> Value:
        axes = tuple(sorted(axes))
        count = int(np.prod([x.shape[a] for a in axes], dtype=np.int64))
        total = self.emit("reduce_sum", x, axes=axes, keepdims=keepdims)
        return self.emit("mul", total, self.scalar(1.0 / count, x.dtype))


def normalize_axis(axis: int, rank: int, node: OnnxNode | None = None) -> int:
    if not -rank <= axis < rank:
        raise FissionError(f"axis {axis} is out of range for rank {rank}")
    return axis % rank


Rule = Callable[[FissionContext, OnnxNode], Sequence[Value | None]]
RULES: dict[str, Rule] = {}


def fission(*op_types: str) -> Callable[[Rule], Rule]:
    """Register `fn` as the fission rule of the given ONNX op types (default domain)."""
    def register(fn: Rule) -> Rule:
        for op_type in op_types:
            if op_type in RULES:
                raise RuntimeError(f"fission rule for {op_type} registered twice")
            RULES[op_type] = fn
        return fn
    return register


def load_rules() -> None:
    """Import every rule module (each registers its rules at import)."""
    from korch.frontend.fission import (  # noqa: F401
        activation,
        elementwise,
        layout,
        linear,
        normalization,
        pooling,
        reduce,
        resize,
        shape,
    )
