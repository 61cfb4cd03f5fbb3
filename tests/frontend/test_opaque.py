"""Nodes korch cannot fission stay whole as opaque primitives; everything around them is fissioned.

Every numeric check draws fresh random inputs (the seed is in the failure message) and compares with
onnxruntime within VERIFY_RTOL of each output's largest magnitude.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from korch.backends.reference import run_graph
from korch.cli import main
from korch.errors import ExitCode, UnsupportedError
from korch.frontend import fission, load_model
from korch.frontend.fission.driver import fission_model
from korch.ir.check import check_graph
from korch.ir.ops import PrimClass
from korch.ir.types import UNKNOWN_DIM
from korch.verify import diff_outputs, random_feeds, run_onnxruntime
from tests.opaque_models import CUSTOM_DOMAIN, RUNNABLE, custom_model, nms_model, topk_model

# Opaque nodes run in onnxruntime on both sides; the rest is fissioned: the usual fp32 target.
VERIFY_RTOL = 1e-4


def _fresh_seed() -> int:
    return int(np.random.SeedSequence().entropy % 2**31)


def _opaque_origins(graph) -> list[str]:
    return list(dict.fromkeys(n.origin for n in graph.nodes if n.klass == PrimClass.OPAQUE))


@pytest.mark.parametrize("name", sorted(RUNNABLE))
def test_fission_verify_lists_opaque_nodes(name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    build, opaque = RUNNABLE[name]
    onnx.save(build(), tmp_path / "m.onnx")
    seed = _fresh_seed()
    code = main(["fission", str(tmp_path / "m.onnx"), "--verify", "--seed", str(seed), "--rtol", str(VERIFY_RTOL),
                 "-o", str(tmp_path / "prims.onnx")])
    out = capsys.readouterr().out
    assert code == 0, f"seed {seed}\n{out}"
    assert "OK" in out, f"seed {seed}\n{out}"
    assert f"opaque      {len(opaque)} ONNX node(s)" in out
    for node in opaque:
        assert f"  {node} (" in out
    # the written primitive graph runs in onnxruntime and agrees with the original model
    feeds = random_feeds(fission(build()), seed)
    want = run_onnxruntime(build(), feeds)
    got = run_onnxruntime(onnx.load(tmp_path / "prims.onnx"), feeds)
    for diff in diff_outputs(got, want):
        assert diff.rel <= VERIFY_RTOL, f"seed {seed}: {diff}"


@pytest.mark.parametrize("name", sorted(RUNNABLE))
def test_primitive_graph_matches_onnxruntime(name: str) -> None:
    build, opaque = RUNNABLE[name]
    model = build()
    graph = check_graph(fission(model))
    assert _opaque_origins(graph) == list(opaque)
    seed = _fresh_seed()
    feeds = random_feeds(graph, seed)
    want = run_onnxruntime(model, feeds)
    got = run_graph(graph, feeds)
    for diff in diff_outputs(got, want):
        assert diff.rel <= VERIFY_RTOL, f"seed {seed}: {diff}"
    other = run_onnxruntime(model, random_feeds(graph, seed + 1))
    assert any(a.shape != b.shape or not np.array_equal(a, b) for a, b in zip(want.values(), other.values())), \
        "the outputs do not depend on the inputs: the check proves nothing"


def test_a_node_with_several_outputs_becomes_consecutive_primitives_one_per_used_output() -> None:
    graph = fission(topk_model())
    topk = [(k, n) for k, n in enumerate(graph.nodes) if n.origin == "topk"]
    assert [n.attrs["index"] for _, n in topk] == [0, 1]
    assert topk[1][0] == topk[0][0] + 1
    assert topk[0][1].attrs["node"] == topk[1][1].attrs["node"]
    assert graph.types[topk[1][1].output].dtype.value == "int64"


def test_omitted_optional_inputs_keep_their_slots() -> None:
    from tests.opaque_models import lstm_model

    graph = fission(lstm_model())
    (first, second) = [n for n in graph.nodes if n.origin == "lstm"]
    assert first.inputs[1:] == ("W", "R", "h0")          # B and sequence_lens are omitted
    from korch.ir.opaque import decode_node

    proto = decode_node(first.attrs)
    assert list(proto.input) == ["in0", "in1", "in2", "", "", "in5"]
    assert list(proto.output) == ["out0", "out1", ""]


def test_data_dependent_shapes_spread_to_what_reads_them() -> None:
    result = fission_model(load_model(nms_model()))
    graph = result.graph
    (nms,) = [n for n in graph.nodes if n.origin == "nms"]
    assert graph.types[nms.output].shape == (UNKNOWN_DIM, 3)
    assert str(graph.types[nms.output]) == "int64[?x3]"
    reasons = {o.name: o.reason for o in result.opaque}
    assert reasons["nms"] == "no fission rule for this op"
    assert "data-dependent shape (int64[?x3])" in reasons["pick_box_index"]
    assert graph.types["picked"].shape == (UNKNOWN_DIM, 4)


def test_a_rule_that_refuses_makes_the_node_opaque_with_its_reason() -> None:
    x = np.zeros((2, 3), np.float32)
    graph = helper.make_graph([helper.make_node("Pad", ["x", "pads"], ["y"], name="pad", mode="wrap")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 5])],
                              initializer=[numpy_helper.from_array(np.array([1, 1, 1, 1], np.int64), "pads")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    model.ir_version = 9
    (node,) = fission_model(load_model(model)).opaque
    assert node.name == "pad" and "mode='wrap'" in node.reason


def test_identical_nodes_in_different_places_share_structural_keys() -> None:
    from korch.candidates import region_candidates

    nodes = [helper.make_node("Relu", ["x"], ["a"], name="relu_a"),
             helper.make_node("Sigmoid", ["x"], ["b"], name="sigmoid_b"),
             helper.make_node("CumSum", ["a", "axis"], ["ca"], name="cumsum_first", exclusive=1),
             helper.make_node("CumSum", ["b", "axis"], ["cb"], name="cumsum_second", exclusive=1),
             helper.make_node("Add", ["ca", "cb"], ["y"], name="add")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 5])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 5])],
                              initializer=[numpy_helper.from_array(np.array(1, np.int64), "axis")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    prim = fission(model)
    first, second = [n for n in prim.nodes if n.klass == PrimClass.OPAQUE]
    assert first.origin != second.origin and first.attrs == second.attrs
    alone = {r.onnx_nodes: r.key for r in region_candidates(prim)}
    assert alone[("cumsum_first",)] == alone[("cumsum_second",)]


def test_nondeterministic_ops_are_never_folded_but_others_are() -> None:
    nodes = [helper.make_node("RandomUniform", [], ["noise"], name="noise", shape=[2, 3], seed=1.0),
             helper.make_node("TopK", ["c", "k"], ["top", "top_i"], name="const_topk", axis=1),
             helper.make_node("Add", ["x", "noise"], ["xn"], name="add_noise"),
             helper.make_node("Add", ["xn", "top"], ["y"], name="add_top")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
                              initializer=[numpy_helper.from_array(np.arange(8, dtype=np.float32).reshape(2, 4), "c"),
                                           numpy_helper.from_array(np.array([3], np.int64), "k")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    result = fission_model(load_model(model))
    assert _opaque_origins(result.graph) == ["noise"]           # the TopK of a constant became a constant
    assert {o.name for o in result.opaque} == {"noise", "const_topk"}
    (noise,) = [n for n in result.graph.nodes if n.origin == "noise"]
    assert noise.inputs == ()


def test_strict_refuses_and_lists_every_node(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tests.opaque_models import lstm_model

    model = lstm_model()
    extra = [helper.make_node("CumSum", ["y", "axis"], ["y_sum"], name="cumsum"),
             helper.make_node("TopK", ["last", "k"], ["top", "top_i"], name="topk", axis=2)]
    model.graph.node.extend(extra)
    model.graph.initializer.extend([numpy_helper.from_array(np.array(0, np.int64), "axis"),
                                    numpy_helper.from_array(np.array([2], np.int64), "k")])
    del model.graph.output[:]
    model.graph.output.extend([helper.make_tensor_value_info("y_sum", TensorProto.FLOAT, [5, 1, 2, 6]),
                               helper.make_tensor_value_info("top", TensorProto.FLOAT, [1, 2, 2])])
    onnx.save(model, tmp_path / "m.onnx")
    with pytest.raises(UnsupportedError) as info:
        fission(model, strict=True)
    message = str(info.value)
    assert message.startswith("1 node(s) cannot be fissioned")       # the others read the refused one
    assert "'lstm' (LSTM): no fission rule" in message
    assert main(["fission", str(tmp_path / "m.onnx"), "--strict", "-o", str(tmp_path / "out.onnx")]) \
        == ExitCode.UNSUPPORTED
    assert "'lstm' (LSTM)" in capsys.readouterr().err
    assert not (tmp_path / "out.onnx").exists()
    assert [o.name for o in fission_model(load_model(model)).opaque] == ["lstm", "cumsum", "topk"]


@pytest.mark.parametrize("import_domain", [True, False])
def test_a_node_no_engine_runs_is_refused_by_name(import_domain: bool, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """With or without its domain's opset import (without it the onnx checker fails first)."""
    onnx.save(custom_model(import_domain=import_domain), tmp_path / "m.onnx")
    before = sorted(p.name for p in tmp_path.iterdir())
    code = main(["fission", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "out.onnx"), "--dump",
                 str(tmp_path / "out.txt")])
    err = capsys.readouterr().err
    assert code == ExitCode.UNSUPPORTED, err
    assert f"node 'my_custom' ({CUSTOM_DOMAIN}.MyOp)" in err
    assert "shape inference" not in err and "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_every_node_no_engine_runs_is_listed() -> None:
    model = custom_model()
    model.graph.node.append(helper.make_node("OtherOp", ["y"], ["z"], name="other", domain=CUSTOM_DOMAIN))
    model.graph.output.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 4]))
    with pytest.raises(UnsupportedError) as info:
        fission(model)
    message = str(info.value)
    assert message.startswith("1 node(s) no ONNX engine can run")     # 'other' reads my_custom's output
    model.graph.node[-1].input[0] = "x"
    with pytest.raises(UnsupportedError, match="2 node") as info:
        fission(model)
    assert "'other' (com.example.OtherOp)" in str(info.value) and "'my_custom'" in str(info.value)


