"""Cost models: the roofline prior, the learned correction, and the saved file (reused, retrained,
rebuilt when damaged or foreign). Times here are synthetic, made by a known rule, never measured."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest

from korch.costmodel import FEATURE_NAMES, FEATURES_VERSION, CostModelSettings, Features, MachinePeaks, train
from korch.costmodel.features import FEATURE_INDEX
from korch.costmodel.model import load_or_train, model_path, prior_seconds, read_model, save_model
from korch.costmodel.quality import pairwise_accuracy
from korch.profile.database import ProfileDB, Record, TimedKernel
from korch.profile.timing import Timing

PEAKS = MachinePeaks(flops_per_s_per_thread=50e9, bytes_per_s=10e9)
MACHINE = "test cpu | 2 cpus | Linux x86_64"
IX = FEATURE_INDEX
SMALL = CostModelSettings(min_rows=20, rounds=100)


def vector(rng: np.random.Generator) -> tuple[float, ...]:
    v = np.zeros(len(FEATURE_NAMES))
    v[IX["nodes"]] = rng.integers(1, 8)
    v[IX["op_transpose"]] = rng.integers(0, 3)
    v[IX["flops"]] = v[IX["linear_flops"]] = 10 ** rng.uniform(3, 8)
    v[IX["bytes_in"]] = 10 ** rng.uniform(3, 7)
    v[IX["bytes_out"]] = 10 ** rng.uniform(3, 7)
    v[IX["linear_node_bytes"]] = v[IX["bytes_in"]] + v[IX["bytes_out"]]
    return tuple(float(x) for x in v)


def synthetic(n: int, seed: int, model: str = "m") -> list[TimedKernel]:
    """Times the prior cannot know: each transpose costs 4x the kernel's roofline time, plus 5% noise."""
    rng = np.random.default_rng(seed)
    rows = []
    for k in range(n):
        f = vector(rng)
        roof = float(prior_seconds([Features(f)], 2, "onnxruntime", PEAKS)[0])
        t = roof * (1 + 4 * f[IX["op_transpose"]]) * rng.lognormal(0, 0.05)
        rows.append(TimedKernel(f"{model}-{seed}-{k}", "v", 2, t, float(k), f, frozenset({model})))
    return rows


def test_prior_ranks_by_work_and_charges_every_call() -> None:
    small, large = np.zeros(len(FEATURE_NAMES)), np.zeros(len(FEATURE_NAMES))
    small[IX["nodes"]] = large[IX["nodes"]] = 1
    small[IX["flops"]], large[IX["flops"]] = 1e6, 1e9
    small[IX["linear_flops"]], large[IX["linear_flops"]] = 1e6, 1e9
    t = prior_seconds([Features(tuple(small)), Features(tuple(large))], 1, "onnxruntime", PEAKS)
    assert 0 < t[0] < t[1]
    assert t[1] == pytest.approx(1e9 / 50e9, rel=0.01)
    assert prior_seconds([Features(tuple(large))], 2, "onnxruntime", PEAKS)[0] < t[1]   # more threads, less time


def test_prior_charges_the_vector_lanes_an_engine_blocking_output_channels_leaves_empty() -> None:
    """A conv with 3 output channels: oneDNN (OpenVINO, Inductor) fills 3 of each vector's lanes with
    them, onnxruntime vectorises over pixels; the prior takes the lanes of the machine it runs on."""
    v = np.zeros(len(FEATURE_NAMES))
    v[IX["nodes"]] = 1
    v[IX["flops"]] = v[IX["linear_flops"]] = 1e9
    v[IX["linear_flops_lanes8"]], v[IX["linear_flops_lanes16"]] = 1e9 * 8 / 3, 1e9 * 16 / 3
    f = [Features(tuple(v))]
    assert prior_seconds(f, 1, "onnxruntime", PEAKS)[0] == pytest.approx(1e9 / 50e9, rel=0.01)
    assert prior_seconds(f, 1, "openvino", PEAKS)[0] == pytest.approx(16 / 3 * 1e9 / 50e9, rel=0.01)
    avx2 = MachinePeaks(flops_per_s_per_thread=50e9, bytes_per_s=10e9, lanes=8)
    assert prior_seconds(f, 1, "openvino", avx2)[0] == pytest.approx(8 / 3 * 1e9 / 50e9, rel=0.01)


