"""The zoo benchmark behind BENCHMARKS.md: cold and warm optimize, then korch bench, per model.

    python benchmarks/zoo_bench.py --threads 2 [--threads 1] [--out DIR] [NAME or MODEL.onnx ...]
    python benchmarks/zoo_bench.py --table --out DIR     # print the table of a finished run again
    python benchmarks/zoo_bench.py --whole-models ...    # optimize with --whole-models (no split plans)

For each model and thread count, in separate processes: a zoo model's export to ONNX (timed apart:
a user's optimize reads the file they bring), `korch optimize` with an empty profile database and an
empty Inductor code cache (cold), the same command again (warm: everything cached),
then `korch bench --plan` (korch and its peers: onnxruntime with default settings, torch.compile and
OpenVINO when installed, interleaved in one process, peak memory of each in its own process). Wall
time and peak RSS of each optimize come from wait4 (its peak RSS: the largest of the optimizer and
each of its compile workers alone); "tree" is the peak of their summed RSS, sampled every 0.1 s, and
"tree PSS" of their summed proportional set size, sampled every 5 s because reading it slows the
optimizer (a page shared by n of them counts 1/n in each, so the sum is what the tree holds;
summed RSS counts a library mapped in three processes three times). Results go to
DIR/results.json (per system: median, p10, p90, peak RSS and error against onnxruntime; the cold
optimize's seconds by stage, the optimizer's peak RSS by the end of each stage (which stage set the
peak), its BLP solves (how many, their seconds, the slowest, any not proven optimal: guided
profiling's and selection's) and what its selection kept and why, from its plan's summary, before
the warm run writes the plan again) and the Markdown tables to stdout; the cold optimize runs with
`korch -v` and its whole log is kept as DIR/<model>-t<threads>/cold-optimize.log. Nothing
here is typed by hand. "vs best" is the fastest peer's median over korch's, and in brackets (runs
since bench reports it) the median over rounds of that peer's time over korch's in the same round,
steadier where the two are close (korch/bench.py). A model given as an
ONNX file is named by its file's stem (benchmarks/export_torchvision.py writes some).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from datetime import date
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))    # the tables import korch

FULL = ["candy", "segformer-b0", "efficientvit-b1", "yolox-nano", "yolov4", "bert-base", "vit-b16", "gpt2-small"]


def timed(cmd: list[str], env: dict[str, str], tree: bool = False, log_path: Path | None = None
          ) -> tuple[float, float, int, str, tuple[float, float, list]]:
    """Wall seconds, peak RSS (MiB, 2**20 bytes, as every "mb" here) and exit code of a child process,
    its output tail, and with `tree` the peaks of its process tree's summed RSS and summed PSS (MiB;
    else 0), and the tree at its PSS peak: [program, pid, PSS MiB] per process, largest first. The
    peak RSS is wait4's: the largest of the process and each descendant alone (a compile worker's
    own peak, not added to the optimizer's);
    the tree's summed RSS is sampled every 0.1 s from statm (a shorter peak can be missed), its summed PSS
    every PSS_EVERY_S from smaps_rollup. Not while timing: `korch bench` runs unsampled. `log_path`:
    where its whole output is written."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    tree_peak: list = [0.0, 0.0, []]
    done = threading.Event()

    def sample() -> None:
        last_pss = 0.0
        while not done.wait(0.1):
            with_pss = time.monotonic() - last_pss >= PSS_EVERY_S
            rss, pss, members = _tree_mb(proc.pid, with_pss)
            tree_peak[0] = max(tree_peak[0], rss)
            if with_pss:
                last_pss = time.monotonic()
                if pss > tree_peak[1]:
                    tree_peak[1], tree_peak[2] = pss, members
    sampler = threading.Thread(target=sample, daemon=True)
    if tree:
        sampler.start()
    output = proc.stdout.read() if proc.stdout else ""
    if log_path is not None:
        log_path.write_text(output)
    _, status, usage = os.wait4(proc.pid, 0)
    done.set()
    if tree:
        sampler.join()
    proc.returncode = os.waitstatus_to_exitcode(status)
    return (time.perf_counter() - start, usage.ru_maxrss / 1024.0, proc.returncode, output[-3000:],
            (tree_peak[0], tree_peak[1], tree_peak[2]))


