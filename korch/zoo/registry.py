"""Model-zoo registry: the InputSpec/ZooModel records and the explicit name -> model table."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from korch import errors

if TYPE_CHECKING:
    import torch

# The modules that register models when imported, in the zoo's order (full and mini variants).
MODEL_MODULES = ("candy", "segformer", "efficientvit", "yolox", "yolov4", "bert", "vit", "gpt")


class UnknownModelError(errors.UnknownModelError, ValueError):
    """Raised when a zoo model name is not registered (a KorchError for the CLI, and a ValueError)."""


@dataclass(frozen=True)
class InputSpec:
    """One graph input: name, static shape, dtype ("float32" or "int64"), exclusive int upper bound."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    high: int | None = None

    def __post_init__(self) -> None:
        if self.dtype not in ("float32", "int64"):
            raise ValueError(f"unsupported dtype {self.dtype!r} for input {self.name!r}")
        if self.dtype == "int64" and (self.high is None or self.high < 1):
            raise ValueError(f"int64 input {self.name!r} needs a positive 'high' bound")


@dataclass(frozen=True)
class ZooModel:
    """A registered model: its graph signature and a factory returning a randomly initialised module.

    calibration_batch is the batch size of the random-input passes that re-estimate BatchNorm
    statistics (ignored without BatchNorm). A sample's deviation is smaller in-batch than out of
    batch, roughly by (n-1)/(n+1) per BN layer with n the effective sample count, and that bias
    compounds through deep nets. Models whose deep features are nearly constant per sample (global
    linear attention, 2x2 maps in mini models) need larger batches to keep activations O(1).
    """

    name: str
    description: str
    inputs: tuple[InputSpec, ...]
    outputs: tuple[str, ...]
    build: Callable[[], torch.nn.Module]
    mini: bool
    calibration_batch: int = 4


_REGISTRY: dict[str, ZooModel] = {}


def register(model: ZooModel) -> ZooModel:
    """Add a model to the zoo; names must be unique."""
    if model.name in _REGISTRY:
        raise ValueError(f"zoo model {model.name!r} registered twice")
    _REGISTRY[model.name] = model
    return model


def _registered() -> None:
    """Import every model module (each registers its models), once: they import torch (1.5 s), which
    a warm optimize of a zoo model whose export is cached never needs."""
    for module in MODEL_MODULES:
        importlib.import_module(f"korch.zoo.{module}")


def list_models(include_mini: bool = True) -> list[ZooModel]:
    """All registered models in registration order (full and, optionally, mini variants)."""
    _registered()
    return [m for m in _REGISTRY.values() if include_mini or not m.mini]


def get_model(name: str) -> ZooModel:
    """Look a model up by name; raises UnknownModelError listing the valid names."""
    _registered()
    try:
        return _REGISTRY[name]
    except KeyError:
        valid = ", ".join(sorted(_REGISTRY))
        raise UnknownModelError(f"unknown zoo model {name!r}; valid names: {valid}") from None
