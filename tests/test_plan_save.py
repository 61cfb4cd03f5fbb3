"""Saving a plan's weights: the source model copied without its weights in memory (plan._save_source),
and constants compared with what was written a block at a time (plan._same_bits)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from korch.ir.onnx_source import OnnxSource
from korch.plan.plan import EXTERNAL_MIN_BYTES, WEIGHTS_FILE, _same_bits, _save_source
from korch.zoo.export import IR_VERSION


@pytest.mark.parametrize("block", [1, 40, 4096, 1 << 20])
def test_same_bits_compares_bit_for_bit_whatever_the_block(block: int) -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((37, 23)).astype(np.float32)
    assert _same_bits(x, x.copy(), block)
    assert _same_bits(x.T, np.ascontiguousarray(x.T), block)           # strided against contiguous
    for k in (0, 18 * 23 + 5, x.size - 1):                               # first, middle and last value
        y = x.copy()
        y.flat[k] = np.nextafter(y.flat[k], np.float32(np.inf))
        assert not _same_bits(x, y, block), k
    zeros = np.zeros((5, 3), np.float32)
    assert not _same_bits(zeros, -zeros, block)                         # -0.0 is not 0.0, bit for bit
    nan = np.full((4,), np.nan, np.float32)
    assert _same_bits(nan, nan.copy(), block)                           # the same NaN is the same
    assert not _same_bits(x, x[:, :22], block)                          # another shape
    assert _same_bits(np.float32(2.5).reshape(()), np.float32(2.5).reshape(()), block)


def _model() -> onnx.ModelProto:
    rng = np.random.default_rng(1)
    big = numpy_helper.from_array(rng.standard_normal((64, 32)).astype(np.float32), "w")
    big.doc_string = "a weight"
    entry = big.metadata_props.add()
    entry.key, entry.value = "origin", "test"
    ints = numpy_helper.from_array(np.arange(300, dtype=np.int64), "idx")
    small = numpy_helper.from_array(np.ones(3, np.float32), "b")                   # stays inline
    floats = helper.make_tensor("f", TensorProto.FLOAT, (16, 16), rng.standard_normal(256).tolist())  # float_data
    strings = helper.make_tensor("s", TensorProto.STRING, (2,), [b"a", b"b"])       # not mappable: inline
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"]), helper.make_node("Add", ["y", "b"], ["z"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, (4, 64))],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, (4, 32))],
        initializer=[big, ints, small, floats, strings], doc_string="the graph")
    model = helper.make_model(graph, producer_name="korch-test", opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = IR_VERSION
    helper.set_model_props(model, {"author": "korch"})
    return model


def _without_initializers(model: onnx.ModelProto) -> bytes:
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    del copy.graph.initializer[:]
    return copy.SerializeToString()


def test_the_saved_source_is_the_model_with_its_large_weights_in_the_weights_file(tmp_path: Path) -> None:
    model = _model()
    original = model.SerializeToString()
    saved = _save_source(OnnxSource(model, {"w": "%c0"}), tmp_path)
    assert model.SerializeToString() == original, "the source model was changed"
    assert saved.weights_dir == tmp_path and dict(saved.value_map) == {"w": "%c0"}

    written = onnx.load(str(tmp_path / "original.onnx"), load_external_data=False)
    assert _without_initializers(written) == _without_initializers(model)      # every other field kept
    by_name = {t.name: t for t in written.graph.initializer}
    assert [t.name for t in written.graph.initializer] == [t.name for t in model.graph.initializer]
    for tensor in model.graph.initializer:
        out = by_name[tensor.name]
        external = out.data_location == TensorProto.EXTERNAL
        large = tensor.data_type != TensorProto.STRING and numpy_helper.to_array(tensor).nbytes >= EXTERNAL_MIN_BYTES
        assert external == large, tensor.name
        if not external:
            assert out == tensor, tensor.name
            continue
        assert not out.raw_data and not out.float_data and not out.int64_data
        assert (out.doc_string, list(out.metadata_props)) == (tensor.doc_string, list(tensor.metadata_props))
        info = {e.key: e.value for e in out.external_data}
        assert info["location"] == WEIGHTS_FILE and int(info["offset"]) % 4096 == 0
        want = numpy_helper.to_array(tensor)
        got = np.fromfile(tmp_path / WEIGHTS_FILE, want.dtype, want.size, offset=int(info["offset"]))
        assert int(info["length"]) == want.nbytes
        np.testing.assert_array_equal(got.reshape(want.shape), want)

    # A loaded plan's source, its weights already external, saved again: the same weights file.
    again = tmp_path / "again"
    again.mkdir()
    _save_source(saved, again)
    assert (again / WEIGHTS_FILE).read_bytes() == (tmp_path / WEIGHTS_FILE).read_bytes()
    assert (again / "original.onnx").read_bytes() == (tmp_path / "original.onnx").read_bytes()


def _saved_weights(model: onnx.ModelProto, directory: Path, previous: Path | None = None) -> bytes:
    directory.mkdir()
    _save_source(OnnxSource(model, {}), directory, previous)
    return (directory / WEIGHTS_FILE).read_bytes()


def test_a_save_over_the_same_weights_links_the_file_it_replaces(tmp_path: Path) -> None:
    model = _model()
    first = _saved_weights(model, tmp_path / "first")
    previous = tmp_path / "first" / WEIGHTS_FILE
    assert _saved_weights(model, tmp_path / "again", previous) == first
    assert (tmp_path / "again" / WEIGHTS_FILE).stat().st_ino == previous.stat().st_ino     # linked, not written


def _one_weight_changed(model: onnx.ModelProto, name: str) -> onnx.ModelProto:
    changed = onnx.ModelProto()
    changed.CopyFrom(model)
    tensor = next(t for t in changed.graph.initializer if t.name == name)
    array = numpy_helper.to_array(tensor).copy()
    array.flat[-1] += 1
    tensor.CopyFrom(numpy_helper.from_array(array, name))
    return changed


@pytest.mark.parametrize("how", ["a weight changed", "the file damaged", "the file longer", "the file shorter"])
def test_a_save_over_other_bytes_writes_its_own(tmp_path: Path, how: str) -> None:
    """However the file being replaced differs (at its start, middle or end, or in length), the
    new file holds exactly what a save into an empty directory writes, and is not the old file."""
    model = _model()
    previous = tmp_path / "previous"
    previous.mkdir()
    _save_source(OnnxSource(model, {}), previous)
    old = previous / WEIGHTS_FILE
    data = bytearray(old.read_bytes())
    if how == "a weight changed":
        model = _one_weight_changed(model, "idx")       # the second of three external weights
    elif how == "the file damaged":
        data[len(data) // 2] ^= 1
    elif how == "the file longer":
        data += b"\0" * 10
    else:
        del data[-1]
    old.write_bytes(bytes(data))
    wanted = _saved_weights(model, tmp_path / "fresh")
    assert wanted != bytes(data)
    assert _saved_weights(model, tmp_path / "saved", old) == wanted
    assert (tmp_path / "saved" / WEIGHTS_FILE).stat().st_ino != old.stat().st_ino
    assert old.read_bytes() == bytes(data), "the file being replaced was written to"
