"""The guided loop alone, on known costs: with optimistic costs that are lower bounds, it ends at the
optimum over every kernel's cost while measuring only some of them; it never measures a kernel twice.
So it does when each round measures what the LP relaxation leans on first (`relax`)."""

from __future__ import annotations

import numpy as np
import pytest

from korch.candidates import enumerate_candidates
from korch.candidates.enumerate import CandidateLimits
from korch.profile.guided import SplitProblem, _stop_gap, solve_until_stable
from korch.settings import OptimizeSettings, ProfileSettings, SelectionSettings
from tests.backends.graphs import conv_bias_relu, mlp_gelu


@pytest.mark.parametrize("relaxed", [False, True], ids=["exact", "lp-first"])
@pytest.mark.parametrize("seed", range(6))
def test_lower_bounds_lead_to_the_exhaustive_optimum(seed: int, relaxed: bool) -> None:
    rng = np.random.default_rng(seed)
    batch = 1 + 4 * (seed % 3)
    graph, pools, true, measured, pending = _problem(rng, seed)
    optimistic = {pair: true[pair] * rng.uniform(0.3, 1.0) for pair in pending}
    asked, measure = _recorder(true, measured)
    problem = _Checked(graph, pools)
    rounds, stable = solve_until_stable(problem, measured, pending, optimistic, measure, max_rounds=100,
                                        batch_size=batch, relax=relaxed, exact_batch_size=1 + seed % 4)
    assert problem.relaxed == relaxed
    best = SplitProblem(graph, pools).solve(true, {}, {}).cost
    chosen_cost = SplitProblem(graph, pools).solve(measured, {}, {}).cost
    assert stable and rounds >= 1 and len(asked) == len(set(asked))
    assert chosen_cost == pytest.approx(best, rel=1e-9)
    if batch == 1:                        # (a larger batch may measure every kernel of these small graphs)
        assert len(measured) < len(true)


def _recorder(true, measured):
    """(asked, measure): `measure` gives each kernel asked for its true cost and records it in `asked`."""
    asked: list[tuple[str, str]] = []

    def measure(want) -> None:
        for name, cs in want.items():
            for c in cs:
                asked.append((c.key, name))
                measured[(c.key, name)] = true[(c.key, name)]
    return asked, measure


def _problem(rng, seed: int):
    """A small graph's candidates on two backends, a random true cost for each, about a fifth of them
    measured: (graph, pools, true, measured, pending)."""
    graph = (mlp_gelu if seed % 2 else conv_bias_relu)(rng)
    cands = [c for c in enumerate_candidates(graph, CandidateLimits()) if c.size < len(graph.nodes)]
    pools = {"a": cands, "b": cands}
    true = {(c.key, name): float(rng.uniform(1, 10) * c.size ** rng.uniform(0.3, 1.0)) for c in cands
            for name in pools}
    measured = {pair: cost for pair, cost in true.items() if rng.random() < 0.2}
    pending = {(c.key, name): c for c in cands for name in pools if (c.key, name) not in measured}
    return graph, pools, true, measured, pending


class _Checked(SplitProblem):
    """Checks each LP relaxation: a fractional cover still covers every output, and its cost is a lower
    bound on the exact solve's at the same costs."""

    relaxed = False

    def relax(self, costs, pending, optimistic, expected=None, uncertainty=0):
        relaxed = super().relax(costs, pending, optimistic, expected, uncertainty)
        assert relaxed is not None
        self.relaxed = True
        made = {t for o in relaxed.support for t in o.outputs}
        assert set(self._graph.outputs) <= made
        # (with a budget, at most its expected costs: some kernels may fall below them, none above)
        priced = optimistic if expected is None or uncertainty <= 0 else expected
        assert relaxed.bound_s <= self.solve(costs, pending, priced).cost * (1 + 1e-9)
        return relaxed


