"""korch built-in model zoo: random-weight PyTorch models exportable to ONNX for tests and benchmarks.

Names resolve on first use: the model modules import torch, which `korch.zoo.files` (where a cached
export lives) does not need."""

from __future__ import annotations

import importlib

_PUBLIC = {"build_module": "korch.zoo.export", "cached_export": "korch.zoo.export",
           "example_inputs": "korch.zoo.export", "export_onnx": "korch.zoo.export", "to_model_proto": "korch.zoo.export",
           "torch_compiled": "korch.zoo.export", "fastest_torch_compiled": "korch.zoo.export",
           "InputSpec": "korch.zoo.registry", "UnknownModelError": "korch.zoo.registry",
           "ZooModel": "korch.zoo.registry", "get_model": "korch.zoo.registry", "list_models": "korch.zoo.registry"}
__all__ = sorted(_PUBLIC)


def __getattr__(name: str) -> object:
    if name not in _PUBLIC:
        raise AttributeError(f"module 'korch.zoo' has no attribute {name!r}")
    value = getattr(importlib.import_module(_PUBLIC[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_PUBLIC})
