"""What measured selection says it kept, and why, names the comparison that decided it; a duel is
decided round by round."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest

import korch.select.measured as measured
from korch.profile.timing import summarize
from korch.select.measured import SPLIT, Duel, _duel, _rounds, _why_split, _why_whole
from korch.settings import ProfileSettings, SelectionSettings

SETTINGS = SimpleNamespace(selection=SelectionSettings(multi_kernel_margin=0.98, duel_rounds=5))


def test_a_split_plan_that_beat_one_engine_and_lost_to_another_is_reported_by_the_duel_it_lost() -> None:
    ctx = SimpleNamespace(settings=SETTINGS, excluded=())
    plan = SimpleNamespace(steps=tuple(range(8)), kernels_by_backend=lambda: {"inductor": 3, "openvino": 5})
    split = SimpleNamespace(plan=plan, measured_s=0.0806, predicted_s=0.079)
    duels = [Duel(SPLIT, "openvino", 0.0806, 0.0826, SPLIT, ratio=1.024),    # the split plan wins this one
             Duel(SPLIT, "inductor", 0.0830, 0.0842, "inductor", ratio=1.012)]  # and loses this one, by the margin
    why = _why_whole(ctx, "inductor", split, duels, {})               # type: ignore[arg-type]
    assert why == ("one engine runs the whole model: the best split plan (8 kernels: 5 openvino, 3 inductor) "
                   "measured 83.0 ms side by "
                   "side with inductor's whole model 84.2 ms, 0.988x its time round by round; a split plan must "
                   "run in 0.98x to pay for its boundaries; kept inductor's whole model 84.2 ms (other whole "
                   "models, side by side: openvino's 82.6 ms (1.024x the split plan's round by round))")
    assert "(0.977x its time)" in _why_split(ctx, split, duels[:1])    # type: ignore[arg-type]


@pytest.mark.parametrize("guided, whole_models", [(True, False), (False, False), (True, True)])
def test_no_split_plan_after_guided_profiling_says_that_guidance_stopped_measuring(guided: bool,
                                                                                   whole_models: bool) -> None:
    """Guided profiling stops once no split plan could beat the fastest whole model: the kernels it
    measured may then cover no split plan, which is not the same as no split plan existing; with
    whole_models no split plan was looked for."""
    settings = SimpleNamespace(selection=SETTINGS.selection, backends=("onnxruntime", "openvino"),
                               profile=ProfileSettings(guided=guided), whole_models=whole_models)
    ctx = SimpleNamespace(settings=settings, excluded=(), whole={})
    duels = [Duel("onnxruntime", "openvino", 0.0150, 0.0162, "onnxruntime", ratio=1.08)]
    why = _why_whole(ctx, "onnxruntime", None, duels, {})               # type: ignore[arg-type]
    assert why.startswith("one engine runs the whole model: ") and why.endswith(
        "kept onnxruntime's whole model 15.0 ms (other whole models, side by side: openvino's 16.2 ms "
        "(1.080x onnxruntime's round by round))"), why
    searched = not whole_models
    assert ("guided profiling measures kernels only while a split plan could still beat" in why) is (
        guided and searched), why
    assert ("no split plan exists over the profiled kernels" in why) is (not guided and searched), why
    assert ("whole-model kernels only were profiled" in why) is whole_models, why


def test_a_whole_model_kept_on_the_rounds_against_a_faster_median_says_so() -> None:
    """gpt2-small on the Intel host: OpenVINO's median 120 ms against Inductor's 126, Inductor kept,
    because round by round Inductor ran faster; the reason shows the ratio that decided."""
    settings = SimpleNamespace(selection=SETTINGS.selection, backends=("openvino", "inductor"),
                               profile=ProfileSettings(guided=False), whole_models=True)
    ctx = SimpleNamespace(settings=settings, excluded=(), whole={})
    duels = [Duel("openvino", "inductor", 0.120, 0.126, "inductor", ratio=0.97)]
    why = _why_whole(ctx, "inductor", None, duels, {})               # type: ignore[arg-type]
    assert why.endswith("kept inductor's whole model 126 ms (other whole models, side by side: openvino's "
                        "120 ms (1.031x inductor's round by round))"), why


def _timings(samples_ms: dict[str, list[float]]) -> dict[str, object]:
    return {k: replace(summarize([v / 1e3 for v in vs]), samples_s=tuple(v / 1e3 for v in vs))
            for k, vs in samples_ms.items()}


@pytest.mark.parametrize("split_first", [True, False])
def test_a_duel_is_decided_by_the_ratio_within_rounds_not_by_the_medians(split_first: bool,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The machine slows down for rounds 3-5, and in round 5 the split plan's turn is lucky. Its median
    reads 5% under the whole model's, yet round by round it runs in 0.985x the whole model's time:
    short of the 2% a split plan must win by."""
    samples = {SPLIT: [98.5, 98.5, 102.4, 102.4, 94.0], "onnxruntime": [100.0, 100.0, 104.0, 104.0, 104.0]}
    monkeypatch.setattr(measured, "side_by_side", lambda fns, *args, **kwargs: _timings(samples))
    ctx = SimpleNamespace(settings=SETTINGS, feeds={}, links=None, around=lambda timing: (timing(), None))
    split = SimpleNamespace(name=SPLIT, session=None, estimate_s=0.1)
    whole = SimpleNamespace(name="onnxruntime", session=None, estimate_s=0.1)
    duel = _duel(ctx, *((split, whole) if split_first else (whole, split)))      # type: ignore[arg-type]
    assert duel.of(SPLIT)[0] / duel.of(SPLIT)[2] == pytest.approx(98.5 / 104.0)
    assert duel.ratio_of(SPLIT) == pytest.approx(102.4 / 104.0)        # rounds 1-2: 0.985, 3-4: 0.985, 5: 0.904
    assert duel.winner == "onnxruntime" and duel.loser == SPLIT

    samples[SPLIT] = [97.0, 97.0, 101.0, 101.0, 101.0]                   # 0.97-0.971x in every round
    assert _duel(ctx, *((split, whole) if split_first else (whole, split))).winner == SPLIT  # type: ignore[arg-type]


