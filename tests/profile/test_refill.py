"""A split kernel priced as it runs inside a plan (korch/profile/refill.py, guided.Refills): its time
after a sweep where it was timed so, else its profile plus the median refill of its backend's
nearest samples; samples stored per machine, threads and backend version; the guided loop's
sample of random kernels and its second timing of the best plan's kernels add to them."""

from __future__ import annotations

import math
import sqlite3
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from korch.candidates import enumerate_candidates
from korch.profile.database import ProfileDB, Record
from korch.profile.guided import Refills, SplitProblem, _confirm, _sample_refills, touched_bytes
from korch.profile.profiler import ProfileOutcome
from korch.profile.refill import RefillModel, RefillSample
from korch.profile.timing import Timing
from korch.settings import OptimizeSettings
from tests.backends.graphs import conv_bias_relu

MIB = 1 << 20


def _sample(key: str, touched_mib: float, refill_ms: float, backend: str = "onnxruntime", evict_mib: float = 640,
            hot_ms: float = 1.0) -> RefillSample:
    return RefillSample(key, backend, int(touched_mib * MIB), int(evict_mib * MIB), hot_ms * 1e-3,
                        (hot_ms + refill_ms) * 1e-3)


def test_a_kernel_is_charged_the_median_refill_of_its_backends_nearest_samples() -> None:
    small = [_sample(f"s{k}", 0.5 + 0.1 * k, 0.2) for k in range(5)]
    large = [_sample(f"l{k}", 200 + 10 * k, 2.0) for k in range(5)]
    odd = _sample("odd", 210, -9.0, hot_ms=20.0)  # read faster after the sweep: one reading out of line
    model = RefillModel.of([*small, *large, odd], neighbours=5)
    assert model.predict("onnxruntime", int(0.6 * MIB), 640 * MIB) == pytest.approx(0.2e-3)
    assert model.predict("onnxruntime", 205 * MIB, 640 * MIB) == pytest.approx(2.0e-3)   # the odd one outvoted
    assert model.predict("openvino", 205 * MIB, 640 * MIB) == 0.0          # no sample of that backend
    assert model.predict("onnxruntime", 205 * MIB, 0) == 0.0               # nothing evicted, nothing to refill
    # the nearest in bytes evicted too: a kernel of a small model whose plan sweeps little
    little = [_sample(f"e{k}", 200, 0.05, evict_mib=16) for k in range(5)]
    both = RefillModel.of([*large, *little], neighbours=5)
    assert both.predict("onnxruntime", 200 * MIB, 16 * MIB) == pytest.approx(0.05e-3)
    assert both.predict("onnxruntime", 200 * MIB, 640 * MIB) == pytest.approx(2.0e-3)
    # a negative median is no refill; fewer samples than neighbours: all of them
    assert RefillModel.of([odd]).predict("onnxruntime", MIB, MIB) == 0.0
    assert RefillModel.of(small[:2]).predict("onnxruntime", 300 * MIB, MIB) == pytest.approx(0.2e-3)


def test_a_kernels_latest_sample_counts() -> None:
    model = RefillModel.of([_sample("a", 1, 0.5), _sample("b", 1, 0.3), _sample("a", 1, 0.1)])
    assert model.count("onnxruntime") == 2 and model.count("openvino") == 0
    extra = model.refills({("a", "openvino"): (MIB, 640 * MIB), ("c", "onnxruntime"): (MIB, 640 * MIB)})
    assert extra == {("a", "openvino"): 0.0, ("c", "onnxruntime"): pytest.approx(0.2e-3)}   # median of 0.1, 0.3


@pytest.mark.parametrize("bad", [dict(hot_s=0.0), dict(evicted_s=math.nan), dict(touched_bytes=-1)])
def test_a_sample_that_is_not_a_timing_is_refused(bad) -> None:
    with pytest.raises(ValueError):
        replace(_sample("a", 1, 0.1), **bad)
    with pytest.raises(ValueError, match="neighbour"):
        RefillModel.of([], neighbours=0)


