"""The `korch` command line. The only module that reads argv or the environment."""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from korch.errors import KorchError, ShapeError, UsageError, VerificationError
from korch.logs import ElapsedFormatter

log = logging.getLogger("korch.cli")


def _input_shapes(items: Sequence[str] | None) -> dict[str, tuple[int, ...]]:
    from korch.frontend import parse_input_shape

    shapes: dict[str, tuple[int, ...]] = {}
    for item in items or []:
        name, shape = parse_input_shape(item)
        if name in shapes:
            raise ShapeError(f"--input-shape gives {name!r} twice")
        shapes[name] = shape
    return shapes


def cmd_fission(args: argparse.Namespace) -> int:
    from korch.io import atomic_write, atomic_write_bytes
    from korch.ir.onnx_export import to_onnx
    from korch.ir.text import dump
    from korch.pipeline import run_fission
    from korch.settings import AccuracyPolicy

    result = run_fission(args.model, _input_shapes(args.input_shape), verify=args.verify, seed=args.seed,
                         accuracy=AccuracyPolicy(rtol=args.rtol), strict=args.strict)
    graph = result.graph
    counts = graph.class_counts()
    print(f"model       {args.model}: {len(result.model.graph.node)} ONNX nodes, "
          f"{len(graph.inputs)} inputs, {len(graph.outputs)} outputs")
    print(f"primitives  {len(graph.nodes)}: " + ", ".join(f"{k.value} {v}" for k, v in counts.items()))
    if result.opaque:
        print(f"opaque      {len(result.opaque)} ONNX node(s) kept whole, run only by an ONNX engine:")
        for node in result.opaque:
            op = f"{node.domain}.{node.op_type}" if node.domain else node.op_type
            print(f"              {node.name or '<unnamed>'} ({op}): {node.reason}")
    print(f"time        load {result.load_seconds:.2f} s, fission {result.fission_seconds:.2f} s")
    if result.verify is not None:
        print(f"verify      {result.verify.summary()} (seed {args.seed})")
        for diff in result.verify.outputs:
            error = diff.mismatch or f"max abs {diff.max_abs:.3g}, relative {diff.rel:.2e}"
            print(f"              {diff.name}: {error}")
        if not result.verify.ok:
            raise VerificationError("the primitive graph disagrees with onnxruntime; no output written")
    if args.output:
        model = to_onnx(graph, doc=f"korch primitive graph of {args.model}")
        atomic_write_bytes(args.output, model.SerializeToString())
        print(f"wrote       {args.output}")
    if args.dump:
        text = dump(graph)
        if args.dump == "-":
            sys.stdout.write(text)
        else:
            atomic_write(args.dump, lambda tmp: tmp.write_text(text))
            print(f"wrote       {args.dump}")
    return 0


@dataclass
class _Kind:
    """One kind of item the progress bar has seen: its time so far, and what it has left."""

    spent: float = 0.0
    done: int = 0
    total: int | None = None
    work_done: float = 0.0
    work_total: float | None = None

    def seconds_left(self) -> float:
        assert self.total is not None
        if self.work_total is not None and self.work_done > 0:
            return self.spent / self.work_done * (self.work_total - self.work_done)
        return self.spent / self.done * (self.total - self.done)


