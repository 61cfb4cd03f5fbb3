"""How far each engine's whole model is from exact, per output, next to onnxruntime's own distance.

    python benchmarks/engine_accuracy.py MODEL [MODEL ...] [--engines onnxruntime,openvino,inductor]
                                         [--seeds 3] [--threads 2]

korch's accuracy policy (settings.AccuracyPolicy) accepts a result within fp32_factor times
onnxruntime's own error against korch's float64-accumulating reference. That factor only separates rounding from
mistakes if correct fp32 engines land within it. This measures where they land: for each zoo model,
engine and output, the error against the float64 run of the zoo's torch module (exact up to float64)
and against korch's reference (what the policy uses), as max |engine - exact| / max |exact| on fresh
random inputs (the worst over the seeds), and each engine's ratio to onnxruntime's. Engines are
korch's whole-model kernels, compiled as measured selection compiles them; onnxruntime is the
default session the plan check compares with.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np


def _rel(got: np.ndarray, want: np.ndarray) -> float:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    scale = float(np.abs(want).max())
    return float(np.abs(got - want).max()) / scale if scale > 0 else float(np.abs(got - want).max())


def engine_runners(graph, model, engines: list[str], threads: int):
    """Per engine: feeds -> {output: array}, korch's whole-model kernel (onnxruntime: the default session)."""
    from korch.backends import CompileOptions, get_backend
    from korch.verify import onnxruntime_runner

    runners = {}
    for name in engines:
        if name == "onnxruntime":
            runners[name] = onnxruntime_runner(model)
            continue
        backend = get_backend(name)
        options = CompileOptions(threads=threads, runs_alone=True)
        try:
            if backend.accepts_onnx:
                kernel = backend.compile_onnx(model, graph.inputs, graph.outputs, options)
            else:
                kernel = backend.compile(graph, options)
        except Exception as e:  # an engine that cannot take the model is reported, not fatal
            print(f"  {name}: cannot compile the whole model ({type(e).__name__}: {str(e)[:120]})", file=sys.stderr)
            continue
        runners[name] = _runner(graph, kernel)
    return runners


def _runner(graph, kernel):
    return lambda feeds: dict(zip(graph.outputs, kernel.run([feeds[i] for i in graph.inputs])))


def exact_outputs(name: str, graph, feeds) -> dict[str, np.ndarray] | None:
    """The zoo module run in float64 (None if the model is not a zoo model or torch is missing)."""
    try:
        import torch

        from korch import zoo
    except ImportError:
        return None
    module = zoo.build_module(name).double()
    args = [torch.from_numpy(feeds[i.name]).to(torch.float64 if feeds[i.name].dtype == np.float32 else torch.int64)
            for i in zoo.get_model(name).inputs]
    with torch.no_grad():
        result = module(*args)
    result = result if isinstance(result, (tuple, list)) else [result]
    return {out: r.numpy() for out, r in zip(graph.outputs, result)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("models", nargs="+")
    p.add_argument("--engines", default="onnxruntime,openvino")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args(argv)

    from korch.backends.reference import run_graph
    from korch.pipeline import run_fission
    from korch.settings import AccuracyPolicy
    from korch.verify import random_feeds

    engines = args.engines.split(",")
    if engines[0] != "onnxruntime":
        engines = ["onnxruntime"] + [e for e in engines if e != "onnxruntime"]
    factor = AccuracyPolicy().fp32_factor
    print(f"error = max |engine - exact| / max |exact|, worst of {args.seeds} random inputs; "
          f"x: the engine's error over onnxruntime's (the policy allows {factor:g}x against korch's reference)")
    for name in args.models:
        fissioned = run_fission(name)
        graph, model = fissioned.graph, fissioned.model
        runners = engine_runners(graph, model, engines, args.threads)
        worst: dict[tuple[str, str, str], float] = {}       # (engine, output, reference) -> worst error
        for seed in range(1, args.seeds + 1):
            feeds = random_feeds(graph, 1000 * seed)
            refs = {"korch-ref": run_graph(graph, feeds)}
            exact = exact_outputs(name, graph, feeds)
            if exact is not None:
                refs["float64"] = exact
            for engine, run in runners.items():
                out = run(feeds)
                for ref_name, ref in refs.items():
                    for o in graph.outputs:
                        key = (engine, o, ref_name)
                        worst[key] = max(worst.get(key, 0.0), _rel(out[o], ref[o]))
        print(f"\n{name}:")
        ref_names = sorted({k[2] for k in worst}, reverse=True)
        header = f"  {'output':<16} {'engine':<12}" + "".join(f" {r + ' error':>16} {'x':>6}" for r in ref_names)
        print(header)
        for o in graph.outputs:
            for engine in runners:
                row = f"  {o[:16]:<16} {engine:<12}"
                for r in ref_names:
                    e, base = worst[(engine, o, r)], worst[("onnxruntime", o, r)]
                    row += f" {e:>16.2e} {e / base if base > 0 else float('nan'):>6.2f}"
                print(row)
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