# smaps_rollup walks a process's page tables: 27 ms for a 2 GB heap on this project's VM. Read every
# 0.1 s from another process, it slowed the optimizer's whole-model profiles 1.20-1.22x (yolov4:
# onnxruntime 600 ms against 501, OpenVINO 244 against 200; benchmarks/tree_sampler_cost.py), which
# put zoo runs' predictions 11-15% above the bench. statm is cheap and gives RSS only.
PSS_EVERY_S = 5.0


def _same_memory(a: int, b: int) -> bool:
    """Whether processes `a` and `b` run in one address space: a child that Python's subprocess started
    by vfork does until it execs, and read then it shows its parent's memory as its own (a process
    holding 1,500 MiB read as 3,049: benchmarks/tree_pss_vfork.py). kcmp(2) with KCMP_VM; False where
    it cannot tell (no syscall, no permission)."""
    kcmp = _kcmp()
    return kcmp is not None and kcmp(a, b, 1, 0, 0) == 0          # KCMP_VM = 1


@functools.cache
def _kcmp() -> Callable[..., int] | None:
    """kcmp(2) through libc's syscall(), or None on an architecture whose number is not known here;
    looked up once: the sampler asks for every child, ten times a second."""
    import ctypes

    number = {"x86_64": 312, "aarch64": 272}.get(platform.machine())
    if number is None:
        return None
    syscall = ctypes.CDLL(None, use_errno=True).syscall
    return functools.partial(syscall, number)


def _tree_mb(pid: int, with_pss: bool = True) -> tuple[float, float, list]:
    """The summed RSS of `pid` and its descendants now, MiB (0 for those gone meanwhile), and with
    `with_pss` their summed PSS and [program, pid, PSS MiB] of each, largest first (else 0 and []).
    A child still in its parent's address space (started by vfork, not yet exec'd) is not counted."""
    rss = pss = 0
    members = []
    todo = [(pid, None)]
    page = os.sysconf("SC_PAGE_SIZE")
    while todo:
        p, parent = todo.pop()
        if parent is not None and _same_memory(p, parent):
            continue
        try:
            with open(f"/proc/{p}/statm") as f:
                rss += int(f.read().split()[1]) * page
            if with_pss:
                mine = 0
                with open(f"/proc/{p}/smaps_rollup") as f:
                    for line in f:
                        if line.startswith("Pss:"):
                            mine = int(line.split()[1]) * 1024
                pss += mine
                members.append([_program(p), p, round(mine / 2**20, 1)])
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    todo.extend((int(c), p) for c in f.read().split())
        except (OSError, ValueError):
            continue
    return rss / 2**20, pss / 2**20, sorted(members, key=lambda m: -m[2])


def _program(pid: int) -> str:
    """A process's command line, shortened: what a compile worker or a compiler is."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            args = f.read().split(b"\0")
    except OSError:
        return "?"
    words = [a.decode(errors="replace") for a in args if a][:4]
    return " ".join(Path(words[0]).name if i == 0 else w[:40] for i, w in enumerate(words)) or "?"


def label(name: str) -> str:
    """What the tables call a model: a zoo name, or an ONNX file's stem."""
    return Path(name).stem if name.endswith(".onnx") else name


def run_one(name: str, threads: int, out: Path, previous: dict | None, flags: tuple[str, ...] = ()) -> dict:
    """Cold + warm optimize and bench; with `previous` (--bench-only) only the bench, on the saved plan.
    `flags`: given to both optimizes (--whole-models)."""
    result = _run_one(name, threads, out / f"{label(name)}-t{threads}", previous, flags)
    return {**result, "model": label(name), "source": name, "optimize_flags": list(flags)}


