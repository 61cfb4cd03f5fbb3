"""Comparing outputs with onnxruntime: errors relative to scale, and shapes that differ."""

from __future__ import annotations

import numpy as np

from korch.verify import VerifyReport, diff_outputs


def test_outputs_of_different_shape_are_reported_as_such() -> None:
    """An output whose shape depends on the data (NonMaxSuppression's) can differ in shape: the report
    says so instead of comparing values."""
    rng = np.random.default_rng()
    want = {"selected": rng.integers(0, 5, (4, 3)), "scores": rng.standard_normal(3).astype(np.float32)}
    got = {"selected": want["selected"][:2], "scores": want["scores"] + np.float32(1e-6)}
    diffs = {d.name: d for d in diff_outputs(got, want)}
    assert diffs["selected"].mismatch == "shape (2, 3), expected (4, 3)" and diffs["selected"].rel == float("inf")
    assert diffs["scores"].mismatch == "" and diffs["scores"].rel < 1e-5
    report = VerifyReport(0, tuple(diffs.values()), 1e-4)
    assert not report.ok
    assert "output 'selected': shape (2, 3), expected (4, 3)" in report.summary()
