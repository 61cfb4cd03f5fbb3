"""How far a side-by-side duel's verdict moves when nothing differs: two identical contenders.

    python benchmarks/duel_noise.py MODEL.onnx [MODEL.onnx ...] [--engine onnxruntime|openvino]
                                    [--duels 12] [--rounds 15] [--threads 2]

Measured selection keeps a split plan only if it wins its duels by `multi_kernel_margin` (2%). Each
duel is `korch.profile.timing.side_by_side`, `duel_rounds` interleaved rounds, as in
korch/select/measured.py. Here both contenders are the same model on the same engine, made twice,
so the true ratio is 1.00 and every departure from it is the machine. For each duel two estimates
of B's time over A's:

- medians: B's median over A's median (what duels compared up to this benchmark);
- paired: the median over rounds of B's sample over A's in the same round (timing.paired_ratio).

Printed per model: the spread of each estimate over the duels (median, p10-p90, the largest
departure from 1) and how many duels it would have called a 2% win for either side.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from korch.profile.timing import paired_ratio, side_by_side
from korch.settings import OptimizeSettings

MARGIN = OptimizeSettings().selection.multi_kernel_margin


def contender(engine: str, model: Path, threads: int) -> Callable[[], object]:
    """One call of `model` on `engine` with fixed random inputs."""
    rng = np.random.default_rng(0)
    if engine == "onnxruntime":
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        session = ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
        feeds = {i.name: _random(rng, i.shape, i.type) for i in session.get_inputs()}
        return lambda: session.run(None, feeds)
    from korch.backends.openvino import OpenVinoBackend

    kernel, _ = OpenVinoBackend().compile_file(str(model), threads)
    args = [_random(rng, tuple(p.get_shape()), str(p.get_element_type().to_dtype())) for p in kernel.compiled.inputs]
    return lambda: kernel.run(args)


def _random(rng: np.random.Generator, shape: tuple, dtype: str) -> np.ndarray:
    if "int" in dtype:
        return np.zeros(shape, np.int64 if "64" in dtype else np.int32)        # valid token ids
    return rng.standard_normal(shape).astype(np.float32)


def spread(values: list[float]) -> str:
    ordered = sorted(values)
    p10, p90 = np.percentile(ordered, [10, 90])
    worst = max(abs(v - 1.0) for v in ordered)
    calls = sum(v <= MARGIN or v >= 1 / MARGIN for v in ordered)
    return f"{statistics.median(ordered):.3f} ({p10:.3f}-{p90:.3f}) | {100 * worst:.1f}% | {calls} of {len(ordered)}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="+", type=Path)
    parser.add_argument("--engine", choices=("onnxruntime", "openvino"), default="onnxruntime")
    parser.add_argument("--duels", type=int, default=12)
    parser.add_argument("--rounds", type=int, default=OptimizeSettings().selection.duel_rounds)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    print(f"{args.engine}, {args.threads} threads, {args.duels} duels of {args.rounds} rounds, margin {MARGIN}")
    print("| model | one call ms | medians: B/A median (p10-p90) | worst | 2% calls | "
          "paired: B/A median (p10-p90) | worst | 2% calls |")
    print("|---|---:|---|---:|---:|---|---:|---:|")
    for model in args.models:
        fns = {"A": contender(args.engine, model, args.threads), "B": contender(args.engine, model, args.threads)}
        start = time.perf_counter()
        for _ in range(3):
            fns["A"]()
        one = (time.perf_counter() - start) / 3
        medians, paired = [], []
        for _ in range(args.duels):
            t = side_by_side(fns, args.rounds, one, warmup=1)
            medians.append(t["B"].median_s / t["A"].median_s)
            paired.append(paired_ratio(t["A"], t["B"]))
        print(f"| {model.stem} | {one * 1e3:.2f} | {spread(medians)} | {spread(paired)} |", flush=True)


if __name__ == "__main__":
    main()
