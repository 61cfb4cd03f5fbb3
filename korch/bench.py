"""`korch bench`: korch's plan and its peers side by side in one process.

The peers run as their users would run them: onnxruntime with its default session settings
(ORT_ENABLE_ALL, --threads intra-op threads; korch's own kernels park their pool after each run, the
baseline does not), torch.compile, and OpenVINO compiling the model's ONNX file (latency hint,
--threads threads, f32) when it is installed. Each peer's outputs are compared with onnxruntime's;
one that disagrees is reported, never dropped. "vs best" is the best peer's median over korch's,
and, paired, the median over rounds of that peer's time over korch's in the same round: the machine's
drift (another process, a frequency change) slows both sides of a round's ratio, so the paired
figure is the steadier of the two when korch and a peer are close.

Latency is measured interleaved (round by round, rotating order, a pause and one untimed call before
each turn) so a noisy machine slows every system alike; medians and 10th/90th percentiles are
reported. Peak resident memory is measured for each system in a separate process (see
korch/bench_rss.py), since in one process they share it.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from korch.backends import CompileOptions, backend_names, get_backend
from korch.backends.onnxruntime import make_session
from korch.backends.reference import run_graph
from korch.profile import link
from korch.profile.database import ProfileDB, machine_fingerprint
from korch.profile.timing import Timing, measure, paired_ratio, side_by_side
from korch.settings import AccuracyPolicy
from korch.verify import OutputCheck, OutputDiff, PlanCheck, judge_outputs, random_feeds

log = logging.getLogger("korch.bench")

# Rounds of the interleaved comparison; each round runs every system once (more for tiny models).
DEFAULT_ROUNDS = 30


@dataclass(frozen=True)
class System:
    name: str
    run: Callable[[], object]
    note: str = ""


def _arrays(result: object) -> list[np.ndarray]:
    """A system's outputs as numpy arrays, in order (torch tensors, tuples and lists of them)."""
    if isinstance(result, (list, tuple)):
        return [a for item in result for a in _arrays(item)]
    if hasattr(result, "detach"):
        return [result.detach().numpy()]         # type: ignore[union-attr]
    return [np.asarray(result)]


def _accuracy(system: System, expected: dict[str, np.ndarray], exact: Callable[[], Mapping[str, np.ndarray]],
              policy: AccuracyPolicy) -> tuple[float, PlanCheck]:
    """The system's worst output error against onnxruntime's, relative to each output's scale (outputs
    by position; inf if it returns a different number of outputs), and its outputs judged by the
    accuracy policy that judges korch's plans (verify.OutputCheck)."""
    actual = _arrays(system.run())
    if len(actual) != len(expected):
        diff = OutputDiff("outputs", float("inf"), 1.0, f"{len(actual)} outputs, expected {len(expected)}")
        return float("inf"), PlanCheck((OutputCheck(0, diff, policy.rtol),))
    outputs = dict(zip(expected, actual))
    check = PlanCheck(tuple(judge_outputs(0, outputs, expected, exact, policy.rtol, policy.tolerance)))
    return check.max_rel, check


def _openvino_file(path: Path, feeds: dict[str, np.ndarray], threads: int) -> System:
    """OpenVINO compiling the model's ONNX file itself, as its users would."""
    kernel, inputs = get_backend("openvino").compile_file(path, threads)      # type: ignore[attr-defined]
    args = [feeds[name] for name in inputs]
    return System("openvino", lambda: kernel.run(args), "the model's ONNX file, latency hint, f32")


