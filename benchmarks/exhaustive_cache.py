"""A model's exhaustive profiles read back, for the scripts that replay or re-measure over them.

An exhaustive cache is one in which the model was optimized with every candidate profiled (guided
profiling off): onnxruntime every candidate, OpenVINO its regions, Inductor its budget and its
largest regions. `load` rebuilds the model's candidates as `korch optimize` does, reads every
stored record of them, and formulates the split-plan BLP over them (with boundary costs and kernel
starts, as guided profiling solves it).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from korch.api import default_backends  # noqa: E402
from korch.backends import get_backend  # noqa: E402
from korch.candidates import Candidate  # noqa: E402
from korch.frontend.regions import OnnxSource  # noqa: E402
from korch.ir.graph import Graph  # noqa: E402
from korch.pipeline import (  # noqa: E402
    CandidateSet,
    candidate_universe,
    enumerate_all,
    inductor_regions,
    profile_pools,
    run_fission,
)
from korch.profile.boundaries import boundary_model  # noqa: E402
from korch.profile.database import DB_FILENAME, ProfileDB, Record, machine_fingerprint  # noqa: E402
from korch.profile.guided import SplitProblem  # noqa: E402
from korch.profile.profiler import accepted, record_version  # noqa: E402
from korch.settings import OptimizeSettings  # noqa: E402


@dataclass
class Exhaustive:
    settings: OptimizeSettings
    machine: str
    graph: Graph
    source: OnnxSource
    cands: CandidateSet
    regions: list[Candidate]                              # Inductor's largest, the whole model first
    pools: dict[str, list[Candidate]]                     # what each backend was profiled on
    truth: dict[tuple[str, str], Record]                  # (candidate key, backend) -> its stored record
    usable: dict[tuple[str, str], float]                  # ... -> seconds, for the accepted and timed
    problem: SplitProblem

    @property
    def whole(self) -> int:
        return len(self.graph.nodes)

    def whole_models(self) -> dict[str, float]:
        """Each engine's whole-model profile, seconds."""
        return {name: self.usable[(c.key, name)] for name, cs in self.pools.items() for c in cs
                if c.size == self.whole and (c.key, name) in self.usable}


def load(cache: Path, model: str, threads: int) -> Exhaustive:
    settings = OptimizeSettings(threads=threads, backends=default_backends())
    ps, machine = settings.profile, machine_fingerprint()
    fissioned = run_fission(model, None, cache_dir=cache, rewrite=settings.rewrites, seed=settings.seed,
                            accuracy=settings.accuracy)         # the graph `korch optimize` profiles
    graph = fissioned.graph
    cands = enumerate_all(graph, settings)
    pools = profile_pools(graph, cands, settings)
    universe = candidate_universe(cands, settings)
    regions = inductor_regions(cands, settings)
    run_pools = {name: list(universe[name] if name in ps.guided_backends else pools[name]) for name in pools}
    if "inductor" in run_pools:
        run_pools["inductor"] = list({c.key: c for c in [*run_pools["inductor"], *regions]}.values())
    with ProfileDB(cache / DB_FILENAME) as db:
        truth = {}
        for name, cs in run_pools.items():
            stored = db.get_many(list({c.key for c in cs}), name, record_version(get_backend(name), ps), threads,
                                 machine)
            truth.update({(key, name): r for key, r in stored.items()})
        boundaries = boundary_model(db, settings.backends, threads, machine, settings.calibration, ps.cold_cache)
    whole = len(graph.nodes)
    whole_ort = next((truth.get((c.key, "onnxruntime")) for c in pools.get("onnxruntime", ()) if c.size == whole), None)
    tolerance = settings.accuracy.tolerance(whole_ort.error if whole_ort is not None and whole_ort.error else 0.0)
    usable = {pair: r.median_s for pair, r in truth.items() if accepted(r, tolerance) and r.median_s}
    problem = SplitProblem(graph, run_pools, lambda p, c, v: boundaries.cost(p, c, graph.types[v]), boundaries.start,
                           settings.selection.solver_time_limit_s)
    return Exhaustive(settings, machine, graph, OnnxSource(fissioned.model, dict(fissioned.value_map or {})), cands,
                      regions, run_pools, truth, usable, problem)
