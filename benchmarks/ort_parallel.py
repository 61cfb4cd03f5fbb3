"""onnxruntime's own branch parallelism: does its parallel executor beat its sequential one?

    python benchmarks/ort_parallel.py MODEL [MODEL ...] [--threads 2] [--rounds 15]

Issue 14 asks korch to run independent kernels side by side. onnxruntime already can, inside one
session: `execution_mode=ORT_PARALLEL` runs independent nodes of a graph at once on an inter-op
pool. If that paid on this machine's models, a whole-model onnxruntime kernel run that way would be
a candidate korch could profile like any other. This times, side by side in one process (a pause and
one untimed call per turn, `korch.profile.timing.side_by_side`), one session per setting with
T = --threads:

- sequential: korch's (and the zoo bench's) onnxruntime whole model, intra-op T threads;
- parallel T x 1: inter-op T threads, intra-op 1 (no oversubscription);
- parallel T x T: inter-op T, intra-op T (branches and ops both threaded: oversubscribed).

Prints the medians with p10-p90 and each setting's median ratio to the sequential session, round by
round. Every session's outputs are checked against the sequential one's. Nothing is written.
"""

from __future__ import annotations

import argparse

import numpy as np


def session(path: str, intra: int, inter: int | None):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = intra
    if inter is not None:
        options.execution_mode = ort.ExecutionMode.ORT_PARALLEL
        options.inter_op_num_threads = inter
    return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="+", help=".onnx files or zoo model names")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()

    import tempfile

    from korch.pipeline import run_fission
    from korch.profile.timing import measure, paired_ratio, side_by_side
    from korch.verify import random_feeds

    t = args.threads
    with tempfile.TemporaryDirectory() as tmp:
        for spec in args.models:
            fissioned = run_fission(spec, cache_dir=tmp)
            model = fissioned.model
            path = f"{tmp}/model.onnx"
            with open(path, "wb") as f:
                f.write(model.SerializeToString())
            feeds = random_feeds(fissioned.graph, 0)
            settings = {"sequential": (t, None), f"parallel {t}x1": (1, t), f"parallel {t}x{t}": (t, t)}
            sessions = {name: session(path, intra, inter) for name, (intra, inter) in settings.items()}
            expected = sessions["sequential"].run(None, feeds)
            for name, s in sessions.items():
                for got, want in zip(s.run(None, feeds), expected):
                    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max() or 1))
            calls = {name: (lambda s=s: s.run(None, feeds)) for name, s in sessions.items()}
            one = max(measure(c, repeats=3, min_seconds=0.1).median_s for c in calls.values())
            timed = side_by_side(calls, args.rounds, one)
            base = timed["sequential"]
            print(f"{spec} ({t} threads, {args.rounds} rounds)")
            for name, timing in timed.items():
                spread = f"{timing.p10_s * 1e3:.2f}-{timing.p90_s * 1e3:.2f}"
                print(f"  {name:<14} {timing.median_s * 1e3:8.2f} ms ({spread})   "
                      f"{paired_ratio(base, timing):.3f}x sequential's time, round by round")


if __name__ == "__main__":
    main()
