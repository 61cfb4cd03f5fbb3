"""A model file's prepared form (loaded, rewritten and checked, fissioned, weights shared) is stored
once and read back as it was; a changed model, option or external data file, or a damaged entry, is
prepared again."""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from korch import zoo
from korch.backends.reference import run_graph
from korch.errors import ModelLoadError
from korch.frontend.prepared import ENTRY, GRAPH, MODEL, PREPARED_DIR, WEIGHTS
from korch.ir.serialize import graph_to_json
from korch.pipeline import prepare_model
from korch.settings import OptimizeSettings
from korch.verify import onnxruntime_runner, random_feeds

SETTINGS = OptimizeSettings()
# Outputs of the rewritten model (onnxruntime) against the model file's, relative to their scale: fp32
# rounding of the reassociated sums on a mini model is ~1e-6.
RTOL = 1e-4


@pytest.fixture(scope="module")
def model_bytes() -> bytes:
    """efficientvit-mini: rewritten (linear attention channel-first), and with transposed weights whose
    initializers are views of fission's constants (regions.share_weights)."""
    return zoo.to_model_proto("efficientvit-mini").SerializeToString()


@pytest.fixture
def model_file(model_bytes: bytes, tmp_path: Path) -> Path:
    path = tmp_path / "model" / "efficientvit-mini.onnx"
    path.parent.mkdir()
    path.write_bytes(model_bytes)
    return path


def _same(a, b) -> None:
    assert graph_to_json(a.graph) == graph_to_json(b.graph)
    for name, array in a.graph.constants.items():
        assert np.array_equal(b.graph.constants[name], array) and b.graph.constants[name].strides == array.strides
    assert set(a.source.arrays) == set(b.source.arrays)
    for name, array in a.source.arrays.items():
        assert np.array_equal(b.source.arrays[name], array) and b.source.arrays[name].strides == array.strides
    assert a.source.model.SerializeToString() == b.source.model.SerializeToString()
    assert dict(a.source.value_map) == dict(b.source.value_map)
    assert (a.opaque, a.rewrites, a.rewritten) == (b.opaque, b.rewrites, b.rewritten)