def test_prior_sums_the_rooflines_of_primitives_an_engine_runs_one_by_one() -> None:
    """A conv bound by arithmetic and a relu bound by memory: onnxruntime runs them one after the
    other, so the kernel costs both; OpenVINO (the relu a post-op of its conv) and Inductor's fused
    kernel cost the larger of its totals."""
    v = np.zeros(len(FEATURE_NAMES))
    v[IX["nodes"]] = 2
    v[IX["flops"]] = (linear := 1e9) + (elementwise := 1e6)
    v[IX["linear_flops"]] = v[IX["linear_flops_lanes8"]] = v[IX["linear_flops_lanes16"]] = linear
    v[IX["elementwise_flops"]] = elementwise
    v[IX["linear_node_bytes"]], v[IX["other_node_bytes"]] = 1e6, 2e8       # the relu reads and writes 100 MB
    v[IX["bytes_in"]], v[IX["bytes_out"]] = 5e5, 1e8
    f = [Features(tuple(v))]
    conv_s, relu_s = linear / 50e9, 2e8 / 10e9
    assert prior_seconds(f, 1, "onnxruntime", PEAKS)[0] == pytest.approx(conv_s + relu_s, rel=0.01)
    fused_s = max((linear + elementwise) / 50e9, (5e5 + 1e8) / 10e9)
    for engine in ("openvino", "inductor"):
        assert prior_seconds(f, 1, engine, PEAKS)[0] == pytest.approx(fused_s, rel=0.01)


def test_learned_correction_ranks_what_the_prior_cannot() -> None:
    model = train(synthetic(400, seed=1), "onnxruntime", MACHINE, PEAKS, SMALL)
    test = synthetic(200, seed=2)
    measured = [r.median_s for r in test]
    feats = [Features(r.features) for r in test]
    prior = pairwise_accuracy(prior_seconds(feats, 2, "onnxruntime", PEAKS), measured)
    learned = pairwise_accuracy(model.predict(feats, 2), measured)
    assert model.booster is not None and model.trained_rows == 400
    assert learned >= 0.93 and learned > prior + 0.03, (prior, learned)


def test_too_few_rows_give_the_prior_alone() -> None:
    rows = synthetic(10, seed=3)
    model = train(rows, "onnxruntime", MACHINE, PEAKS, SMALL)
    feats = [Features(r.features) for r in rows]
    assert model.booster is None
    np.testing.assert_array_equal(model.predict(feats, 2), prior_seconds(feats, 2, "onnxruntime", PEAKS))


