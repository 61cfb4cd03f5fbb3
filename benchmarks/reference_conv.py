"""Time and peak memory of korch's float64 reference conv on candy's shapes.

    python benchmarks/reference_conv.py          # run it on two checkouts to compare implementations

The reference runs whole graphs (the fp32 error that sets the accuracy tolerance, the values each
profiled kernel is checked against), so its memory is part of optimize's peak. Prints each case's
time (second call) and the process's peak RSS.
"""

from __future__ import annotations

import resource
import time

import numpy as np

from korch.backends.reference import KERNELS

# (input shape, weight shape, group, pads, strides, dilations): candy's first and last 9x9 convs at
# 224x224, a residual block's 3x3, a strided 3x3, a depthwise and a grouped one
CASES = [
    ((1, 3, 232, 232), (32, 3, 9, 9), 1, [0, 0, 0, 0], [1, 1], [1, 1]),
    ((1, 32, 232, 232), (3, 32, 9, 9), 1, [0, 0, 0, 0], [1, 1], [1, 1]),
    ((1, 128, 58, 58), (128, 128, 3, 3), 1, [0, 0, 0, 0], [1, 1], [1, 1]),
    ((1, 32, 114, 114), (64, 32, 3, 3), 1, [0, 0, 0, 0], [2, 2], [1, 1]),
    ((1, 64, 56, 56), (64, 1, 3, 3), 64, [1, 1, 1, 1], [1, 1], [1, 1]),
    ((1, 96, 28, 28), (192, 48, 3, 3), 2, [1, 1, 1, 1], [2, 2], [1, 1]),
]


def main() -> None:
    rng = np.random.default_rng(0)
    conv = KERNELS["conv"]
    for x_shape, w_shape, group, pads, strides, dilations in CASES:
        x = rng.standard_normal(x_shape).astype(np.float32)
        w = rng.standard_normal(w_shape).astype(np.float32)
        attrs = {"group": group, "pads": pads, "strides": strides, "dilations": dilations}
        conv([x, w], attrs)
        t0 = time.perf_counter()
        y = conv([x, w], attrs)
        print(f"x {x_shape} w {w_shape} group {group} -> {y.shape}: {(time.perf_counter() - t0) * 1e3:.1f} ms")
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024} MB")


if __name__ == "__main__":
    main()