@pytest.mark.parametrize("uncertainty", [1, 2])
def test_a_budget_of_uncertainty_finds_the_optimum_when_no_plan_has_more_kernels_below_expectation(
        uncertainty: int) -> None:
    """Pending kernels expected at random costs: `uncertainty` of them, at random, measure at their
    optimistic cost far below it, the rest at or above it. Then no plan has more kernels below their
    expected cost than the budget allows, so the loop, pricing by the budget, still ends at the
    exhaustive optimum, and over the seeds it measures fewer kernels than without the budget, where
    every pending kernel is at its optimistic cost at once."""
    counts = {0: 0, uncertainty: 0}
    for seed in range(6):
        for budget in counts:
            rng = np.random.default_rng(seed)
            graph, pools, _, measured, pending = _problem(rng, seed)
            expected = {pair: float(rng.uniform(1, 10) * c.size ** 0.6) for pair, c in pending.items()}
            optimistic = {pair: cost * 0.3 for pair, cost in expected.items()}
            low = set(map(tuple, rng.permutation(sorted(pending))[:uncertainty]))
            true = {**measured, **{pair: optimistic[pair] if pair in low else cost * rng.uniform(1.0, 1.5)
                                   for pair, cost in expected.items()}}
            asked, measure = _recorder(true, measured)
            _, stable = solve_until_stable(_Checked(graph, pools), measured, pending, optimistic, measure,
                                           max_rounds=200, expected=expected, uncertainty=budget)
            assert stable
            best = SplitProblem(graph, pools).solve(true, {}, {}).cost
            assert SplitProblem(graph, pools).solve(measured, {}, {}).cost == pytest.approx(best, rel=1e-9), \
                (seed, budget)
            counts[budget] += len(asked)
    assert counts[uncertainty] < counts[0], counts


@pytest.mark.parametrize("seed", range(3))
def test_only_rounds_an_exact_solve_chose_fill_up_to_the_exact_batch(seed: int) -> None:
    """Without the LP every round is an exact solve's: a batch of 1 with an exact batch of 3 measures
    what a batch of 3 does, and not what a batch of 1 alone does (that the loop ends at the optimum
    with exact batches is the first test's)."""
    runs = []
    for batch, exact in ((3, None), (1, 3), (1, None)):
        rng = np.random.default_rng(seed)
        graph, pools, true, measured, pending = _problem(rng, seed)
        optimistic = {pair: true[pair] * rng.uniform(0.3, 1.0) for pair in pending}
        asked, measure = _recorder(true, measured)
        solve_until_stable(SplitProblem(graph, pools), measured, pending, optimistic, measure, max_rounds=100,
                           batch_size=batch, relax=False, exact_batch_size=exact)
        runs.append(asked)
    assert runs[0] == runs[1] and runs[2] != runs[0]


@pytest.mark.parametrize("budget", [1, 2, 4])
def test_a_budget_caps_the_kernels_measured_and_ends_unstable(budget: int) -> None:
    """With optimistic costs of zero every solve wants an unmeasured kernel: the loop measures exactly
    `budget` of them, the ones a solve chose first, and says it did not reach a stable solve."""
    rng = np.random.default_rng(budget)
    graph = conv_bias_relu(rng)
    cands = [c for c in enumerate_candidates(graph, CandidateLimits()) if c.size < len(graph.nodes)]
    pools = {"a": cands, "b": cands}
    measured = {(c.key, "a"): float(c.size) for c in cands}
    pending = {(c.key, "b"): c for c in cands}
    assert len(pending) > budget
    asked: list[tuple[str, str]] = []

    def measure(want) -> None:
        for name, cs in want.items():
            asked.extend((c.key, name) for c in cs)
            measured.update({(c.key, name): float(c.size) for c in cs})

    rounds, stable = solve_until_stable(SplitProblem(graph, pools), measured, pending, dict.fromkeys(pending, 0.0),
                                        measure, max_rounds=100, batch_size=2, relax=False, budget=budget)
    assert not stable and len(asked) == budget == len(set(asked))
    assert rounds <= budget


