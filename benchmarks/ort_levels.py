"""onnxruntime's graph optimization levels against each other on whole models, side by side.

    python benchmarks/ort_levels.py MODEL [MODEL ...] [--threads 2] [--rounds 20] [--cache DIR]

MODEL is a zoo name or an .onnx file. Each model runs in three onnxruntime sessions, otherwise as
onnxruntime's default session (spinning pool, `--threads` intra-op threads): ORT_ENABLE_ALL (the
default: with the NCHWc layout transform, which converts 4-D tensors to blocked channel layouts and
back around the ops it covers), ORT_ENABLE_EXTENDED (every fusion, no layout transform) and
ORT_ENABLE_BASIC. Timed side by side as `korch bench` times systems (rounds of turns, each after a
pause and one untimed call), with each level's error against ORT_ENABLE_ALL on the same input.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

LEVELS = ("ORT_ENABLE_ALL", "ORT_ENABLE_EXTENDED", "ORT_ENABLE_BASIC")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="+")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--cache", default=None, help="directory zoo models are exported into once")
    args = parser.parse_args()

    import time

    import numpy as np
    import onnx
    import onnxruntime as ort

    from korch.pipeline import resolve_model
    from korch.profile.timing import measure, side_by_side
    from korch.verify import diff_outputs

    print(f"| model | {' | '.join(f'{lv} ms (p10-p90)' for lv in LEVELS)} | "
          f"{' | '.join(f'ALL / {lv[11:]}' for lv in LEVELS[1:])} | max rel err |")
    print("|---|" + "---|" * len(LEVELS) + "---:|" * (len(LEVELS) - 1) + "---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for spec in args.models:
            given = resolve_model(spec, args.cache or tmp)
            data = given.SerializeToString() if isinstance(given, onnx.ModelProto) else str(given)
            sessions = {}
            for level in LEVELS:
                options = ort.SessionOptions()
                options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
                options.intra_op_num_threads = args.threads
                sessions[level] = ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
            rng = np.random.default_rng(0)
            feeds = {}
            for i in sessions[LEVELS[0]].get_inputs():
                shape = [d if isinstance(d, int) else 1 for d in i.shape]
                kind = np.float32 if "float" in i.type else np.int64
                feeds[i.name] = (rng.standard_normal(shape).astype(kind) if kind is np.float32
                                 else rng.integers(0, 100, shape).astype(kind))
            outputs = {lv: s.run(None, feeds) for lv, s in sessions.items()}
            names = [o.name for o in sessions[LEVELS[0]].get_outputs()]
            error = max(d.rel for lv in LEVELS[1:]
                        for d in diff_outputs(dict(zip(names, outputs[lv])), dict(zip(names, outputs[LEVELS[0]]))))
            fns = {lv: (lambda s=s: s.run(None, feeds)) for lv, s in sessions.items()}
            one = measure(fns[LEVELS[0]], warmup=1, repeats=3).median_s
            time.sleep(0.2)
            t = side_by_side(fns, args.rounds, one, warmup=2, round_s=0.06)
            name = Path(str(spec)).stem if str(spec).endswith(".onnx") else spec
            cells = " | ".join(f"{t[lv].median_s * 1e3:.2f} ({t[lv].p10_s * 1e3:.2f}-{t[lv].p90_s * 1e3:.2f})"
                               for lv in LEVELS)
            ratios = " | ".join(f"{t[LEVELS[0]].median_s / t[lv].median_s:.3f}" for lv in LEVELS[1:])
            print(f"| {name} | {cells} | {ratios} | {error:.1e} |", flush=True)
            del sessions, fns


if __name__ == "__main__":
    main()