def test_samples_are_stored_per_backend_version_threads_and_machine(tmp_path: Path) -> None:
    samples = [_sample("a", 1, 0.5), _sample("b", 4, 0.7, backend="openvino")]
    with ProfileDB(tmp_path / "p.sqlite") as db:
        db.put_refills(samples, {"onnxruntime": "v1", "openvino": "w1"}, 2, "m")
        assert db.refills("onnxruntime", "v1", 2, "m") == [samples[0]]
        assert db.refills("openvino", "w1", 2, "m") == [samples[1]]
        assert db.refills("onnxruntime", "v2", 2, "m") == [] and db.refills("onnxruntime", "v1", 1, "m") == []
        assert db.refills("onnxruntime", "v1", 2, "other") == []
        db.put_refills([replace(samples[0], evicted_s=9e-3)], {"onnxruntime": "v1"}, 2, "m")    # timed again: replaced
        assert [s.evicted_s for s in db.refills("onnxruntime", "v1", 2, "m")] == [9e-3]


def test_a_database_from_before_refills_gets_the_table_and_a_damaged_row_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / "p.sqlite"
    with ProfileDB(path) as db:
        db.count()
    conn = sqlite3.connect(path)
    conn.execute("DROP TABLE refills")
    conn.commit()
    conn.close()
    with ProfileDB(path) as db:
        assert db.refills("onnxruntime", "v1", 2, "m") == []       # the table made again on open
        db.put_refills([_sample("a", 1, 0.5)], {"onnxruntime": "v1"}, 2, "m")
    conn = sqlite3.connect(path)
    conn.execute("INSERT INTO refills VALUES ('bad', 'onnxruntime', 'v1', 2, 'm', 1, 1, 0.0, 1.0, 0)")
    conn.commit()
    conn.close()
    with ProfileDB(path) as db:
        assert [s.candidate_key for s in db.refills("onnxruntime", "v1", 2, "m")] == ["a"]


def _conv_problem():
    graph = conv_bias_relu(np.random.default_rng(0))
    cands = enumerate_candidates(graph, OptimizeSettings().limits)
    pools = {"onnxruntime": cands, "openvino": cands}
    return graph, pools


def _record(key: str, backend: str, seconds: float, created: float = 1.0) -> Record:
    r = Record.ok(key, backend, "v", 2, "m", Timing(seconds, seconds, seconds, 5))
    return replace(r, created_at=created)


def test_refills_price_a_split_kernel_at_its_time_after_the_sweep_else_profile_plus_refill(tmp_path: Path) -> None:
    graph, pools = _conv_problem()
    whole = len(graph.nodes)
    split = [c for c in pools["onnxruntime"] if c.size < whole]
    total = sum(touched_bytes(graph, c) for c in split)
    with ProfileDB(tmp_path / "p.sqlite") as db:
        refills = Refills(graph, pools, db, {"onnxruntime": "v", "openvino": "w"}, 2, "m", cap=1 << 40, neighbours=3)
        assert all(c.size < whole for c in split) and len(refills.kernels) == 2 * len({c.key for c in split})
        assert not any(c.size == whole for name in pools for c in pools[name]
                       if (c.key, name) in refills.kernels)                   # a whole model runs alone
        some = split[0]
        touched, evict = refills.kernels[(some.key, "onnxruntime")]
        assert touched == touched_bytes(graph, some) and 0 < evict <= total
        assert refills.price((some.key, "onnxruntime"), 1e-3) == 1e-3         # no samples: its profile
        samples = [RefillSample(c.key, "onnxruntime", *refills.kernels[(c.key, "onnxruntime")], 1e-3, 1.5e-3)
                   for c in split[:3]]
        refills.add(samples)
        assert len(db.refills("onnxruntime", "v", 2, "m")) == 3                # stored
        assert refills.price((split[0].key, "onnxruntime"), 1e-3) == pytest.approx(1.5e-3)   # timed after the sweep
        other = next(c for c in split if c.key not in {s.candidate_key for s in samples})
        assert refills.price((other.key, "onnxruntime"), 2e-3) == pytest.approx(2.5e-3)      # profile + refill
        assert refills.price((other.key, "openvino"), 2e-3) == 2e-3           # no openvino sample
        again = Refills(graph, pools, db, {"onnxruntime": "v", "openvino": "w"}, 2, "m", cap=1 << 40, neighbours=3)
        assert again.price((other.key, "onnxruntime"), 2e-3) == pytest.approx(2.5e-3)        # read back
        off = Refills(graph, pools, db, {"onnxruntime": "v"}, 2, "m", cap=0, neighbours=3)     # nothing evicted
        assert off.price((other.key, "onnxruntime"), 2e-3) == 2e-3 and off.price((split[0].key, "onnxruntime"), 1e-3) == 1e-3


