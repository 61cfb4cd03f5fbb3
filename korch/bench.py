"""`korch bench`: korch's plan, onnxruntime and torch.compile side by side in one process.

Latency is measured interleaved (round by round, rotating order) so a noisy machine slows every
system alike; medians and 10th/90th percentiles are reported. Peak resident memory is measured for
each system in a separate process (see korch/bench_rss.py), since in one process they share it.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from korch.backends import CompileOptions, get_backend
from korch.backends.onnxruntime import make_session
from korch.profile.database import ProfileDB
from korch.profile.timing import Timing, measure, side_by_side
from korch.verify import diff_outputs, random_feeds

log = logging.getLogger("korch.bench")

# Rounds of the interleaved comparison; each round runs every system once (more for tiny models).
DEFAULT_ROUNDS = 30


@dataclass(frozen=True)
class System:
    name: str
    run: Callable[[], object]
    note: str = ""


def _torch_compile_zoo(name: str, feeds: dict[str, np.ndarray], threads: int) -> System:
    """The zoo's own torch module under torch.compile (Inductor): the faster of freezing on and off."""
    import torch

    from korch import zoo

    torch.set_num_threads(threads)
    module = zoo.build_module(name)
    spec = zoo.get_model(name)
    args = [torch.from_numpy(feeds[i.name]) for i in spec.inputs]
    best: tuple[float, Callable[[], object], str] | None = None
    for freezing in (True, False):
        compiled = torch.compile(module, options={"freezing": freezing})

        def call(compiled=compiled) -> object:
            with torch.no_grad():
                return compiled(*args)

        call()
        t = measure(call, warmup=2, repeats=5, min_seconds=0.2).median_s
        if best is None or t < best[0]:
            best = (t, call, f"zoo torch module, freezing={'on' if freezing else 'off'}")
    assert best is not None
    return System("torch_compile", best[1], best[2])


def _torch_compile_graph(graph, feeds: dict[str, np.ndarray], threads: int) -> System:
    """For an ONNX file: korch's translation of the whole primitive graph to torch, under Inductor."""
    kernel = get_backend("inductor").compile(graph, CompileOptions(threads=threads))
    inputs = [feeds[n] for n in graph.inputs]
    return System("torch_compile", lambda: kernel.run(inputs), "korch's translation of the ONNX graph to torch")


def peak_rss_mb(args: list[str]) -> float | None:
    """Run korch.bench_rss in a fresh process; None if it fails (reported, not fatal)."""
    proc = subprocess.run([sys.executable, "-m", "korch.bench_rss", *args], capture_output=True, text=True)
    if proc.returncode != 0:
        log.warning("peak RSS measurement failed for %s: %s", args[0], proc.stderr.strip()[-300:])
        return None
    return float(proc.stdout.strip().splitlines()[-1])


def _stats(t: Timing, rss: float | None) -> dict[str, float | None]:
    return {"median_ms": t.median_s * 1e3, "p10_ms": t.p10_s * 1e3, "p90_ms": t.p90_s * 1e3, "peak_rss_mb": rss}


