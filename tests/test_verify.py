"""The output comparison every check uses: errors relative to scale, IEEE specials, mask sentinels."""

from __future__ import annotations

import numpy as np
import pytest

from korch.verify import OutputCheck, PlanCheck, VerifyReport, diff_outputs

LOWEST = float(np.finfo(np.float32).min)


def _rel(got: np.ndarray, want: np.ndarray) -> float:
    (d,) = diff_outputs({"v": got}, {"v": want})
    return d.rel


@pytest.fixture
def scores() -> np.ndarray:
    """Masked attention scores: random data, the upper triangle masked with -inf."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 8)).astype(np.float32)
    x[np.triu_indices(8, 1)] = -np.inf
    return x


def test_equal_infinities_and_nans_match(scores: np.ndarray) -> None:
    assert _rel(scores.copy(), scores) == 0.0
    with_nan = scores.copy()
    with_nan[0, 0] = np.nan
    assert _rel(with_nan.copy(), with_nan) == 0.0


def test_one_sided_or_opposite_specials_are_infinite_errors(scores: np.ndarray) -> None:
    flipped = scores.copy()
    flipped[0, 7] = np.inf
    assert _rel(flipped, scores) == np.inf
    unmasked = scores.copy()
    unmasked[0, 7] = 0.5
    assert _rel(unmasked, scores) == np.inf
    nan = scores.copy()
    nan[3, 3] = np.nan
    assert _rel(nan, scores) == np.inf


def test_error_is_relative_to_the_data_not_the_mask(scores: np.ndarray) -> None:
    """The scale is the largest finite, non-sentinel |expected|: a -inf or a lowest-value mask
    neither hides nor inflates the error of the real scores."""
    finite = np.abs(scores[np.isfinite(scores)]).max()
    off = scores.copy()
    off[5, 0] += 1e-3 * finite
    assert _rel(off, scores) == pytest.approx(1e-3, rel=1e-3)
    lowest = np.where(np.isinf(scores), LOWEST, scores).astype(np.float32)
    off_lowest = np.where(np.isinf(off), LOWEST, off).astype(np.float32)
    assert _rel(off_lowest, lowest) == pytest.approx(1e-3, rel=1e-3)
    # a sentinel that fp32 arithmetic pushed past the lowest value to -inf is still "masked"
    overflowed = np.where(np.isinf(scores), -np.inf, scores).astype(np.float32)
    assert _rel(overflowed, lowest) == 0.0
    # but a masked entry that came out as data is an error
    leaked = lowest.copy()
    leaked[0, 7] = -1e30
    assert _rel(leaked, lowest) == np.inf


def test_shape_mismatch_and_integer_outputs() -> None:
    assert _rel(np.zeros(3, np.float32), np.zeros(4, np.float32)) == np.inf
    assert _rel(np.array([1, 2, 3]), np.array([1, 2, 4])) == pytest.approx(0.25)
    assert _rel(np.array([True, False]), np.array([True, False])) == 0.0


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
    check = PlanCheck(tuple(OutputCheck(0, d, 1e-4) for d in diffs.values()))
    assert not check.ok and "shape (2, 3), expected (4, 3)" in check.summary()