@pytest.mark.parametrize("seed", range(3))
def test_a_bar_no_split_plan_can_beat_stops_the_loop_before_measuring(seed: int) -> None:
    """When the LP relaxation's cost at optimistic costs, a lower bound on every split plan, is at least
    `bar` (the best whole model), or within `gap` below it, no pending kernel is measured; a bar above
    that changes nothing."""
    rng = np.random.default_rng(seed)
    graph = conv_bias_relu(rng)
    cands = [c for c in enumerate_candidates(graph, CandidateLimits()) if c.size < len(graph.nodes)]
    pools = {"a": cands, "b": cands}
    measured = {(c.key, "a"): float(rng.uniform(1, 10)) for c in cands}
    pending = {(c.key, "b"): c for c in cands}
    optimistic = {pair: 0.5 for pair in pending}
    bound = SplitProblem(graph, pools).relax(measured, pending, optimistic).bound_s
    for bar, gap, stops in ((bound, 0.0, True), (bound * 1.001, 0.0, False), (bound * 1.04, 0.03, False),
                            (bound * 1.03, 0.03, True)):
        asked: list[tuple[str, str]] = []
        costs = dict(measured)

        def measure(want) -> None:
            for name, cs in want.items():
                asked.extend((c.key, name) for c in cs)
                costs.update({(c.key, name): 100.0 for c in cs})

        rounds, stable = solve_until_stable(SplitProblem(graph, pools), costs, dict(pending), optimistic,
                                            measure, max_rounds=100, bar=bar, gap=gap)
        assert stable
        assert (not asked) is stops, (bar, gap, bound, asked)


@pytest.mark.parametrize("seed", range(4))
def test_a_refine_that_raises_floors_ends_the_round_and_still_reaches_the_optimum(seed: int) -> None:
    """`refine` measures something else first (here nothing real: it reports 3 kernels) and raises every
    pending floor to just under the true cost: that round measures none of the kernels it picked, the
    next solves again at the new floors, and the loop still ends at the optimum over every kernel.
    What refine measured counts against the budget: with a budget of 3, nothing else is measured."""
    for budget in (None, 3):
        graph, pools, true, measured, pending = _problem(np.random.default_rng(100 + seed), seed)
        optimistic = {pair: true[pair] * 0.1 for pair in pending}
        asked: list[tuple[str, str]] = []
        refined: list[int] = []

        def measure(want) -> None:
            for name, cs in want.items():
                for c in cs:
                    asked.append((c.key, name))
                    measured[(c.key, name)] = true[(c.key, name)]

        def refine(picked) -> int:
            assert picked and all(p in pending for p in picked)
            if refined:
                return 0
            refined.append(len(asked))
            optimistic.update({pair: true[pair] * 0.99 for pair in pending})
            return 3

        rounds, stable = solve_until_stable(SplitProblem(graph, pools), measured, pending, optimistic, measure,
                                            max_rounds=100, batch_size=2, relax=False, budget=budget, refine=refine)
        assert refined == [0]
        if budget is not None:
            assert not stable and not asked and rounds == 1
            continue
        assert stable and rounds >= 2 and asked
        best = SplitProblem(graph, pools).solve(true, {}, {}).cost
        assert SplitProblem(graph, pools).solve(measured, {}, {}).cost == pytest.approx(best, rel=1e-9)


def test_predictions_read_the_stored_features_and_compute_the_missing(tmp_path) -> None:
    """Predicted costs from the features the pipeline stored equal those computed afresh; a key whose
    stored vector is of another length (a damaged row) is computed again, not trusted."""
    from korch.costmodel.features import FEATURES_VERSION, features_by_key
    from korch.costmodel.model import CostModel, MachinePeaks
    from korch.profile.database import ProfileDB
    from korch.profile.guided import _predicted_costs
    from korch.settings import OptimizeSettings

    graph, pools, _, _, pending = _problem(np.random.default_rng(0), 0)
    models = {name: CostModel(name, "m", MachinePeaks(1e10, 1e10)) for name in ("onnxruntime", "openvino")}
    pending = {(key, name): c for (key, _), c in pending.items() for name in models}
    settings = OptimizeSettings(threads=2)
    computed = _predicted_costs(graph, pending, models, settings)
    features = features_by_key(graph, list(pending.values()))
    broken = next(iter(features))
    with ProfileDB(tmp_path / "p.sqlite") as db:
        db.put_features("m", FEATURES_VERSION, {k: (f.values if k != broken else (1.0,)) for k, f in features.items()})
        assert _predicted_costs(graph, pending, models, settings, db) == computed


