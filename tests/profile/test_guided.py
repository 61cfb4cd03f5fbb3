"""Guided profiling: with a learned cost model, or on a new machine with the roofline prior alone,
only the kernels the BLP could choose are measured, the plan still passes its check, and a warm
optimize measures and solves nothing again."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from korch import zoo
from korch.candidates import region_candidates
from korch.costmodel import CostModelSettings
from korch.pipeline import optimize
from korch.profile.database import ProfileDB, machine_fingerprint
from korch.settings import QUICK_CALIBRATION, QUICK_PROFILE, QUICK_SELECTION, OptimizeSettings

SETTINGS = OptimizeSettings(threads=1, backends=("onnxruntime",), profile=QUICK_PROFILE, selection=QUICK_SELECTION,
                            calibration=QUICK_CALIBRATION, cost_model=CostModelSettings(min_rows=40, rounds=60))
IN_FULL = replace(SETTINGS, profile=replace(QUICK_PROFILE, guide_by_prior=False))


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A database that has profiled one model whole: enough for onnxruntime's cost model to learn."""
    path = tmp_path_factory.mktemp("cache") / "profiles.sqlite"
    with ProfileDB(path) as db:
        _, _, stats = optimize(zoo.to_model_proto("candy-mini"), db, IN_FULL)
    assert stats.guide.backends == () and stats.profiled_new > 100
    return path


def test_guided_profiling_measures_what_could_be_chosen_and_replays_warm(trained: Path) -> None:
    model = zoo.to_model_proto("segformer-mini")
    with ProfileDB(trained) as db:
        plan, _, cold = optimize(model, db, SETTINGS)       # raises if the plan fails its check
        _, _, warm = optimize(model, db, SETTINGS)
    assert cold.guide.backends == ("onnxruntime",) and cold.guide.stable and cold.guide.rounds >= 1
    assert cold.guide.skipped > 0 and cold.profiled_new + cold.profiled_cached < cold.unique_candidates
    assert warm.profiled_new == 0 and warm.guide.rounds == 0 and warm.guide.skipped == cold.guide.skipped
    assert cold.max_rel_error <= cold.check_tolerance
    assert warm.selection.kernels == cold.selection.kernels


