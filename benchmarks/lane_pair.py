"""Two independent onnxruntime kernels: one after another on all threads, or side by side on one each.

What co-scheduling (korch/plan/schedule.py) can gain on this machine, before any plan is involved:
for each conv size, two independent 3x3 conv kernels (each its own session, as in a plan) run

- sequential: one after the other, each on `--threads` threads, pools parked between calls and
  workers held to their CPUs (korch's split-plan settings);
- side by side: each on one thread, the first on the calling thread and the second on a lane
  worker (runtime/lanes.py), both held to their own CPUs.

With `--engine openvino` the kernels are OpenVINO compiled models (korch's settings, one inference
request each) instead: korch does not run OpenVINO in lanes yet, this measures whether it could.

Both are timed interleaved (a pause and one untimed call per turn), medians with p10-p90. Then
one conv alone on each thread count, back to back (`measure`), with the caller held to its CPU: how
well the kernel itself scales.

    python benchmarks/lane_pair.py --threads 2 --rounds 15 [--engine openvino]
"""

from __future__ import annotations

import argparse

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from korch.backends.onnxruntime import make_session
from korch.backends.placement import pinned, placement
from korch.profile.timing import measure, side_by_side
from korch.runtime.lanes import LanePool

SIZES = [(32, 20), (64, 40), (128, 40), (64, 80), (128, 80)]      # (channels, side)


def conv_model(channels: int, side: int, seed: int) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    w = numpy_helper.from_array(rng.standard_normal((channels, channels, 3, 3)).astype(np.float32) * 0.05, "w")
    node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])
    shape = [1, channels, side, side]
    graph = helper.make_graph([node], "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


class OpenVinoRun:
    """An OpenVINO compiled model and its request, run like an onnxruntime session (korch's settings)."""

    def __init__(self, model: onnx.ModelProto, threads: int) -> None:
        import tempfile

        import openvino as ov

        from korch.backends.openvino.backend import DEVICE, compile_config

        with tempfile.NamedTemporaryFile(suffix=".onnx") as f:
            f.write(model.SerializeToString())
            f.flush()
            self.request = ov.Core().compile_model(f.name, DEVICE, compile_config(threads)).create_infer_request()

    def run(self, _outputs: object, feeds: dict[str, np.ndarray]) -> None:
        self.request.infer(list(feeds.values()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--engine", choices=("onnxruntime", "openvino"), default="onnxruntime")
    args = parser.parse_args()
    where = placement(args.threads)
    workers = where.workers if where is not None else ()
    caller = where.caller if where is not None else None
    pool = LanePool(2, workers)
    wide_label = f"one, {args.threads} threads us"
    print(f"{'conv':>14} {'sequential ms':>24} {'side by side ms':>24} {'ratio':>6} {'one, 1 thread us':>17} "
          f"{wide_label:>18}")
    for channels, side in SIZES:
        models = [conv_model(channels, side, seed) for seed in (1, 2)]
        if args.engine == "openvino":
            wide = [OpenVinoRun(m, args.threads) for m in models]
            narrow = [OpenVinoRun(m, 1) for m in models]
        else:
            wide = [make_session(m, args.threads, stop_spinning=True, worker_cpus=workers) for m in models]
            narrow = [make_session(m, 1, stop_spinning=True) for m in models]
        feeds = [{"x": np.random.default_rng(s).standard_normal((1, channels, side, side)).astype(np.float32)}
                 for s in (3, 4)]

        def sequential() -> None:
            with pinned(caller):
                for sess, f in zip(wide, feeds):
                    sess.run(None, f)

        def concurrent() -> None:
            with pinned(caller):
                pool.run([lambda: narrow[0].run(None, feeds[0]), lambda: narrow[1].run(None, feeds[1])])

        sequential()
        concurrent()
        t = side_by_side({"sequential": sequential, "concurrent": concurrent}, args.rounds, 1e-3)
        s, c = t["sequential"], t["concurrent"]
        with pinned(caller):
            one = measure(lambda: narrow[0].run(None, feeds[0])).median_s
            all_ = measure(lambda: wide[0].run(None, feeds[0])).median_s
        print(f"{channels:>4}ch {side:>3}x{side:<3} {s.median_s * 1e3:8.3f} ({s.p10_s * 1e3:.3f}-{s.p90_s * 1e3:.3f})"
              f" {c.median_s * 1e3:8.3f} ({c.p10_s * 1e3:.3f}-{c.p90_s * 1e3:.3f}) {s.median_s / c.median_s:6.2f}"
              f" {one * 1e6:17.1f} {all_ * 1e6:18.1f}")
    pool.close()


if __name__ == "__main__":
    main()