def test_predictions_are_rescaled_by_the_whole_model_where_it_was_timed() -> None:
    """_whole_scale: each guided backend's whole model measured / predicted, from that candidate and no
    other; a backend whose whole model was not timed (or not accepted) is left to the random sample."""
    from korch.costmodel import CostModel, MachinePeaks
    from korch.costmodel.features import features_by_key
    from korch.profile.guided import _whole_scale
    from korch.settings import OptimizeSettings

    graph = conv_bias_relu(np.random.default_rng(0))
    cands = list(enumerate_candidates(graph, CandidateLimits()))
    whole = next(c for c in cands if c.size == len(graph.nodes))
    part = next(c for c in cands if c.size < len(graph.nodes))
    peaks = MachinePeaks(flops_per_s_per_thread=1e10, bytes_per_s=1e10)
    models = {name: CostModel(name, "m", peaks) for name in ("onnxruntime", "openvino")}
    settings = OptimizeSettings(threads=1)
    predicted = float(models["onnxruntime"].predict([features_by_key(graph, [whole])[whole.key]], 1)[0])
    usable = {(whole.key, "onnxruntime"): 3.0 * predicted, (part.key, "onnxruntime"): 1e-9,
              (part.key, "openvino"): 1.0}
    scale = _whole_scale(graph, {"onnxruntime": cands, "openvino": cands}, models, usable, settings)
    assert scale == {"onnxruntime": pytest.approx(3.0)}


def test_each_backends_optimism_is_a_low_quantile_of_its_random_samples_spread() -> None:
    """_spread_optimism: measured / (predicted x scale) over the pairs drawn, its quantile, held within
    [floor, 1]; pairs not measured or not accepted do not count, and a backend with fewer than two
    such pairs gets the floor."""
    from korch.profile.guided import _spread_expectation, _spread_optimism

    ratios = [0.4, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2, 1.3, 1.5, 2.0]
    pairs = [(f"k{i}", "onnxruntime") for i in range(len(ratios))]
    predicted = {p: 1e-3 * (i + 1) for i, p in enumerate(pairs)}
    scale = {"onnxruntime": 2.0, "openvino": 1.0, "inductor": 1.0}
    measured = {p: r * predicted[p] * 2.0 for p, r in zip(pairs, ratios)}
    slow = [(f"s{i}", "openvino") for i in range(3)]                 # every one measures above its prediction
    predicted.update({p: 1e-3 for p in slow})
    measured.update({p: 5e-3 for p in slow})
    lone = [("a", "inductor"), ("b", "inductor")]                    # one of them rejected: no time
    predicted.update({p: 1e-3 for p in lone})
    measured[lone[0]] = 1e-3
    sample = {"onnxruntime": pairs + [("unmeasured", "onnxruntime")], "openvino": slow, "inductor": lone}
    got = _spread_optimism(measured, predicted, scale, sample, quantile=0.1, floor=0.5)
    assert got["onnxruntime"] == pytest.approx(np.quantile(ratios, 0.1))     # 0.6
    assert got["openvino"] == 1.0 and got["inductor"] == 0.5
    assert _spread_optimism(measured, predicted, scale, sample, quantile=0.0, floor=0.5)["onnxruntime"] == 0.5
    # the median, uncapped: what a kernel measures against its rescaled prediction, typically (the
    # budget of uncertainty's expected cost); too few pairs: the prediction itself
    typical = _spread_expectation(measured, predicted, scale, sample, floor=0.5)
    assert typical["onnxruntime"] == pytest.approx(np.median(ratios)) and typical["openvino"] == pytest.approx(5.0)
    assert typical["inductor"] == 1.0


def test_the_bar_is_the_best_whole_model_times_the_margin_a_split_plan_must_win_by() -> None:
    from dataclasses import replace

    from korch.profile.guided import _bar
    from korch.settings import OptimizeSettings

    graph = conv_bias_relu(np.random.default_rng(0))
    cands = list(enumerate_candidates(graph, CandidateLimits()))
    whole = next(c for c in cands if c.size == len(graph.nodes))
    part = next(c for c in cands if c.size < len(graph.nodes))
    usable = {(whole.key, "onnxruntime"): 4e-3, (whole.key, "openvino"): 3e-3, (part.key, "openvino"): 1e-4}
    settings = OptimizeSettings(threads=1)
    settings = replace(settings, selection=replace(settings.selection, multi_kernel_margin=0.9))
    pools = {"onnxruntime": cands, "openvino": cands}
    assert _bar(pools, usable, len(graph.nodes), settings) == pytest.approx(2.7e-3)
    assert _bar(pools, {(part.key, "openvino"): 1e-4}, len(graph.nodes), settings) is None