def test_a_model_file_is_prepared_once_and_read_back_as_it_was(model_file: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    fresh = prepare_model(model_file, None, SETTINGS, cache)
    again = prepare_model(model_file, None, SETTINGS, cache)
    assert not fresh.remembered and again.remembered and fresh.rewritten and fresh.rewrites
    _same(fresh, again)
    # initializers held as views of the graph's constants (transposed weights) share its memory again
    views = [n for n, a in fresh.source.arrays.items()
             if any(np.shares_memory(a, c) for c in fresh.graph.constants.values()) and a.ndim == 2
             and not a.flags.owndata and a.base is not None and a.T.flags.f_contiguous]
    assert views, "efficientvit-mini no longer holds a transposed weight as a view: pick another model"
    for name in views:
        assert any(np.shares_memory(again.source.arrays[name], c) for c in again.graph.constants.values()), name
    feeds = random_feeds(again.graph, int(np.random.default_rng().integers(1 << 30)))
    ours, theirs = run_graph(fresh.graph, feeds), run_graph(again.graph, feeds)
    assert all(np.array_equal(ours[k], theirs[k]) for k in ours)          # the same graph and weights, bit for bit
    onnx_feeds = {i.name: feeds[again.source.value_map[i.name]] for i in again.source.model.graph.input
                  if i.name in again.source.value_map and again.source.value_map[i.name] in feeds}
    read = onnxruntime_runner(again.source.model, shared=again.source.arrays)(onnx_feeds)
    given = onnxruntime_runner(model_file)(onnx_feeds)
    for name, expected in given.items():
        assert np.abs(read[name] - expected).max() <= RTOL * np.abs(expected).max(), name


def test_a_changed_model_option_or_external_data_file_is_prepared_again(model_file: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    prepare_model(model_file, None, SETTINGS, cache)
    assert not prepare_model(model_file, None, OptimizeSettings(rewrites=False), cache).remembered
    assert not prepare_model(model_file, None, OptimizeSettings(seed=5), cache).remembered
    assert prepare_model(model_file, None, OptimizeSettings(seed=5), cache).remembered
    # a weight changed in the file, then in an external data file
    model = onnx.load(str(model_file))
    weight = max(model.graph.initializer, key=lambda t: np.prod(t.dims))
    array = numpy_helper.to_array(weight).copy()
    array.flat[0] += 1.0
    weight.CopyFrom(numpy_helper.from_array(array, weight.name))
    onnx.save(model, str(model_file))
    changed = prepare_model(model_file, None, SETTINGS, cache)
    assert not changed.remembered
    external = tmp_path / "external" / "m.onnx"
    external.parent.mkdir()
    onnx.save(model, str(external), save_as_external_data=True, all_tensors_to_one_file=True, location="w.bin",
              size_threshold=1024)          # (onnxruntime reads no shape tensor from external data)
    first = prepare_model(external, None, SETTINGS, cache)
    assert prepare_model(external, None, SETTINGS, cache).remembered
    loaded = onnx.load(str(external), load_external_data=False)
    where = next(t for t in loaded.graph.initializer if t.name == weight.name)
    offset = int(next(e.value for e in where.external_data if e.key == "offset"))
    with open(external.parent / "w.bin", "r+b") as f:           # the changed weight's first float, back as it was
        f.seek(offset)
        f.write(np.float32(array.flat[0] - 1.0).tobytes())
    back = prepare_model(external, None, SETTINGS, cache)
    assert not back.remembered
    differs = [n for n, a in back.graph.constants.items()
               if n in first.graph.constants and a.shape == first.graph.constants[n].shape
               and not np.array_equal(a, first.graph.constants[n])]
    assert differs, "the weight changed in the external data file did not reach the prepared graph"


def _entries(cache: Path) -> list[Path]:
    """The entries (and any directory a failed store left) in the cache's prepared/."""
    return sorted(p for p in (cache / PREPARED_DIR).iterdir() if p.is_dir())


def _damage_weights(entry: Path) -> None:
    with open(entry / WEIGHTS, "r+b") as f:
        f.seek(64)
        byte = f.read(1)
        f.seek(64)
        f.write(bytes([byte[0] ^ 0x40]))


def _truncate_weights(entry: Path) -> None:
    with open(entry / WEIGHTS, "r+b") as f:
        f.truncate(f.seek(0, 2) // 2)


def _damage_model(entry: Path) -> None:
    data = bytearray((entry / MODEL).read_bytes())
    data[len(data) // 2] ^= 0x01
    (entry / MODEL).write_bytes(bytes(data))


def _damage_graph(entry: Path) -> None:
    assert '"op": "mul"' in (entry / GRAPH).read_text()
    (entry / GRAPH).write_text((entry / GRAPH).read_text().replace('"op": "mul"', '"op": "add"', 1))


def _damage_index(entry: Path) -> None:
    meta = json.loads((entry / ENTRY).read_text())
    name = next(iter(meta["constants"]))
    meta["constants"][name] = [0, "<f4", [1 << 30], [4]]
    (entry / ENTRY).write_text(json.dumps(meta))


def _garble_index(entry: Path) -> None:
    (entry / ENTRY).write_text("{not json")


@pytest.mark.parametrize("damage", [_damage_weights, _truncate_weights, _damage_model, _damage_graph, _damage_index,
                                    _garble_index])
def test_a_damaged_entry_is_prepared_again_with_a_warning(damage, model_file: Path, tmp_path: Path,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    cache = tmp_path / "cache"
    fresh = prepare_model(model_file, None, SETTINGS, cache)
    (entry,) = _entries(cache)
    damage(entry)
    with caplog.at_level(logging.WARNING, logger="korch.frontend"):
        again = prepare_model(model_file, None, SETTINGS, cache)
    assert not again.remembered
    assert "is damaged" in caplog.text and str(model_file) in caplog.text
    _same(fresh, again)
    assert prepare_model(model_file, None, SETTINGS, cache).remembered          # stored whole again
    assert _entries(cache) == [entry]                                            # nothing left behind


def test_an_entry_unused_for_the_kept_days_is_removed_when_another_is_stored(model_file: Path, tmp_path: Path) -> None:
    cache, days = tmp_path / "cache", SETTINGS.kept_kernel_days
    prepare_model(model_file, None, SETTINGS, cache)
    (used,) = _entries(cache)
    other = tmp_path / "other.onnx"
    other.write_bytes(model_file.read_bytes())
    prepare_model(other, None, SETTINGS, cache)
    (unused,) = [p for p in _entries(cache) if p != used]
    old = time.time() - (days + 10) * 86400
    for path in cache / PREPARED_DIR / ".pruned", used, unused:
        os.utime(path, (old, old))
    assert prepare_model(model_file, None, SETTINGS, cache).remembered          # used: touched
    third = tmp_path / "third.onnx"
    third.write_bytes(model_file.read_bytes())
    prepare_model(third, None, SETTINGS, cache)                                  # stored: the store is pruned
    left = _entries(cache)
    assert used in left and unused not in left and len(left) == 2


def test_a_model_file_that_cannot_be_read_is_refused_by_name_not_by_the_cache(model_file: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    prepare_model(model_file, None, SETTINGS, cache)
    model_file.write_bytes(b"not an onnx model")
    with pytest.raises(ModelLoadError, match="efficientvit-mini.onnx: not"):
        prepare_model(model_file, None, SETTINGS, cache)
    model_file.unlink()
    model_file.mkdir()                                          # (open() of a directory: an OSError)
    with pytest.raises(ModelLoadError, match="efficientvit-mini.onnx"):
        prepare_model(model_file, None, SETTINGS, cache)