@pytest.mark.parametrize(("challenger_ms", "winner"), [(99.0, "openvino"), (98.0, "inductor"), (95.0, "inductor")])
def test_a_whole_model_replaces_the_champion_whole_model_only_by_the_switch_margin(
        challenger_ms: float, winner: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """OpenVINO's whole model, the cheaper by profile, is the champion. Inductor's beats it round by
    round by 1% (noise: the champion stays), by 2% (the margin) or by 5%."""
    samples = {"openvino": [100.0] * 5, "inductor": [challenger_ms] * 5}
    monkeypatch.setattr(measured, "side_by_side", lambda fns, *args, **kwargs: _timings(samples))
    ctx = SimpleNamespace(settings=SETTINGS, feeds={}, links=None, around=lambda timing: (timing(), None))
    champion = SimpleNamespace(name="openvino", session=None, estimate_s=0.1)
    challenger = SimpleNamespace(name="inductor", session=None, estimate_s=0.12)
    assert SETTINGS.selection.switch_margin == 0.98
    assert _duel(ctx, champion, challenger).winner == winner          # type: ignore[arg-type]


@pytest.mark.parametrize(("states", "winner", "tries"), [
    (["far", "near"], "onnxruntime", 2),       # compared again, near: that verdict
    (["far", "far"], "openvino", 2),           # far both times: the first
    (["moving", "far"], "openvino", 2),        # moving, then far: the one with some rounds near
    (["far", "moving"], "onnxruntime", 2),
    (["unread", "far"], "openvino", 2),        # the probe read nothing: ranked as moving, not far
    (["far", "unread"], "onnxruntime", 2),
    (["near"], "openvino", 1),                 # near at once: not again
])
def test_a_duel_run_with_the_core_link_far_or_moving_is_run_again_and_the_nearest_kept(
        states: list[str], winner: str, tries: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """yolox-nano at 2 threads: side by side with the link far, OpenVINO's whole model beat
    onnxruntime's by 1.196x; benched mostly near, it ran 0.93x onnxruntime's. A comparison that ran
    far or moving is run once more (SelectionSettings.duel_link_retries), and the verdict is the one
    taken nearest the near state."""
    calls = iter([{"openvino": [12.9] * 5, "onnxruntime": [15.5] * 5},     # each comparison's samples
                  {"openvino": [10.7] * 5, "onnxruntime": [10.0] * 5}])
    monkeypatch.setattr(measured, "side_by_side", lambda fns, *args, **kwargs: _timings(next(calls)))
    said = iter(states)
    ctx = SimpleNamespace(settings=SETTINGS, feeds={}, links=SimpleNamespace(nearest=50.0), whole_states={},
                          around=lambda timing: (timing(), next(said)))
    champion = SimpleNamespace(name="openvino", session=None, estimate_s=0.00855)
    challenger = SimpleNamespace(name="onnxruntime", session=None, estimate_s=0.00892)
    duel = _duel(ctx, champion, challenger)                             # type: ignore[arg-type]
    assert (duel.winner, duel.tries) == (winner, tries)
    assert duel.state == {"openvino": states[0], "onnxruntime": states[-1]}[winner]
    off = SimpleNamespace(settings=SimpleNamespace(selection=replace(SETTINGS.selection, duel_link_retries=0)),
                          feeds={}, links=SimpleNamespace(nearest=50.0), whole_states={},
                          around=lambda timing: (timing(), "far"))
    calls = iter([{"openvino": [12.9] * 5, "onnxruntime": [15.5] * 5}])
    assert _duel(off, champion, challenger).tries == 1                  # type: ignore[arg-type]
    unread = SimpleNamespace(**{**vars(off), "settings": SETTINGS, "links": SimpleNamespace(nearest=None)})  # none read
    calls = iter([{"openvino": [12.9] * 5, "onnxruntime": [15.5] * 5}])
    assert _duel(unread, champion, challenger).tries == 1               # type: ignore[arg-type]


@pytest.mark.parametrize(("states", "profiled", "winner"), [
    (["far", "far"], {"onnxruntime": "near", "openvino": "near"}, "onnxruntime"),   # never near: the profiles
    (["far", "moving"], {"onnxruntime": "near", "openvino": "near"}, "onnxruntime"),
    (["far", "far"], {"onnxruntime": "near", "openvino": "far"}, "openvino"),       # not both near: the duel
    (["far", "far"], {"onnxruntime": "near"}, "openvino"),
    (["far", "near"], {"onnxruntime": "near", "openvino": "near"}, "openvino"),     # a near duel: its verdict
])
def test_two_whole_models_never_compared_near_are_judged_by_their_profiles_taken_near(
        states: list[str], profiled: dict[str, str], winner: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """yolox-nano at 2 threads: onnxruntime's and OpenVINO's whole models profiled near at 8.36 and
    9.04 ms met side by side twice with the link far (15.9 against 12.9 ms), and OpenVINO's was kept;
    the bench ran it 0.93x onnxruntime's in its near rounds. Where no comparison ran near and both
    were profiled near, their profiles decide; a comparison that ran near still does."""
    calls = iter([{"onnxruntime": [15.9] * 5, "openvino": [12.9] * 5},
                  {"onnxruntime": [10.0] * 5, "openvino": [9.5] * 5}])        # (near: OpenVINO 0.95x)
    monkeypatch.setattr(measured, "side_by_side", lambda fns, *args, **kwargs: _timings(next(calls)))
    said = iter(states)
    ctx = SimpleNamespace(settings=SETTINGS, feeds={}, links=SimpleNamespace(nearest=50.0), whole_states=profiled,
                          around=lambda timing: (timing(), next(said)))
    champion = SimpleNamespace(name="onnxruntime", session=None, estimate_s=0.00836)
    challenger = SimpleNamespace(name="openvino", session=None, estimate_s=0.00904)
    duel = _duel(ctx, champion, challenger)                             # type: ignore[arg-type]
    assert duel.winner == winner and duel.tries == 2
    decided = states[-1] != "near" and set(profiled.values()) == {"near"} and len(profiled) == 2
    assert duel.profiled == decided
    if decided:
        assert duel.ratio == pytest.approx(9.04 / 8.36)
        assert _rounds(duel) == (f" (side by side with the core link {duel.state}; 1.081x onnxruntime's by "
                                 "their profiles, both taken near)")


@pytest.mark.parametrize(("split_ms", "expected"), [
    (None, ["onnxruntime", "openvino"]),           # no split plan timed: within 1.25x of the cheapest profile
    (25.0, ["onnxruntime", "openvino"]),           # a split plan a little faster: the same
    (18.0, ["onnxruntime"]),                       # much faster: only the cheapest joins (it always does)
    (47.7, ["onnxruntime", "openvino"]),           # read slow: the cheapest whole model's profile bounds the bar
])
def test_contenders_are_within_the_factor_of_the_faster_of_the_split_plan_and_the_cheapest_whole(
        split_ms: float | None, expected: list[str]) -> None:
    """Inductor's whole model (44.4 ms) is a contender only if something could be that slow: a split plan
    timed at 47.7 ms in a slow spell no longer makes it one while onnxruntime's profiled at 25.3 ms."""
    whole = {"onnxruntime": SimpleNamespace(cost=25.3e-3), "openvino": SimpleNamespace(cost=30.4e-3),
             "inductor": SimpleNamespace(cost=44.4e-3)}
    ctx = SimpleNamespace(settings=SimpleNamespace(selection=SelectionSettings(contender_factor=1.25)), whole=whole)
    split = None if split_ms is None else SimpleNamespace(measured_s=split_ms * 1e-3)
    assert measured._contenders(ctx, split) == expected


class _Compiled(Exception):
    """Raised by the fake context's compile: the split plan got as far as compiling."""


@pytest.mark.parametrize(("predicted_ms", "within", "compiled"), [
    (25.0, 1.0, True),             # predicted below the cheapest whole model: compiled and timed
    (25.4, 1.0, False),            # predicted just above it (default): its prediction is the reason
    (25.4, 1.25, True),            # within a looser factor (QUICK_SELECTION's): compiled
    (32.0, 1.25, False),
])
def test_a_split_plan_is_compiled_only_if_predicted_within_split_within_of_the_cheapest_whole_model(
        predicted_ms: float, within: float, compiled: bool) -> None:
    """A split plan's prediction errs low (its kernels run slower in a plan than profiled), so one
    predicted slower than the cheapest whole model is not compiled and timed to lose."""
    whole = {"onnxruntime": SimpleNamespace(cost=25.3e-3), "openvino": SimpleNamespace(cost=30.4e-3)}
    selection = SimpleNamespace(seconds=0.01, boundary_s=0.2e-3)
    plan = SimpleNamespace(steps=("a", "b"))

    def compile_(plan):
        raise _Compiled

    ctx = SimpleNamespace(settings=SimpleNamespace(selection=SelectionSettings(split_within=within)), whole=whole,
                          solve=lambda costs, bar=None: selection, costed=lambda costs: costs,
                          plan=lambda sel: (plan, predicted_ms * 1e-3), compile=compile_, uncalibrated=lambda plan: [])
    if compiled:
        with pytest.raises(_Compiled):
            measured._best_split(ctx, {})
        return
    timed, rounds, _, _ = measured._best_split(ctx, {})
    assert timed.session is None and timed.measured_s is None and timed.predicted_s == pytest.approx(predicted_ms * 1e-3)
    assert rounds == 0
    assert SelectionSettings().split_within == 1.0


@pytest.mark.parametrize(("other_ms", "joins"), [(30.0, True), (40.0, False)])
def test_a_second_look_times_the_other_with_look_repeats_and_joins_within_the_factor(other_ms: float, joins: bool) -> None:
    """A second look asks a coarse question (was a profile beyond contender_factor a slow spell?), so
    the other whole model is timed with `look_repeats` calls, not a plan's full timing, against the
    champion's time taken just before (the champion itself may be gone meanwhile: _compare); the
    other joins if within the factor of it, else its session goes."""
    calls = []

    def time(session, repeats=None):
        calls.append((session, repeats))
        return {"other": other_ms * 1e-3}[session]

    settings = SimpleNamespace(selection=SelectionSettings(contender_factor=1.25, look_repeats=3))
    ctx = SimpleNamespace(settings=settings, time=time, around=lambda timing: (timing(), None), whole_states={})
    champion = SimpleNamespace(name="openvino", session=None, estimate_s=25e-3)
    other = SimpleNamespace(name="onnxruntime", session="other", estimate_s=80e-3)
    assert measured._second_look(ctx, 25e-3, champion, other) is joins            # type: ignore[arg-type]
    assert calls == [("other", 3)]
    assert (other.session is None) is (not joins)


@pytest.mark.parametrize(("champion_name", "look_state", "bar_state", "profile_state", "joins"), [
    ("openvino", "near", "near", "near", True),       # one state: held to the bar (351 <= 1.25 x 282)
    ("openvino", "near", "far", "near", False),       # the bar ran far: held to the profile taken near
    ("openvino", "near", None, "near", False),        # ... or while the link moved
    ("openvino", "near", "far", "far", True),         # no profile in the look's state: the bar
    ("openvino", None, "far", "near", True),          # the look's own state unknown: the bar
    (SPLIT, "near", "far", None, True),               # a split champion has no profile: the bar
])
def test_a_second_look_in_another_link_state_than_the_bar_is_held_to_the_champions_profile_in_its_state(
        champion_name: str, look_state: str | None, bar_state: str | None, profile_state: str | None,
        joins: bool) -> None:
    """yolov4 at 4f974b9 (the link not read around looks then): OpenVINO's whole model (profiled 238 ms,
    link near) timed 282 ms as the bar, Inductor's then 351 ms: within 1.25x of the bar, it joined a
    duel and lost at 1.56x. These are those times, with the states the test gives them."""
    reads = []

    def around(timing):
        reads.append(1)
        return timing(), look_state

    settings = SimpleNamespace(selection=SelectionSettings(contender_factor=1.25, look_repeats=3))
    ctx = SimpleNamespace(settings=settings, time=lambda session, repeats=None: 351e-3, around=around,
                          whole_states={champion_name: profile_state})
    champion = SimpleNamespace(name=champion_name, session=None, estimate_s=237.6e-3)
    other = SimpleNamespace(name="inductor", session="other", estimate_s=358e-3)
    assert measured._second_look(ctx, 282e-3, champion, other, bar_state) is joins   # type: ignore[arg-type]
    assert reads == [1] and (other.session is None) is (not joins)


@pytest.mark.parametrize(("states", "cost_ms", "look"), [
    ({"openvino": "near", "inductor": "near"}, 40.0, False),      # one state, both at speed: no look
    ({"openvino": "one thread", "inductor": "one thread"}, 40.0, False),
    ({"openvino": "far", "inductor": "near"}, 40.0, True),        # profiled in different link states
    ({"openvino": "near", "inductor": None}, 40.0, True),         # changed state, or slow, or not profiled here
    ({"inductor": "near"}, 40.0, True),
    ({"openvino": "near", "inductor": "near"}, 30.0, True),       # within the factor of the cheapest's profile
])
def test_a_whole_model_beyond_the_factor_gets_a_second_look_unless_both_profiles_were_taken_in_one_state(
        states: dict, cost_ms: float, look: bool) -> None:
    """The look guards against a profile the machine slowed. Two profiles taken at the machine's speed
    in one core-link state compare as they are; any other pair, or one beyond the factor only of the
    split plan's measured time (the bar contenders are admitted by), still gets its look."""
    settings = SimpleNamespace(selection=SelectionSettings(contender_factor=1.25))
    whole = {"openvino": SimpleNamespace(cost=25e-3), "inductor": SimpleNamespace(cost=cost_ms * 1e-3)}
    ctx = SimpleNamespace(settings=settings, whole=whole, whole_states=states)
    why = measured._profiles_compare(ctx, "inductor")                           # type: ignore[arg-type]
    assert (why is None) is look
    if not look:
        assert why.startswith(f"inductor's whole model, profiled at {cost_ms:.1f} ms, 1.60x openvino's whole model "
                              "profiled in the same state (")
