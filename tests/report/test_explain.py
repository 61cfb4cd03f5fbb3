"""`korch explain`: the kernel of a primitive, its rivals with costs, and the reason each lost."""

from __future__ import annotations

import dataclasses

import pytest

from korch.cli import main
from korch.errors import UsageError
from korch.profile.database import ProfileDB
from korch.report.alternatives import Outcome, ProfileIndex
from korch.report.explain import explain
from korch.report.facts import load_facts
from tests.report.conftest import SavedPlan, exhaustive_settings, save_candy_plan


@pytest.fixture(scope="module")
def candy_plan(tmp_path_factory: pytest.TempPathFactory) -> SavedPlan:
    """Every candidate profiled: which primitives have a rival that lost must not depend on what
    guided profiling chose to measure (under CI's load a fixed primitive once had none)."""
    return save_candy_plan(tmp_path_factory, exhaustive_settings())


@pytest.fixture(scope="module")
def index(candy_plan: SavedPlan) -> ProfileIndex:
    with ProfileDB(candy_plan.cache / "profiles.sqlite") as db:
        return ProfileIndex(load_facts(candy_plan.path), db, backends=("onnxruntime",))


def test_every_kernel_is_a_chosen_candidate_and_no_rival_beats_it(index: ProfileIndex) -> None:
    facts = index.facts
    for kernel in facts.kernels:
        rivals = index.rivals(kernel.nodes)
        chosen = [r for r in rivals if r.outcome is Outcome.CHOSEN and r.candidate.nodes == kernel.nodes]
        # (this failed once in a loaded full run, its message lost: the messages say what was compared)
        seen = [(r.backend, r.outcome.value, r.cost_s, r.covering_s, r.extra_nodes, r.candidate.key[:40])
                for r in rivals]
        assert len(chosen) == 1 and chosen[0].cost_s == kernel.cost_s, (kernel.id, kernel.cost_s, seen)
        for r in rivals:
            if r.outcome is Outcome.COSTLIER:
                assert r.margin_s is not None and r.margin_s > 0 and r.reason.startswith("costlier by"), \
                    (kernel.id, r.margin_s, r.reason)
            if r.outcome is Outcome.COSTLIER and r.extra_nodes == 0:
                # same primitives: the BLP's optimum can only be cheaper (exact comparison)
                assert r.cost_s is not None and r.cost_s > r.covering_s, (kernel.id, r.cost_s, r.covering_s, r.reason)


def test_explain_node_by_value_and_by_onnx_node(candy_plan: SavedPlan, index: ProfileIndex) -> None:
    """A primitive with a profiled rival that lost (every candidate was profiled, so one exists)."""
    facts = index.facts
    kernel, i = next((k, i) for k in facts.kernels for i in k.nodes
                     if any(r.outcome is Outcome.COSTLIER for r in index.rivals([i])))
    node = facts.graph.nodes[i]
    text = explain(facts, index, node=node.output, limit=1000)          # every rival, whatever the plan chose
    assert f"computed by {kernel.id}" in text and "chosen" in text and "onnxruntime" in text
    assert "costlier by" in text
    by_origin = explain(facts, index, node=node.origin)
    assert f"ONNX node {node.origin} became" in by_origin and node.output in by_origin


def test_explain_kernel_and_errors(index: ProfileIndex) -> None:
    facts = index.facts
    text = explain(facts, index, kernel="k0")
    assert text.startswith("k0") and "candidates it beat" in text
    with pytest.raises(UsageError, match="no such kernel"):
        explain(facts, index, kernel="k999")
    name = facts.graph.nodes[3].output
    with pytest.raises(UsageError, match="did you mean"):
        explain(facts, index, node=name + "x")


def test_cli_explain(candy_plan: SavedPlan, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", str(candy_plan.path)]) == 0
    assert "k0" in capsys.readouterr().out
    assert main(["-q", "explain", str(candy_plan.path), "--kernel", "k1", "--cache", str(candy_plan.cache)]) == 0
    out = capsys.readouterr()
    assert "candidates it beat" in out.out and out.err == ""
    assert main(["explain", str(candy_plan.path), "--node", "nope", "--cache", str(candy_plan.cache)]) != 0
    assert "no primitive output or ONNX node" in capsys.readouterr().err


def test_explain_says_why_the_plan_is_one_engines_whole_model(tmp_path) -> None:
    """A plan that is one engine running the whole model: the overview and the kernel say so and why,
    with measured times, and no rival is excused by an optimality gap the solver proved is zero."""
    from korch import zoo
    from korch.pipeline import optimize
    from korch.plan import save_plan
    from korch.settings import QUICK_CALIBRATION, QUICK_PROFILE, QUICK_SELECTION, OptimizeSettings

    # a split plan would have to run in no time to be kept: the whole model is the plan, whatever the timings
    never_split = dataclasses.replace(QUICK_SELECTION, multi_kernel_margin=0.0, contender_factor=1e9, split_within=1e9)
    # profiled in full, so that a split plan exists to be timed (guided by the prior, profiling may stop
    # before one is covered)
    settings = OptimizeSettings(threads=1, backends=("onnxruntime",), selection=never_split,
                                profile=dataclasses.replace(QUICK_PROFILE, guide_by_prior=False),
                                calibration=QUICK_CALIBRATION)
    with ProfileDB(tmp_path / "cache" / "profiles.sqlite") as db:
        plan, _, stats = optimize(zoo.to_model_proto("bert-mini"), db, settings)
        assert stats.selection.kept == "onnxruntime" and stats.selection.split_measured_ms is not None
        facts = load_facts(save_plan(plan, tmp_path / "plan"))
        index = ProfileIndex(facts, db, backends=("onnxruntime",))
    overview = explain(facts, None)
    assert f"measured {stats.selection.measured_ms:.4f} ms" in overview
    assert "why: one engine runs the whole model: the best split plan" in overview
    assert "measured" in overview and "onnxruntime's whole model" in overview
    text = explain(facts, index, kernel="k0", limit=10_000)
    assert "why: one engine runs the whole model" in text
    assert stats.selection.gap == 0 and "optimality gap" not in text
