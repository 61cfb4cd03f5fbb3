"""The Python API in four calls: optimize a model into a plan, compile it, save it, load it back.

    plan = korch.optimize("model.onnx", threads=2)        # or a ModelProto, or a zoo name
    korch.save(plan, "model.plan")
    session = korch.load("model.plan")                    # session.run(None, {"input": x})

Everything here is a thin layer over `korch.pipeline` (the stages), `korch.plan` and
`korch.runtime`; the CLI's `optimize` and `run` do the same with argv.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Union

from korch.errors import UsageError

if TYPE_CHECKING:
    import onnx

    from korch.plan import Plan
    from korch.plan.buckets import BucketedPlan
    from korch.runtime import Session
    from korch.runtime.buckets import BucketSession

# (a string: loading a plan imports neither onnx nor the optimizer)
ModelSpec = Union[str, os.PathLike, "onnx.ModelProto"]


def default_backends() -> tuple[str, ...]:
    """Every registered kernel provider that is chosen for speed: onnxruntime, inductor when torch is
    installed, openvino when openvino is installed (the reference backend defines semantics and is
    never chosen)."""
    from korch.backends import backend_names

    return tuple(b for b in ("onnxruntime", "inductor", "openvino") if b in backend_names())


def check_backends(names: Sequence[str]) -> tuple[str, ...]:
    """The given provider names, checked against the registry; a UsageError names the unknown ones."""
    from korch.backends import backend_names

    chosen = tuple(dict.fromkeys(n.strip() for n in names if n.strip()))
    unknown = [n for n in chosen if n not in backend_names()]
    if unknown or not chosen:
        raise UsageError(f"backends: unknown {unknown or 'empty list'}; available: {', '.join(backend_names())}")
    return chosen


def optimize(model: ModelSpec, *, threads: int = 1, backends: Sequence[str] | None = None,
             cache_dir: str | os.PathLike | None = None,
             input_shapes: Mapping[str, Sequence[int]] | None = None,
             shapes: Mapping[str, Sequence[Sequence[int]]] | None = None,
             progress: Callable[[int, int, str], None] | None = None, strict: bool = False,
             sequential: bool = False, rewrites: bool = True, whole_models: bool = False) -> Plan | BucketedPlan:
    """Optimize `model` (an .onnx path, a ModelProto or a zoo name) for this machine at `threads`
    threads. Measurements go to the profile database under `cache_dir` (default: the user cache dir,
    ~/.cache/korch), so optimizing the same model again profiles nothing.

    The returned plan has been compiled, timed end to end and checked against onnxruntime (in this
    run, or in an earlier one on the same weights: then it is returned without compiling it again); a
    plan that disagrees raises VerificationError instead. Its summary holds what the CLI prints.
    Nodes korch cannot fission run whole in onnxruntime; `strict=True` refuses such a model instead.
    A split plan's independent kernels may run side by side on fewer threads each, if that measures
    faster (plan.schedule); `sequential=True` runs them one after another on all threads.
    `rewrites=False` optimizes the graph as given, without korch's algebraic rewrites
    (korch/frontend/rewrites.py; the plan is checked against the model as given either way).
    `whole_models=True` chooses among each backend's whole-model kernel only (no split plans, no
    boundary calibration): what korch keeps where no split plan pays, in a fraction of the time.

    `progress(done, total, what)` is called as profiling and calibration advance, with done 0 when a
    long step starts (compiling Inductor's kernels ahead).

    `input_shapes` fixes symbolic dims to one value each. `shapes` gives several ({"input_ids":
    [(1, 32), (1, 64)]}: bucket k takes each input's k-th shape, other inputs follow through the dims
    they share by name) and returns a BucketedPlan: one plan per bucket, whose session dispatches on
    the feeds' shapes and runs any other shape on onnxruntime over the model itself.
    """
    from korch.pipeline import optimize as run_pipeline
    from korch.pipeline import optimize_buckets
    from korch.profile.database import ProfileDB, default_cache_dir
    from korch.settings import OptimizeSettings, ScheduleSettings

    if threads < 1:
        raise UsageError(f"threads must be >= 1, got {threads}")
    if shapes is not None and input_shapes is not None:
        raise UsageError("give shapes= (one plan per bucket) or input_shapes= (one plan), not both")
    settings = OptimizeSettings(threads=threads, strict=strict, schedule=ScheduleSettings(enabled=not sequential),
                                rewrites=rewrites, whole_models=whole_models, backends=check_backends(backends) if backends is not None else default_backends())
    directory = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    told = None
    if progress is not None:
        def told(done: int, total: int, what: str, *_: object) -> None:     # the profiler also passes counts per backend
            progress(done, total, what)
    with ProfileDB(directory / "profiles.sqlite") as db:
        if shapes is not None:
            return optimize_buckets(model, db, settings, shapes, told)[0]
        plan, _, _ = run_pipeline(model, db, settings, input_shapes, progress=told, compile_session=False)
    return plan


def compile(plan: Plan | BucketedPlan) -> Session | BucketSession:      # noqa: A001  (korch.compile reads as what it does)
    """Compile a plan's kernels into a session whose run(output_names, feeds) is onnxruntime's shape.
    Compiled artifacts are cached on disk by their providers, so compiling a plan again is quick."""
    from korch.plan.buckets import BucketedPlan
    from korch.runtime import compile_plan

    if isinstance(plan, BucketedPlan):
        from korch.runtime.buckets import compile_bucketed

        return compile_bucketed(plan)
    return compile_plan(plan)


def save(plan: Plan | BucketedPlan, directory: str | os.PathLike) -> Path:
    """Write the plan as a directory, atomically (a temporary directory renamed into place)."""
    from korch.plan import save_plan
    from korch.plan.buckets import BucketedPlan, save_bucketed

    return save_bucketed(plan, directory) if isinstance(plan, BucketedPlan) else save_plan(plan, directory)


def load(directory: str | os.PathLike) -> Session | BucketSession:
    """Load a saved plan (or bucketed plan) and compile it. Refuses a plan made by another korch
    version or machine, and a plan whose files differ from its manifest."""
    from korch.runtime import load as load_session

    return load_session(directory)
