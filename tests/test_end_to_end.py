"""End to end: every zoo model fissions, passes the IR checker, and matches onnxruntime.

Mini variants run in CI; the full-size models are marked slow (run with `-m slow`).
"""

from __future__ import annotations

import numpy as np
import pytest

from korch import zoo
from korch.backends.reference import run_graph
from korch.ir.check import check_graph
from korch.pipeline import run_fission
from korch.settings import AccuracyPolicy
from korch.verify import DEFAULT_RTOL, random_feeds

MINI = [m.name for m in zoo.list_models() if m.mini]
FULL = [m.name for m in zoo.list_models() if not m.mini]
# yolov4 (110 convs) is deeper than fp32 is exact: onnxruntime's own output is 3.35e-4 of scale from a
# float64 run of the same model on its deepest head, korch's reference 1.54e-4 (benchmarks/precision_check.py).
# Against onnxruntime korch can only be checked to the sum of the two.
RTOL = {"yolov4": 5e-4}


def _check(name: str, seed: int) -> None:
    rtol = RTOL.get(name, DEFAULT_RTOL)
    result = run_fission(zoo.to_model_proto(name), verify=True, seed=seed, accuracy=AccuracyPolicy(rtol=rtol))
    check_graph(result.graph)
    assert result.verify is not None
    assert result.verify.ok, f"{name}: {result.verify.summary()}"
    # The check is only meaningful if the outputs depend on the input.
    graph = result.graph
    a = run_graph(graph, random_feeds(graph, seed + 1))
    b = run_graph(graph, random_feeds(graph, seed + 2))
    for out in graph.outputs:
        scale = float(np.abs(a[out]).max())
        assert np.isfinite(a[out]).all() and scale > 0
        assert float(np.abs(a[out] - b[out]).max()) > 1e-3 * scale, f"{name}: output {out} ignores its input"


@pytest.mark.parametrize("name", MINI)
def test_mini_model_matches_onnxruntime(name: str) -> None:
    _check(name, seed=11)


@pytest.mark.slow
@pytest.mark.parametrize("name", FULL)
def test_full_model_matches_onnxruntime(name: str) -> None:
    _check(name, seed=5)