def _torch_compile_zoo(name: str, feeds: dict[str, np.ndarray], threads: int) -> System:
    """The zoo's own torch module under torch.compile (Inductor): the faster of freezing on and off."""
    import torch

    from korch import zoo

    torch.set_num_threads(threads)
    spec = zoo.get_model(name)
    args = [torch.from_numpy(feeds[i.name]) for i in spec.inputs]
    call, frozen, _ = zoo.fastest_torch_compiled(lambda: zoo.build_module(name), args,
                                                 lambda f: measure(f, warmup=2, repeats=5, min_seconds=0.2).median_s)
    return System("torch_compile", call, f"zoo torch module, freezing={'on' if frozen else 'off'}")


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
    """korch's plan (optimized now, or `plan_dir`) and its peers on one model. A bucketed plan
    (`korch optimize --shapes`) is compared bucket by bucket: its result holds one comparison per
    bucket under "buckets", each on random feeds of that bucket's shapes, with the peers running the
    model as given (onnxruntime and OpenVINO take its symbolic dims)."""
    import korch.runtime as runtime
    from korch import zoo
    from korch.pipeline import optimize, resolve_model
    from korch.plan import save_plan
    from korch.plan.buckets import is_bucketed
    from korch.settings import OptimizeSettings

    zoo_name = model_spec if not Path(model_spec).exists() and model_spec in [m.name for m in zoo.list_models()] else None
    model = resolve_model(model_spec, db.path.parent)
    model = model if isinstance(model, onnx.ModelProto) else onnx.load(model)
    settings = settings or OptimizeSettings(threads=threads)
    machine = machine_fingerprint()
    nearest = db.nearest_link(machine)        # each round's link judged against the machine's nearest too
    with tempfile.TemporaryDirectory(prefix="korch-bench-") as tmp:
        model_path = Path(tmp) / "model.onnx"
        onnx.save(model, model_path)
        if plan_dir is not None and is_bucketed(plan_dir):
            session = runtime.load(plan_dir)
            buckets = []
            for k, bucket in enumerate(session.plans.buckets):
                feeds = random_feeds(bucket.plan.graph, seed)
                result = _compare(model, model_path, None, bucket.plan, session, feeds, threads, rounds, settings,
                                  Path(plan_dir) / f"bucket-{k}" if measure_rss else None, db.path.parent / "tools",
                                  nearest)
                _note_link(db, machine, result)
                buckets.append({"bucket": k, "shapes": {n: list(s) for n, s in bucket.shapes.items()}, **result})
            return {"model": model_spec, "threads": threads, "buckets": buckets}
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
        result = _compare(model, model_path, zoo_name, plan, session, random_feeds(plan.graph, seed), threads, rounds,
                          settings, Path(plan_dir) if measure_rss else None, db.path.parent / "tools", nearest)
        _note_link(db, machine, result)
    return {
        "model": model_spec, "threads": threads, **result,
        "optimize_seconds": optimize_seconds,
        "candidates": stats.get("candidates"), "unique_candidates": stats.get("unique_candidates"),
        "profiled": stats.get("profiled_new"), "profiled_cached": stats.get("profiled_cached"),
    }


def _note_link(db: ProfileDB, machine: str, result: Mapping[str, Any]) -> None:
    """Keep the nearest core link a comparison read as the machine's, if nearer (ProfileDB.put_link)."""
    read = [x for x in result.get("core_link", {}).get("readings_ns", ()) if x is not None]
    if read:
        db.put_link(machine, min(read))


def _compare(model: onnx.ModelProto, model_path: Path, zoo_name: str | None, plan, session,
             feeds: dict[str, np.ndarray], threads: int, rounds: int, settings, rss_plan: Path | None,
             link_tools: Path | None = None, nearest_link: float | None = None) -> dict[str, Any]:
    """korch's `session` (running `plan`) and the peers on `feeds`, side by side; peak RSS of each in
    its own process when `rss_plan` (the plan directory korch's process loads) is given; with
    `link_tools` (where the core link probe is built) and 2+ threads, each system per link state,
    judged against `nearest_link` too (the machine's nearest reading, ns; link.split)."""
    graph = plan.graph
    # onnxruntime as its users run it: default session settings, so its pool spins after a run
    # (korch's own onnxruntime kernels park it; that is korch's setting, not the baseline's).
    ort_session = make_session(model, threads, stop_spinning=False)
    ort_feeds = {n: feeds[n] for n in graph.inputs}
    systems = [System("korch", lambda: session.run(None, feeds)),
               System("onnxruntime", lambda: ort_session.run(None, ort_feeds))]
    try:
        systems.append(_torch_compile_zoo(zoo_name, feeds, threads) if zoo_name
                       else _torch_compile_graph(graph, feeds, threads))
    except Exception as e:  # torch missing or a compile failure: report, do not hide the others
        log.warning("torch.compile baseline unavailable: %s", e)
    if "openvino" in backend_names():
        try:
            systems.append(_openvino_file(model_path, feeds, threads))
        except Exception as e:  # a model OpenVINO cannot compile: report it, keep the others
            log.warning("OpenVINO baseline unavailable: %s", e)
    expected = dict(zip([o.name for o in ort_session.get_outputs()], ort_session.run(None, ort_feeds)))

    @functools.cache
    def exact() -> Mapping[str, np.ndarray]:        # korch's float64 reference: once, if a system needs it
        values = run_graph(graph, feeds)
        return dict(zip(expected, (values[o] for o in graph.outputs)))     # outputs by position

    # Every system, korch and peers, is judged by the accuracy policy that judges korch's plans.
    judged = {s.name: _accuracy(s, expected, exact, settings.accuracy) for s in systems if s.name != "onnxruntime"}
    errors = {name: error for name, (error, _) in judged.items()}
    disagree = {name: check.worst() for name, (_, check) in judged.items() if not check.ok}
    for name, why in disagree.items():
        log.warning("%s disagrees with onnxruntime beyond the accuracy policy: %s", name, why)
    one = measure(systems[1].run, warmup=2, repeats=3, min_seconds=0.0).median_s
    # The host can move the vCPUs apart mid-run (korch/profile/link.py): the link is read before
    # each round, and each system reported in each state.
    read_link = link.reader(link_tools) if threads > 1 and link_tools is not None else None
    readings: list[float | None] = []
    timings = side_by_side({s.name: s.run for s in systems}, rounds, one, warmup=3,
                           between_rounds=(lambda: readings.append(read_link())) if read_link else None)
    states = link.split(readings, {name: t.samples_s for name, t in timings.items()}, nearest_link) \
        if read_link else None
    rss: dict[str, float | None] = {s.name: None for s in systems}
    if rss_plan is not None:
        shapes = ",".join(f"{n}={'x'.join(map(str, feeds[n].shape))}" for n in graph.inputs)
        rss["korch"] = peak_rss_mb(["korch", str(rss_plan), str(threads)])
        rss["onnxruntime"] = peak_rss_mb(["onnxruntime", str(model_path), str(threads), shapes])
        if zoo_name and "torch_compile" in rss:
            rss["torch_compile"] = peak_rss_mb(["torch_compile", zoo_name, str(threads)])
        if "openvino" in rss:
            rss["openvino"] = peak_rss_mb(["openvino", str(model_path), str(threads), shapes])
    stats_by_system = {s.name: {**_stats(timings[s.name], rss[s.name]), "max_rel_error": errors.get(s.name, 0.0)}
                       for s in systems}
    return {
        "onnxruntime_settings": f"default session: ORT_ENABLE_ALL, intra_op_num_threads={threads}",
        "systems": stats_by_system, "vs_best": vs_best(stats_by_system, timings),
        "notes": {s.name: s.note for s in systems if s.note},
        "max_rel_error": errors["korch"], "disagree": disagree, "rtol": settings.accuracy.rtol,
        "kernels": len(plan.steps), "kernels_by_backend": plan.kernels_by_backend(),
        **({"core_link": {**dataclasses.asdict(states), "readings_ns": readings}} if states else {}),
    }


