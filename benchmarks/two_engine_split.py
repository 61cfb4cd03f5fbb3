"""The simplest split plans: one engine runs the model up to a cut, another runs the rest.

    python benchmarks/two_engine_split.py MODEL [--threads 2] [--engines onnxruntime,openvino] [--cuts 12]
                                          [--confirm 3] [--rounds 15]

A cut is a position where one computed tensor is live (between residual blocks, say), as region
candidates use them (korch/candidates/regions.py). For --cuts cuts spread evenly over the model, every
ordered pair of engines (A runs the prefix, B the suffix; A = B too, which prices the cut alone)
is compiled as a two-kernel plan and timed back to back; each engine's whole-model kernel is timed
the same way. The --confirm fastest split plans then run side by side with the whole-model kernels
(the protocol of `korch bench` and measured selection), medians with p10-p90.

This bounds what orchestration over large regions can win on a model: if no prefix/suffix split of
two engines beats the best engine's whole model, the gain has to come from finer kernels. Every
split plan's outputs are compared with the first engine's whole model on the same random inputs.
Nothing is written.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np


def region_plan(graph, source, parts, threads: int):
    """A plan of regions of whole ONNX nodes, in order: (start, end, engine) runs primitives [start, end)."""
    from korch import __version__
    from korch.backends import get_backend
    from korch.candidates.regions import _region
    from korch.plan import Plan, Step
    from korch.profile.database import machine_fingerprint

    steps = []
    for start, end, engine in parts:
        cand = _region(graph, start, end)
        onnx_nodes = cand.onnx_nodes if get_backend(engine).accepts_onnx else ()
        steps.append(Step(engine, cand.nodes, cand.inputs, cand.outputs, cand.key, 0.0, onnx_nodes))
    return Plan(graph, tuple(steps), threads, machine_fingerprint(), __version__, source)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--engines", default="onnxruntime,openvino")
    p.add_argument("--cuts", type=int, default=12)
    p.add_argument("--confirm", type=int, default=3)
    p.add_argument("--rounds", type=int, default=15)
    args = p.parse_args(argv)

    from korch.candidates.regions import cut_positions, onnx_spans
    from korch.frontend.regions import OnnxSource
    from korch.pipeline import run_fission
    from korch.profile.timing import measure, side_by_side
    from korch.runtime import Session
    from korch.runtime.session import compile_step
    from korch.verify import random_feeds

    engines = args.engines.split(",")
    fissioned = run_fission(args.model)
    graph = fissioned.graph
    source = OnnxSource(fissioned.model, dict(fissioned.value_map or {}))
    spans = onnx_spans(graph)
    if spans is None:
        print(f"{args.model}: ONNX nodes are not contiguous in primitive order; no regions", file=sys.stderr)
        return 2
    n = len(graph.nodes)
    cuts = sorted(s for s, _ in spans[1:] if s in cut_positions(graph))
    if not cuts:
        print(f"{args.model}: no position where a single tensor is live", file=sys.stderr)
        return 2
    chosen = sorted({cuts[round(k * (len(cuts) - 1) / max(1, args.cuts - 1))] for k in range(args.cuts)})
    feeds = random_feeds(graph, 0)
    kernels = {}        # by step: a prefix or suffix is compiled once for all the plans it is in

    def session(parts: list[tuple[int, int, str]]) -> Session:
        plan = region_plan(graph, source, parts, args.threads)
        for step in plan.steps:
            if step not in kernels:
                kernels[step] = compile_step(plan, step)
        return Session(plan, [kernels[step] for step in plan.steps])

    def timed(sess: Session) -> float:
        return measure(lambda: sess.run(None, feeds), warmup=3, repeats=10, min_seconds=0.3).median_s

    print(f"{args.model}: {n} primitives, {len(spans)} ONNX nodes, {len(cuts)} single-tensor cuts; "
          f"timing {len(chosen)} cuts x {len(engines) ** 2} engine pairs at {args.threads} threads", file=sys.stderr)
    wholes = {e: session([(0, n, e)]) for e in engines}
    reference = dict(zip(graph.outputs, wholes[engines[0]].run(None, feeds)))
    whole_s = {e: timed(s) for e, s in wholes.items()}
    best_whole = min(whole_s, key=whole_s.get)
    rows = []
    for c in chosen:
        for a in engines:
            for b in engines:
                sess = session([(0, c, a), (c, n, b)])
                out = dict(zip(graph.outputs, sess.run(None, feeds)))
                err = max(float(np.max(np.abs(out[k] - reference[k])) / max(float(np.max(np.abs(reference[k]))), 1e-30))
                          for k in graph.outputs)
                rows.append((c, a, b, timed(sess), err, sess))
                time.sleep(0.06)
        print(f"cut {c}/{n} done", file=sys.stderr, flush=True)

    ms = 1e3
    print(f"{args.model}, {args.threads} threads, back to back (median ms):")
    print("  whole models: " + ", ".join(f"{e} {t * ms:.2f}" for e, t in whole_s.items()))
    print()
    print("| cut (primitive) | share of ONNX nodes | " + " | ".join(f"{a} -> {b}" for a in engines for b in engines) + " |")
    print("|---|---|" + "---|" * len(engines) ** 2)
    starts = [s for s, _ in spans]
    for c in chosen:
        cells = [f"{t * ms:.2f}" + (" (error %.0e)" % err if err > 1e-3 else "")
                 for cc, _, _, t, err, _ in rows if cc == c]
        print(f"| {c} | {sum(s < c for s in starts) / len(starts):.2f} | " + " | ".join(cells) + " |")
    print()

    contenders = sorted((r for r in rows if r[1] != r[2] and r[4] <= 1e-3), key=lambda r: r[3])[: args.confirm]
    fns = {f"whole {e}": (lambda s=s: s.run(None, feeds)) for e, s in wholes.items()}
    for c, a, b, _, _, sess in contenders:
        fns[f"{a} -> {b} at {c}"] = lambda sess=sess: sess.run(None, feeds)
    timings = side_by_side(fns, args.rounds, whole_s[best_whole])
    base = timings[f"whole {best_whole}"].median_s
    print(f"side by side, {args.rounds} rounds (median, p10-p90 ms; best whole model / this):")
    for name, t in sorted(timings.items(), key=lambda kv: kv[1].median_s):
        print(f"  {name}: {t.median_s * ms:.2f} ({t.p10_s * ms:.2f}-{t.p90_s * ms:.2f})  {base / t.median_s:.3f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
