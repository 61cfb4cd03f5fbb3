"""What the first Inductor kernel of a process costs, and how much of it is choosing a vector ISA.

    python benchmarks/inductor_first_compile.py [--rounds 3]

Each sample is a fresh process that compiles one small kernel (Mul + Relu on [1, 32, 16, 16], a
block of the boundary calibration's chain) through korch's Inductor backend, after choosing the
vector ISA one of two ways, timed apart:

- inductor:  `pick_vec_isa()` as Inductor runs it on its own: a g++ build and a load in a child
             Python for every ISA whose CPU flags are present;
- korch:     `checked_isa_config()` (korch/backends/inductor/isa.py): the same check, for the ISA
             Inductor would pick only.

with an empty Inductor cache (a new machine's first optimize) and with a warm one (every later
process: compile workers, later optimizes). Printed: per way and cache, the medians over rounds of
the ISA step (torch's import included), the kernel's compile after it (on the inductor way, korch's
compile still checks its one ISA, whose build the cache then holds: a load of ~0.3 s), and the ISA
each way picked. Nothing is kept.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
from torch._inductor import cpu_vec_isa
from korch.backends.inductor.isa import checked_isa_config
if sys.argv[1] == "inductor":
    picked = cpu_vec_isa.pick_vec_isa()
else:
    checked_isa_config()
t1 = time.perf_counter()
from korch.profile.boundaries import PLAIN, chain_model, chain_plan
from korch.runtime.session import compile_step
plan = chain_plan(chain_model(PLAIN, 1, 16), ("inductor",), 2)
t2 = time.perf_counter()
compile_step(plan, plan.steps[0])
t3 = time.perf_counter()
print(json.dumps({"isa_s": t1 - t0, "compile_s": t3 - t2, "picked": str(cpu_vec_isa.pick_vec_isa())}))
"""


def sample(way: str, cache: str) -> dict:
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=cache)
    out = subprocess.run([sys.executable, "-c", CHILD, way], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    results: dict[tuple[str, str], list[dict]] = {}
    warm = tempfile.mkdtemp(prefix="korch-isa-warm-")
    try:
        sample("inductor", warm)                # fills the warm cache: every ISA's test build, the kernel
        for r in range(args.rounds):
            for way in ("inductor", "korch") if r % 2 == 0 else ("korch", "inductor"):
                fresh = tempfile.mkdtemp(prefix="korch-isa-fresh-")
                try:
                    results.setdefault((way, "empty"), []).append(sample(way, fresh))
                finally:
                    shutil.rmtree(fresh, ignore_errors=True)
                results.setdefault((way, "warm"), []).append(sample(way, warm))
                print(f"round {r + 1}/{args.rounds}: {way}", file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(warm, ignore_errors=True)
    print("| ISA chosen by | Inductor cache | ISA step s | first kernel's compile s | total s | ISA picked |")
    print("|---|---|---|---|---|---|")
    for cache in ("empty", "warm"):
        for way in ("inductor", "korch"):
            rows = results[(way, cache)]
            isa = statistics.median(r["isa_s"] for r in rows)
            comp = statistics.median(r["compile_s"] for r in rows)
            total = statistics.median(r["isa_s"] + r["compile_s"] for r in rows)
            print(f"| {way} | {cache} | {isa:.2f} | {comp:.2f} | {total:.2f} | {rows[0]['picked']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
