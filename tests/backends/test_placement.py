"""A split plan's threads are placed: the caller held to one CPU while the plan runs, each onnxruntime
pool worker to another, so a parked worker is never woken onto its caller's CPU."""

from __future__ import annotations

import os

import numpy as np
import pytest
from onnx import TensorProto, helper

from korch.backends.placement import Placement, pinned, placement

needs_two_cpus = pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
                                    reason="placing threads needs two CPUs this process may use")


def test_one_thread_or_too_few_cpus_place_nothing() -> None:
    assert placement(1) is None
    if hasattr(os, "sched_getaffinity"):
        assert placement(len(os.sched_getaffinity(0)) + 1) is None


@needs_two_cpus
def test_placement_takes_the_first_cpus_the_process_may_use() -> None:
    allowed = sorted(os.sched_getaffinity(0))
    assert placement(2) == Placement(allowed[0], (allowed[1],))


@needs_two_cpus
def test_pinned_holds_the_calling_thread_and_restores_it() -> None:
    before = os.sched_getaffinity(0)
    cpu = sorted(before)[-1]
    with pinned(cpu):
        assert os.sched_getaffinity(0) == {cpu}
    assert os.sched_getaffinity(0) == before
    with pytest.raises(ZeroDivisionError):                 # restored on the way out of an error too
        with pinned(cpu):
            1 / 0
    assert os.sched_getaffinity(0) == before
    with pinned(None):
        assert os.sched_getaffinity(0) == before


def _relu_model() -> bytes:
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "relu",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64, 64, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64, 64, 64])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


@needs_two_cpus
def test_onnxruntime_kernel_workers_are_held_to_their_cpus() -> None:
    from korch.backends import CompileOptions, get_backend

    worker = sorted(os.sched_getaffinity(0))[1]
    backend = get_backend("onnxruntime")            # (loading onnxruntime may start threads of its own)
    backend.compile_onnx(_relu_model(), ["x"], ["y"], CompileOptions(threads=1))
    before = set(os.listdir("/proc/self/task"))
    kernel = backend.compile_onnx(_relu_model(), ["x"], ["y"], CompileOptions(threads=2, worker_cpus=(worker,)))
    x = np.random.default_rng(0).standard_normal((1, 64, 64, 64)).astype(np.float32)
    (y,) = kernel.run([x])
    np.testing.assert_array_equal(y, np.maximum(x, 0))
    started = set(os.listdir("/proc/self/task")) - before
    assert started, "a two-thread session starts one pool worker"
    assert all(os.sched_getaffinity(int(tid)) == {worker} for tid in started)
    with pytest.raises(ValueError, match="pool workers"):
        backend.compile_onnx(_relu_model(), ["x"], ["y"], CompileOptions(threads=2, worker_cpus=(0, 1)))


@needs_two_cpus
def test_a_split_plan_holds_its_caller_while_it_runs_and_a_whole_model_does_not() -> None:
    from korch.pipeline import run_fission
    from korch.plan import Plan, Step
    from korch.runtime import Session

    nodes = [helper.make_node("Neg", [f"v{k}"], [f"v{k + 1}"], name=f"neg{k}") for k in range(3)]
    model = helper.make_model(helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("v0", TensorProto.FLOAT, [4])],
                                                [helper.make_tensor_value_info("v3", TensorProto.FLOAT, [4])]),
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    graph = run_fission(model).graph
    seen: list[set[int]] = []

    class Recording:
        def run(self, inputs):
            seen.append(os.sched_getaffinity(0))
            return [-inputs[0]]

    def run(steps: tuple[Step, ...]) -> np.ndarray:
        plan = Plan(graph, steps, 2, "machine", "version")
        (y,) = Session(plan, [Recording() for _ in steps]).run(None, {graph.inputs[0]: np.ones(4, np.float32)})
        return y

    before = os.sched_getaffinity(0)
    split = tuple(Step("recording", (k,), n.inputs, (n.output,), f"k{k}", 0.0) for k, n in enumerate(graph.nodes))
    np.testing.assert_array_equal(run(split), -np.ones(4, np.float32))
    assert seen == [{placement(2).caller}] * 3 and os.sched_getaffinity(0) == before
    seen.clear()
    whole = (Step("recording", (0, 1, 2), graph.inputs, graph.outputs, "all", 0.0),)
    run(whole)
    assert seen == [before]                        # one engine running the whole model runs as its users run it