def _run_one(name: str, threads: int, work: Path, previous: dict | None, flags: tuple[str, ...]) -> dict:
    if previous is None and work.exists():
        shutil.rmtree(work)      # a cold optimize starts from empty caches, also when OUT holds an earlier run
    work.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(work / "inductor-cache"))
    korch = [sys.executable, "-m", "korch", "-q"]
    optimize = korch + ["optimize", name, "-o", str(work / "plan"), "--threads", str(threads),
                        "--cache", str(work / "profile-cache"), *flags]
    # The core link (korch/profile/link.py) before and after the cold optimize, and the nearest and
    # farthest its profiler read.
    link: dict[str, list] = {"optimize": [], "profiling": []}
    export_s = None
    if previous is None and not Path(name).is_file():
        # The zoo model's ONNX file first, exported from its torch code into the cache the optimizes
        # read it from, and timed apart: the zoo stands in for the file a user brings, whose optimize
        # never exports it (6-17 s of the cold optimizes in BENCHMARKS.md before 2026-12-07).
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-c", "import sys; from korch.zoo import cached_export; "
                               "cached_export(sys.argv[1], sys.argv[2])", name, str(work / "profile-cache")],
                              env=env, capture_output=True, text=True)
        export_s = time.perf_counter() - start
        if done.returncode != 0:
            return {"model": name, "threads": threads, "error": f"export failed: {done.stderr[-300:]}"}
    if previous is None:
        link["optimize"].append(_link())
        # verbose, its log kept beside the plan: what a figure came from (which steps ran, a solver that
        # stopped at its time limit) is read there afterwards
        verbose = [sys.executable, "-m", "korch", "-v", *optimize[4:]]
        cold_s, cold_rss, code, log, cold_tree = timed(verbose, env, tree=True, log_path=work / "cold-optimize.log")
        link["optimize"].append(_link())
        if code != 0:
            return {"model": name, "threads": threads, "error": f"optimize failed ({code}): {log}"}
        cold_stages = _stages(work / "plan")       # (the warm run writes the plan again)
        cold = _summary(work / "plan")
        link["profiling"] = list(cold.get("profile_link_ns") or [])
        link["whole"] = {b: list(v) for b, v in (cold.get("whole_model_link_ns") or {}).items()}
        cold_selection = _selection(work / "plan")
        cold_peaks = dict(cold.get("peak_mib") or {})     # the optimizer's peak RSS by the end of each stage
        cold_solves = dict(cold.get("solves") or {})      # every BLP solve of the cold run: count, seconds, slowest
        warm_s, warm_rss, code, _, warm_tree = timed(optimize, env, tree=True)
    else:
        cold_s, warm_s = previous["cold_optimize_s"], previous["warm_optimize_s"]
        export_s = previous.get("export_s")
        cold_rss = warm_rss = previous["optimize_peak_rss_mb"]
        cold_tree = warm_tree = (previous.get("optimize_tree_peak_mb", 0.0), previous.get("optimize_tree_pss_peak_mb", 0.0),
                                 previous.get("optimize_tree_pss_peak_members", []))
        cold_stages = previous.get("cold_stages_s", {})
        cold_selection = previous.get("cold_selection", {})
        cold_peaks = previous.get("cold_stage_peak_mib", {})
        cold_solves = previous.get("cold_solves", {})
    result_json = work / "bench.json"
    _, _, code, log, _ = timed(korch + ["bench", name, "--plan", str(work / "plan"), "--threads", str(threads),
                                     "--cache", str(work / "profile-cache"), "--json", str(result_json)], env)
    if code != 0:
        return {"model": name, "threads": threads, "error": f"bench failed ({code}): {log}"}
    result = json.loads(result_json.read_text())
    if previous is not None:
        link = {k: previous.get("core_link_ns", {}).get(k, []) for k in ("optimize", "profiling")}
        link["whole"] = previous.get("core_link_ns", {}).get("whole", {})
    result.update(core_link_ns=link, export_s=export_s, cold_optimize_s=cold_s, warm_optimize_s=warm_s, optimize_peak_rss_mb=max(cold_rss, warm_rss),
                  optimize_tree_peak_mb=max(cold_tree[0], warm_tree[0]),
                  optimize_tree_pss_peak_mb=max(cold_tree[1], warm_tree[1]),
                  optimize_tree_pss_peak_members=max(cold_tree, warm_tree, key=lambda t: t[1])[2],
                  cold_stages_s=cold_stages, cold_stage_peak_mib=cold_peaks, cold_solves=cold_solves,
                  cold_selection=cold_selection,
                  predicted_ms=_predicted(work / "plan"))
    return result


def _link() -> float | None:
    """The core link's round trip now, in ns (None where it cannot be read: no C compiler, one CPU)."""
    from core_link import link_ns

    return link_ns()


def _links(readings: list) -> str:
    return " / ".join("-" if x is None else f"{x:.0f}" for x in readings) or "-"


