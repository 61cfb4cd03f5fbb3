"""Kernels slow to compile are kept compiled by the profiler (ProfileSettings.keep_compiled_s), and
measured selection loads them instead of compiling them again when a split plan uses them."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

import korch.profile.profiler as profiler
from korch import zoo
from korch.candidates import RegionLimits, region_candidates
from korch.frontend.regions import OnnxSource
from korch.pipeline import optimize, run_fission
from korch.profile.boundaries import boundary_model
from korch.profile.database import ProfileDB, machine_fingerprint
from korch.profile.profiler import profile
from korch.settings import QUICK_CALIBRATION, QUICK_PROFILE, QUICK_SELECTION, OptimizeSettings
from tests.profile.test_compile_threads import _convs

MACHINE = "test machine"


@pytest.mark.parametrize("keep_s", [0.0, float("inf")])
def test_the_profiler_keeps_whole_models_and_kernels_slower_to_compile_than_the_setting(
        tmp_path: Path, keep_s: float) -> None:
    fissioned = run_fission(_convs())
    graph = fissioned.graph
    source = OnnxSource(fissioned.model, dict(fissioned.value_map or {}))
    regions = list({r.key: r for r in region_candidates(graph, RegionLimits())}.values())
    whole = {r.key for r in regions if r.size == len(graph.nodes)}
    assert whole and len(regions) > len(whole)
    kept: list[str] = []
    settings = replace(QUICK_PROFILE, keep_compiled_s=keep_s)
    with ProfileDB(tmp_path / "p.sqlite") as db:
        out = profile(graph, {"onnxruntime": regions}, db, 1, MACHINE, settings, source=source,
                      keep=lambda key, nodes, backend, kernel, sub: kept.append(key))
    accepted = {key for (key, _), r in out.records.items() if r.median_s is not None}
    assert accepted == {r.key for r in regions}
    # every kernel takes at least no time to compile; none takes forever: all of them, or the whole model alone
    assert set(kept) == (accepted if keep_s == 0.0 else whole)
    assert len(kept) == len(set(kept))


def test_selection_loads_the_kernels_profiling_kept_instead_of_compiling_them_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Inductor alone, every kernel kept: no candidate is compiled twice in the optimize, though
    selection compiles and times split plans of the kernels profiled and the whole model."""
    pytest.importorskip("torch")
    compiles: Counter[str] = Counter()
    compile_candidate = profiler.compile_candidate

    def counted(graph, cand, backend_name, options, source):
        compiles[cand.key] += 1
        return compile_candidate(graph, cand, backend_name, options, source)

    settings = OptimizeSettings(threads=1, backends=("inductor",), calibration=QUICK_CALIBRATION,
                                profile=replace(QUICK_PROFILE, inductor_budget=3, inductor_region_budget=3,
                                                keep_compiled_s=0.0, compile_workers=1),   # all compiled here
                                selection=replace(QUICK_SELECTION, contender_factor=10.0, split_within=10.0))
    with ProfileDB(tmp_path / "profiles.sqlite") as db:
        # calibrated first: its chains of tiny kernels compile the same blocks for each engine pair
        boundary_model(db, settings.backends, settings.threads, machine_fingerprint(), settings.calibration)
        monkeypatch.setattr(profiler, "compile_candidate", counted)     # (compile_step imports it from here)
        _, _, stats = optimize(zoo.to_model_proto("candy-mini"), db, settings)
    assert stats.selection.split_kernels, "selection compiled no split plan: the test shows nothing"
    assert compiles and max(compiles.values()) == 1, compiles