def test_output_of_unknown_type_is_refused_by_name() -> None:
    nodes = [helper.make_node("SplitToSequence", ["x"], ["seq"], name="to_sequence", axis=0),
             helper.make_node("ConcatFromSequence", ["seq"], ["y"], name="from_sequence", axis=0)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    with pytest.raises(UnsupportedError, match="'to_sequence' \\(SplitToSequence\\): output 'seq' is not a tensor"):
        fission(model)


def test_onnxruntime_contrib_ops_are_typed_and_kept_whole() -> None:
    rng = np.random.default_rng(_fresh_seed())
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
             helper.make_node("Gelu", ["h"], ["g"], name="gelu", domain="com.microsoft"),
             helper.make_node("Relu", ["g"], ["y"], name="relu")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5])],
                              initializer=[numpy_helper.from_array(rng.standard_normal((8, 5)).astype(np.float32),
                                                                   "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    result = fission_model(load_model(model))
    assert [(o.name, o.domain) for o in result.opaque] == [("gelu", "com.microsoft")]
    assert [n.op for n in result.graph.nodes] == ["matmul", "opaque", "relu"]
    seed = _fresh_seed()
    feeds = random_feeds(result.graph, seed)
    for diff in diff_outputs(run_graph(result.graph, feeds), run_onnxruntime(model, feeds)):
        assert diff.rel <= VERIFY_RTOL, f"seed {seed}: {diff}"


def _if_model(capture: bool) -> onnx.ModelProto:
    """y = x + (sum(x) > 0 ? ones : zeros), the then-branch reading x from outside when `capture`."""
    def branch(name: str, value: float, reads_x: bool) -> onnx.GraphProto:
        const = numpy_helper.from_array(np.full((2, 3), value, np.float32), f"{name}_c")
        node = helper.make_node("Add", ["x", const.name], [name]) if reads_x else \
            helper.make_node("Identity", [const.name], [name])
        return helper.make_graph([node], name, [], [helper.make_tensor_value_info(name, TensorProto.FLOAT, [2, 3])],
                                 initializer=[const])

    nodes = [helper.make_node("ReduceSum", ["x"], ["s"], name="sum", keepdims=0),
             helper.make_node("Greater", ["s", "zero"], ["cond"], name="positive"),
             helper.make_node("If", ["cond"], ["r"], name="choose", then_branch=branch("t", 1.0, capture),
                              else_branch=branch("e", 0.0, False)),
             helper.make_node("Add", ["r", "x"], ["y"], name="add")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
                              initializer=[numpy_helper.from_array(np.array(0, np.float32), "zero")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_control_flow_is_kept_whole_unless_its_subgraph_reads_the_enclosing_graph() -> None:
    model = _if_model(capture=False)
    graph = fission(model)
    assert _opaque_origins(graph) == ["choose"]
    seed = _fresh_seed()
    for s in (seed, seed + 1):             # both branches are likely taken over a few draws
        feeds = random_feeds(graph, s)
        for diff in diff_outputs(run_graph(graph, feeds), run_onnxruntime(model, feeds)):
            assert diff.rel <= VERIFY_RTOL, f"seed {s}: {diff}"
    with pytest.raises(UnsupportedError, match=r"'choose' \(If\): its subgraph reads \['x'\] from the enclosing"):
        fission(_if_model(capture=True))


def test_repeated_node_names_are_made_unique() -> None:
    """Primitives name their ONNX node, and regions find nodes by that name: it must be unique."""
    model = topk_model()
    for node in model.graph.node:
        node.name = "same"
    loaded = load_model(model)
    names = [n.name for n in loaded.graph.node]
    assert len(set(names)) == len(names) and names[0] == "same"
    graph = fission(model)
    assert len(_opaque_origins(graph)) == 1