def test_saved_model_predicts_the_same_and_foreign_or_damaged_files_are_ignored(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    model = train(synthetic(100, seed=4), "inductor", MACHINE, PEAKS, SMALL)
    path = tmp_path / "m.json"
    save_model(model, path)
    feats = [Features(r.features) for r in synthetic(30, seed=5)]
    again = read_model(path, "inductor", MACHINE)
    np.testing.assert_array_equal(again.predict(feats, 2), model.predict(feats, 2))
    assert again.trained_rows == 100 and again.peaks == PEAKS
    with caplog.at_level(logging.WARNING, "korch.costmodel"):
        assert read_model(path, "onnxruntime", MACHINE) is None
        assert read_model(path, "inductor", "another machine") is None
        header = json.loads(path.read_text())
        path.write_text(json.dumps({**header, "features": FEATURES_VERSION + 1}))
        assert read_model(path, "inductor", MACHINE) is None
        # trees that learned a correction to another prior (or to one the file does not name)
        path.write_text(json.dumps({**header, "prior": {**header["prior"], "internal_traffic": True}}))
        assert read_model(path, "inductor", MACHINE) is None
        path.write_text(json.dumps({k: v for k, v in header.items() if k != "prior"}))
        assert read_model(path, "inductor", MACHINE) is None
        path.write_text(json.dumps({**header, "booster": "tree\nnot a model"}))
        assert read_model(path, "inductor", MACHINE) is None
        path.write_text(path.read_text()[:50])
        assert read_model(path, "inductor", MACHINE) is None
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 7 and all(str(path) in m and "ignoring it" in m for m in messages)
    assert "another backend" in messages[0] and "another machine" in messages[1] and "another features" in messages[2]
    assert "another prior" in messages[3] and "another prior" in messages[4]
    path.write_text(json.dumps(header))
    assert read_model(path, "inductor", MACHINE) is not None         # the file as saved is read again


def store(db: ProfileDB, rows: list[TimedKernel], version: str | None = None) -> None:
    """`rows` as onnxruntime's profiles, of the engine as korch runs it now unless `version` is given."""
    from korch.backends import get_backend

    version = f"{get_backend('onnxruntime').version}|hot|heap-1" if version is None else version
    db.put_many([Record.ok(r.candidate_key, "onnxruntime", version, r.threads, MACHINE,
                           Timing(r.median_s, r.median_s, r.median_s, 10)) for r in rows])
    db.put_features("m", FEATURES_VERSION, {r.candidate_key: r.features for r in rows})


def test_a_model_learns_only_from_profiles_of_the_engine_as_korch_runs_it_now(tmp_path: Path) -> None:
    """Profiles of an older engine version (or an older way korch ran its kernels) are ones the
    profiler takes again: 30 of them, their times 20x, neither count toward training nor move the
    model; a key profiled again counts once, by its newest profile."""
    from korch.backends import get_backend
    from korch.costmodel.model import current_rows

    settings = CostModelSettings(min_rows=20, rounds=20)
    fresh = synthetic(30, seed=10)
    stale = [r._replace(median_s=20 * r.median_s) for r in synthetic(30, seed=11)]
    with ProfileDB(tmp_path / "profiles.sqlite") as db:
        store(db, stale, version="onnxruntime-0.0.1|hot|heap-1")
        store(db, fresh)
        model = load_or_train(db, "onnxruntime", MACHINE, PEAKS, settings)
        assert model.trained_rows == 30
        feats = [Features(r.features) for r in fresh]
        alone = train(fresh, "onnxruntime", MACHINE, PEAKS, settings)
        np.testing.assert_allclose(model.predict(feats, 2), alone.predict(feats, 2), rtol=1e-9)
        rows = db.timed_with_features("onnxruntime", MACHINE, FEATURES_VERSION)
    version = get_backend("onnxruntime").version
    assert len(rows) == 60 and len(current_rows(rows, version)) == 30
    now = [r._replace(backend_version=f"{version}|hot|heap-1") for r in fresh]
    again = now[0]._replace(median_s=1.0, created_at=now[0].created_at + 1)
    kept = {r.candidate_key: r for r in current_rows([again, *now], version)}
    assert len(kept) == 30 and kept[again.candidate_key].median_s == 1.0


def test_load_or_train_reuses_until_the_database_grows_and_rebuilds_a_damaged_file(tmp_path: Path) -> None:
    settings = CostModelSettings(min_rows=20, rounds=20, retrain_growth=1.5)
    with ProfileDB(tmp_path / "profiles.sqlite") as db:
        store(db, synthetic(10, seed=6))
        first = load_or_train(db, "onnxruntime", MACHINE, PEAKS, settings)
        assert first.booster is None and first.trained_rows == 10     # the prior alone, saved
        path = model_path(tmp_path, "onnxruntime", MACHINE)
        assert path.exists()
        store(db, synthetic(30, seed=7))
        second = load_or_train(db, "onnxruntime", MACHINE, PEAKS, settings)
        assert second.booster is not None and second.trained_rows == 40
        store(db, synthetic(10, seed=8))                              # 50 < 1.5 x 40: reused
        assert load_or_train(db, "onnxruntime", MACHINE, PEAKS, settings).trained_at == second.trained_at
        store(db, synthetic(20, seed=9))                              # 70 >= 60: retrained
        assert load_or_train(db, "onnxruntime", MACHINE, PEAKS, settings).trained_rows == 70
        path.write_bytes(b"\x00garbage")
        rebuilt = load_or_train(db, "onnxruntime", MACHINE, PEAKS, settings)
        assert rebuilt.trained_rows == 70 and read_model(path, "onnxruntime", MACHINE) is not None


def test_a_saved_model_is_read_without_lightgbm_and_damaged_trees_never_reach_it(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Reading a saved model checks its header, its trees' SHA-256 and feature count; lightgbm parses
    the trees at the first prediction (a warm optimize never predicts). Trees cut short after a valid
    header, which made lightgbm abort the whole process (SIGABRT), are refused by the checksum before
    lightgbm sees them, with a warning naming the file."""
    import subprocess
    import sys

    model = train(synthetic(100, seed=6), "inductor", MACHINE, PEAKS, SMALL)
    path = tmp_path / "m.json"
    save_model(model, path)
    code = ("import sys; from pathlib import Path; from korch.costmodel.model import read_model; "
            f"m = read_model(Path({str(path)!r}), 'inductor', {MACHINE!r}); "
            "print(m is not None and m.booster is not None, 'lightgbm' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["True", "False"]
    feats = [Features(r.features) for r in synthetic(10, seed=7)]
    np.testing.assert_array_equal(read_model(path, "inductor", MACHINE).predict(feats, 2), model.predict(feats, 2))
    header = json.loads(path.read_text())
    cut = header["booster"].index("Tree=1")             # the header intact, the trees cut short
    path.write_text(json.dumps({**header, "booster": header["booster"][:cut]}))
    code = ("import sys; from pathlib import Path; from korch.costmodel.model import read_model; "
            f"print(read_model(Path({str(path)!r}), 'inductor', {MACHINE!r}))")
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert child.returncode == 0 and child.stdout.split() == ["None"], child.stderr[-300:]
    assert str(path) in child.stderr and "checksum" in child.stderr
