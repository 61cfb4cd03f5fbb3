"""Running a bucketed plan: the feeds' shapes pick the bucket's session; shapes no bucket fits run
on onnxruntime over the original model, which is always correct, and the log says so once."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from korch.plan.buckets import BucketedPlan, fallback_model, load_bucketed
from korch.runtime.session import RunError, Session, compile_plan
from korch.shapes import describe

log = logging.getLogger("korch.runtime")


class BucketSession:
    """Session.run's interface over one compiled session per bucket, dispatched on the feeds' shapes
    (a dictionary lookup: no search, whatever the number of buckets)."""

    def __init__(self, plans: BucketedPlan, sessions: Sequence[Session], fallback: Path | bytes | None = None) -> None:
        self.plans = plans
        self.sessions = tuple(sessions)
        self._inputs = tuple(plans.inputs)
        self._by_shapes = {self._key(b.shapes): s for b, s in zip(plans.buckets, self.sessions)}
        self._fallback_path = fallback
        self._fallback = None                  # onnxruntime's session of the model itself, made on first use
        self.fallback_runs = 0

    def _key(self, shapes: Mapping[str, Sequence[int]]) -> tuple[tuple[int, ...], ...]:
        return tuple(tuple(int(d) for d in shapes[name]) for name in self._inputs)

    def session_for(self, feeds: Mapping[str, np.ndarray]) -> Session | None:
        """The bucket session these feeds' shapes select, or None (the fallback)."""
        missing = [n for n in self._inputs if n not in feeds]
        if missing:
            raise RunError(f"missing feeds for inputs {missing}; the plan's inputs are {list(self._inputs)}")
        return self._by_shapes.get(self._key({n: np.shape(feeds[n]) for n in self._inputs}))

    def run(self, output_names: Sequence[str] | None, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        session = self.session_for(feeds)
        if session is not None:
            return session.run(output_names, feeds)
        return self._run_fallback(output_names, feeds)

    def _run_fallback(self, output_names: Sequence[str] | None, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        unknown = [n for n in feeds if n not in self._inputs]
        if unknown:
            raise RunError(f"unknown feeds {unknown}: not inputs of the plan, whose inputs are {list(self._inputs)}")
        if self._fallback is None:
            if self._fallback_path is None:
                raise RunError("these shapes match no bucket and this session has no fallback model: "
                               + describe({n: np.shape(feeds[n]) for n in self._inputs}))
            from korch.backends.onnxruntime import make_session

            log.warning("input shapes %s match no bucket (%s); running onnxruntime over the original model "
                        "for such shapes (said once)", describe({n: np.shape(feeds[n]) for n in self._inputs}),
                        "; ".join(describe(b.shapes) for b in self.plans.buckets))
            model = self._fallback_path if isinstance(self._fallback_path, bytes) else str(self._fallback_path)
            self._fallback = make_session(model, self.plans.threads)
        self.fallback_runs += 1
        try:
            return self._fallback.run(list(output_names) if output_names else None, dict(feeds))
        except Exception as e:        # onnxruntime's own message: a wrong element type, a bad rank
            raise RunError(f"the original model on onnxruntime refused these feeds: {str(e).strip()[:300]}") from None

    def get_inputs(self):
        return [(n, t) for n, t in self.plans.inputs.items()]

    def get_outputs(self):
        return [(n, t) for n, t in self.plans.outputs.items()]


def compile_bucketed(plans: BucketedPlan, directory: str | os.PathLike | None = None) -> BucketSession:
    """Compile every bucket's plan; `directory` (a saved bucketed plan) provides the fallback model."""
    sessions = [compile_plan(b.plan) for b in plans.buckets]
    source = plans.source
    if directory is not None:
        fallback: Path | bytes | None = fallback_model(directory)
    elif source is not None and source.weights_dir is not None:        # loaded: the model file beside its weights
        fallback = source.weights_dir / "original.onnx"
    else:
        fallback = source.model.SerializeToString() if source is not None else None
    return BucketSession(plans, sessions, fallback)


def load_bucketed_session(directory: str | os.PathLike, check_origin: bool = True) -> BucketSession:
    from korch import __version__
    from korch.profile.database import machine_fingerprint

    plans = load_bucketed(directory, __version__, machine_fingerprint(), check_origin=check_origin)
    return compile_bucketed(plans, directory)
