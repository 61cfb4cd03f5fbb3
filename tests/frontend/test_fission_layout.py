"""Layout fission rules against onnxruntime, on random shapes, values and attributes."""

from __future__ import annotations

import numpy as np
import pytest
from onnx.reference import ReferenceEvaluator

from korch.backends.reference import run_graph
from korch.errors import UnsupportedError
from korch.frontend import fission
from tests.oracle import check_op, ops_of, single_node_model

EXACT = 0.0   # layout primitives only move data: results must be bit-identical
INT64_MAX = np.iinfo(np.int64).max
INT64_MIN = np.iinfo(np.int64).min
SEEDS = range(4)


def _shape(rng: np.random.Generator, low_rank: int = 1, high_rank: int = 4, high: int = 6) -> tuple[int, ...]:
    return tuple(int(d) for d in rng.integers(1, high, size=rng.integers(low_rank, high_rank + 1)))


def _randn(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def _i64(values: object) -> np.ndarray:
    return np.array(values, dtype=np.int64)


def _primitives(graph: object) -> list[str]:
    """The emitted primitives, without the copy the graph builder adds when an output is an input."""
    return [n.op for n in graph.nodes if n.origin != "output-copy"]


# ---- Transpose, Reshape, Flatten, Squeeze, Unsqueeze ---------------------------------------------

@pytest.mark.parametrize("seed", SEEDS)
def test_transpose(seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = _randn(rng, _shape(rng, 2, 5))
    graph = check_op("Transpose", {"x": x}, {"perm": [int(p) for p in rng.permutation(x.ndim)]}, rtol=EXACT)
    assert set(_primitives(graph)) <= {"transpose"}
    assert ops_of(check_op("Transpose", {"x": x}, rtol=EXACT)) == ["transpose"]   # default: reverse


@pytest.mark.parametrize("opset", [11, 14, 21])
@pytest.mark.parametrize("seed", SEEDS)
def test_reshape_zero_and_minus_one(opset: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = _randn(rng, (2, 3, int(rng.integers(1, 5)), 4))
    target = [0, -1, 4] if seed % 2 else [2, 0, -1]
    graph = check_op("Reshape", {"x": x}, constants={"shape": _i64(target)}, opset=opset, rtol=EXACT)
    assert ops_of(graph) == ["reshape"]


def test_reshape_allowzero_with_explicit_dims() -> None:
    x = _randn(np.random.default_rng(1), (2, 3, 4))
    check_op("Reshape", {"x": x}, {"allowzero": 1}, constants={"shape": _i64([4, -1, 2])}, opset=14, rtol=EXACT)


@pytest.mark.parametrize("seed", SEEDS)
def test_flatten(seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = _randn(rng, _shape(rng, 1, 4))
    axis = int(rng.integers(-x.ndim, x.ndim + 1))
    check_op("Flatten", {"x": x}, {"axis": axis}, rtol=EXACT)


@pytest.mark.parametrize("opset", [11, 13, 21])
def test_squeeze_and_unsqueeze(opset: int) -> None:
    rng = np.random.default_rng(opset)
    x = _randn(rng, (1, 3, 1, 4, 1))
    for axes in ([0, -1], [2], None):
        if axes is None:
            check_op("Squeeze", {"x": x}, opset=opset, rtol=EXACT)
        elif opset < 13:
            check_op("Squeeze", {"x": x}, {"axes": axes}, opset=opset, rtol=EXACT)
        else:
            check_op("Squeeze", {"x": x}, constants={"axes": _i64(axes)}, opset=opset, rtol=EXACT)
    y = _randn(rng, (3, 4))
    for axes in ([0], [-1, 1], [0, 3]):
        if opset < 13:
            graph = check_op("Unsqueeze", {"x": y}, {"axes": axes}, opset=opset, rtol=EXACT)
        else:
            graph = check_op("Unsqueeze", {"x": y}, constants={"axes": _i64(axes)}, opset=opset, rtol=EXACT)
        assert ops_of(graph) == ["reshape"]


# ---- Slice and Split -------------------------------------------------------------------------------

def _random_bound(rng: np.random.Generator, dim: int, step: int, is_end: bool) -> int:
    """A start or end anywhere ONNX allows: in range, negative, out of range, or INT64 max/min.

    Not an INT64_MAX end with a negative step: onnxruntime reads it as "to the beginning" where the
    spec (and onnx shape inference) clamps it to dim - 1; see the test after this one."""
    choices = [rng.integers(-dim - 3, dim + 4), INT64_MIN, rng.integers(0, dim + 1)]
    if not (is_end and step < 0):
        choices.append(INT64_MAX)
    return int(rng.choice(choices))


@pytest.mark.parametrize("opset", [11, 13, 21])
@pytest.mark.parametrize("seed", range(6))
def test_slice_random(opset: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = _randn(rng, _shape(rng, 1, 4, high=8))
    axes = [int(a) for a in rng.choice(x.ndim, size=rng.integers(1, x.ndim + 1), replace=False)]
    steps = [int(rng.choice([-3, -2, -1, 1, 2, 3])) for _ in axes]
    starts = [_random_bound(rng, x.shape[a], step, False) for a, step in zip(axes, steps)]
    ends = [_random_bound(rng, x.shape[a], step, True) for a, step in zip(axes, steps)]
    axes = [a - x.ndim if rng.random() < 0.5 else a for a in axes]
    constants = {"starts": _i64(starts), "ends": _i64(ends), "axes": _i64(axes), "steps": _i64(steps)}
    graph = check_op("Slice", {"x": x}, constants=constants, opset=opset, rtol=EXACT)
    assert len(_primitives(graph)) <= 1


def test_slice_int64_max_end_with_negative_step_follows_the_spec() -> None:
    """ONNX clamps end to [-1, dim - 1] for negative steps, so end=INT64_MAX means dim - 1 (as onnx's
    reference evaluator and shape inference agree); onnxruntime alone reads it as numpy's None."""
    x = _randn(np.random.default_rng(2), (5, 3))
    constants = {"starts": _i64([4]), "ends": _i64([INT64_MAX]), "axes": _i64([0]), "steps": _i64([-1])}
    model = single_node_model("Slice", {"x": x}, constants=constants)
    (want,) = ReferenceEvaluator(model).run(None, {"x": x})
    assert want.shape == (0, 3)
    np.testing.assert_array_equal(run_graph(fission(model), {"x": x})["y0"], want)


def test_slice_negative_step_reverses_whole_axis() -> None:
    x = _randn(np.random.default_rng(3), (4, 5))
    constants = {"starts": _i64([-1]), "ends": _i64([INT64_MIN]), "axes": _i64([1]), "steps": _i64([-1])}
    graph = check_op("Slice", {"x": x}, constants=constants, rtol=EXACT)
    assert ops_of(graph) == ["slice"]


def test_slice_without_axes_and_steps() -> None:
    x = _randn(np.random.default_rng(4), (6, 5, 4))
    check_op("Slice", {"x": x}, constants={"starts": _i64([1, -4]), "ends": _i64([-1, 1000])}, rtol=EXACT)


def test_full_range_slice_is_a_no_op() -> None:
    x = _randn(np.random.default_rng(5), (3, 4))
    constants = {"starts": _i64([0, -100]), "ends": _i64([INT64_MAX, 4]), "axes": _i64([0, 1])}
    graph = check_op("Slice", {"x": x}, constants=constants, rtol=EXACT)
    assert _primitives(graph) == []


@pytest.mark.parametrize("seed", SEEDS)
def test_split_sizes(seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = _randn(rng, (3, 7, 4))
    sizes = [2, 4, 1] if seed % 2 else [7]
    axis = int(rng.choice([1, -2]))
    n = len(sizes)
    check_op("Split", {"x": x}, {"axis": axis, "split": sizes}, opset=11, num_outputs=n, rtol=EXACT)
    graph = check_op("Split", {"x": x}, {"axis": axis}, constants={"split": _i64(sizes)}, opset=13,
                     num_outputs=n, rtol=EXACT)
    assert ops_of(graph).count("slice") == (n if n > 1 else 0)


@pytest.mark.parametrize("opset", [11, 13, 17])
def test_split_equal(opset: int) -> None:
    x = _randn(np.random.default_rng(opset), (2, 6, 3))
    check_op("Split", {"x": x}, {"axis": 1}, opset=opset, num_outputs=3, rtol=EXACT)


@pytest.mark.parametrize("dim,parts", [(7, 3), (8, 3), (6, 3), (5, 2)])
def test_split_num_outputs_uneven(dim: int, parts: int) -> None:
    x = _randn(np.random.default_rng(dim), (2, dim))
    graph = check_op("Split", {"x": x}, {"axis": -1, "num_outputs": parts}, opset=18, num_outputs=parts, rtol=EXACT)
    assert ops_of(graph) == ["slice"] * parts


# ---- Concat and Pad ----------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", SEEDS)
def test_concat(seed: int) -> None:
    rng = np.random.default_rng(seed)
    base = _shape(rng, 1, 4)
    axis = int(rng.integers(-len(base), len(base)))
    inputs = {}
    for k in range(int(rng.integers(1, 4))):
        shape = list(base)
        shape[axis] = int(rng.integers(1, 5))
        inputs[f"x{k}"] = _randn(rng, tuple(shape))
    graph = check_op("Concat", inputs, {"axis": axis}, rtol=EXACT)
    assert _primitives(graph) == (["concat"] if len(inputs) > 1 else [])


def _random_pads(rng: np.random.Generator, shape: tuple[int, ...], mode: str) -> list[int]:
    """Begins then ends; reflect pads stay below the (cropped) dim, constant/edge may crop."""
    if mode == "reflect":
        return [int(rng.integers(0, d)) for d in shape] + [int(rng.integers(0, d)) for d in shape]
    return [int(rng.integers(-1, 3)) if d > 2 else int(rng.integers(0, 3)) for d in shape * 2]


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
@pytest.mark.parametrize("opset", [11, 13, 18, 21])
@pytest.mark.parametrize("seed", range(3))
def test_pad_modes(mode: str, opset: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = _randn(rng, _shape(rng, 1, 4))
    constants = {"pads": _i64(_random_pads(rng, x.shape, mode))}
    if mode == "constant":
        constants["value"] = np.array(rng.standard_normal(), np.float32)
    check_op("Pad", {"x": x}, {"mode": mode}, constants=constants, opset=opset, rtol=EXACT,
             input_order=["x", "pads", "value"] if "value" in constants else None)


def test_pad_negative_crops_with_a_slice() -> None:
    x = _randn(np.random.default_rng(8), (4, 6))
    graph = check_op("Pad", {"x": x}, constants={"pads": _i64([-1, 2, 0, -2])}, rtol=EXACT)
    assert ops_of(graph) == ["slice", "pad"]
    graph = check_op("Pad", {"x": x}, constants={"pads": _i64([-1, 0, 0, -2])}, rtol=EXACT)
    assert ops_of(graph) == ["slice"]


@pytest.mark.parametrize("mode", ["reflect", "edge"])
def test_pad_mixed_signs_crop_before_padding(mode: str) -> None:
    """onnxruntime crops first, then reflects/repeats the cropped data."""
    x = _randn(np.random.default_rng(10), (5, 6))
    for pads in ([-1, 2, 2, -2], [2, -1, -2, 3]):
        check_op("Pad", {"x": x}, {"mode": mode}, constants={"pads": _i64(pads)}, rtol=EXACT)


def test_pad_int_and_default_value() -> None:
    x = np.random.default_rng(9).integers(-5, 5, (3, 4)).astype(np.int64)
    check_op("Pad", {"x": x}, constants={"pads": _i64([1, 0, 2, 1]), "v": np.array(7, np.int64)}, rtol=EXACT)
    check_op("Pad", {"x": x}, constants={"pads": _i64([0, 1, 1, 0])}, rtol=EXACT)


@pytest.mark.parametrize("opset", [18, 21])
def test_pad_axes_input(opset: int) -> None:
    rng = np.random.default_rng(opset)
    x = _randn(rng, (2, 3, 4, 5))
    constants = {"pads": _i64([1, 2, 0, 3]), "value": np.array(1.5, np.float32), "axes": _i64([-1, 1])}
    graph = check_op("Pad", {"x": x}, {"mode": "constant"}, constants=constants, opset=opset, rtol=EXACT)
    assert ops_of(graph) == ["pad"]


# ---- DepthToSpace, SpaceToDepth ----------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["DCR", "CRD"])
@pytest.mark.parametrize("seed", range(3))
def test_depth_to_space(mode: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    b = int(rng.integers(2, 4))
    x = _randn(rng, (int(rng.integers(1, 3)), b * b * int(rng.integers(1, 4)), int(rng.integers(1, 4)), 3))
    graph = check_op("DepthToSpace", {"x": x}, {"blocksize": b, "mode": mode}, rtol=EXACT)
    assert ops_of(graph) == ["reshape", "transpose", "reshape"]


def test_depth_to_space_default_mode_opset11() -> None:
    x = _randn(np.random.default_rng(2), (1, 8, 2, 3))
    check_op("DepthToSpace", {"x": x}, {"blocksize": 2}, opset=11, rtol=EXACT)


@pytest.mark.parametrize("seed", range(3))
def test_space_to_depth(seed: int) -> None:
    rng = np.random.default_rng(seed)
    b = int(rng.integers(2, 4))
    x = _randn(rng, (2, int(rng.integers(1, 4)), b * int(rng.integers(1, 3)), b * 2))
    graph = check_op("SpaceToDepth", {"x": x}, {"blocksize": b}, rtol=EXACT)
    assert ops_of(graph) == ["reshape", "transpose", "reshape"]


# ---- Gather, Expand, Tile --------------------------------------------------------------------------

@pytest.mark.parametrize("seed", SEEDS)
def test_gather_constant_indices(seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = _randn(rng, _shape(rng, 1, 4))
    axis = int(rng.integers(-x.ndim, x.ndim))
    dim = x.shape[axis]
    indices = rng.integers(-dim, dim, size=_shape(rng, 0, 2, high=4))
    graph = check_op("Gather", {"x": x}, {"axis": axis}, constants={"i": indices.astype(np.int64)}, rtol=EXACT)
    assert ops_of(graph) == ["gather"]
    assert all(graph.constants[n.inputs[1]].min() >= 0 for n in graph.nodes)


def test_gather_scalar_index_drops_axis() -> None:
    x = _randn(np.random.default_rng(1), (3, 4, 5))
    graph = check_op("Gather", {"x": x}, {"axis": 1}, constants={"i": np.array(-1, np.int64)}, rtol=EXACT)
    assert graph.types[graph.outputs[0]].shape == (3, 5)


@pytest.mark.parametrize("dtype", [np.int64, np.int32])
def test_gather_dynamic_indices(dtype: type) -> None:
    rng = np.random.default_rng(2)
    table = _randn(rng, (10, 4))
    ids = rng.integers(-10, 10, (2, 3)).astype(dtype)
    graph = check_op("Gather", {"ids": ids}, constants={"table": table}, input_order=["table", "ids"], rtol=EXACT)
    assert ops_of(graph) == ["gather"]


@pytest.mark.parametrize("seed", SEEDS)
def test_expand_bidirectional(seed: int) -> None:
    rng = np.random.default_rng(seed)
    out = _shape(rng, 1, 4)
    x_shape = tuple(1 if rng.random() < 0.5 else d for d in out[rng.integers(0, len(out)):])
    shape = [1 if rng.random() < 0.4 else d for d in out]   # 1s in the shape keep the input's dim
    check_op("Expand", {"x": _randn(rng, x_shape)}, constants={"shape": _i64(shape)}, rtol=EXACT)


def test_expand_to_a_shorter_shape() -> None:
    x = _randn(np.random.default_rng(3), (2, 1, 4))
    graph = check_op("Expand", {"x": x}, constants={"shape": _i64([3, 1])}, rtol=EXACT)
    assert ops_of(graph) == ["expand"]


@pytest.mark.parametrize("seed", SEEDS)
def test_tile(seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = _randn(rng, _shape(rng, 1, 4, high=4))
    repeats = rng.integers(1, 4, size=x.ndim)
    graph = check_op("Tile", {"x": x}, constants={"r": repeats.astype(np.int64)}, rtol=EXACT)
    assert set(_primitives(graph)) <= {"reshape", "expand"}


def test_tile_structure() -> None:
    x = _randn(np.random.default_rng(4), (2, 1, 3))
    graph = check_op("Tile", {"x": x}, constants={"r": _i64([2, 4, 1])}, rtol=EXACT)
    assert ops_of(graph) == ["reshape", "expand", "reshape"]


# ---- rejections ------------------------------------------------------------------------------------

def test_pad_wrap_mode_is_rejected() -> None:
    x = _randn(np.random.default_rng(0), (3, 4))
    with pytest.raises(UnsupportedError, match="mode='wrap'"):
        check_op("Pad", {"x": x}, {"mode": "wrap"}, constants={"pads": _i64([1, 1, 1, 1])}, opset=19, strict=True)


def test_depth_to_space_unknown_mode_is_rejected() -> None:
    x = _randn(np.random.default_rng(0), (1, 4, 2, 2))
    with pytest.raises(UnsupportedError, match="mode='XYZ'"):
        check_op("DepthToSpace", {"x": x}, {"blocksize": 2, "mode": "XYZ"}, strict=True)


def test_reshape_of_a_dynamic_shape_is_rejected() -> None:
    x = _randn(np.random.default_rng(0), (2, 6))
    with pytest.raises(UnsupportedError, match="Reshape's shape input must be a constant"):
        check_op("Reshape", {"x": x, "shape": _i64([3, 4])}, strict=True)