@pytest.mark.parametrize("seed", range(4))
def test_the_best_plans_lucky_kernels_are_timed_again_once_and_the_solve_turns_from_them(seed: int) -> None:
    """The winner's curse (_confirm): every kernel measured, each first timing low by a random factor;
    the best plan's kernels are timed again (their true cost), each once, until the best plan's
    kernels have all been timed twice; the optimum can then only be higher. Nothing is timed again
    where the best plan cannot beat the bar."""
    from korch.profile.guided import _confirm, touched_bytes

    rng = np.random.default_rng(seed)
    graph, pools, true, _, _ = _problem(rng, seed)
    lucky = {pair: cost * rng.uniform(0.5, 1.0) for pair, cost in true.items()}
    split = SplitProblem(graph, pools)
    usable = dict(lucky)
    again: list[tuple[str, str]] = []
    evicted: dict[tuple[str, str], int] = {}

    def measure(want, retime=(), evict=None) -> None:
        evicted.update(evict or {})
        for name, cs in want.items():
            for c in cs:
                assert (c.key, name) in retime
                again.append((c.key, name))
                usable[(c.key, name)] = true[(c.key, name)]

    confirmed: set[tuple[str, str]] = set()
    first = split.solve(usable, {}, {})
    by_pair = {(c.key, name): c for name, cs in pools.items() for c in cs}
    touched = {split.pairs[o.key]: touched_bytes(graph, by_pair[split.pairs[o.key]]) for o in first.chosen}
    cap = sum(touched.values()) // 2
    count = _confirm(graph, split, usable, pools, None, confirmed, measure, evict_cap=cap)
    assert count == len(first.chosen) == len(again) == len(set(again)) and confirmed == set(again)
    assert all(usable[p] == true[p] for p in again)
    # each kernel timed again after a sweep of what the plan's other kernels touch, at most the cap
    assert evicted == {p: min(cap, sum(touched.values()) - touched[p]) for p in again}
    while _confirm(graph, split, usable, pools, None, confirmed, measure):
        pass
    assert len(again) == len(set(again))                      # each kernel timed again once
    best = split.solve(usable, {}, {})
    assert all(split.pairs[o.key] in confirmed for o in best.chosen)
    assert best.cost >= first.cost - 1e-12                    # the luck taken out can only raise the optimum
    assert _confirm(graph, split, dict(lucky), pools, first.cost, set(), measure) == 0     # at the bar: nothing


def test_a_backend_is_calibrated_before_its_first_kernel_is_measured_and_the_loop_solves_again() -> None:
    """Backend b's boundaries cost nothing until calibrated (a lower bound: profile/boundaries.py
    Boundaries). The round that first picks a b kernel calibrates b before measuring anything and
    solves again at b's real boundary costs; the loop ends at the optimum over every kernel's true
    cost with those boundaries, and its problem prices them as calibrated."""
    rng = np.random.default_rng(3)
    graph, pools, true, measured, pending = _problem(rng, 3)
    optimistic = {pair: true[pair] * rng.uniform(0.3, 1.0) for pair in pending}
    per_boundary = {"b": 0.0}
    events: list[tuple[str, frozenset[str]]] = []

    def boundary(producer: str, consumer: str, value: str) -> float:
        return per_boundary["b"] if "b" in (producer, consumer) else 0.1

    def calibrate(backends) -> bool:
        new = "b" in backends and per_boundary["b"] == 0.0
        if new:
            per_boundary["b"] = 2.0
        events.append(("calibrate" if new else "calibrated", frozenset(backends)))
        return new
    asked, record = _recorder(true, measured)

    def measure(want) -> None:
        events.append(("measure", frozenset(name for name, cs in want.items() if cs)))
        record(want)
    problem = SplitProblem(graph, pools, boundary)
    _, stable = solve_until_stable(problem, measured, pending, optimistic, measure, max_rounds=100, calibrate=calibrate)
    assert stable
    calibrated = next(i for i, (what, _) in enumerate(events) if what == "calibrate")
    assert not any(what == "measure" and "b" in names for what, names in events[:calibrated])
    assert sum(what == "calibrate" for what, _ in events) == 1
    fresh = SplitProblem(graph, pools, boundary)
    assert problem.solve(measured, {}, {}).cost == pytest.approx(fresh.solve(measured, {}, {}).cost, rel=1e-9)
    assert fresh.solve(measured, {}, {}).cost == pytest.approx(fresh.solve(true, {}, {}).cost, rel=1e-9)


