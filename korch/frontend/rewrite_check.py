"""The check that keeps algebraic rewrites honest (frontend/rewrites.py): onnxruntime's outputs of the
rewritten model against its outputs of the model as given, under the accuracy policy that judges
every plan; a verdict passed is remembered in the profile database, so a model is checked once.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np
import onnx

from korch.backends.reference import run_graph
from korch.frontend.fission.driver import Fissioned, fission_model
from korch.frontend.onnx_import import model_digest
from korch.frontend.regions import OnnxSource, share_weights
from korch.frontend.rewrites import F2_RULES, F2_RULES_NAME, rewrite_model, uses_f4
from korch.heap import blocks_returned
from korch.settings import AccuracyPolicy
from korch.verify import judge_outputs, onnxruntime_runner
from korch.version import code_version

if TYPE_CHECKING:
    from korch.profile.database import ProfileDB

log = logging.getLogger("korch.frontend.rewrites")


def checked_rewrites(original: onnx.ModelProto, rewritten: onnx.ModelProto, rewrites: tuple[str, ...],
                     feeds: Mapping[str, np.ndarray], accuracy: AccuracyPolicy, strict: bool,
                     given: str | os.PathLike | None, db: ProfileDB | None, seed: int,
                     fissioned: Fissioned | None = None) -> tuple[onnx.ModelProto, tuple[str, ...]]:
    """The rewritten model and its rewrites' notes if it passes `rewrite_checked`; where it does not
    and has Winograd layers in F(4x4, 3x3), the model rewritten by F2_RULES (F(2x2, 3x3) only) if that
    passes; else `original` and no notes. A verdict passed is remembered in `db`, each form's apart.
    `fissioned`: `rewritten`'s primitive graph; where the check runs, onnxruntime reads the rewritten
    model's weights from its constants (regions.share_weights), not from a serialized copy."""
    key = rewrite_check_key(original, accuracy, seed) if db is not None else None
    if key is not None and db.rewrites_passed(key):
        log.info("rewrites: passed their check on this model before")
        return rewritten, rewrites
    f4 = uses_f4(rewrites)
    closer_key = None if key is None else f"{key}|{F2_RULES_NAME}"
    if f4 and closer_key is not None and db.rewrites_passed(closer_key):
        log.info("rewrites: with Winograd in F(2x2, 3x3) only, passed their check on this model before")
        return rewrite_model(original, F2_RULES)
    held = rewritten if fissioned is None else \
        share_weights(OnnxSource(rewritten, dict(fissioned.value_map)), fissioned.graph)
    if rewrite_checked(original, held, feeds, accuracy, strict, given):
        if key is not None:
            db.put_rewrites_passed(key)
        return rewritten, rewrites
    if f4:
        closer, notes = rewrite_model(original, F2_RULES)
        if rewrite_checked(original, closer, feeds, accuracy, strict, given):
            log.warning("rewrites: taken with Winograd in F(2x2, 3x3) only (F(4x4, 3x3) missed the accuracy policy)")
            if closer_key is not None:
                db.put_rewrites_passed(closer_key)
            return closer, notes
    return original, ()


def rewrite_check_key(model: onnx.ModelProto, accuracy: AccuracyPolicy, seed: int) -> str:
    """What a rewrite check's verdict depends on: the model as given (model_digest), korch's code (the
    rules), onnxruntime's version (its outputs judge), the accuracy policy and the input's seed. A warm
    optimize of yolov4 spent 6 s checking its 33 Winograd rewrites again (two onnxruntime sessions and
    a float64 reference run: its fission stage 6.9 s, 0.8 s remembered)."""
    import onnxruntime

    h = hashlib.sha256(model_digest(model).encode())
    h.update(f"|{code_version()}|{onnxruntime.__version__}|{accuracy.rtol}|{accuracy.fp32_factor}|{seed}".encode())
    return h.hexdigest()


def rewrite_checked(model: onnx.ModelProto, rewritten: onnx.ModelProto | OnnxSource, feeds: Mapping[str, np.ndarray],
                    accuracy: AccuracyPolicy = AccuracyPolicy(), strict: bool = False,
                    given: str | os.PathLike | None = None) -> bool:
    """Whether onnxruntime's outputs of the rewritten model are those of the model as given, on `feeds`,
    under the accuracy policy that judges every plan (verify.judge_outputs): within `accuracy.rtol` of
    onnxruntime's outputs of the model, or else within what onnxruntime's own error earns against the
    float64 reference of the model AS GIVEN (fissioned again for it: a wrong identity must not be its
    own judge). Rewrites that fail are dropped, with a warning; the plan is checked against the model
    as given in the end either way. A deep model needs the second test: yolov4 with its 3x3
    convolutions in Winograd's form is 1.4e-4 from onnxruntime, where onnxruntime itself is ~3e-4
    from exact. `given`: the file `model` was read from, which onnxruntime then reads itself instead
    of a serialized copy of `model` (yolov4: +691 MiB against +955, benchmarks/rewrite_check_memory.py).
    `rewritten` as an OnnxSource: its stand-in initializers' data handed to onnxruntime as arrays."""
    def exact() -> Mapping[str, np.ndarray]:
        return run_graph(fission_model(model, strict).graph, feeds)
    with blocks_returned():                 # (the sessions only: the reference's arrays are reused)
        ours = onnxruntime_runner(rewritten) if isinstance(rewritten, onnx.ModelProto) else \
            onnxruntime_runner(rewritten.model, shared=rewritten.arrays)
        actual = ours(feeds)
        del ours                            # (its session, before the next one loads)
        expected = onnxruntime_runner(model if given is None else given)(feeds)
    checks = judge_outputs(0, actual, expected, exact, accuracy.rtol, accuracy.tolerance)
    for check in checks:
        if not check.ok:
            log.warning("rewrites dropped: output %r moved by %.2e of its scale (tolerance %.0e)",
                        check.diff.name, check.error, check.tolerance)
            return False
    return True