def test_a_warm_run_does_not_retrain_the_cost_models_it_will_not_ask(trained: Path, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A finished guided problem is recognised by the saved cost models as they are: a warm run retrains
    none, though the database outgrew them (retrain_growth 1.0: any run finds them stale); the cold run,
    with a problem to solve, does retrain."""
    import shutil

    import korch.costmodel.model as costmodel

    trainings: list[str] = []
    train = costmodel.train

    def counted(rows, backend, *args, **kwargs):          # type: ignore[no-untyped-def]
        trainings.append(backend)
        return train(rows, backend, *args, **kwargs)

    monkeypatch.setattr(costmodel, "train", counted)
    shutil.copytree(trained.parent, tmp_path / "cache")       # (the saved cost models beside the database)
    db_path = tmp_path / "cache" / trained.name
    assert (db_path.parent / "costmodels").is_dir()
    eager = replace(SETTINGS, cost_model=replace(SETTINGS.cost_model, retrain_growth=1.0))
    model = zoo.to_model_proto("efficientvit-mini")     # (one no other test optimizes into `trained`)
    with ProfileDB(db_path) as db:
        _, _, cold = optimize(model, db, eager)
        retrained = list(trainings)
        trainings.clear()
        _, _, warm = optimize(model, db, eager)
    assert retrained == ["onnxruntime"] and cold.guide.rounds >= 1
    assert trainings == [] and warm.guide.rounds == 0 and warm.profiled_new == 0
    assert warm.selection.kernels == cold.selection.kernels


def test_optimism_from_a_random_samples_spread_measures_the_sample_first(trained: Path, tmp_path: Path,
                                                                        caplog: pytest.LogCaptureFixture) -> None:
    """ProfileSettings.guide_spread_sample: that many random pairs are measured before any solve, and
    their spread sets onnxruntime's optimism (logged, within [guide_optimism, 1]); the plan still
    passes its check and a warm run measures nothing."""
    import re
    import shutil

    db_path = tmp_path / "profiles.sqlite"
    shutil.copy(trained, db_path)
    spread = replace(SETTINGS, profile=replace(QUICK_PROFILE, guide_spread_sample=8))
    model = zoo.to_model_proto("segformer-mini")
    with caplog.at_level("INFO", logger="korch.profile"), ProfileDB(db_path) as db:
        _, _, cold = optimize(model, db, spread)
        _, _, warm = optimize(model, db, spread)
    said = re.search(r"from the spread of 8 random kernel\(s\) per backend, measured / rescaled predicted at least "
                     r"\(median\) onnxruntime ([0-9.]+) \(([0-9.]+); ([0-9]+) accepted\)", caplog.text)
    assert said is not None and QUICK_PROFILE.guide_optimism <= float(said.group(1)) <= 1.0
    assert float(said.group(2)) >= float(said.group(1))       # the expected cost, for the budget of uncertainty
    # ... from the sample's own ratios (timed with the whole models, before anything is predicted)
    assert int(said.group(3)) >= 2, said.group(0)
    assert cold.guide.stable and cold.profiled_new >= 8 and cold.max_rel_error <= cold.check_tolerance
    assert warm.profiled_new == 0 and warm.guide.rounds == 0 and warm.selection.kernels == cold.selection.kernels


def test_guided_profiling_can_be_turned_off(trained: Path) -> None:
    off = replace(SETTINGS, profile=replace(QUICK_PROFILE, guided=False))
    with ProfileDB(trained) as db:
        _, _, stats = optimize(zoo.to_model_proto("gpt-mini"), db, off)
    assert stats.guide.backends == () and stats.profiled_new + stats.profiled_cached >= stats.unique_candidates


def test_a_model_profiled_in_full_is_not_solved_again_once_its_backend_is_guided(trained: Path) -> None:
    """candy-mini was profiled in full before onnxruntime's model learned; now guided, nothing is left
    to measure, so no solve runs (a warm yolov4 spent 0.9 s on one)."""
    with ProfileDB(trained) as db:
        _, _, again = optimize(zoo.to_model_proto("candy-mini"), db, SETTINGS)
    assert again.guide.backends == ("onnxruntime",) and again.guide.rounds == 0 and again.profiled_new == 0


def test_a_new_machine_is_guided_by_the_roofline_prior(tmp_path: Path) -> None:
    """An empty database: onnxruntime's cost model has learned nothing, so its rescaled roofline prior
    guides. Fewer kernels are measured than profiling in full would, the plan passes its check, and a
    warm run measures and solves nothing."""
    model = zoo.to_model_proto("segformer-mini")
    with ProfileDB(tmp_path / "profiles.sqlite") as db:
        _, _, cold = optimize(model, db, SETTINGS)
        _, _, warm = optimize(model, db, SETTINGS)
    assert cold.guide.backends == ("onnxruntime",) and cold.guide.stable and cold.guide.skipped > 0
    assert cold.profiled_new < cold.unique_candidates
    assert cold.max_rel_error <= cold.check_tolerance
    assert warm.profiled_new == 0 and warm.guide.rounds == 0 and warm.selection.kernels == cold.selection.kernels


def test_the_best_split_plans_kernels_are_timed_again_once(trained: Path, tmp_path: Path,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    """ProfileSettings.guide_confirm_rounds (the winner's curse): once the loop is stable, the kernels
    of the best split plan over measured costs are timed a second time, that timing their record; off
    at 0. A warm run times nothing again. (Any split plan may be kept here, however slow beside the
    whole model, so that the mini model's loop never stops at the whole-model bar; nor at the regret
    stop, which ends the loop once its LP bound is within 3% of the whole model's profile, and so ended
    this one whenever the mini model's whole model profiled near its split plans: guide_regret 0.)"""
    import re
    import shutil

    model = zoo.to_model_proto("yolox-mini")       # (one no other test optimizes into `trained`)
    counts = {}
    for rounds in (0, 3):
        db_path = tmp_path / f"profiles-{rounds}.sqlite"
        shutil.copy(trained, db_path)
        settings = replace(SETTINGS, profile=replace(QUICK_PROFILE, guide_confirm_rounds=rounds, guide_regret=0.0),
                           selection=replace(QUICK_SELECTION, multi_kernel_margin=1e9))
        caplog.clear()
        with caplog.at_level("INFO", logger="korch.profile"), ProfileDB(db_path) as db:
            _, _, cold = optimize(model, db, settings)
            _, _, warm = optimize(model, db, settings)
        said = [int(n) for n in re.findall(r"the best split plan's (\d+) kernel\(s\) timed again", caplog.text)]
        assert cold.guide.stable and cold.max_rel_error <= cold.check_tolerance
        assert sum(said) == cold.guide.confirmed and warm.guide.confirmed == 0 and warm.profiled_new == 0
        counts[rounds] = cold.guide.confirmed
    assert counts[0] == 0 and counts[3] >= 1


def test_the_other_whole_model_is_timed_again_only_where_both_were_profiled_at_speed_in_different_link_states(
        ) -> None:
    from types import SimpleNamespace

    from korch.profile.guided import _other_state
    from korch.profile.profiler import ProfileOutcome

    def cand(key: str, size: int):
        return SimpleNamespace(key=key, size=size)

    pools = {"inductor": [cand("w", 10)], "openvino": [cand("w", 10), cand("s", 2)], "onnxruntime": [cand("w", 10)]}
    usable = {("w", "inductor"): 0.35, ("w", "openvino"): 0.30, ("w", "onnxruntime"): 0.60, ("s", "openvino"): 0.01}
    got = ProfileOutcome({}, 0, 0, 1e-3, None, link=(50.0, 700.0),
                         whole_links={"inductor": (52.0, 55.0), "openvino": (600.0, 650.0), "onnxruntime": (50.0, 51.0)},
                         whole_at_speed=frozenset({"inductor", "openvino", "onnxruntime"}))
    other = _other_state(got, "inductor", pools, usable, 10, 2)     # openvino's, the fastest other, is far
    assert other is not None and other[0] == "openvino" and other[1].key == "w" and other[2] == ("near", "far")
    same = replace(got, whole_links={**got.whole_links, "openvino": (51.0, 53.0)})
    assert _other_state(same, "inductor", pools, usable, 10, 2) is None
    slow = replace(got, whole_at_speed=frozenset({"inductor", "onnxruntime"}))   # openvino's not known at speed
    assert _other_state(slow, "inductor", pools, usable, 10, 2) is None
    assert _other_state(got, "inductor", {"inductor": pools["inductor"]}, usable, 10, 2) is None   # no other


def test_a_whole_model_profiled_with_the_link_moving_or_far_is_told_apart_from_one_profiled_near() -> None:
    from korch.profile.guided import _unsettled
    from korch.profile.profiler import ProfileOutcome

    got = ProfileOutcome({}, 0, 0, 1e-3, None, link=(50.0, 700.0),
                         whole_links={"onnxruntime": (50.0, 55.0), "openvino": (49.0, 356.0), "inductor": (600.0, 650.0),
                                      "apart": ()})
    why = _unsettled(got, ["onnxruntime", "openvino", "inductor", "apart", "never"], 2)
    assert set(why) == {"openvino", "inductor"}
    assert "moved" in why["openvino"] and "far" in why["inductor"]
    assert _unsettled(got, ["openvino"], 1) == {}                         # one thread: no link to cross
    far_only = ProfileOutcome({}, 0, 0, 1e-3, None, link=(590.0, 700.0), whole_links={"openvino": (600.0, 650.0)})
    assert _unsettled(far_only, ["openvino"], 2) == {}                   # nothing nearer read in the run


def test_the_faster_of_two_profiles_is_kept_with_its_own_link_readings() -> None:
    from korch.profile.database import Record, Status
    from korch.profile.guided import _faster_kept
    from korch.profile.profiler import ProfileOutcome

    def record(median: float) -> Record:
        return Record("w", "openvino", "v", 2, "m", median, median, median, 3, Status.OK)

    class Stored:
        def __init__(self) -> None:
            self.put_back: list[Record] = []

        def put(self, r: Record) -> None:
            self.put_back.append(r)

    pair = ("w", "openvino")
    more = ProfileOutcome({pair: record(0.30)}, 1, 0, 1e-3, None, whole_links={"openvino": (600.0, 650.0)},
                          whole_at_speed=frozenset({"openvino"}), hot_beside={pair: 0.29})
    db = Stored()
    kept = _faster_kept(more, record(0.25), pair, db)         # the earlier profile was faster
    assert kept.records[pair].median_s == 0.25 and [r.median_s for r in db.put_back] == [0.25]
    assert kept.whole_links == {} and kept.whole_at_speed == frozenset() and kept.hot_beside == {}
    db = Stored()
    assert _faster_kept(more, record(0.35), pair, db) is more and db.put_back == []      # the new one was
    assert _faster_kept(more, None, pair, db) is more


def test_a_whole_model_profiled_far_is_timed_again_once_and_keeps_the_faster_profile(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """At 2 threads, with a core link read near once and far ever after (the host moved the vCPUs
    apart while the whole model was timed, or before), guided profiling times onnxruntime's whole model once
    more and keeps the faster of its two profiles; off (ProfileSettings.settle_whole_models), it does
    not. A warm run times nothing again."""
    import re
    import sqlite3

    from korch.profile import link

    calls = iter(range(10**9))

    def reader(*args, **kwargs):
        return lambda: 50.0 if next(calls) == 0 else 400.0

    monkeypatch.setattr(link, "reader", reader)
    model = zoo.to_model_proto("candy-mini")
    said: dict[bool, list[tuple[float, float]]] = {}
    for settle in (True, False):
        calls = iter(range(10**9))
        settings = replace(SETTINGS, threads=2, profile=replace(QUICK_PROFILE, settle_whole_models=settle))
        path = tmp_path / f"p-{settle}.sqlite"
        caplog.clear()
        with caplog.at_level("INFO", logger="korch.profile"), ProfileDB(path) as db:
            plan, _, cold = optimize(model, db, settings)
            # the run's nearest reading is kept as the machine's, for a bench that reads far throughout
            read = [x for v in cold.whole_model_link_ns.values() for x in v] + list(cold.profile_link_ns or ())
            assert read and db.nearest_link(machine_fingerprint()) == min(read)
            said[settle] = [(float(a), float(b)) for a, b in re.findall(
                r"onnxruntime: its whole model profiled at ([\d.]+) ms, but the core link (?:moved|was far) during "
                r"its timing \((?:50|400) / 400 ns[^)]*\): timed again at ([\d.]+) ms", caplog.text)]
            caplog.clear()
            _, _, warm = optimize(model, db, settings)
            assert "timed again at" not in caplog.text and warm.profiled_new == 0
        assert cold.max_rel_error <= cold.check_tolerance
        whole = next(c for c in region_candidates(plan.graph) if c.size == len(plan.graph.nodes))
        with sqlite3.connect(path) as conn:          # (not the longest kernel: under load a small one can be)
            (whole_s,), = conn.execute("SELECT median_s FROM profiles WHERE backend = 'onnxruntime' "
                                       "AND threads = 2 AND candidate_key = ?", (whole.key,)).fetchall()
        if settle:
            assert len(said[True]) == 1
            first, again = said[True][0]
            assert abs(whole_s * 1e3 - min(first, again)) < 0.01
    assert said[False] == []


def test_a_whole_model_profiled_far_before_the_link_was_read_near_is_timed_again_after_the_rounds(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """The core link reads far until guided profiling first settles its whole models, near after (the
    speed watch reads it beside every kernel): then onnxruntime's whole model, profiled far, looks
    settled (nothing nearer read yet); after the rounds it is timed again, judged against the near
    readings, and the faster of its two profiles is kept."""
    import re
    import sqlite3

    import korch.profile.guided as guided
    from korch.profile import link

    near = [False]

    def reader(*args, **kwargs):
        return lambda: 50.0 if near[0] else 400.0

    settle = guided._settle_wholes
    settled: list[bool] = []

    def settle_then_near(*args, **kwargs):
        settled.append(near[0])
        timed = settle(*args, **kwargs)
        near[0] = True
        return timed

    monkeypatch.setattr(link, "reader", reader)
    monkeypatch.setattr(guided, "_settle_wholes", settle_then_near)
    settings = replace(SETTINGS, threads=2, profile=replace(QUICK_PROFILE, watch_interval_s=0.0,
                                                            watch_sentinel_s=(0.0, 1.0)))
    path = tmp_path / "p.sqlite"
    with caplog.at_level("INFO", logger="korch.profile"), ProfileDB(path) as db:
        plan, _, cold = optimize(zoo.to_model_proto("candy-mini"), db, settings)
    assert settled == [False, True], settled      # before the rounds (all far), after them (near read)
    said = [(float(a), float(b)) for a, b in re.findall(
        r"onnxruntime: its whole model profiled at ([\d.]+) ms, but the core link was far during its timing "
        r"\(400 / 400 ns, against 50 ns read in this run\): timed again at ([\d.]+) ms", caplog.text)]
    assert len(said) == 1, caplog.text
    assert cold.max_rel_error <= cold.check_tolerance
    whole = next(c for c in region_candidates(plan.graph) if c.size == len(plan.graph.nodes))
    with sqlite3.connect(path) as conn:
        (whole_s,), = conn.execute("SELECT median_s FROM profiles WHERE backend = 'onnxruntime' "
                                   "AND threads = 2 AND candidate_key = ?", (whole.key,)).fetchall()
    assert abs(whole_s * 1e3 - min(said[0])) < 0.01