def _summary(plan: Path) -> dict:
    """The summary of the optimize that last wrote `plan` ({} if there is no readable plan)."""
    try:
        return json.loads((plan / "plan.json").read_text()).get("summary") or {}
    except (OSError, ValueError):
        return {}


def _predicted(plan: Path) -> float | None:
    """The predicted time of the plan the bench ran, from its summary (the warm optimize's)."""
    value = _summary(plan).get("predicted_ms")
    return float(value) if isinstance(value, (int, float)) else None


STAGES = ("load", "calibrate", "profile", "select", "optimize")


def _stages(plan: Path) -> dict[str, float]:
    """The seconds of each stage of the optimize that wrote `plan`, from its summary ("load" builds and
    exports a zoo model not yet cached; "calibrate" measures the machine's kernel boundaries, once),
    and of each profiling phase under "profile: PHASE" (compile, check, timing per backend; compile ahead)."""
    summary = _summary(plan)
    phases = summary.get("profile_phase_seconds") or {}
    return {**{stage: float(summary[f"{stage}_seconds"]) for stage in STAGES
               if isinstance(summary.get(f"{stage}_seconds"), (int, float))},
            **{f"profile: {name}": float(s) for name, s in phases.items() if isinstance(s, (int, float))}}


SELECTION = ("kept", "why", "split_kernels", "split_predicted_ms", "split_measured_ms", "selection_rounds",
             "in_plan_costs", "whole_model_ms", "side_by_side_ms")


def _selection(plan: Path) -> dict:
    """What the cold optimize's measured selection did (kept, why, its best split plan predicted and
    timed), from its plan's summary: the warm run replays that choice and its summary says less."""
    summary = _summary(plan)
    return {k: summary[k] for k in SELECTION if k in summary}


def selection_lines(results: list[dict]) -> str:
    """Per model, what the cold optimize's selection kept and why, and its best split plan's time
    predicted and, if it was compiled, timed in the plan."""
    lines = []
    for r in results:
        sel = r.get("cold_selection") or {}
        if "error" in r or not sel:
            continue
        split = ""
        if sel.get("split_kernels"):
            timed = (f", timed {sel['split_measured_ms']:.2f} ms" if sel.get("split_measured_ms") else ", not timed")
            split = f" [best split plan: {sel['split_kernels']} kernels predicted {sel['split_predicted_ms']:.2f} ms{timed}]"
        lines.append(f"- {r['model']}, {r['threads']} threads, cold: kept {sel.get('kept')}, "
                     f"{sel.get('selection_rounds', 0)} split plan(s) timed{split}: {sel.get('why', '')}")
    return "\n".join(lines)


PEERS = ("onnxruntime", "torch_compile", "openvino")


def _ms(systems: dict, name: str, disagree: dict) -> str:
    """A system's median with its p10-p90 spread, '-' if it did not run; one that `korch bench` found
    beyond the accuracy policy (the one korch's plans are checked by) is marked."""
    if name not in systems:
        return "-"
    s = systems[name]
    flag = " (disagrees)" if name in disagree else ""
    return f"{s['median_ms']:.2f} ({s['p10_ms']:.2f}-{s['p90_ms']:.2f}){flag}"


def _tree(result: dict) -> str:
    """Summed RSS / summed PSS of the optimize's tree ('-' for runs from before either was sampled)."""
    return " / ".join(f"{v:.0f}" if (v := result.get(k)) else "-"
                      for k in ("optimize_tree_peak_mb", "optimize_tree_pss_peak_mb"))


def _rss(systems: dict) -> str:
    """Each system's run peak RSS in MiB; '-' where it was not measured (torch.compile of an ONNX file:
    korch bench measures only the zoo's own torch module)."""
    return " / ".join(f"{systems[k]['peak_rss_mb']:.0f}" if systems.get(k, {}).get("peak_rss_mb") is not None
                      else "-" for k in ("korch", *PEERS))


def _paired(result: dict) -> str:
    """' (1.01x)': the bench's paired figure against the fastest peer, where it reported one."""
    paired = (result.get("vs_best") or {}).get("paired_speedup")
    return "" if paired is None else f" ({paired:.2f}x)"


