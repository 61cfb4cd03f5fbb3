"""What Inductor's fused candidates could buy: optimize one model with a larger Inductor budget.

    python benchmarks/inductor_budget.py MODEL --budget 400 [--threads 2] [--cache DIR]

Inductor, the one backend that generates fused code, is offered `ProfileSettings.inductor_budget`
unique small candidates per model (40 by default; compiles cost about a second each). This runs
`korch optimize` with another budget (cold unless --cache holds earlier profiles), logs measured
selection's rounds, and prints the kept plan, its kernels per engine, why it was kept, and how many
Inductor candidates were profiled and beat the best other engine on the same candidate. Nothing is
written outside --cache.
"""

from __future__ import annotations

import argparse
import logging
import os
import sqlite3
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model")
    p.add_argument("--budget", type=int, required=True, help="unique small candidates Inductor profiles")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--cache", type=Path, help="profile cache directory (default: a fresh temporary one)")
    args = p.parse_args(argv)
    cache = args.cache or Path(tempfile.mkdtemp(prefix="korch-budget-"))
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(cache / "inductor-cache"))
    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
    logging.getLogger("korch.select").setLevel(logging.INFO)

    from korch.api import default_backends
    from korch.pipeline import optimize
    from korch.profile.database import ProfileDB
    from korch.settings import OptimizeSettings, ProfileSettings

    settings = OptimizeSettings(threads=args.threads, backends=default_backends(),
                                profile=replace(ProfileSettings(), inductor_budget=args.budget))
    t0 = time.perf_counter()
    with ProfileDB(cache / "profiles.sqlite") as db:
        plan, _, stats = optimize(args.model, db, settings)
    seconds = time.perf_counter() - t0
    sel = stats.selection
    print(f"{args.model}, {args.threads} threads, Inductor budget {args.budget}: optimize {seconds:.0f} s "
          f"(profile {stats.profile_seconds:.0f} s)")
    print(f"  kept: {plan.kernels_by_backend()}: {sel.why}")
    print(f"  kept plan measured {sel.measured_ms:.2f} ms, predicted {sel.predicted_ms:.2f} ms; best split plan "
          f"{sel.split_kernels} kernels, predicted {sel.split_predicted_ms} ms, measured {sel.split_measured_ms} ms")

    rows = sqlite3.connect(cache / "profiles.sqlite").execute(
        "select candidate_key, backend, median_s from profiles where status = 'ok' and threads = ?",
        (args.threads,)).fetchall()
    by_key: dict[str, dict[str, float]] = {}
    for key, backend, median in rows:
        if median is not None:
            by_key.setdefault(key, {})[backend] = min(median, by_key.get(key, {}).get(backend, float("inf")))
    inductor = [(d["inductor"], min(v for b, v in d.items() if b != "inductor"))
                for d in by_key.values() if "inductor" in d and len(d) > 1]
    faster = [(i, o) for i, o in inductor if i < o]
    print(f"  Inductor profiled {len(inductor)} candidates another engine also ran; faster on {len(faster)}, "
          f"saving {sum(o - i for i, o in faster) * 1e3:.2f} ms summed over those candidates")
    return 0


if __name__ == "__main__":
    sys.exit(main())