def bench(model_spec: str, db: ProfileDB, threads: int, plan_dir: str | None = None, rounds: int = DEFAULT_ROUNDS,
          settings=None, measure_rss: bool = True, seed: int = 0) -> dict[str, Any]:
    import korch.runtime as runtime
    from korch import zoo
    from korch.pipeline import optimize, resolve_model, run_fission
    from korch.plan import save_plan
    from korch.settings import OptimizeSettings

    zoo_name = model_spec if not Path(model_spec).exists() and model_spec in [m.name for m in zoo.list_models()] else None
    model = resolve_model(model_spec, db.path.parent)
    model = model if isinstance(model, onnx.ModelProto) else onnx.load(model)
    settings = settings or OptimizeSettings(threads=threads)
    with tempfile.TemporaryDirectory(prefix="korch-bench-") as tmp:
        t0 = time.perf_counter()
        if plan_dir is not None:
            session = runtime.load(plan_dir)
            plan = session.plan
            optimize_seconds = plan.summary.get("optimize_seconds")
        else:
            plan, session, _ = optimize(model, db, settings)
            optimize_seconds = time.perf_counter() - t0
            plan_dir = str(save_plan(plan, Path(tmp) / "plan"))
        stats = plan.summary
        graph = plan.graph
        feeds = random_feeds(graph, seed)
        # The baseline parks its threads when run() returns, like korch's own onnxruntime kernels: with
        # onnxruntime's default the pool kept spinning into the other systems' turns (yolox-nano: korch's
        # one-kernel plan, 4.7 ms alone, read 11.9 ms next to it; torch.compile 23.8 ms, p10 12.8).
        ort_session = make_session(model, threads, stop_spinning=True)
        ort_feeds = {n: feeds[n] for n in graph.inputs}
        systems = [System("korch", lambda: session.run(None, feeds)),
                   System("onnxruntime", lambda: ort_session.run(None, ort_feeds))]
        try:
            systems.append(_torch_compile_zoo(zoo_name, feeds, threads) if zoo_name
                           else _torch_compile_graph(run_fission(model).graph, feeds, threads))
        except Exception as e:  # torch missing or a compile failure: report, do not hide the other two
            log.warning("torch.compile baseline unavailable: %s", e)
        expected = dict(zip([o.name for o in ort_session.get_outputs()], ort_session.run(None, ort_feeds)))
        actual = dict(zip(graph.outputs, session.run(None, feeds)))
        max_rel = max(d.rel for d in diff_outputs(actual, expected))
        one = measure(systems[1].run, warmup=2, repeats=3, min_seconds=0.0).median_s
        timings = side_by_side({s.name: s.run for s in systems}, rounds, one, warmup=3)
        rss: dict[str, float | None] = {s.name: None for s in systems}
        if measure_rss:
            model_path = Path(tmp) / "model.onnx"
            onnx.save(model, model_path)
            rss["korch"] = peak_rss_mb(["korch", plan_dir, str(threads)])
            rss["onnxruntime"] = peak_rss_mb(["onnxruntime", str(model_path), str(threads)])
            if zoo_name and "torch_compile" in rss:
                rss["torch_compile"] = peak_rss_mb(["torch_compile", zoo_name, str(threads)])
    return {
        "model": model_spec, "threads": threads, "onnxruntime_settings": "ORT_ENABLE_ALL, force_spinning_stop=1",
        "systems": {s.name: _stats(timings[s.name], rss[s.name]) for s in systems},
        "notes": {s.name: s.note for s in systems if s.note},
        "max_rel_error": max_rel, "optimize_seconds": optimize_seconds,
        "candidates": stats.get("candidates"), "unique_candidates": stats.get("unique_candidates"),
        "profiled": stats.get("profiled_new"), "profiled_cached": stats.get("profiled_cached"),
        "kernels": len(plan.steps), "kernels_by_backend": plan.kernels_by_backend(),
    }


def format_table(result: dict[str, Any]) -> str:
    systems = result["systems"]
    base = systems["korch"]["median_ms"]
    lines = [f"{result['model']} ({result['threads']} threads)",
             f"{'system':<14} {'median ms':>10} {'p10 ms':>8} {'p90 ms':>8} {'peak MB':>8} {'vs korch':>9}"]
    for name, s in systems.items():
        rss = f"{s['peak_rss_mb']:.0f}" if s["peak_rss_mb"] is not None else "-"
        lines.append(f"{name:<14} {s['median_ms']:>10.3f} {s['p10_ms']:>8.3f} {s['p90_ms']:>8.3f} {rss:>8} "
                     f"{s['median_ms'] / base:>8.2f}x")
    for name, note in result.get("notes", {}).items():
        lines.append(f"  {name}: {note}")
    lines.append(f"max rel error vs onnxruntime {result['max_rel_error']:.2e}; kernels {result['kernels']} "
                 f"{result['kernels_by_backend']}")
    return "\n".join(lines)


def write_json(result: dict[str, Any], path: str | os.PathLike) -> None:
    from korch.io import atomic_write

    atomic_write(path, lambda tmp: tmp.write_text(json.dumps(result, indent=2)))