def vs_best(systems: dict[str, dict[str, Any]], timings: Mapping[str, Timing] | None = None) -> dict[str, Any]:
    """korch against the fastest peer (by median): that peer's median time over korch's (above 1:
    korch is faster), and with the interleaved `timings`, "paired_speedup": the median over rounds of
    the peer's sample over korch's in the same round (profile.timing.paired_ratio)."""
    peers = {name: s["median_ms"] for name, s in systems.items() if name != "korch"}
    best = min(peers, key=peers.__getitem__)
    result = {"peer": best, "speedup": peers[best] / systems["korch"]["median_ms"]}
    if timings is not None:
        result["paired_speedup"] = paired_ratio(timings["korch"], timings[best])
    return result


def format_table(result: dict[str, Any]) -> str:
    if "buckets" in result:
        return "\n\n".join(format_table({"model": f"{result['model']}, bucket {b['bucket']}: " + ", ".join(
            f"{n} {'x'.join(map(str, s))}" for n, s in b["shapes"].items()), "threads": result["threads"], **b})
            for b in result["buckets"])
    systems = result["systems"]
    base = systems["korch"]["median_ms"]
    lines = [f"{result['model']} ({result['threads']} threads)",
             f"{'system':<14} {'median ms':>10} {'p10 ms':>8} {'p90 ms':>8} {'peak MiB':>8} {'vs korch':>9} "
             f"{'rel err':>9}"]
    for name, s in systems.items():
        rss = f"{s['peak_rss_mb']:.0f}" if s["peak_rss_mb"] is not None else "-"
        error = "(ref)" if name == "onnxruntime" else f"{s['max_rel_error']:.1e}"
        lines.append(f"{name:<14} {s['median_ms']:>10.3f} {s['p10_ms']:>8.3f} {s['p90_ms']:>8.3f} {rss:>8} "
                     f"{s['median_ms'] / base:>8.2f}x {error:>9}")
    for name, note in result.get("notes", {}).items():
        lines.append(f"  {name}: {note}")
    for name, why in result["disagree"].items():
        lines.append(f"  {name} DISAGREES with onnxruntime beyond the accuracy policy: {why}")
    best = result["vs_best"]
    paired = f", {best['paired_speedup']:.2f}x paired round by round" if "paired_speedup" in best else ""
    lines.append(f"vs best: korch {best['speedup']:.2f}x against the fastest peer ({best['peer']}{paired}); "
                 f"onnxruntime: {result['onnxruntime_settings']}")
    if "core_link" in result:
        lines.append(link.LinkStates(**{k: v for k, v in result["core_link"].items() if k != "readings_ns"}).line())
    lines.append(f"rel err: max error vs onnxruntime relative to each output's scale (past {result['rtol']:.0e}, "
                 f"a system is judged against the float64 reference instead); kernels {result['kernels']} "
                 f"{result['kernels_by_backend']}")
    return "\n".join(lines)


def write_json(result: dict[str, Any], path: str | os.PathLike) -> None:
    from korch.io import atomic_write

    atomic_write(path, lambda tmp: tmp.write_text(json.dumps(result, indent=2)))