class ProgressBar:
    """Counts, elapsed time and ETA on stderr; redrawn in place on a terminal, otherwise a line every
    10%, when items of a new kind start (`what`: the backend being profiled), and at least every
    `quiet_s` seconds. A count that starts again at 1 is a new bar.

    With `part` (done, total of the items of the current kind), the ETA adds up each kind's own rate
    times what it has left: the profiler interleaves backends, whose kernels take from tens of
    milliseconds (onnxruntime) to seconds (Inductor) to profile. Averaging over all of them, a cold
    segformer-b0 said "ETA 28s" at 90% with six minutes of Inductor compiles to go. With `work`
    (done, total of the kind's estimated work), the rate is per unit of work, not per item: Inductor's
    regions (the whole model first) come last and take 15-130x a small kernel's time.

    A count of 0 says the items start now: the bar starts its clock there and prints a line, so the
    first item's time counts. Otherwise the clock starts when the first item ends, which is wrong
    when that item is long: compiling Inductor's regions ahead read "4/4 16s elapsed" after 73 s,
    silent for the first 57."""

    def __init__(self, label: str, enabled: bool, *, stream=None, clock=time.perf_counter,
                 quiet_s: float = 60.0) -> None:
        self.label, self.enabled = label, enabled
        self.stream = stream if stream is not None else sys.stderr
        self.clock, self.quiet_s = clock, quiet_s
        self.tty = self.stream.isatty()
        self.start = self.last_call = self.last_line = 0.0
        self.last_decile = -1
        self.kinds: dict[str, _Kind] = {}
        self.opened = False                # a count of 0 started the clock: item 1 does not restart it

    def __call__(self, done: int, total: int, what: str, part: tuple[int, int] | None = None,
                 work: tuple[float, float] | None = None) -> None:
        if not self.enabled or total == 0:
            return
        now = self.clock()
        if done == 0 or (done == 1 and not self.opened):
            self.start = self.last_call = self.last_line = now
            self.last_decile, self.kinds = -1, {}
        self.opened = done == 0
        if done == 0:
            item = f"{what} 0/{part[1]}" if part is not None else what
            self.stream.write(("\r" if self.tty else "") + f"{self.label} 0/{total} (0%) [{item}]"
                              + ("" if self.tty else "\n"))
            self.stream.flush()
            return
        new_kind = what not in self.kinds
        kind = self.kinds.setdefault(what, _Kind())
        kind.spent += now - self.last_call               # the time since the last item went to this one
        kind.done += 1
        if part is not None:
            kind.total = part[1]
        if work is not None:
            kind.work_done, kind.work_total = work
        self.last_call = now
        elapsed = now - self.start
        known = [k for k in self.kinds.values() if k.total is not None]
        if known:
            eta = sum(k.seconds_left() for k in known)
            unseen = (total - done) - sum(k.total - k.done for k in known)
            left = f"ETA {eta:.0f}s" + (f" + {unseen} more of other kinds" if unseen > 0 else "")
        else:
            left = f"ETA {elapsed / done * (total - done):.0f}s"
        item = f"{what} {part[0]}/{part[1]}" if part is not None else what
        line = f"{self.label} {done}/{total} ({100 * done // total}%) {elapsed:.0f}s elapsed, {left} [{item}]"
        if self.tty:
            self.stream.write("\r" + line.ljust(79) + ("\n" if done == total else ""))
        elif (done * 10 // total != self.last_decile or done == total or new_kind
              or now - self.last_line >= self.quiet_s):
            self.last_decile, self.last_line = done * 10 // total, now
            self.stream.write(line + "\n")
        self.stream.flush()


def _settings(args: argparse.Namespace):
    from korch.api import check_backends, default_backends
    from korch.settings import OptimizeSettings, ScheduleSettings

    if args.threads < 1:
        raise UsageError("--threads must be >= 1")
    strict = getattr(args, "strict", False)
    schedule = ScheduleSettings(enabled=not getattr(args, "sequential", False))
    rewrites = not getattr(args, "no_rewrites", False)
    whole_models = getattr(args, "whole_models", False)
    if args.backends is None:
        backends = default_backends()
    else:
        try:
            backends = check_backends(args.backends.split(","))
        except UsageError as e:
            raise UsageError(f"--{e}") from None
    return OptimizeSettings(threads=args.threads, backends=backends, strict=strict, schedule=schedule,
                            rewrites=rewrites, whole_models=whole_models)


def _open_db(args: argparse.Namespace):
    from korch.profile.database import ProfileDB, default_cache_dir

    directory = Path(args.cache) if args.cache else default_cache_dir()
    return ProfileDB(directory / "profiles.sqlite")


def cmd_optimize(args: argparse.Namespace) -> int:
    from korch.pipeline import optimize
    from korch.plan import save_plan

    settings = _settings(args)
    if args.shapes:
        return _optimize_buckets(args, settings)
    with _open_db(args) as db:
        plan, _, stats = optimize(args.model, db, settings, _input_shapes(args.input_shape),
                                  progress=ProgressBar("profiling", not args.quiet), compile_session=False)
    save_plan(plan, args.output)
    if not args.quiet:
        print(format_summary(stats, plan.kernels_by_backend()))
        print(f"wrote plan {args.output}")
    return 0


