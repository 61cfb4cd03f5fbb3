"""Pairwise comparison accuracy, and leave-one-model-out keeping each model's kernels out of training."""

from __future__ import annotations

import math

import numpy as np

from korch.costmodel.quality import leave_one_model_out, pairwise_accuracy
from tests.costmodel.test_model import IX, MACHINE, PEAKS, SMALL, synthetic


def test_pairwise_accuracy_counts_ordered_pairs() -> None:
    rng = np.random.default_rng(0)
    measured = rng.uniform(1, 2, 50)
    assert pairwise_accuracy(measured * 3, measured) == 1.0
    assert pairwise_accuracy(-measured, measured) == 0.0
    assert pairwise_accuracy(np.ones(50), measured) == 0.5              # a tie in prediction counts half
    assert math.isnan(pairwise_accuracy(measured, np.ones(50)))          # no pair to order
    assert pairwise_accuracy([1, 2, 3, 4], [1, 2, 4, 3]) == 5 / 6
    noisy = measured + rng.normal(0, 0.2, 50)
    exact = pairwise_accuracy(noisy, measured)
    assert 0.6 < exact < 0.95
    assert abs(pairwise_accuracy(noisy, measured, exact_max_rows=10, sampled_pairs=200_000) - exact) < 0.01


def test_leave_one_model_out_tests_only_kernels_the_training_never_saw() -> None:
    rows = synthetic(150, 1, "a") + synthetic(150, 2, "b") + synthetic(60, 3, "c")
    shared = rows[0]._replace(models=frozenset({"a", "c"}))              # seen in a and c
    rows = [shared] + rows[1:]
    held = {h.model: h for h in leave_one_model_out(rows, "onnxruntime", MACHINE, PEAKS, SMALL)}
    assert set(held) == {"a", "b", "c"}
    assert held["a"].test_rows == 150 and held["a"].train_rows == 210
    assert held["c"].test_rows == 61 and held["c"].train_rows == 299      # the shared kernel is tested with c, not learned
    for h in held.values():
        assert h.pca_learned > h.pca_prior and h.pca_learned >= 0.9, h


def test_below_optimism_is_rescaled_by_the_whole_model_as_guided_profiling_rescales() -> None:
    """The held-out model's largest kernel (standing for its whole model: the most primitives) sets the
    scale: timed 10x slower than the prior would have it, nearly every other kernel then falls below
    half its rescaled prediction; rescaled by a random sample instead, almost none does."""
    rows = synthetic(150, 1, "a") + synthetic(150, 2, "b")
    k = max((k for k, r in enumerate(rows) if "b" in r.models), key=lambda k: rows[k].features[IX["nodes"]])
    rows[k] = rows[k]._replace(median_s=rows[k].median_s * 10)
    by_whole = {h.model: h for h in leave_one_model_out(rows, "onnxruntime", MACHINE, PEAKS, SMALL)}["b"]
    by_sample = {h.model: h for h in leave_one_model_out(rows, "onnxruntime", MACHINE, PEAKS, SMALL,
                                                         by_whole=False)}["b"]
    assert by_whole.below_optimism > 0.9 and by_sample.below_optimism < 0.1
    # guided profiling's own optimism, from a random sample's spread: a low quantile of the sample's
    # ratios, but never below the floor on the whole-model scale, so the whole model's 10x still
    # leaves nearly every kernel below it (the floor binds); by a sample's scale almost none
    assert by_whole.below_spread > 0.9 and by_sample.below_spread < 0.1


def test_spread_optimism_is_a_low_quantile_of_the_ratios_within_the_floor_and_one() -> None:
    from korch.costmodel.quality import spread_optimism

    ratios = [0.4, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2, 1.3, 1.5, 2.0]
    assert spread_optimism(ratios, 0.1, 0.5) == np.quantile(ratios, 0.1)
    assert spread_optimism(ratios, 0.0, 0.5) == 0.5                     # the floor
    assert spread_optimism([3.0, 4.0], 0.0, 0.5) == 1.0                 # never above the prediction
    assert spread_optimism([0.7], 0.0, 0.5) == 0.5                      # too few ratios: the floor
