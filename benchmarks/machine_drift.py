"""How much one unchanged model's time drifts on this machine, and which probe drifts with it.

    python benchmarks/machine_drift.py SYSTEM [--engine openvino] [--rewrite] [--threads 2]
                                      [--seconds 60] [--block 10] [--cache DIR]

SYSTEM is a plan directory (korch.load), or an .onnx file or zoo name run by `--engine` as its users
run it (benchmarks/rewrite_gain.py's engine_call), after korch's rewrites with `--rewrite`. It runs in
blocks of `--block` back-to-back calls; between blocks, three probes: a 256x256 float32 matmul x20
(numpy's BLAS, compute-bound), a read of one byte per cache line of 64 MB (memory-bound), and the
round trip of a cache line between CPUs 0 and 1 (benchmarks/core_link.py). Printed: each one's block
medians with p10-p90 and the coefficient of variation across blocks, the correlation of the system's
block medians with each probe's and the variation of system / probe, and the system's block medians
split by the core link's state (far: at least korch/profile/link.py's FAR_RATIO times the nearest reading).
If the system tracks a probe, a time taken on this machine is only comparable with one taken in the
same state of that probe; if it tracks none, the drift is the floor under any "predicted within x%"
figure whose prediction was measured minutes before the plan.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def _block(fn, n: int) -> float:
    samples = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        fn()
        samples.append((time.perf_counter_ns() - t0) / 1e6)
    return statistics.median(samples)


def _system(args, scratch: Path):
    """The call to time, and how it is named in the output."""
    from korch.verify import random_feeds

    if Path(args.system).is_dir():
        import korch

        session = korch.load(args.system)
        feeds = random_feeds(session.plan.graph, 5)
        return (lambda: session.run(None, feeds)), "plan"
    import onnx
    from engine_breakdown import fissioned, model_path
    from rewrite_gain import engine_call

    from korch.frontend.onnx_import import load_model
    from korch.frontend.rewrites import rewrite_model

    path = model_path(args.system, args.cache)
    feeds = random_feeds(fissioned(path), 5)
    if args.rewrite:
        rewritten, notes = rewrite_model(load_model(str(path)))
        print(f"{len(notes)} rewrite(s) of {path.name}")
        path = scratch / "rewritten.onnx"
        onnx.save(rewritten, path)
    return engine_call(path, args.engine, args.threads, feeds), args.engine


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("system", help="a plan directory, an .onnx file or a zoo name")
    p.add_argument("--engine", choices=("openvino", "onnxruntime"), default="openvino")
    p.add_argument("--rewrite", action="store_true", help="apply korch's rewrites to an .onnx model first")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--block", type=int, default=10)
    p.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "korch")
    args = p.parse_args(argv)

    from core_link import link_ns

    from korch.profile.link import FAR_RATIO, far

    with tempfile.TemporaryDirectory() as scratch:
        call, name = _system(args, Path(scratch))
        a = np.random.default_rng(0).random((256, 256), dtype=np.float32)
        lines = np.ones(64 << 20, np.uint8)[::64]
        blocks = {name: lambda: _block(call, args.block),
                  "matmul probe ms": lambda: _block(lambda: [a @ a for _ in range(20)], args.block),
                  "memory probe ms": lambda: _block(lines.sum, args.block),
                  "core link ns": lambda: link_ns()}
        if link_ns() is None:
            print("no core link reading (one CPU or no C compiler): that probe left out")
            del blocks["core link ns"]
        for fn in blocks.values():
            fn()
        rows = []
        end = time.monotonic() + args.seconds
        while time.monotonic() < end:
            rows.append([fn() for fn in blocks.values()])
    r = np.array(rows)
    print(f"{len(r)} blocks of {args.block} calls over {args.seconds:.0f} s, {args.threads} threads")
    for k, label in enumerate(blocks):
        p10, p50, p90 = np.percentile(r[:, k], [10, 50, 90])
        print(f"  {label:16s} block medians {p50:.2f} [{p10:.2f}-{p90:.2f}], cv {r[:, k].std() / r[:, k].mean():.3f}")
    for k, label in list(enumerate(blocks))[1:]:
        ratio = r[:, 0] / r[:, k]
        print(f"  {name} ~ {label}: correlation {np.corrcoef(r[:, 0], r[:, k])[0, 1]:.2f}, "
              f"cv of {name} / probe {ratio.std() / ratio.mean():.3f}")
    if "core link ns" not in blocks:
        return 0
    link = r[:, -1]
    apart = np.array([far(x, link.min()) for x in link])
    for state, mask in (("near", ~apart), (f"far (>= {FAR_RATIO:g}x the nearest)", apart)):
        if mask.any():
            t = r[mask, 0]
            print(f"  link {state}: {mask.sum()} blocks, link {np.median(link[mask]):.0f} ns, "
                  f"{name} {np.median(t):.2f} ms [{np.percentile(t, 10):.2f}-{np.percentile(t, 90):.2f}]")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
