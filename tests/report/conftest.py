"""Plans for the report tests: one real candy-mini plan per test module, and a large synthetic one."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

import numpy as np
import pytest

from korch import __version__, zoo
from korch.candidates.candidate import boundary
from korch.ir.graph import GraphBuilder
from korch.ir.types import DType, TensorType
from korch.pipeline import optimize
from korch.plan import Plan, Step, save_plan
from korch.profile.database import ProfileDB, machine_fingerprint
from korch.settings import QUICK_CALIBRATION, QUICK_PROFILE, OptimizeSettings

# Primitives in the synthetic plan: the size the report must stay usable at.
LARGE_PRIMITIVES = 1500
LARGE_KERNEL_SIZE = 5


def kernels_only_settings() -> OptimizeSettings:
    """onnxruntime kernels of primitives only (no region options), so the plan has many kernels."""
    return OptimizeSettings(threads=1, backends=("onnxruntime",), regions=None, calibration=QUICK_CALIBRATION)


@dataclasses.dataclass(frozen=True)
class SavedPlan:
    path: Path
    cache: Path
    plan: Plan


def exhaustive_settings() -> OptimizeSettings:
    """kernels_only_settings with every candidate profiled (quick timing): rivals that lost always exist."""
    return dataclasses.replace(kernels_only_settings(), profile=dataclasses.replace(QUICK_PROFILE, guided=False))


def save_candy_plan(tmp_path_factory: pytest.TempPathFactory, settings: OptimizeSettings) -> SavedPlan:
    root = tmp_path_factory.mktemp("candy")
    with ProfileDB(root / "cache" / "profiles.sqlite") as db:
        plan, _, _ = optimize(zoo.to_model_proto("candy-mini"), db, settings)
    return SavedPlan(save_plan(plan, root / "plan"), root / "cache", plan)


@pytest.fixture(scope="module")
def candy_plan(tmp_path_factory: pytest.TempPathFactory) -> SavedPlan:
    return save_candy_plan(tmp_path_factory, kernels_only_settings())


def large_plan(directory: Path, seed: int = 0) -> Path:
    """A chain of LARGE_PRIMITIVES primitives with residual skips and weights, in kernels of LARGE_KERNEL_SIZE."""
    rng = random.Random(seed)
    b = GraphBuilder("large")
    x = b.add_input("x", TensorType((1, 16), DType.FLOAT32))
    skip = x
    for k in range(LARGE_PRIMITIVES):
        if k % 7 == 6:
            x = b.emit("add", [x, skip], origin=f"Add_{k}")
            skip = x
        elif k % 3 == 0:
            w = b.add_constant(np.full((1, 16), 0.5 + rng.random(), dtype=np.float32))
            x = b.emit("mul", [x, w], origin=f"Mul_{k}")
        else:
            x = b.emit("tanh" if k % 2 else "relu", [x], origin=f"Act_{k}")
    graph = b.build([("y", x)])
    steps = []
    for start in range(0, len(graph.nodes), LARGE_KERNEL_SIZE):
        nodes = tuple(range(start, min(start + LARGE_KERNEL_SIZE, len(graph.nodes))))
        inputs, outputs = boundary(graph, nodes)
        steps.append(Step("onnxruntime", nodes, inputs, outputs, f"key{start}", rng.uniform(1e-6, 5e-5)))
    plan = Plan(graph, tuple(steps), 1, machine_fingerprint(), __version__, summary={"primitives": len(graph.nodes)})
    return save_plan(plan, directory)