def test_the_split_plan_solve_pays_the_refill_of_every_kernel_it_chooses(tmp_path: Path) -> None:
    """One kernel per primitive at 1.0 ms each, against a two-primitive kernel of 2.1 ms and a single
    for the rest: back to back the singles win (3.0 against 3.1 ms); with 0.2 ms of refill on every
    kernel the fewer kernels do (3.5 against 3.6)."""
    graph, pools = _conv_problem()
    whole = len(graph.nodes)
    cands = [c for c in pools["onnxruntime"] if c.size < whole]
    singles = [c for c in cands if c.size == 1]
    big = next(c for c in cands if c.size == whole - 1)
    assert whole == 3 and len(singles) == 3
    costs = {(c.key, "onnxruntime"): 1.0e-3 for c in singles}
    costs[(big.key, "onnxruntime")] = 2.1e-3
    only = {"onnxruntime": [*singles, big]}
    plain = SplitProblem(graph, only)
    assert {plain.pairs[o.key] for o in plain.solve(costs, {}, {}).chosen} == {(c.key, "onnxruntime") for c in singles}
    with ProfileDB(tmp_path / "p.sqlite") as db:
        refills = Refills(graph, only, db, {"onnxruntime": "v"}, 2, "m", cap=1 << 40, neighbours=3)
        refills.add([RefillSample("elsewhere", "onnxruntime", 1 << 10, 1 << 20, 1e-3, 1.2e-3)])
        priced = SplitProblem(graph, only, refills=refills)
        best = priced.solve(costs, {}, {})
        assert (big.key, "onnxruntime") in {priced.pairs[o.key] for o in best.chosen} and len(best.chosen) == 2
        assert best.cost == pytest.approx(3.5e-3)
        assert priced.price((big.key, "onnxruntime"), 2.1e-3) == pytest.approx(2.3e-3)


def test_random_kernels_are_timed_again_after_the_sweep_spread_over_bytes_and_keep_their_profiles(
        tmp_path: Path) -> None:
    graph, pools = _conv_problem()
    whole = len(graph.nodes)
    split = list({c.key: c for c in pools["onnxruntime"] if c.size < whole}.values())
    records = {(c.key, "onnxruntime"): _record(c.key, "onnxruntime", 1e-3) for c in split}
    usable = {p: 1e-3 for p in records}
    timed: list[tuple[tuple[str, str], int]] = []

    def measure(want, retime=(), evict=None) -> ProfileOutcome:
        beside = {}
        for name, cs in want.items():
            for c in cs:
                pair = (c.key, name)
                assert pair in retime and evict[pair] > 0
                timed.append((pair, evict[pair]))
                records[pair] = _record(c.key, name, 1.4e-3, created=2.0)     # as profile() stores a retime
                usable[pair] = 1.4e-3
                beside[pair] = 0.9e-3         # back to back, in turn with those calls: not the 1e-3 profile
        return ProfileOutcome({}, len(beside), 0, 1.0, None, hot_beside=beside)

    with ProfileDB(tmp_path / "p.sqlite") as db:
        refills = Refills(graph, {"onnxruntime": split}, db, {"onnxruntime": "v"}, 2, "m", cap=1 << 40, neighbours=3)
        size = min(4, len(split))
        assert _sample_refills(refills, usable, records, {"onnxruntime": split}, db, measure, size) == size
        picked = [p for p, _ in timed]
        assert len(set(picked)) == size and all(e == refills.kernels[p][1] for p, e in timed)
        touched = sorted(refills.kernels[p][0] for p in usable)
        assert {refills.kernels[p][0] for p in picked} >= {touched[0], touched[-1]}   # spread: both ends
        assert all(usable[p] == 1e-3 and records[p].median_s == 1e-3 for p in picked)   # profiles kept ...
        samples = db.refills("onnxruntime", "v", 2, "m")
        assert {p[0] for p in picked} == {s.candidate_key for s in samples}
        assert all(s.hot_s == 0.9e-3 and s.refill_s == pytest.approx(0.5e-3) for s in samples)
        assert all(refills.price(p, 1e-3) == pytest.approx(1.4e-3) for p in picked)     # ... priced in plan
        timed.clear()                  # the database holds enough now: nothing more is timed
        assert _sample_refills(refills, usable, records, {"onnxruntime": split}, db, measure, size) == 0 and not timed


