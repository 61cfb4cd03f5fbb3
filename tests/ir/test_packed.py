"""Arrays packed in one file map back with their values, layouts and shared memory."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from korch.ir.packed import PackedError, Placed, map_arrays, write_arrays


def _arrays(rng: np.random.Generator) -> dict[str, np.ndarray]:
    w = rng.standard_normal((6, 5)).astype(np.float32)
    f = np.asfortranarray(rng.standard_normal((4, 7)).astype(np.float32))
    return {
        "w": w, "w.T": w.T, "w flat": w.reshape(-1), "f": f,
        "row": rng.standard_normal(5).astype(np.float32),
        "broadcast": np.broadcast_to(w[:1], (3, 5)),          # stride 0: no dense block, copied
        "reversed": w[::-1],                                   # negative stride: copied
        "every other": w[:, ::2],                              # holes: copied
        "empty": np.zeros((0, 3), np.float32),
        "scalar": np.array(rng.standard_normal(), np.float64),
        "flags": rng.random(9) > 0.5,
        "half": rng.standard_normal((2, 3)).astype(np.float16),
        "ids": rng.integers(-5, 5, (3, 2), dtype=np.int64),
    }


def test_arrays_map_back_equal_with_their_strides_and_shared_memory(tmp_path: Path) -> None:
    arrays = _arrays(np.random.default_rng())
    placed = write_arrays(tmp_path / "a.bin", arrays)
    back = map_arrays(tmp_path / "a.bin", placed)
    assert set(back) == set(arrays)
    for name, array in arrays.items():
        assert back[name].dtype == array.dtype and back[name].shape == array.shape, name
        assert np.array_equal(back[name], array), name
        assert not back[name].flags.writeable, name
    for name in ("w", "w.T", "w flat", "f", "scalar", "flags", "half", "ids"):   # dense: read as they were
        assert back[name].strides == arrays[name].strides, name
    assert back["f"].flags.f_contiguous and not back["f"].flags.c_contiguous
    # views of one block of memory are views of one block again, written once
    assert np.shares_memory(back["w"], back["w.T"]) and np.shares_memory(back["w"], back["w flat"])
    assert not np.shares_memory(back["w"], back["f"])
    dense_bytes = sum(arrays[n].nbytes for n in ("w", "f", "row", "scalar", "flags", "half", "ids"))
    copied_bytes = sum(arrays[n].nbytes for n in ("broadcast", "reversed", "every other"))
    assert (tmp_path / "a.bin").stat().st_size < dense_bytes + copied_bytes + 64 * len(arrays)
    assert (tmp_path / "a.bin").stat().st_size >= dense_bytes + copied_bytes


def test_entries_that_read_outside_the_file_or_are_malformed_are_refused(tmp_path: Path) -> None:
    arrays = {"x": np.random.default_rng().standard_normal((8, 8)).astype(np.float32)}
    placed = write_arrays(tmp_path / "a.bin", arrays)
    with open(tmp_path / "a.bin", "r+b") as f:
        f.truncate(100)
    with pytest.raises(PackedError, match="array 'x' lies outside the file"):
        map_arrays(tmp_path / "a.bin", placed)
    with pytest.raises(PackedError, match="not .offset, dtype, shape, strides"):
        Placed.from_json([0, "<f4", [2]])
    with pytest.raises(PackedError, match="does not describe an array of numbers"):
        Placed.from_json([0, "O", [2], [8]])
    with pytest.raises(PackedError, match="Python objects"):
        write_arrays(tmp_path / "b.bin", {"o": np.array([object()])})
    with pytest.raises(PackedError, match="cannot map"):
        map_arrays(tmp_path / "missing.bin", placed)
