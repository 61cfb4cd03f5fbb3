"""Does an engine's whole model read slower side by side with one rival than with another?

    python benchmarks/neighbour_bias.py MODEL [--engines openvino,onnxruntime,inductor] [--threads 2]
                                      [--rounds 15] [--repeats 2]

Measured selection's duels run two whole models in alternating turns (`side_by_side`: a pause and
one untimed call per turn), and the kept plan's "measured" time is its median in its last duel.
On segformer-b0 (Intel host) OpenVINO's whole model read 83.1 ms in its duel with a split plan and
90.2 ms in its duel with Inductor's whole model, in the same optimize. This times each engine's
whole model alone (turns of its own), and beside each other engine, `--repeats` times in turn, so
a rival that slows whoever runs next shows as a ratio above 1 against the alone reading.
Nothing is written.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from two_engine_split import region_plan  # noqa: E402  (benchmarks/two_engine_split.py)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", help="an .onnx file or a zoo model name")
    parser.add_argument("--engines", default="openvino,onnxruntime,inductor")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()

    from korch.frontend.regions import OnnxSource
    from korch.heap import keep_freed_blocks
    from korch.pipeline import run_fission
    from korch.profile.timing import measure, side_by_side
    from korch.runtime.session import compile_plan
    from korch.verify import random_feeds

    keep_freed_blocks()
    fissioned = run_fission(args.model)
    graph = fissioned.graph
    source = OnnxSource(fissioned.model, dict(fissioned.value_map or {}))
    engines = args.engines.split(",")
    sessions = {e: compile_plan(region_plan(graph, source, [(0, len(graph.nodes), e)], args.threads))
                for e in engines}
    feeds = random_feeds(graph, 0)
    calls = {e: (lambda s=s: s.run(None, feeds)) for e, s in sessions.items()}
    one = max(measure(c, repeats=3, min_seconds=0.1).median_s for c in calls.values())
    readings: dict[tuple[str, str], list[float]] = {}
    for _ in range(args.repeats):
        for e in engines:
            alone = side_by_side({e: calls[e]}, args.rounds, one)
            readings.setdefault((e, "alone"), []).append(alone[e].median_s)
            for rival in engines:
                if rival != e:
                    pair = side_by_side({e: calls[e], rival: calls[rival]}, args.rounds, one)
                    readings.setdefault((e, rival), []).append(pair[e].median_s)
    print(f"{args.model}, {args.threads} threads, {args.rounds} rounds x {args.repeats}: each engine's median ms "
          "(one per repeat), alone and beside each rival; ratio of the means to alone")
    for e in engines:
        base = statistics.mean(readings[(e, "alone")])
        cells = []
        for who in ["alone"] + [r for r in engines if r != e]:
            vals = readings[(e, who)]
            cells.append(f"{who}: {' '.join(f'{v * 1e3:.2f}' for v in vals)} ({statistics.mean(vals) / base:.3f}x)")
        print(f"  {e:12s} " + " | ".join(cells))


if __name__ == "__main__":
    main()
