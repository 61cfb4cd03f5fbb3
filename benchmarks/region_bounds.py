"""Could a region be skipped before it is compiled? How far a region's time falls below its whole
model's, scaled by the cost model.

    python benchmarks/region_bounds.py CACHE [CACHE ...] [--threads 2] [--backend inductor]

Inductor's largest regions (ProfileSettings.inductor_region_budget) are compiled on every cold
optimize, 43-89 s on the zoo models at 2 threads, though on yolox-nano they are the whole model and
suffixes of 96%, 90% and 89% of it. To skip one before compiling it korch would need a bound under
its time; the natural one is the whole model's measured time split as the cost model splits it:

    ratio = (region's time / whole model's time) / (region's predicted time / whole model's predicted time)

and a bound of whole model's time x predicted share x r holds for every region whose ratio is >= r.

Each CACHE is a profile cache in which a model was optimized (its profiles.sqlite, and the cost
models saved beside it, if any). For each backend, the regions (candidates of whole ONNX nodes) with
an accepted profile on this machine are compared with the largest one, the whole model. Predictions
are the backend's saved cost model for this machine, or its roofline prior if none is saved, from the
feature vectors stored with the profiles. Prints, per cache and backend, the whole model's time and
each region's share of its primitives and ratio, largest regions first, then the range over all caches.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from korch.candidates.regions import REGION_KEY_PREFIX  # noqa: E402
from korch.costmodel.features import FEATURE_INDEX, Features  # noqa: E402
from korch.costmodel.model import CostModel, MachinePeaks, model_path, read_model  # noqa: E402
from korch.profile.database import DB_FILENAME, machine_fingerprint  # noqa: E402


def ratios(cache: Path, backend: str, threads: int, machine: str, peaks: MachinePeaks) -> tuple[float, list] | None:
    """(whole model's seconds, [(share of its primitives, ratio)]) for one cache and backend."""
    with sqlite3.connect(f"file:{cache / DB_FILENAME}?mode=ro", uri=True) as con:
        rows = con.execute("SELECT p.candidate_key, p.median_s, f.vector FROM profiles p JOIN features f "
                           "USING (candidate_key) WHERE p.backend = ? AND p.status = 'ok' AND p.threads = ? "
                           "AND p.machine = ? AND p.candidate_key LIKE ? AND p.median_s > 0",
                           (backend, threads, machine, REGION_KEY_PREFIX + "%")).fetchall()
    if len(rows) < 2:
        return None
    features = [Features(tuple(json.loads(vector))) for _, _, vector in rows]
    saved = read_model(model_path(cache, backend, machine), backend, machine)
    model = saved if saved is not None else CostModel(backend, machine, peaks)
    predicted = model.predict(features, threads)
    nodes = [f.values[FEATURE_INDEX["nodes"]] for f in features]
    top = max(range(len(rows)), key=lambda k: nodes[k])
    whole_s = rows[top][1]
    out = [(nodes[k] / nodes[top], (rows[k][1] / whole_s) / (predicted[k] / predicted[top]))
           for k in range(len(rows)) if k != top]
    return whole_s, sorted(out, reverse=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("caches", type=Path, nargs="+")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--backend", nargs="+", default=["inductor", "onnxruntime", "openvino"])
    args = parser.parse_args()
    machine, peaks = machine_fingerprint(), MachinePeaks.measure()
    for backend in args.backend:
        every = []
        for cache in args.caches:
            got = ratios(cache, backend, args.threads, machine, peaks)
            if got is None:
                continue
            whole_s, out = got
            every += [r for _, r in out]
            shown = " ".join(f"{share:.2f}:{r:.2f}" for share, r in out[:12]) + (" ..." if len(out) > 12 else "")
            print(f"{cache} {backend}: whole model {whole_s * 1e3:.1f} ms; share:ratio {shown}")
        if every:
            print(f"{backend}: {len(every)} regions, ratio {min(every):.2f}-{max(every):.2f}")


if __name__ == "__main__":
    main()
