"""Save a plan again with this checkout's korch: what a plan saved by an older korch holds when saved
today (e.g. OpenVINO's regions as ready models), to measure both from the same optimize.

    python benchmarks/resave_plan.py PLAN_DIR NEW_DIR [PLAN_DIR NEW_DIR ...]

The plan is read as saved (its korch version and machine are not checked) and written whole into
NEW_DIR, which must not exist or be a plan. Its kernels are not compiled.
"""

from __future__ import annotations

import argparse

from korch.plan import load_plan, save_plan
from korch.profile.database import machine_fingerprint


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("pairs", nargs="+", help="PLAN_DIR NEW_DIR, one pair per plan")
    args = parser.parse_args()
    if len(args.pairs) % 2:
        parser.error("give PLAN_DIR NEW_DIR pairs")
    for source, target in zip(args.pairs[::2], args.pairs[1::2]):
        plan = load_plan(source, "any", machine_fingerprint(), check_origin=False)
        save_plan(plan, target)
        print(f"{source} -> {target}")


if __name__ == "__main__":
    main()
