"""Why korch's plan of OpenVINO's whole model runs slower than OpenVINO compiling the same file.

    python benchmarks/openvino_whole_paths.py PLAN_DIR [--rounds 30] [--threads 2]

PLAN_DIR is a saved plan of one OpenVINO kernel (an engine's whole model, as `korch optimize` keeps
for the zoo's transformers). Each way of compiling and calling its ready region model is timed side
by side in one process (korch bench's protocol: rounds, each turn after a pause and one untimed call),
so that the step from OpenVINO as its users run it to korch's session can be read off one at a time:

- `file`: compile_model(path), outputs copied out (korch bench's OpenVINO peer);
- `file, shared out`: the same compiled model, outputs shared (korch's kernel call);
- `read+compile`: read_model(path) then compile_model(model), as korch loads a saved plan's step,
  without dropping the weights' pages;
- `kernel`: korch's kernel as `compile_onnx_file` makes it (pages dropped while compiling), called raw;
- `session`: the saved plan loaded by `korch.load`, called through Session.run.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import openvino as ov  # noqa: E402

import korch  # noqa: E402
from korch.backends import CompileOptions, get_backend  # noqa: E402
from korch.backends.openvino.backend import DEVICE, compile_config  # noqa: E402
from korch.plan.plan import load_plan  # noqa: E402
from korch.profile.database import machine_fingerprint  # noqa: E402
from korch.profile.timing import interleaved, paired_ratio  # noqa: E402
from korch.verify import random_feeds  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("plan")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--only", default="", help="comma-separated subset of the systems")
    args = parser.parse_args()
    plan = load_plan(args.plan, korch.__version__, machine_fingerprint())
    if len(plan.steps) != 1 or plan.steps[0].backend != "openvino":
        sys.exit(f"{args.plan}: not a plan of one OpenVINO kernel")
    step = plan.steps[0]
    path = plan.models[step]
    feeds = random_feeds(plan.graph, 7)
    backend = get_backend("openvino")
    core: ov.Core = backend.core          # type: ignore[attr-defined]
    config = compile_config(args.threads, runs_alone=True)
    ordered = [feeds[name] for name in step.inputs]

    def raw(compiled: ov.CompiledModel, share_outputs: bool):
        request = compiled.create_infer_request()
        return lambda: request.infer(ordered, share_inputs=True, share_outputs=share_outputs)

    builders = {
        "file": lambda: raw(core.compile_model(str(path), DEVICE, config), False),
        "file, shared out": lambda: raw(core.compile_model(str(path), DEVICE, config), True),
        "read+compile": lambda: raw(core.compile_model(core.read_model(str(path)), DEVICE, config), True),
        "kernel": lambda: (lambda k: (lambda: k.run(ordered)))(backend.compile_onnx_file(
            path, step.inputs, step.outputs, [plan.graph.types[o].dtype.numpy for o in step.outputs],
            CompileOptions(threads=args.threads, runs_alone=True))),
        "session": lambda: (lambda s: (lambda: s.run(None, feeds)))(korch.load(args.plan)),
    }
    wanted = [w for w in args.only.split(",") if w] or list(builders)
    systems = {name: builders[name]() for name in wanted}
    timings = interleaved(systems, args.rounds, settle_s=0.06, turn_warmup=1)
    first = next(iter(timings.values()))
    print(f"{'system':<18} {'ms':>8}  p10-p90          vs {wanted[0]} (paired)")
    for name, t in timings.items():
        print(f"{name:<18} {t.median_s * 1e3:8.2f}  {t.p10_s * 1e3:.2f}-{t.p90_s * 1e3:.2f}"
              f"  {paired_ratio(t, first):.3f}")


if __name__ == "__main__":
    main()