def _optimize_buckets(args: argparse.Namespace, settings) -> int:
    """optimize --shapes: a plan per bucket, each summarised, saved together."""
    from korch.pipeline import optimize_buckets
    from korch.plan.buckets import save_bucketed
    from korch.shapes import describe, parse_shapes

    if args.input_shape:
        raise UsageError("give --shapes (one plan per bucket) or --input-shape (one plan), not both")
    shapes = parse_shapes(args.shapes)

    def announce(k: int, bucket) -> None:
        if not args.quiet:
            print(f"bucket {k}: {describe(bucket)}", flush=True)

    with _open_db(args) as db:
        plans, stats = optimize_buckets(args.model, db, settings, shapes,
                                           ProgressBar("profiling", not args.quiet), announce)
    save_bucketed(plans, args.output)
    if not args.quiet:
        for k, (bucket, st) in enumerate(zip(plans.buckets, stats)):
            print(f"\nbucket {k}: {describe(bucket.shapes)} (plan {Path(args.output) / f'bucket-{k}'})")
            print(format_summary(st, bucket.plan.kernels_by_backend()))
        print(f"\nwrote plan {args.output}: {len(plans.buckets)} buckets; other shapes run on onnxruntime")
    return 0


# The optimize summary lists this many rewrites and counts the rest: yolov4 has 33 Winograd convolutions.
REWRITES_SHOWN = 3


def link_note(link_ns: tuple[float, float] | None) -> str:
    """A clause for the profiled row when the host moved the vCPUs apart while profiling (profile/link.py)."""
    from korch.profile.link import far

    if link_ns is None or not far(link_ns[1], link_ns[0]):
        return ""
    return (f"; the host moved the vCPUs apart while profiling (core link {link_ns[0]:.0f}-{link_ns[1]:.0f} ns): "
            f"some times were taken in each state, and a 2-thread time differs between them")


def rewrites_line(notes: Sequence[str], shown: int = REWRITES_SHOWN) -> str:
    """The rewrites in a line: all of a few; of many, their count, the first `shown` and where the rest are."""
    if len(notes) <= shown + 1:
        return "; ".join(notes)
    return (f"{len(notes)}, the first {shown} here ('korch -v optimize' logs each): " + "; ".join(notes[:shown])
            + f"; and {len(notes) - shown} more")


def _solves(solves) -> str:
    """Every BLP solve of the run (pipeline.OptimizeStats.solves), after the kept plan's solve."""
    if not solves.solves:
        return ""
    proven = "all proven optimal" if not solves.unproven else f"{solves.unproven} NOT proven optimal"
    return (f"; the run's {solves.solves} BLP solve(s) {solves.seconds:.2f} s, the slowest "
            f"{solves.slowest_s:.2f} s, {proven}")


def format_summary(stats, by_backend: dict[str, int]) -> str:
    """The optimize summary: what was done, what was kept and why, the check, and the stage times."""
    sel = stats.selection
    split = ""
    if sel.split_kernels is not None and sel.kept != "split":
        split = f"; best split plan {sel.split_kernels} kernels"
    rows = [
        ("primitives", f"{stats.primitives}" + (" (the model file as an earlier run fissioned it)"
                                                if stats.fission_remembered else "")
                       + (f"; {stats.opaque_nodes} ONNX node(s) kept whole (opaque, see korch fission)"
                          if stats.opaque_nodes else "")),
        *([("rewrites", rewrites_line(stats.rewrites))] if stats.rewrites else []),
        ("candidates", f"{stats.candidates} enumerated, {stats.unique_candidates} unique keys"),
        ("profiled", f"{stats.profiled_new} new, {stats.profiled_cached} from cache; kernels accepted within "
                     f"{stats.kernel_tolerance:.1e} of the reference"
                     + (f" (onnxruntime's own error {stats.fp32_error:.1e})" if stats.fp32_error else "")
                     + (f"; {stats.profiled_again} timed again, the machine having run slow (its slowest "
                        f"reading {stats.machine_slowest:.2f}x its fastest)" if stats.profiled_again else "")
                     + (f"; {stats.compiled_ahead} compiled ahead in worker processes" if stats.compiled_ahead else "")
                     + link_note(stats.profile_link_ns)
                     + (f"; guided by cost models on {', '.join(stats.guide.backends)}: {stats.guide.rounds} "
                        f"solve(s), {stats.guide.skipped} kernels never compiled"
                        + (f", {stats.guide.confirmed} kernel(s) of best split plans timed again as in their plan" if stats.guide.confirmed else "")
                        + ("" if stats.guide.stable else " (round limit reached)")
                        if stats.guide.backends and (stats.guide.rounds or stats.guide.skipped) else "")),
        ("kernels", f"{sel.kernels}: " + ", ".join(f"{k} {v}" for k, v in sorted(by_backend.items())) + split),
        ("time", f"measured {sel.measured_ms:.3f} ms per run"
                 + (" when it was chosen" if stats.check_remembered else "")
                 + f"; predicted {sel.predicted_ms:.3f} ms (profiled "
                 f"kernels + {sel.boundary_ms:.3f} ms of boundary costs and kernel starts calibrated on this machine); "
                 + ("the choice remembered from an earlier run" if sel.remembered
                    else f"{sel.rounds} split plan(s) timed")),
        ("why", sel.why),
        *([("selected again", f"this model's last selection was of another problem: {sel.not_replayed}")]
          if sel.not_replayed else []),
        *([("schedule", ("the best split plan: " if sel.kept != "split" else "") + sel.schedule.why)]
          if sel.schedule is not None and sel.split_kernels is not None else []),
        ("solver", f"{sel.solve_seconds:.3f} s, " + ("proven optimal" if sel.optimal and sel.gap == 0 else
                                                      f"gap {sel.gap:.1e}, NOT proven optimal") + _solves(stats.solves)),
        ("check", f"max relative error vs onnxruntime {stats.max_rel_error:.2e} over {stats.check_inputs} random "
                  f"inputs; worst {stats.check_worst}"
                  + ("; passed by this plan on these weights in an earlier run, not run again"
                     if stats.check_remembered else "")),
        ("stages", ", ".join(f"{name} {seconds:.1f} s" for name, seconds in (
            ("load", stats.load_seconds), ("fission", stats.fission_seconds), ("candidates", stats.candidates_seconds),
            ("calibrate", stats.calibrate_seconds), ("profile", stats.profile_seconds),
            ("select", stats.select_seconds), ("check", stats.check_seconds), ("optimize", stats.optimize_seconds)))),
    ]
    if stats.profile_phase_seconds:
        phases = sorted(stats.profile_phase_seconds.items(), key=lambda kv: -kv[1])
        rows.append(("profiling", ", ".join(f"{name} {seconds:.1f} s" for name, seconds in phases)))
    if stats.peak_mib:
        rows.append(("memory", "this process's peak RSS by the end of " + ", ".join(
            f"{name} {mib:,.0f} MiB" for name, mib in stats.peak_mib.items())))
    return "\n".join(f"{k:<11} {v}" for k, v in rows)


