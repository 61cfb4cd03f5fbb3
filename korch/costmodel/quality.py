"""How good a cost model is: pairwise comparison accuracy, and leave-one-model-out evaluation.

Pairwise comparison accuracy (PCA, as in the TenSet line of work) is the fraction of candidate pairs
with different measured times that the model orders the same way; a tie in prediction counts half.
It is what selection needs of a model: which of two kernels is faster, not their exact times.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from korch.costmodel.features import FEATURE_INDEX
from korch.costmodel.model import CostModel, CostModelSettings, MachinePeaks, per_thread_count, prior_seconds, train
from korch.profile.database import TimedKernel

# Above this many kernels, PCA is estimated on this many random pairs (the exact count is quadratic).
EXACT_PAIRS_MAX_ROWS = 3000
SAMPLED_PAIRS = 2_000_000


def pairwise_accuracy(predicted: Sequence[float], measured: Sequence[float], seed: int = 0,
                      exact_max_rows: int = EXACT_PAIRS_MAX_ROWS, sampled_pairs: int = SAMPLED_PAIRS) -> float:
    """PCA of `predicted` against `measured`; nan when no pair's measured times differ."""
    p, m = np.asarray(predicted, dtype=np.float64), np.asarray(measured, dtype=np.float64)
    if p.shape != m.shape:
        raise ValueError(f"{p.shape[0]} predictions for {m.shape[0]} measurements")
    n = len(m)
    if n <= exact_max_rows:
        i, j = np.triu_indices(n, k=1)
    else:
        rng = np.random.default_rng(seed)
        i, j = rng.integers(0, n, sampled_pairs), rng.integers(0, n, sampled_pairs)
    dm, dp = np.sign(m[i] - m[j]), np.sign(p[i] - p[j])
    counted = dm != 0
    if not counted.any():
        return float("nan")
    score = np.where(dp == 0, 0.5, (dp == dm).astype(np.float64))
    return float(score[counted].mean())


@dataclass(frozen=True)
class HeldOut:
    """One model held out: its kernels predicted by a model trained on every other model's."""

    model: str
    backend: str
    test_rows: int
    train_rows: int
    pca_prior: float
    pca_learned: float
    # The fraction measured below `optimism` x their prediction (rescaled as guided profiling does, by
    # the whole model's measured / predicted, or a random sample's median of them): kernels guided
    # profiling could wrongly leave out at a fixed optimism.
    below_optimism: float
    # The same at the optimism guided profiling sets from a random sample's spread (spread_optimism,
    # the sample's kernels not counted): what it could wrongly leave out.
    below_spread: float


def spread_optimism(ratios: Sequence[float], quantile: float, floor: float) -> float:
    """A backend's optimism from a random sample of its kernels' measured / rescaled predicted: the
    `quantile` of the ratios within [`floor`, 1] (how far below its rescaled prediction a kernel of
    this model measures, seldom); `floor` for fewer than two ratios."""
    if len(ratios) < 2:
        return floor
    return min(1.0, max(floor, float(np.quantile(ratios, quantile))))


def leave_one_model_out(rows: Sequence[TimedKernel], backend: str, machine: str, peaks: MachinePeaks,
                        settings: CostModelSettings = CostModelSettings(), optimism: float = 0.5,
                        sample: int = 12, by_whole: bool = True, spread: int = 16,
                        quantile: float = 0.0) -> list[HeldOut]:
    """For each model: train on the kernels never seen in it, predict the kernels seen in it.
    `by_whole`: rescale by the model's largest kernel timed (its whole model: every primitive of it)
    as guided profiling does (ProfileSettings.guide_scale_by_whole), else by `sample` random kernels.
    `spread`, `quantile`: the random sample whose spread sets guided profiling's optimism (at least
    `optimism`; ProfileSettings.guide_spread_sample, guide_spread_quantile)."""
    models = sorted({m for r in rows for m in r.models})
    out = []
    for held in models:
        test = [r for r in rows if held in r.models]
        rest = [r for r in rows if held not in r.models]
        if len(test) < 2:
            continue
        learned: CostModel = train(rest, backend, machine, peaks, settings)
        measured = [r.median_s for r in test]
        prior = per_thread_count(test, lambda fs, t: prior_seconds(fs, t, backend, peaks))
        predicted = per_thread_count(test, learned.predict)
        if by_whole:
            whole = max(range(len(test)), key=lambda k: test[k].features[FEATURE_INDEX["nodes"]])
            scale = measured[whole] / float(predicted[whole])
        else:
            picked = np.random.default_rng(0).choice(len(test), size=min(sample, len(test)), replace=False)
            scale = float(np.median(np.asarray(measured)[picked] / predicted[picked]))
        times = np.asarray(measured)
        below = float(np.mean(times < optimism * scale * predicted))
        # guided profiling's spread sample: random kernels other than the whole model, not counted after
        small = np.asarray([k for k in range(len(test)) if not (by_whole and k == whole)])
        drawn = np.random.default_rng(1).choice(small, size=min(spread, len(small) - 1), replace=False)
        factor = spread_optimism(times[drawn] / (scale * predicted[drawn]), quantile, optimism)
        counted = np.setdiff1d(small, drawn)
        below_spread = float(np.mean(times[counted] < factor * scale * predicted[counted]))
        out.append(HeldOut(held, backend, len(test), learned.trained_rows, pairwise_accuracy(prior, measured),
                           pairwise_accuracy(predicted, measured), below, below_spread))
    return out
