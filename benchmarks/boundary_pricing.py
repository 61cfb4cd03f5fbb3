"""How long the BLP takes to price kernel boundaries on a real model's options.

    python benchmarks/boundary_pricing.py MODEL --cache DIR [--threads 2] [--repeats 3]

Builds the split-plan options guided profiling solves over on MODEL (every candidate of every
default backend, each at a unit cost) and times `korch.select.blp._crossings`, the step that prices
every tensor an option reads as it would cross from each engine that makes it, with the calibrated
boundary model stored in DIR's profile database (an empty model, if none: then every price is
zero). Prints the options, the crossing terms and the median seconds over `--repeats`.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from korch.api import default_backends  # noqa: E402
from korch.pipeline import candidate_universe, enumerate_all, run_fission  # noqa: E402
from korch.profile.boundaries import stored_model  # noqa: E402
from korch.profile.database import DB_FILENAME, ProfileDB, machine_fingerprint  # noqa: E402
from korch.profile.guided import candidate_option  # noqa: E402
from korch.select.blp import _crossings  # noqa: E402
from korch.settings import OptimizeSettings  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--cache", type=Path, required=True)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    settings = OptimizeSettings(threads=args.threads, backends=default_backends())
    graph = run_fission(args.model, cache_dir=args.cache).graph
    universe = candidate_universe(enumerate_all(graph, settings), settings)
    with ProfileDB(args.cache / DB_FILENAME) as db:
        model = stored_model(db, settings.backends, args.threads, machine_fingerprint())
    whole = len(graph.nodes)
    options = [candidate_option(c, name, 1.0, k) for k, (name, c) in
               enumerate((name, c) for name, cands in universe.items() for c in cands if c.size < whole)]
    seconds = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        crossings = _crossings(options, set(graph.inputs), lambda p, c, v: model.cost(p, c, graph.types[v]))
        seconds.append(time.perf_counter() - t0)
    print(f"{args.model}: {len(options)} options, {len(crossings.cost)} crossing terms, "
          f"{statistics.median(seconds):.3f} s to price them (median of {args.repeats})")


if __name__ == "__main__":
    main()