def cmd_run(args: argparse.Namespace) -> int:
    import numpy as np

    import korch.runtime as runtime
    from korch.io import atomic_write
    from korch.verify import random_feeds

    session = runtime.load(args.plan)
    if args.inputs:
        try:
            with np.load(args.inputs, allow_pickle=False) as archive:
                feeds = {k: archive[k] for k in archive.files}
        except (OSError, ValueError) as e:
            raise UsageError(f"{args.inputs}: cannot read inputs ({e})") from None
    else:
        from korch.runtime.buckets import BucketSession

        bucketed = isinstance(session, BucketSession)
        graph = session.plans.buckets[0].plan.graph if bucketed else session.plan.graph
        feeds = random_feeds(graph, args.seed)
        print(f"inputs      random (seed {args.seed}{', the first bucket' if bucketed else ''}); "
              "pass --inputs FILE.npz for your own")
    outputs = dict(zip([n for n, _ in session.get_outputs()], session.run(None, feeds)))
    for name, value in outputs.items():
        print(f"output      {name}: {value.dtype}{list(value.shape)} mean {float(value.mean()):.6g} "
              f"max|.| {float(np.abs(value).max()):.6g}")
    if args.output:
        atomic_write(args.output, lambda tmp: np.savez(open(tmp, "wb"), **outputs))
        print(f"wrote       {args.output}")
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    from korch.bench import bench, format_table, write_json

    settings = _settings(args)
    with _open_db(args) as db:
        result = bench(args.model, db, args.threads, args.plan, rounds=args.rounds, settings=settings,
                       measure_rss=not args.no_rss)
    print(format_table(result))
    if args.json:
        write_json(result, args.json)
        print(f"wrote {args.json}")
    if args.plan and "buckets" in result:       # each bucket's beside its plan, where the report shows it
        for part in result["buckets"]:
            write_json({"model": result["model"], "threads": result["threads"], **part},
                       Path(args.plan) / f"bucket-{part['bucket']}" / "bench.json")
    elif args.plan:
        write_json(result, Path(args.plan) / "bench.json")     # the report shows it beside the plan
    return 0


def cmd_zoo_list(args: argparse.Namespace) -> int:
    from korch import zoo

    for m in zoo.list_models(include_mini=not args.full_only):
        shapes = ", ".join(f"{i.name} {i.dtype}[{'x'.join(map(str, i.shape))}]" for i in m.inputs)
        print(f"{m.name:<18} {shapes:<34} {m.description}")
    return 0


