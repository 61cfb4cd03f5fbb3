"""The profiler's reference values: each kernel is fed exactly the reference, and each value is
dropped as soon as no later node or job needs it, even when a job needs it after its last consumer."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from korch.backends.reference import evaluate, run_graph
from korch.ir.graph import GraphBuilder
from korch.ir.types import DType, TensorType
from korch.profile.profiler import Job, _streamed_values
from korch.verify import random_feeds


def _chain():
    """x -> relu -> exp -> neg -> sigmoid -> tanh -> abs: nodes 0..5, each read only by the next."""
    b = GraphBuilder("chain", fold=lambda node, arrays: evaluate(node, arrays))
    v = b.add_input("x", TensorType((64, 64), DType.FLOAT32))
    for op in ("relu", "exp", "neg", "sigmoid", "tanh", "abs"):
        v = b.emit(op, [v])
    return b.build([("y", v)])


def _job(graph, nodes):
    """A job over `nodes` (a stand-in candidate: the streamer reads only nodes, inputs and outputs)."""
    produced = {graph.nodes[k].output for k in nodes}
    inputs = sorted({i for k in nodes for i in graph.nodes[k].inputs if i not in produced})
    return Job(SimpleNamespace(nodes=tuple(nodes), inputs=inputs, outputs=[graph.nodes[max(nodes)].output]), "x")


def test_a_value_a_job_needs_past_its_last_consumer_is_dropped_after_that_job() -> None:
    graph = _chain()
    feeds = random_feeds(graph, 3)
    reference = run_graph(graph, feeds, intermediate=True)
    first = graph.nodes[0].output                # read by node 1 only, and by the job over nodes 1..3
    jobs = [_job(graph, [1, 2, 3]), _job(graph, [5])]
    seen = {}
    for job, env in _streamed_values(graph, feeds, jobs):
        seen[max(job.candidate.nodes)] = set(env) - set(graph.constants)
        for name in job.candidate.inputs + job.candidate.outputs:      # fed exactly the reference
            np.testing.assert_array_equal(env[name], reference[name])
    assert first in seen[3]                      # the job over nodes 1..3 is fed it
    assert first not in seen[5]                  # and nothing needs it after that job
    assert seen[5] <= {graph.nodes[4].output, graph.nodes[5].output}
