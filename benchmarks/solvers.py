"""Which MILP solver should korch's kernel-selection BLP use? Measured on the zoo models (issue 3).

    python benchmarks/solvers.py build                 # build and cache the BLP instances (needs torch)
    python benchmarks/solvers.py run [--repeats 3]     # solve each instance with each solver, print a table

THE COSTS ARE SYNTHETIC. Real per-kernel profiles take minutes per model, so each (candidate, backend)
option gets a roofline estimate instead:

    FLOPs of its linear primitives / 150 GFLOP/s  +  bytes of its boundary tensors / 40 GB/s
    + a per-kernel overhead (5 us on onnxruntime, 16 us on inductor)

times a deterministic multiplicative noise in [0.7, 1.3] drawn from an RNG seeded by (structural key,
backend), so structurally identical candidates cost the same, as they do when korch profiles them once
per key. Everything else is korch's real instance: the fissioned primitive graph, the small candidates
(enumerate_candidates with the default CandidateLimits), the regions (region_candidates with the
default RegionLimits), both backends with inductor restricted as korch.pipeline does it
(worth_profiling(graph, small, 120) plus the 12 largest regions), and the same constraint matrix
(korch.select.blp._problem) with the cover cuts over every primitive.

Instances are pickled under /tmp/korch-solver-bench/ (building one takes 10-60 s: torch export and
fission). Every solve runs in its own subprocess (highspy and ortools must not share a process) and is
repeated; the table shows the median wall time. "total" is korch's Selection.seconds: building the
constraints and the solver's model plus the solve; "solver" is the solve call alone.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import statistics
import subprocess
import sys
import time
import zlib
from pathlib import Path

import numpy as np

CACHE = Path(os.environ.get("KORCH_SOLVER_BENCH_CACHE", "/tmp/korch-solver-bench"))
MODELS = ("candy", "segformer-b0", "efficientvit-b1", "yolox-nano", "yolov4", "bert-base", "vit-b16")
TIME_LIMIT_S = 30.0

# The synthetic cost model (see the module docstring).
PEAK_FLOPS = 150e9
BANDWIDTH = 40e9
OVERHEAD_S = {"onnxruntime": 5e-6, "inductor": 16e-6}
NOISE = 0.30
SEED = 0
INDUCTOR_BUDGET = 120          # korch.pipeline.DEFAULT_INDUCTOR_BUDGET
INDUCTOR_REGION_BUDGET = 12    # korch.pipeline.DEFAULT_INDUCTOR_REGION_BUDGET


# ---------------------------------------------------------------------------------------------
# building instances


def linear_flops(graph, node) -> int:
    """Multiply-adds x 2 of a matmul / conv / conv_transpose primitive; 0 for the other classes."""
    from korch.ir.ops import PrimClass

    if node.klass != PrimClass.LINEAR:
        return 0
    out = graph.types[node.output]
    a, w = (graph.types[v] for v in node.inputs[:2])
    if node.op == "matmul":
        return 2 * out.size * a.shape[-1]
    if node.op == "conv":                       # w: M x C/group x kernel
        return 2 * out.size * int(np.prod(w.shape[1:]))
    if node.op == "conv_transpose":             # every input element scatters into M/group x kernel
        return 2 * a.size * int(np.prod(w.shape[1:]))
    raise ValueError(f"unknown linear primitive {node.op}")


def roofline_s(graph, candidate, backend: str) -> float:
    flops = sum(linear_flops(graph, graph.nodes[i]) for i in candidate.nodes)
    nbytes = 0
    for v in (*candidate.inputs, *candidate.outputs):
        t = graph.types[v]
        nbytes += t.size * t.dtype.numpy.itemsize
    return flops / PEAK_FLOPS + nbytes / BANDWIDTH + OVERHEAD_S[backend]


def noise(key: str, backend: str) -> float:
    rng = np.random.default_rng([SEED, zlib.crc32(f"{backend}|{key}".encode())])
    return float(rng.uniform(1 - NOISE, 1 + NOISE))


def build_instance(name: str) -> dict:
    from korch.candidates import CandidateLimits, RegionLimits, enumerate_candidates, region_candidates
    from korch.pipeline import run_fission
    from korch.profile.prune import worth_profiling
    from korch.select import Option
    from korch.zoo import to_model_proto

    t0 = time.perf_counter()
    fissioned = run_fission(to_model_proto(name))
    graph = fissioned.graph
    t1 = time.perf_counter()
    small = enumerate_candidates(graph, CandidateLimits())
    regions = region_candidates(graph, RegionLimits())
    candidates = list(small) + list(regions)
    largest = sorted(regions, key=lambda c: -c.size)[:INDUCTOR_REGION_BUDGET]
    pools = {"onnxruntime": {c.key for c in candidates},
             "inductor": {c.key for c in worth_profiling(graph, small, INDUCTOR_BUDGET) + largest}}
    options = []
    for c in candidates:
        for backend in ("onnxruntime", "inductor"):
            if c.key not in pools[backend]:
                continue
            cost = roofline_s(graph, c, backend) * noise(c.key, backend)
            options.append(Option(f"{backend}@{c.nodes[0]}-{c.nodes[-1]}:{len(options)}", frozenset(c.inputs),
                                  frozenset(c.outputs), cost, frozenset(c.nodes)))
    return {"model": name, "options": options, "inputs": tuple(graph.inputs), "outputs": tuple(graph.outputs),
            "primitives": len(graph.nodes), "candidates": len(candidates), "regions": len(regions),
            "fission_s": t1 - t0, "candidates_s": time.perf_counter() - t1}


def instance_path(name: str) -> Path:
    return CACHE / f"{name}.pkl"


def load_instance(name: str) -> dict:
    with open(instance_path(name), "rb") as f:
        return pickle.load(f)


# ---------------------------------------------------------------------------------------------
# solvers: each returns (x in {0,1}^n or None, status, proven lower bound in scaled units, solver seconds)
# on min c.x s.t. A x >= lower, x binary (costs scaled to microseconds as korch does)


def _cbc(cost, matrix, lower, time_limit):
    import pulp

    prob = pulp.LpProblem("korch_blp", pulp.LpMinimize)
    x = [pulp.LpVariable(f"x{k}", cat=pulp.LpBinary) for k in range(len(cost))]
    prob += pulp.LpAffineExpression(zip(x, cost.tolist()))
    csr = matrix.tocsr()
    for r in range(csr.shape[0]):
        lo, hi = csr.indptr[r], csr.indptr[r + 1]
        expr = pulp.LpAffineExpression(zip((x[j] for j in csr.indices[lo:hi]), csr.data[lo:hi].tolist()))
        prob += pulp.LpConstraint(expr, pulp.LpConstraintGE, rhs=float(lower[r]))
    log = CACHE / f"cbc-{os.getpid()}.log"
    solver = pulp.PULP_CBC_CMD(msg=False, timeLimit=time_limit, gapRel=0.0, threads=1, logPath=str(log))
    t0 = time.perf_counter()
    prob.solve(solver)
    seconds = time.perf_counter() - t0
    text = log.read_text() if log.exists() else ""
    log.unlink(missing_ok=True)
    status = pulp.LpStatus[prob.status]
    values = [v.varValue for v in x]
    xs = None if any(v is None for v in values) else np.array(values, dtype=float)
    optimal = prob.sol_status == pulp.LpSolutionOptimal
    bound = None
    for line in text.splitlines():            # CBC's final summary: "Lower bound: 123.4" when it stops early
        if line.strip().startswith("Lower bound:"):
            bound = float(line.split(":")[1])
    if optimal and bound is None and xs is not None:
        bound = float(cost @ xs)
    return xs, "optimal" if optimal else status, bound, seconds


def _cpsat(cost, matrix, lower, time_limit, workers):
    from ortools.sat.python import cp_model

    # CP-SAT needs integers: 1 unit = 1e-6 us (1 fs), so rounding moves the optimum by < 1e-9 relative.
    scale = 1e6
    icost = np.rint(cost * scale).astype(np.int64)
    model = cp_model.CpModel()
    x = [model.new_bool_var(f"x{k}") for k in range(len(cost))]
    csr = matrix.tocsr()
    for r in range(csr.shape[0]):
        lo, hi = csr.indptr[r], csr.indptr[r + 1]
        cols, vals = csr.indices[lo:hi], csr.data[lo:hi]
        model.add(cp_model.LinearExpr.weighted_sum([x[j] for j in cols], [int(v) for v in vals]) >= int(lower[r]))
    model.minimize(cp_model.LinearExpr.weighted_sum(x, icost.tolist()))
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = time_limit
    solver.parameters.num_workers = workers
    # With the default linearization (level 1) CP-SAT proves no bound at all on these instances (candy:
    # bound 0 after 30 s with 1 or 2 workers); level 2 puts every constraint into its LP relaxation.
    solver.parameters.linearization_level = 2
    solver.parameters.relative_gap_limit = 0.0
    solver.parameters.absolute_gap_limit = 0.0
    t0 = time.perf_counter()
    code = solver.solve(model)
    seconds = time.perf_counter() - t0
    name = solver.status_name(code).lower()
    if code in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        xs = np.array([solver.boolean_value(v) for v in x], dtype=float)
        return xs, name, solver.best_objective_bound / scale, seconds
    return None, name, None, seconds


def run_solver(solver: str, inst: dict, time_limit: float) -> dict:
    from korch.select import solve
    from korch.select.blp import COST_SCALE, _problem

    options, required = inst["options"], range(inst["primitives"])
    cost = np.array([o.cost for o in options]) * COST_SCALE
    out: dict = {"model": inst["model"], "solver": solver, "variables": len(options)}
    if solver in ("highs", "highs-nocuts"):
        req = required if solver == "highs" else ()
        t0 = time.perf_counter()
        sel = solve(options, inst["inputs"], inst["outputs"], required=req, time_limit=time_limit)
        total = time.perf_counter() - t0
        keys = {o.key for o in sel.chosen}
        xs = np.array([o.key in keys for o in options], dtype=float)
        matrix, lower = _problem(options, set(inst["inputs"]), inst["outputs"], req)
        status = "optimal" if sel.optimal else "not optimal"
        bound, solver_s = sel.lower_bound * COST_SCALE, None
    else:
        t0 = time.perf_counter()
        matrix, lower = _problem(options, set(inst["inputs"]), inst["outputs"], required)
        if solver == "cbc":
            xs, status, bound, solver_s = _cbc(cost, matrix, lower, time_limit)
        elif solver.startswith("cpsat"):
            workers = int(solver.split("-")[1]) if "-" in solver else 1
            xs, status, bound, solver_s = _cpsat(cost, matrix, lower, time_limit, workers)
        else:
            raise SystemExit(f"unknown solver {solver}")
        total = time.perf_counter() - t0
    # Check the solution against the cut-free constraints (valid for every solver), objective in us.
    plain, plain_lower = _problem(options, set(inst["inputs"]), inst["outputs"], ())
    feasible = xs is not None and bool(np.all(plain @ xs >= plain_lower - 1e-9))
    objective = float(cost @ xs) if xs is not None else None
    out.update(constraints=int(matrix.shape[0]), total_s=total, solver_s=solver_s, status=status,
               objective_us=objective, bound_us=bound, feasible=feasible)
    if objective is not None and bound is not None:
        out["gap"] = max(0.0, (objective - bound) / objective) if objective > 0 else 0.0
    return out


# ---------------------------------------------------------------------------------------------
# driver


SOLVERS = ("highs", "highs-nocuts", "cbc", "cpsat", "cpsat-2")
DEFAULT_SOLVERS = ("highs", "highs-nocuts", "cbc", "cpsat")   # cpsat-2: no bound at all on candy in 30 s


def cmd_build(args) -> None:
    CACHE.mkdir(parents=True, exist_ok=True)
    for name in args.models:
        path = instance_path(name)
        if path.exists() and not args.force:
            print(f"{name}: cached at {path}", flush=True)
            continue
        if not args.inline:      # one process per model: torch export leaves a lot of memory behind
            subprocess.run([sys.executable, __file__, "build", "--inline", *(["--force"] if args.force else []), name],
                           check=True)
            continue
        inst = build_instance(name)
        tmp = path.with_suffix(".tmp")
        with open(tmp, "wb") as f:
            pickle.dump(inst, f, protocol=pickle.HIGHEST_PROTOCOL)
        tmp.replace(path)
        print(f"{name}: {inst['primitives']} primitives, {inst['candidates']} candidates ({inst['regions']} regions), "
              f"{len(inst['options'])} options; fission {inst['fission_s']:.1f} s, candidates "
              f"{inst['candidates_s']:.1f} s", flush=True)


def cmd_worker(args) -> None:
    print(json.dumps(run_solver(args.solver, load_instance(args.model), args.time_limit)))


def _solve_once(model: str, solver: str, time_limit: float) -> dict:
    proc = subprocess.run([sys.executable, __file__, "worker", model, solver, "--time-limit", str(time_limit)],
                          capture_output=True, text=True, timeout=time_limit * 4 + 120)
    if proc.returncode:
        return {"model": model, "solver": solver, "status": f"crashed: {proc.stderr.strip().splitlines()[-1:]}"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _fmt(v, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def cmd_run(args) -> None:
    results = []
    for model in args.models:
        for solver in args.solvers:
            runs = []
            for _ in range(args.repeats):
                r = _solve_once(model, solver, args.time_limit)
                runs.append(r)
                print(f"  {model} {solver}: {r.get('status')} {_fmt(r.get('total_s'), '.3f')} s", file=sys.stderr,
                      flush=True)
                # A run that hit the time limit will hit it again: repeating it only costs time.
                if r.get("status") != "optimal" and not args.repeat_timeouts:
                    break
            ok = [r for r in runs if "total_s" in r]
            row = dict(ok[len(ok) // 2] if ok else runs[0])
            if ok:
                row["total_s"] = statistics.median(r["total_s"] for r in ok)
                solver_times = [r["solver_s"] for r in ok if r.get("solver_s") is not None]
                row["solver_s"] = statistics.median(solver_times) if solver_times else None
                row["runs"] = len(ok)
                row["all_times"] = [round(r["total_s"], 4) for r in ok]
            results.append(row)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    print_table(results)


def print_table(results: list[dict]) -> None:
    print("| model | solver | vars | cons | total s (median) | solver s | runs | status | objective us | bound us | gap |")
    print("|---|---|---:|---:|---:|---:|---:|---|---:|---:|---:|")
    for r in results:
        print(f"| {r['model']} | {r['solver']} | {r.get('variables', '-')} | {r.get('constraints', '-')} "
              f"| {_fmt(r.get('total_s'), '.3f')} | {_fmt(r.get('solver_s'), '.3f')} | {r.get('runs', '-')} "
              f"| {r.get('status')}{'' if r.get('feasible', True) else ' INFEASIBLE'} "
              f"| {_fmt(r.get('objective_us'), '.4f')} | {_fmt(r.get('bound_us'), '.4f')} "
              f"| {_fmt(r.get('gap'), '.2%')} |")
    # Every solver that claims optimality must find the same optimum.
    by_model: dict[str, list[dict]] = {}
    for r in results:
        if r.get("status") == "optimal" and r.get("objective_us") is not None:
            by_model.setdefault(r["model"], []).append(r)
    print()
    for model, rows in by_model.items():
        objs = [r["objective_us"] for r in rows]
        spread = (max(objs) - min(objs)) / max(abs(max(objs)), 1e-12)
        verdict = "agree" if spread <= 1e-6 else "DISAGREE"
        print(f"{model}: {len(rows)} optimal solvers {verdict} (relative spread {spread:.1e}; "
              f"{', '.join(r['solver'] for r in rows)})")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="build and cache the BLP instances")
    b.add_argument("models", nargs="*", default=list(MODELS))
    b.add_argument("--force", action="store_true")
    b.add_argument("--inline", action="store_true", help=argparse.SUPPRESS)
    w = sub.add_parser("worker", help="solve one instance once, print JSON")
    w.add_argument("model")
    w.add_argument("solver", choices=SOLVERS)
    w.add_argument("--time-limit", type=float, default=TIME_LIMIT_S)
    r = sub.add_parser("run", help="solve every instance with every solver in subprocesses, print a table")
    r.add_argument("--models", nargs="+", default=list(MODELS))
    r.add_argument("--solvers", nargs="+", default=list(DEFAULT_SOLVERS), choices=SOLVERS)
    r.add_argument("--repeats", type=int, default=3)
    r.add_argument("--time-limit", type=float, default=TIME_LIMIT_S)
    r.add_argument("--repeat-timeouts", action="store_true", help="repeat runs that did not prove optimality")
    r.add_argument("--json", help="also write the rows here")
    args = p.parse_args()
    {"build": cmd_build, "worker": cmd_worker, "run": cmd_run}[args.cmd](args)


if __name__ == "__main__":
    main()