def cmd_zoo_export(args: argparse.Namespace) -> int:
    from korch import zoo

    zoo.export_onnx(args.name, args.output, seed=args.seed)
    print(f"wrote {args.output}")
    return 0


def _report_db(args: argparse.Namespace):
    """The profile database for report/explain, or None (with a note why) if there is none; never created."""
    from korch.profile.database import DB_FILENAME, ProfileDB, default_cache_dir

    path = (Path(args.cache) if args.cache else default_cache_dir()) / DB_FILENAME
    if not path.is_file():
        note = f"no profile database at {path}; pass --cache DIR to show the candidates each kernel beat"
        log.warning("%s", note)
        return None, note
    return ProfileDB(path), str(path)


def cmd_report(args: argparse.Namespace) -> int:
    from korch.report import load_facts, write_report

    facts = load_facts(args.plan)
    db, note = _report_db(args)
    try:
        write_report(facts, db, args.output, note)
    finally:
        if db is not None:
            db.close()
    if not args.quiet:
        print(f"wrote {args.output}")
    return 0


def cmd_explain(args: argparse.Namespace) -> int:
    from korch.report import ProfileIndex, explain, load_facts

    facts = load_facts(args.plan)
    index = None
    if args.node is not None or args.kernel is not None:
        db, _ = _report_db(args)
        try:
            index = ProfileIndex(facts, db)
        finally:
            if db is not None:
                db.close()
    print(explain(facts, index, args.node, args.kernel, args.limit))
    return 0


def cmd_diff(args: argparse.Namespace) -> int:
    from korch.report import diff_plans, format_diff, load_facts

    print(format_diff(diff_plans(load_facts(args.plan_a), load_facts(args.plan_b))))
    return 0


STRICT_HELP = ("refuse the model if some node cannot be fissioned (by default such a node is kept whole and "
               "run by an ONNX engine)")