# Run in a new process, so that torch's OpenMP pool is made there (a pytest worker made its own
# long ago). Prints, as JSON, each thread whose CPUs are fewer than the process's own: its CPUs and
# the CPU time (clock ticks) it spent while the kernel ran 1,000 times.
_CONFINED = """
import json, os, sys
import numpy as np
from korch.backends.placement import pinned, placement
where = placement(2)

def ticks():
    out = {}
    for t in os.listdir("/proc/self/task"):
        fields = open(f"/proc/self/task/{t}/stat").read().rsplit(")", 1)[1].split()
        out[t] = int(fields[11]) + int(fields[12])          # utime + stime
    return out

if sys.argv[1] == "inductor":
    from korch.backends import CompileOptions, get_backend
    from korch.backends.reference import evaluate
    from korch.ir.graph import GraphBuilder
    from korch.ir.types import DType, TensorType
    b = GraphBuilder("g", fold=lambda node, arrays: evaluate(node, arrays))
    v = b.emit("exp", [b.emit("relu", [b.add_input("x", TensorType((1024, 1024), DType.FLOAT32))])])
    kernel = get_backend("inductor").compile(b.build([("y", v)]), CompileOptions(threads=2, worker_cpus=where.workers))
    x = np.random.default_rng(0).standard_normal((1024, 1024)).astype(np.float32)
    before = ticks()
    with pinned(where.caller):                      # as a split plan's Session runs it
        for _ in range(1000):
            (y,) = kernel.run([x])
    np.testing.assert_allclose(y, np.exp(np.maximum(x, 0)), rtol=1e-5)
else:                                               # torch's pool made on the pinned caller: confined
    import torch
    torch.set_num_threads(2)
    before = ticks()
    with pinned(where.caller):                      # torch's first parallel loop (a fill of 4M floats)
        torch.ones(2048, 2048).sum()
after = ticks()
full = os.sched_getaffinity(0)
print(json.dumps({t: [sorted(os.sched_getaffinity(int(t))), after[t] - before.get(t, 0)]
                  for t in after if os.sched_getaffinity(int(t)) != full}))
"""


@needs_two_cpus
def test_an_inductor_kernel_holds_its_openmp_workers_to_theirs_and_not_to_the_callers_cpu() -> None:
    """A thread inherits the CPUs of the thread that makes it: an engine pool first made while a split
    plan holds its caller to one CPU would run all its threads there (the control). An Inductor kernel
    among others holds torch's OpenMP workers to the plan's worker CPUs, as onnxruntime's are held
    (placement.hold_openmp_workers): the one thread held is the pool's worker, busy while the
    kernel runs, and no thread is held to the caller's CPU."""
    import json
    import subprocess
    import sys

    pytest.importorskip("torch")
    where = placement(2)

    def confined(kind: str) -> dict[str, list]:
        out = subprocess.run([sys.executable, "-c", _CONFINED, kind], capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-2000:]
        return json.loads(out.stdout.splitlines()[-1])

    assert any(cpus == [where.caller] for cpus, _ in confined("torch-on-the-pinned-caller").values())
    held = confined("inductor")
    assert [cpus for cpus, _ in held.values()] == [list(where.workers)], held
    ((_, busy),) = held.values()
    assert busy >= 10, f"the held thread ran {busy} clock ticks of the kernel's 1,000 calls: not the pool's worker"


def test_holding_openmp_workers_without_cpus_does_nothing() -> None:
    from korch.backends.placement import hold_openmp_workers

    before = {t: os.sched_getaffinity(int(t)) for t in os.listdir("/proc/self/task")}
    assert hold_openmp_workers(()) is False
    assert {t: os.sched_getaffinity(int(t)) for t in os.listdir("/proc/self/task") if t in before} == before
