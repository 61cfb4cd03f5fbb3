"""Peak RSS of a chain of onnxruntime sessions, each with its own arena or sharing the environment's.

    python benchmarks/ort_arenas.py [--sessions 1 20 60] [--threads 2]

A chain of N sessions, each a 3x3 conv (64 channels, 80x80, its own weights) + Relu, runs 7 times
in a fresh process per (mode, N). Both modes set what korch sets on a kernel that runs among others
(pools park after a call); `own` leaves each session its own arena, `shared` registers one arena on
onnxruntime's environment and has every session use it (what korch.backends.onnxruntime.make_session
does for such kernels). Printed per row: peak RSS (MB) and the median time of one pass over the chain
(ms; one process per row, so compare times only roughly: this machine drifts between processes).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

CHILD = r"""
import json, statistics, sys, time
import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

mode, n, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])

def model(k):
    rng = np.random.default_rng(k)
    w = numpy_helper.from_array((rng.standard_normal((64, 64, 3, 3)) * 0.05).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["t"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["t"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64, 80, 80])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64, 80, 80])], [w])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 9
    return m.SerializeToString()

if mode == "shared":
    info = ort.OrtMemoryInfo("Cpu", ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, ort.OrtMemType.DEFAULT)
    ort.create_and_register_allocator(info, ort.OrtArenaCfg(0, -1, -1, -1))
sessions = []
for k in range(n):
    options = ort.SessionOptions()        # as korch's kernels among others: pools park after a call
    options.intra_op_num_threads = threads
    options.add_session_config_entry("session.force_spinning_stop", "1")
    if mode == "shared":
        options.add_session_config_entry("session.use_env_allocators", "1")
    sessions.append(ort.InferenceSession(model(k), options, providers=["CPUExecutionProvider"]))
x = np.random.default_rng(0).random((1, 64, 80, 80), dtype=np.float32)
times = []
for _ in range(7):
    t0 = time.perf_counter()
    v = x
    for s in sessions:
        v = s.run(None, {"x": v})[0]
    times.append(time.perf_counter() - t0)
print(json.dumps({"rss_mb": int(next(l for l in open("/proc/self/status") if l.startswith("VmHWM")).split()[1]) / 1024,
                  "pass_ms": statistics.median(times[2:]) * 1e3}))
"""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sessions", type=int, nargs="+", default=[1, 20, 60])
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args(argv)
    print("| sessions | arena | peak RSS MB | one pass ms |")
    print("|---|---|---|---|")
    for n in args.sessions:
        for mode in ("own", "shared"):
            out = subprocess.run([sys.executable, "-c", CHILD, mode, str(n), str(args.threads)], check=True,
                                 capture_output=True, text=True).stdout
            row = json.loads(out.strip().splitlines()[-1])
            arena = "one per session" if mode == "own" else "one, shared"
            print(f"| {n} | {arena} | {row['rss_mb']:.0f} | {row['pass_ms']:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
