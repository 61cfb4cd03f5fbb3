"""Element types and static tensor types of the primitive IR."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import numpy as np
from onnx import TensorProto


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
            name = TensorProto.DataType.Name(elem_type) if elem_type in TensorProto.DataType.values() else str(elem_type)
            raise ValueError(f"element type {name} is not supported")
        return _FROM_ONNX[elem_type]


_TO_ONNX = {
    DType.FLOAT32: TensorProto.FLOAT,
    DType.FLOAT64: TensorProto.DOUBLE,
    DType.FLOAT16: TensorProto.FLOAT16,
    DType.INT64: TensorProto.INT64,
    DType.INT32: TensorProto.INT32,
    DType.INT8: TensorProto.INT8,
    DType.UINT8: TensorProto.UINT8,
    DType.BOOL: TensorProto.BOOL,
}
_FROM_ONNX = {v: k for k, v in _TO_ONNX.items()}


@dataclass(frozen=True)
class TensorType:
    """A tensor's static shape and element type. Every value in the IR has one."""

    shape: tuple[int, ...]
    dtype: DType

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    def __str__(self) -> str:
        return f"{self.dtype.value}[{'x'.join(map(str, self.shape))}]"