def test_the_best_plans_kernels_timed_again_become_refill_samples(tmp_path: Path) -> None:
    graph, pools = _conv_problem()
    whole = len(graph.nodes)
    only = {"onnxruntime": list({c.key: c for c in pools["onnxruntime"] if c.size < whole}.values())}
    rng = np.random.default_rng(0)
    usable = {(c.key, "onnxruntime"): float(rng.uniform(0.5e-3, 2e-3)) for c in only["onnxruntime"]}
    with ProfileDB(tmp_path / "p.sqlite") as db:
        refills = Refills(graph, only, db, {"onnxruntime": "v"}, 2, "m", cap=1 << 40, neighbours=3)
        split = SplitProblem(graph, only, refills=refills)

        def measure(want, retime=(), evict=None) -> ProfileOutcome | None:
            for name, cs in want.items():
                for c in cs:
                    usable[(c.key, name)] += 0.3e-3
            return None                        # (no time back to back beside them: their profiles serve)

        first = {split.pairs[o.key] for o in split.solve(usable, {}, {}).chosen}
        before = {p: usable[p] for p in first}
        assert _confirm(graph, split, usable, only, None, set(), measure, evict_cap=1 << 40) == len(first)
        stored = {s.candidate_key: s for s in db.refills("onnxruntime", "v", 2, "m")}
        assert set(stored) == {p[0] for p in first}
        assert all(stored[p[0]].hot_s == before[p] and stored[p[0]].refill_s == pytest.approx(0.3e-3) for p in first)


def test_the_best_plans_kernels_timed_again_are_sampled_against_their_time_back_to_back_beside(
        tmp_path: Path) -> None:
    """Where the retime timed each kernel back to back in turn with its calls after the sweep, that time,
    not its profile, is the sample's other side."""
    graph, pools = _conv_problem()
    whole = len(graph.nodes)
    only = {"onnxruntime": list({c.key: c for c in pools["onnxruntime"] if c.size < whole}.values())}
    usable = {(c.key, "onnxruntime"): 1e-3 for c in only["onnxruntime"]}
    with ProfileDB(tmp_path / "p.sqlite") as db:
        refills = Refills(graph, only, db, {"onnxruntime": "v"}, 2, "m", cap=1 << 40, neighbours=3)
        split = SplitProblem(graph, only, refills=refills)

        def measure(want, retime=(), evict=None) -> ProfileOutcome:
            beside = {}
            for name, cs in want.items():
                for c in cs:
                    usable[(c.key, name)] = 1.5e-3
                    beside[(c.key, name)] = 1.2e-3
            return ProfileOutcome({}, len(beside), 0, 1.0, None, hot_beside=beside)

        first = {split.pairs[o.key] for o in split.solve(usable, {}, {}).chosen}
        assert _confirm(graph, split, usable, only, None, set(), measure, evict_cap=1 << 40) == len(first)
        stored = {s.candidate_key: s for s in db.refills("onnxruntime", "v", 2, "m")}
        assert set(stored) == {p[0] for p in first}
        assert all(stored[p[0]].hot_s == 1.2e-3 and stored[p[0]].refill_s == pytest.approx(0.3e-3) for p in first)
        others = [p for p in usable if p not in first]
        assert all(split.price(p, usable[p]) == pytest.approx(usable[p] + 0.3e-3) for p in others)


def test_a_kernel_whose_record_is_its_in_plan_time_keeps_its_back_to_back_time_when_timed_again(
        tmp_path: Path) -> None:
    """A best plan's kernel timed again in an earlier optimize has its time after a sweep as its
    record; timed again now, its sample's back-to-back time is the earlier sample's, not that record."""
    graph, pools = _conv_problem()
    whole = len(graph.nodes)
    only = {"onnxruntime": list({c.key: c for c in pools["onnxruntime"] if c.size < whole}.values())}
    with ProfileDB(tmp_path / "p.sqlite") as db:
        refills = Refills(graph, only, db, {"onnxruntime": "v"}, 2, "m", cap=1 << 40, neighbours=3)
        usable = {(c.key, "onnxruntime"): 1e-3 for c in only["onnxruntime"]}
        split = SplitProblem(graph, only, refills=refills)
        chosen = {split.pairs[o.key] for o in split.solve(usable, {}, {}).chosen}
        refills.add([RefillSample(k, b, *refills.kernels[(k, b)], 0.6e-3, 1e-3) for k, b in chosen])
        assert all(refills.hot(p, 1e-3) == pytest.approx(0.6e-3) for p in chosen)

        def measure(want, retime=(), evict=None) -> None:
            for name, cs in want.items():
                for c in cs:
                    usable[(c.key, name)] = 1.1e-3

        _confirm(graph, split, usable, only, None, set(), measure, evict_cap=1 << 40)
        stored = {s.candidate_key: s for s in db.refills("onnxruntime", "v", 2, "m")}
        timed = [p for p in chosen if usable[p] == 1.1e-3]
        assert timed and all(stored[p[0]].hot_s == pytest.approx(0.6e-3) and stored[p[0]].evicted_s == 1.1e-3
                             for p in timed)