def table(results: list[dict]) -> str:
    head = ("| model | threads | korch ms (p10-p90) | onnxruntime ms | torch.compile ms | OpenVINO ms | vs best | "
            "max rel err | optimize cold / warm s | optimize RSS MiB (process / tree / tree PSS) | "
            "run RSS MiB korch / ORT / torch / OV | "
            "candidates (unique) | kernels profiled | kernels by backend |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in results:
        if "error" in r:
            lines.append(f"| {r['model']} | {r['threads']} | failed: {r['error'][:120]} |")
            continue
        s, disagree = r["systems"], r.get("disagree", {})
        best = min(s[k]["median_ms"] for k in PEERS if k in s)
        lines.append(
            f"| {r['model']} | {r['threads']} | {' | '.join(_ms(s, k, disagree) for k in ('korch', *PEERS))} | "
            f"{best / s['korch']['median_ms']:.2f}x{_paired(r)} | "
            f"{r['max_rel_error']:.1e} | "
            f"{r['cold_optimize_s']:.0f} / {r['warm_optimize_s']:.1f} | "
            f"{r['optimize_peak_rss_mb']:.0f} / {_tree(r)} | {_rss(s)} | "
            f"{r['candidates']} ({r['unique_candidates']}) | {(r['profiled'] or 0) + (r.get('profiled_cached') or 0)} | "
            f"{', '.join(f'{k} {v}' for k, v in sorted(r['kernels_by_backend'].items()))} |")
    return "\n".join(lines)


def predicted_table(results: list[dict]) -> str:
    """The kept plan's predicted time (its summary) against korch's median in the bench. On a VM whose
    host moves its vCPUs apart and back, a 2-thread time belongs to the core link's state
    (korch/profile/link.py): the link read before and after the cold optimize (whose profiles the
    prediction uses), korch's median in the bench's rounds of each state, and the bench's rounds in
    the prediction's state against it: for a one-engine plan the state its whole model was profiled
    in, else the optimize's when all it read agrees."""
    head = ("| model | threads | kernels by backend | predicted ms | measured ms | measured / predicted "
            "| link at cold optimize ns (before / after; nearest-farthest while profiling; around each whole model's profile) | bench rounds near / far (ns) | korch near / far ms "
            "| measured in the prediction's state / predicted |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in results:
        if "error" in r or not r.get("predicted_ms"):
            continue
        measured = r["systems"]["korch"]["median_ms"]
        cols = [r["model"], str(r["threads"]),
                ", ".join(f"{k} {v}" for k, v in sorted(r["kernels_by_backend"].items())),
                f"{r['predicted_ms']:.2f}", f"{measured:.2f}", f"{measured / r['predicted_ms']:.3f}",
                _links(r.get("core_link_ns", {}).get("optimize", []))
                + ("; " + "-".join(f"{x:.0f}" for x in r["core_link_ns"]["profiling"])
                   if r.get("core_link_ns", {}).get("profiling") else "")
                + "".join(f"; {b}'s whole model {_links(v)}" for b, v in r.get("core_link_ns", {}).get("whole", {}).items())]
        states = r.get("core_link")
        if states and states["rounds_near"] + states["rounds_far"]:
            ns = lambda x: "-" if x is None else f"{x:.0f}"       # noqa: E731
            ms = lambda d: f"{d['korch']:.2f}" if d else "-"     # noqa: E731
            cols += [f"{states['rounds_near']} / {states['rounds_far']} ({ns(states['near_ns'])} / {ns(states['far_ns'])})",
                     f"{ms(states['near_ms'])} / {ms(states['far_ms'])}"]
            seen = r.get("core_link_ns", {})
            # a one-kernel plan's prediction is its whole model's profile: the link read around it,
            # where the profiler read it; else everything the cold optimize read
            kernels = r["kernels_by_backend"]
            alone = next(iter(kernels)) if list(kernels.values()) == [1] else None
            around = seen.get("whole", {}).get(alone, [])
            state = _optimize_state(around or [*seen.get("optimize", []), *seen.get("profiling", [])], states)
            same = states.get(f"{state}_ms") if state else None
            cols.append(f"{same['korch'] / r['predicted_ms']:.3f} ({state})" if same else "-")
        else:
            cols += ["-", "-", "-"]
        lines.append("| " + " | ".join(cols) + " |")
    return "\n".join(lines)


def _optimize_state(readings: list, states: dict) -> str | None:
    """"near" or "far" when `readings` (of the optimize) are all in that state, judged against the
    nearest reading of the optimize and the bench (None if they differ or are fewer than two)."""
    from korch.profile.link import far

    known = [x for x in readings if x is not None]
    if len(known) < 2:
        return None
    nearest = min([*known, *(x for x in states.get("readings_ns", []) if x is not None)])
    said = {"far" if far(x, nearest) else "near" for x in known}
    return said.pop() if len(said) == 1 else None


def stages_table(results: list[dict]) -> str:
    """Where each cold optimize spent its time, by stage (as its plan's summary says)."""
    head = ("| model | threads | export s | cold optimize s | " + " | ".join(f"{s} s" for s in STAGES)
            + " | BLP solves: count / s / slowest s / not proven optimal |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in results:
        stages = r.get("cold_stages_s") or {}
        if "error" in r or not stages:
            continue
        solves = r.get("cold_solves") or {}
        blp = (f"{solves['solves']} / {solves['seconds']:.2f} / {solves['slowest_s']:.2f} / {solves['unproven']}"
               if solves else "-")
        export = "-" if r.get("export_s") is None else f"{r['export_s']:.1f}"
        lines.append(f"| {r['model']} | {r['threads']} | {export} | {r['cold_optimize_s']:.0f} | "
                     + " | ".join(f"{stages[s]:.1f}" if s in stages else "-" for s in STAGES) + f" | {blp} |")
    phases = []
    for r in results:               # the profile stage's largest phases (runs since the plan summary's phases are kept)
        own = sorted(((k.removeprefix("profile: "), v) for k, v in (r.get("cold_stages_s") or {}).items()
                      if k.startswith("profile: ")), key=lambda kv: -kv[1])
        if "error" not in r and own:
            phases.append(f"- {r['model']}, {r['threads']} threads, profile: "
                          + ", ".join(f"{name} {v:.1f} s" for name, v in own[:5]))
    return "\n".join(lines + ([""] + phases if phases else []))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", default=FULL)
    parser.add_argument("--threads", type=int, action="append")
    parser.add_argument("--out", default="bench-out")
    parser.add_argument("--table", action="store_true", help="only print the table of DIR/results.json")
    parser.add_argument("--bench-only", action="store_true",
                        help="re-run only the bench on the saved plans (optimize figures are kept)")
    parser.add_argument("--whole-models", action="store_true",
                        help="optimize with --whole-models (each engine's whole model only, no split plans)")
    args = parser.parse_args()
    flags = ("--whole-models",) if args.whole_models else ()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results_path = out / "results.json"
    results = json.loads(results_path.read_text()) if results_path.exists() else []
    for threads in [] if args.table else args.threads or [2]:
        for name in args.names:
            print(f"== {name}, {threads} threads", file=sys.stderr, flush=True)
            previous = next((r for r in results if (r["model"], r["threads"]) == (label(name), threads)
                             and "error" not in r), None) if args.bench_only else None
            results = [r for r in results if (r["model"], r["threads"]) != (label(name), threads)]
            results.append(run_one(name, threads, out, previous, flags))
            results_path.write_text(json.dumps(results, indent=1))
    from korch.profile.database import machine_fingerprint

    print(f"Machine: {machine_fingerprint()}, Python {platform.python_version()}; "
          f"run on {date.today().isoformat()}\n")
    for r in results:                  # (runs before predicted_ms was recorded: the plan is still there)
        if "error" not in r and "predicted_ms" not in r:
            r["predicted_ms"] = _predicted(out / f"{r['model']}-t{r['threads']}" / "plan")
    print(table(results))
    print()
    print(predicted_table(results))
    print()
    print(stages_table(results))
    print()
    if selected := selection_lines(results):
        print(selected)
        print()
    print(tree_lines(results))
    return 0


def tree_lines(results: list[dict]) -> str:
    """Per model, the optimize tree at its PSS peak: its largest processes."""
    lines = []
    for r in results:
        if members := r.get("optimize_tree_pss_peak_members"):
            shown = ", ".join(f"{name} ({pid}) {mb:.0f}" for name, pid, mb in members[:6])
            more = f", and {len(members) - 6} more" if len(members) > 6 else ""
            lines.append(f"- {r['model']}, {r['threads']} threads: tree PSS peak "
                         f"{r['optimize_tree_pss_peak_mb']:.0f} MiB: {shown}{more}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