class _Version(argparse.Action):
    """--version: korch's and the engines' versions, read only when asked for."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        from korch.version import describe

        print(describe())
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="korch", description="Optimal kernel orchestration for ONNX inference graphs.")
    parser.add_argument("--version", action=_Version, nargs=0,
                        help="print korch's version and the engines' versions, and exit")
    parser.add_argument("-v", "--verbose", action="store_true", help="per-stage logs")
    parser.add_argument("-q", "--quiet", action="store_true", help="errors only")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("fission", help="rewrite an ONNX model into primitives (and check it against onnxruntime)")
    p.add_argument("model", help="an .onnx file or a zoo model name (see `korch zoo list`)")
    p.add_argument("-o", "--output", help="write the primitive graph as ONNX here")
    p.add_argument("--verify", action="store_true", help="compare with onnxruntime on random inputs")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs for --verify (default 0)")
    p.add_argument("--rtol", type=float, default=1e-4,
                   help="--verify tolerance: max error relative to each output's max magnitude (default 1e-4)")
    p.add_argument("--input-shape", action="append", metavar="NAME=D1xD2...", help="fix an input's shape (repeatable)")
    p.add_argument("--dump", metavar="FILE", help="write the primitive graph as text ('-' for stdout)")
    p.add_argument("--strict", action="store_true", help=STRICT_HELP)
    p.set_defaults(run=cmd_fission)

    def orchestration_flags(p: argparse.ArgumentParser) -> None:
        p.add_argument("--threads", type=int, default=1, help="threads per kernel (default 1)")
        p.add_argument("--backends", help="kernel providers to choose from, comma-separated (default: "
                                          "onnxruntime, inductor when torch is installed, openvino when "
                                          "openvino is installed)")
        p.add_argument("--cache", metavar="DIR", help="profile database directory (default: the user cache dir)")

    p = sub.add_parser("optimize", help="choose the fastest kernels for a model and save the plan")
    p.add_argument("model", help="an .onnx file or a zoo model name")
    p.add_argument("-o", "--output", required=True, metavar="PLAN_DIR")
    p.add_argument("--input-shape", action="append", metavar="NAME=D1xD2...", help="fix an input's shape (repeatable)")
    p.add_argument("--shapes", action="append", metavar="NAME=D1xD2,D1xD2...",
                   help="one plan per shape bucket: bucket k takes each named input's k-th shape, other inputs "
                        "follow through the symbolic dims they share (repeatable, one input each); the saved "
                        "plan dispatches on the feeds' shapes and runs any other shape on onnxruntime")
    p.add_argument("--strict", action="store_true", help=STRICT_HELP)
    p.add_argument("--sequential", action="store_true",
                   help="run a split plan's kernels one after another, each on all threads (by default they are "
                        "co-scheduled: independent kernels side by side on fewer threads, if that measures faster)")
    p.add_argument("--no-rewrites", action="store_true",
                   help="optimize the graph as given (by default korch first applies algebraic rewrites that remove "
                        "flops, such as a 1x1 convolution moved below the upsampling of a concatenation's branches, "
                        "each checked against the model as given)")
    p.add_argument("--whole-models", action="store_true",
                   help="choose among each backend's whole-model kernel only (of the rewritten model): no split "
                        "plans, no boundary calibration; a fraction of a full optimize's time")
    orchestration_flags(p)
    p.set_defaults(run=cmd_optimize)

    p = sub.add_parser("run", help="run a saved plan")
    p.add_argument("plan", metavar="PLAN_DIR")
    p.add_argument("--inputs", metavar="FILE.npz", help="feeds by input name (default: random)")
    p.add_argument("-o", "--output", metavar="OUT.npz", help="save the outputs")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(run=cmd_run)

    p = sub.add_parser("bench", help="korch vs onnxruntime (default settings), torch.compile and OpenVINO "
                                     "(when installed), side by side")
    p.add_argument("model", help="an .onnx file or a zoo model name")
    p.add_argument("--plan", metavar="PLAN_DIR", help="a saved plan (default: optimize now, using the cache)")
    p.add_argument("--json", metavar="OUT.json")
    p.add_argument("--rounds", type=int, default=30, help="interleaved rounds (default 30)")
    p.add_argument("--no-rss", action="store_true", help="skip the peak-memory runs (separate processes)")
    orchestration_flags(p)
    p.set_defaults(run=cmd_bench)

    p = sub.add_parser("report", help="write a plan as one self-contained HTML page (graph, kernels, times)")
    p.add_argument("plan", metavar="PLAN_DIR")
    p.add_argument("-o", "--output", required=True, metavar="REPORT.html")
    p.add_argument("--cache", metavar="DIR", help="profile database directory (default: the user cache dir)")
    p.set_defaults(run=cmd_report)
    p = sub.add_parser("explain", help="why a primitive ended up in its kernel, and what each kernel beat")
    p.add_argument("plan", metavar="PLAN_DIR")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--node", metavar="NAME", help="a primitive's output value or an ONNX node name")
    which.add_argument("--kernel", metavar="ID", help="a kernel id (k0, k1, ... in execution order)")
    p.add_argument("--limit", type=int, default=12, help="candidates listed per primitive or kernel (default 12)")
    p.add_argument("--cache", metavar="DIR", help="profile database directory (default: the user cache dir)")
    p.set_defaults(run=cmd_explain)
    p = sub.add_parser("diff", help="what changed between two plans: kernels, backends, times")
    p.add_argument("plan_a", metavar="PLAN_A")
    p.add_argument("plan_b", metavar="PLAN_B")
    p.set_defaults(run=cmd_diff)

    z = sub.add_parser("zoo", help="built-in random-weight models").add_subparsers(dest="zoo_command", required=True,
                                                                                 metavar="ZOO_COMMAND")
    zl = z.add_parser("list", help="list the zoo models")
    zl.add_argument("--full-only", action="store_true", help="hide the mini test variants")
    zl.set_defaults(run=cmd_zoo_list)
    ze = z.add_parser("export", help="build a zoo model and write it as ONNX")
    ze.add_argument("name")
    ze.add_argument("-o", "--output", required=True)
    ze.add_argument("--seed", type=int, default=0, help="weight seed (default 0)")
    ze.set_defaults(run=cmd_zoo_export)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    level = logging.DEBUG if args.verbose else logging.ERROR if args.quiet else logging.WARNING
    # -v is korch's stage log; other libraries (onnxscript, torch) stay at warnings, or they flood it.
    handler = logging.StreamHandler()
    handler.setFormatter(ElapsedFormatter() if args.verbose else logging.Formatter("%(name)s: %(message)s"))
    # (a no-op when the root logger has handlers already: korch used as a library, or under pytest)
    logging.basicConfig(level=max(level, logging.WARNING) if not args.quiet else level, handlers=[handler])
    logging.getLogger("korch").setLevel(level)
    try:
        return args.run(args)
    except KorchError as e:
        print(f"korch: error: {e}", file=sys.stderr)
        return int(e.exit_code)
    except KeyboardInterrupt:
        print("korch: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
