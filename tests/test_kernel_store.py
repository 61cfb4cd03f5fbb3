"""The kept-kernel store (korch/plan/store.py) removes what has not been used for a while."""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np

from korch.io import prune
from korch.plan.store import keep_kernel
from tests.backends.graphs import conv_bias_relu

DAY = 86400.0


def _aged(path: Path, days: float) -> Path:
    stamp = time.time() - days * DAY
    os.utime(path, (stamp, stamp))
    return path


def _store(tmp_path: Path) -> tuple[Path, Path, Path, Path]:
    store = tmp_path / "kernels"
    old, recent = store / "a", store / "b"
    for entry in (old, recent):
        entry.mkdir(parents=True)
        (entry / "artifact.json").write_text("{}")
    marker = store / "c.not-saveable"
    marker.write_text("why\n")
    return store, _aged(old, 40), _aged(recent, 3), _aged(marker, 31)


def test_prune_removes_entries_and_markers_unused_for_longer_than_the_limit(tmp_path: Path) -> None:
    store, old, recent, marker = _store(tmp_path)
    assert prune(store, 30 * DAY) == 2
    assert not old.exists() and not marker.exists() and recent.is_dir()
    assert prune(store, 30 * DAY) == 0
    assert prune(tmp_path / "absent", 30 * DAY) == 0


def test_keeping_a_kernel_prunes_the_store_and_leaves_what_it_wrote(tmp_path: Path) -> None:
    store, old, recent, marker = _store(tmp_path)
    # onnxruntime saves no kernels: the store writes a refusal marker in its place
    keep_kernel(object(), conv_bias_relu(np.random.default_rng(0)), "onnxruntime", store / "d", max_age_s=30 * DAY)
    assert (store / "d.not-saveable").is_file()
    assert not old.exists() and not marker.exists() and recent.is_dir()


def test_candidates_of_equal_structure_are_kept_apart() -> None:
    """Candidates of equal structure share a key (and a profile) but not their weights: two layers of
    a transformer. A kernel kept for one is not the other's (vit-b16's plan failed to load one)."""
    from korch.plan.store import kernel_digest

    layer2, layer5 = (10, 11, 12), (40, 41, 42)
    same = kernel_digest("m", "onnxruntime", "K", layer2, 2, "w")
    assert same == kernel_digest("m", "onnxruntime", "K", layer2, 2, "w")
    assert same != kernel_digest("m", "onnxruntime", "K", layer5, 2, "w")


def test_the_store_is_scanned_for_old_entries_at_most_once_per_thirtieth_of_their_age(tmp_path: Path) -> None:
    from korch.io import prune_now_and_then

    store, old, recent, marker = _store(tmp_path)
    assert prune_now_and_then(store, 30 * DAY) == 2 and not old.exists()
    _aged(recent, 40)                                 # unused since long ago: due, but the store was just scanned
    assert prune_now_and_then(store, 30 * DAY) == 0 and recent.is_dir()
    assert prune_now_and_then(store, 30 * DAY, now=time.time() + 1.5 * DAY) == 1 and not recent.exists()
    assert (store / ".pruned").is_file()              # never taken for an entry
