"""Element types and tensor types of the primitive IR.

Shapes are static, with one exception: a dim of UNKNOWN_DIM on a value an opaque primitive computes
whose size only the data decides (NonMaxSuppression's [?, 3]). Rules never see such values.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum
from functools import cached_property

import numpy as np


class DType(Enum):
    FLOAT32 = "float32"
    FLOAT64 = "float64"
    FLOAT16 = "float16"
    INT64 = "int64"
    INT32 = "int32"
    INT8 = "int8"
    UINT8 = "uint8"
    BOOL = "bool"

    @property
    def numpy(self) -> np.dtype:
        return np.dtype(self.value)

    @property
    def onnx(self) -> int:
        return _TO_ONNX[self]

    @property
    def is_float(self) -> bool:
        return self in (DType.FLOAT32, DType.FLOAT64, DType.FLOAT16)

    @staticmethod
    def from_numpy(dtype: np.dtype | type) -> DType:
        return DType(np.dtype(dtype).name)

    @staticmethod
    def from_onnx(elem_type: int) -> DType:
        if elem_type not in _FROM_ONNX:
            from onnx import TensorProto

            name = TensorProto.DataType.Name(elem_type) if elem_type in TensorProto.DataType.values() else str(elem_type)
            raise ValueError(f"element type {name} is not supported")
        return _FROM_ONNX[elem_type]


# ONNX's TensorProto.DataType numbers (fixed by the ONNX spec; written out so that the IR, which a
# loaded plan needs, does not import onnx; tests/ir checks them against onnx's enum).
_TO_ONNX = {
    DType.FLOAT32: 1,       # FLOAT
    DType.FLOAT64: 11,      # DOUBLE
    DType.FLOAT16: 10,      # FLOAT16
    DType.INT64: 7,         # INT64
    DType.INT32: 6,         # INT32
    DType.INT8: 3,          # INT8
    DType.UINT8: 2,         # UINT8
    DType.BOOL: 9,          # BOOL
}
_FROM_ONNX = {v: k for k, v in _TO_ONNX.items()}


# A dim whose size depends on the data (only on values opaque primitives compute); shown as "?".
UNKNOWN_DIM = -1


@dataclass(frozen=True)
class TensorType:
    """A tensor's shape and element type. Every value in the IR has one."""

    shape: tuple[int, ...]
    dtype: DType

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def is_static(self) -> bool:
        return UNKNOWN_DIM not in self.shape

    @cached_property
    def size(self) -> int:
        if not self.is_static:
            raise ValueError(f"{self} has a data-dependent size")
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        """Bytes of a value of this type (raises for a data-dependent size, as `size` does)."""
        return self.size * self.dtype.numpy.itemsize

    def admits(self, shape: tuple[int, ...]) -> bool:
        """Whether an array of `shape` is a value of this type (unknown dims take any size)."""
        return len(shape) == self.rank and all(d == UNKNOWN_DIM or d == s for d, s in zip(self.shape, shape))

    def __str__(self) -> str:
        return self._text

    @cached_property
    def _text(self) -> str:
        """(Kept: candidate keys print a type per tensor, yolov4's 22,797 candidates 258,000 times.)"""
        dims = ("?" if d == UNKNOWN_DIM else str(d) for d in self.shape)
        return f"{self.dtype.value}[{'x'.join(dims)}]"