def test_measured_selection_is_offered_split_kernels_at_their_in_plan_price_and_whole_models_at_their_profile(
        tmp_path: Path) -> None:
    from korch.pipeline import build_options, enumerate_all

    graph, _ = _conv_problem()
    settings = replace(OptimizeSettings(threads=2), backends=("onnxruntime",))
    cands = enumerate_all(graph, settings)
    records = {(c.key, "onnxruntime"): _record(c.key, "onnxruntime", 1e-3 * c.size) for c in cands.all}
    profiled = ProfileOutcome(records, 0, len(records), 1e-3, None)
    ok = profiled.kernels_of(cands.all, ["onnxruntime", "openvino"])
    assert ok["openvino"] == [] and {c.key for c in ok["onnxruntime"]} == {c.key for c in cands.all}
    with ProfileDB(tmp_path / "p.sqlite") as db:
        refills = Refills(graph, ok, db, {"onnxruntime": "v"}, 2, "m", cap=1 << 40, neighbours=3)
        refills.add([RefillSample("elsewhere", "onnxruntime", 1 << 10, 1 << 20, 1e-3, 1.25e-3)])
        plain, _ = build_options(graph, cands, profiled, settings)
        priced, steps = build_options(graph, cands, profiled, settings, refills)
    whole = len(graph.nodes)
    for a, b in zip(plain, priced):
        assert a.key == b.key
        size = len(a.nodes)
        assert b.cost == pytest.approx(a.cost if size == whole else a.cost + 0.25e-3)
        assert steps[b.key].cost_s == pytest.approx(1e-3 * size)          # the step keeps its profile


def test_no_refill_is_priced_with_eviction_off(tmp_path: Path) -> None:
    from korch.profile.guided import evict_cap, load_refills

    graph, pools = _conv_problem()
    settings = OptimizeSettings(threads=2)
    off = replace(settings, profile=replace(settings.profile, guide_confirm_evict=None))
    assert evict_cap(off.profile) == 0 and evict_cap(settings.profile) > 0
    with ProfileDB(tmp_path / "p.sqlite") as db:
        assert load_refills(graph, pools, db, off, "m") is None
        on = load_refills(graph, {"onnxruntime": pools["onnxruntime"]}, db, settings, "m")
        assert on is not None and max(e for _, e in on.kernels.values()) <= evict_cap(settings.profile)


def test_a_kernel_is_charged_only_the_refill_beyond_the_start_the_blp_charges_apart(tmp_path: Path) -> None:
    graph, pools = _conv_problem()
    whole = len(graph.nodes)
    only = {"onnxruntime": list({c.key: c for c in pools["onnxruntime"] if c.size < whole}.values())}
    sampled, other = only["onnxruntime"][0], only["onnxruntime"][1]
    starts = {"onnxruntime": 0.1e-3}
    with ProfileDB(tmp_path / "p.sqlite") as db:
        refills = Refills(graph, only, db, {"onnxruntime": "v"}, 2, "m", cap=1 << 40, neighbours=3,
                          start=starts.__getitem__)
        t, e = refills.kernels[(sampled.key, "onnxruntime")]
        refills.add([RefillSample(sampled.key, "onnxruntime", t, e, 1e-3, 1.4e-3)])
        assert refills.price((other.key, "onnxruntime"), 2e-3) == pytest.approx(2.3e-3)     # 2 + (0.4 - 0.1)
        assert refills.price((sampled.key, "onnxruntime"), 1.4e-3) == pytest.approx(1.3e-3)  # 1.4 - 0.1
        small = Refills(graph, only, db, {"onnxruntime": "v"}, 2, "m", cap=1 << 40, neighbours=3,
                        start=lambda backend: 1e-3)          # a refill under the start: nothing more, never less
        assert small.price((other.key, "onnxruntime"), 2e-3) == 2e-3
        assert small.price((sampled.key, "onnxruntime"), 1.4e-3) == pytest.approx(1e-3)       # its time back to back
