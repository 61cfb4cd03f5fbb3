"""The onnxruntime backend's sessions: kernels that run among others share one arena."""

from __future__ import annotations

import json
import subprocess
import sys

# N kernels of a 64-channel 80x80 conv each (1.6 MB activations), run in a chain: peak RSS of the
# process (VmHWM: ru_maxrss would carry the high-water mark of pytest, which spawned it). `alone` compiles each as a kernel that runs alone (its own arena, as onnxruntime's default
# session); otherwise as kernels among others (korch's shared arena).
CHILD = r"""
import json, sys
import numpy as np
from onnx import TensorProto, helper, numpy_helper
from korch.backends import CompileOptions, get_backend

alone, n = sys.argv[1] == "alone", int(sys.argv[2])
backend = get_backend("onnxruntime")
kernels = []
for k in range(n):
    w = numpy_helper.from_array((np.random.default_rng(k).standard_normal((64, 64, 3, 3)) * 0.05).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["t"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["t"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64, 80, 80])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64, 80, 80])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    kernels.append(backend.compile_onnx(model, ["x"], ["y"], CompileOptions(threads=1, runs_alone=alone)))
x = np.random.default_rng(0).random((1, 64, 80, 80), dtype=np.float32)
for _ in range(2):
    v = x
    for kernel in kernels:
        (v,) = kernel.run([v])
print(json.dumps({"rss_mb": int(next(l for l in open("/proc/self/status") if l.startswith("VmHWM")).split()[1]) / 1024, "sum": float(v.sum())}))
"""


def _peak(mode: str, n: int) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, mode, str(n)], check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_kernels_among_others_share_one_arena() -> None:
    """30 kernels with an arena each hold ~30 activations' worth of memory; sharing the environment's
    arena, a few (measured: 496 against 119 MB at 60 sessions, benchmarks/ort_arenas.py). Same outputs."""
    own, shared = _peak("alone", 30), _peak("among", 30)
    assert shared["sum"] == own["sum"]
    assert own["rss_mb"] - shared["rss_mb"] > 80, (own, shared)