@pytest.mark.parametrize("regret,margin", [(0.03, 0.98), (0.05, 0.98), (0.03, 1.0), (0.01, 0.98), (0.0, 0.98)])
def test_the_guided_stop_lets_no_split_plan_beat_the_best_whole_model_by_more_than_the_regret(regret: float,
                                                                                             margin: float) -> None:
    """The loop stops at bound >= bar * (1 - gap), bar = best * margin: that is best / (1 + regret) where
    the regret allows more than the margin, and the bar itself where it does not."""
    settings = OptimizeSettings(profile=ProfileSettings(guide_regret=regret),
                                selection=SelectionSettings(multi_kernel_margin=margin))
    best = 0.1
    stop = best * margin * (1 - _stop_gap(settings))
    assert stop == pytest.approx(min(best * margin, best / (1 + regret)), rel=1e-12)


@pytest.mark.parametrize("seed", range(4))
def test_a_round_that_chose_an_unrivalled_kernel_measures_only_what_it_chose(seed: int) -> None:
    """With a batch of 40, each round also measures pending kernels over the chosen ones' primitives
    (rivals); a round whose solve chose an `unrivalled` pair (Inductor's tiles in profile_last)
    measures exactly the pending pairs that solve chose. At least one such round runs, and without
    `unrivalled` the same problem's first round measures more than its solve chose."""
    for unrivalled_on in (True, False):
        rng = np.random.default_rng(seed)
        graph, pools, true, measured, pending = _problem(rng, seed)
        optimistic = {pair: 0.0 for pair in pending}          # every pending kernel looks free
        unrivalled = set(list(pending)[::3]) if unrivalled_on else set()
        chosen: list[set[tuple[str, str]]] = []
        rounds: list[set[tuple[str, str]]] = []

        class Recording(SplitProblem):
            def solve(self, costs, pend, opt):
                got = super().solve(costs, pend, opt)
                chosen.append({self.pairs[o.key] for o in got.chosen if self.pairs[o.key] in pend})
                return got

        def measure(want) -> None:
            rounds.append({(c.key, name) for name, cs in want.items() for c in cs})
            for pair in rounds[-1]:
                measured[pair] = true[pair]

        solve_until_stable(Recording(graph, pools), measured, pending, optimistic, measure, max_rounds=100,
                           batch_size=40, relax=False, unrivalled=unrivalled)
        if unrivalled_on:
            alone = [(r, c) for r, c in zip(rounds, chosen) if unrivalled & c]
            assert alone and all(r == c for r, c in alone), alone
        else:
            assert len(rounds[0]) > len(chosen[0]), (rounds[0], chosen[0])


@pytest.mark.parametrize("seed", range(2))
def test_a_round_of_unrivalled_kernels_alone_is_measured_before_calibrating(seed: int) -> None:
    """`calibrate` is asked before every round that measures anything, except a round whose kernels
    are all `unrivalled` (Inductor's tiles: their few boundaries are a small share of their time)."""
    for all_unrivalled in (True, False):
        rng = np.random.default_rng(seed)
        graph, pools, true, measured, pending = _problem(rng, seed)
        asked, measure = _recorder(true, measured)
        calls: list[int] = []
        solve_until_stable(SplitProblem(graph, pools), measured, pending, dict.fromkeys(pending, 0.0), measure,
                           max_rounds=100, batch_size=4, relax=False,
                           calibrate=lambda names: calls.append(len(asked)) is not None,   # (never calibrates)
                           unrivalled=set(pending) if all_unrivalled else ())
        assert asked
        assert calls == [] if all_unrivalled else len(calls) >= 1, calls
