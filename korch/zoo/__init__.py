"""korch built-in model zoo: random-weight PyTorch models exportable to ONNX for tests and benchmarks."""

from __future__ import annotations

# Importing each model module registers its full and mini variants, in this order.
# isort: off
from korch.zoo import candy as _candy  # noqa: F401
from korch.zoo import segformer as _segformer  # noqa: F401
from korch.zoo import efficientvit as _efficientvit  # noqa: F401
from korch.zoo import yolox as _yolox  # noqa: F401
from korch.zoo import yolov4 as _yolov4  # noqa: F401
from korch.zoo import bert as _bert  # noqa: F401
from korch.zoo import vit as _vit  # noqa: F401
from korch.zoo import gpt as _gpt  # noqa: F401
# isort: on
from korch.zoo.export import build_module, cached_export, example_inputs, export_onnx, to_model_proto
from korch.zoo.registry import InputSpec, UnknownModelError, ZooModel, get_model, list_models

__all__ = [
    "InputSpec",
    "UnknownModelError",
    "ZooModel",
    "build_module",
    "cached_export",
    "example_inputs",
    "export_onnx",
    "get_model",
    "list_models",
    "to_model_proto",
]
