"""Does Inductor's max-autotune (its C++ GEMM templates benchmarked against ATen's BLAS calls) pay on
this CPU? The zoo's torch module, frozen, compiled with Inductor's defaults and with max-autotune,
timed side by side in one process.

    python benchmarks/inductor_autotune.py [--threads 2] [--rounds 20] MODEL [MODEL ...]

Prints per model: each variant's compile seconds, median and p10-p90 ms, and the paired ratio
(autotuned / default, round by round).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from korch import zoo  # noqa: E402
from korch.profile.timing import measure, side_by_side  # noqa: E402

VARIANTS = {
    "default": {},
    "max-autotune": {"max_autotune": True},
}


def compiled(name: str, args: list[torch.Tensor], options: dict) -> tuple[object, float]:
    module = zoo.build_module(name)
    fn = torch.compile(module)

    def call() -> object:
        with torch.no_grad():
            return fn(*args)

    t0 = time.perf_counter()
    with torch._inductor.config.patch(freezing=True, **options):
        call()
    return call, time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("models", nargs="+")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print("| model | variant | compile s | ms (p10-p90) | paired ratio vs default |")
    print("|---|---|---:|---|---:|")
    for name in args.models:
        inputs = [torch.from_numpy(a) for a in zoo.example_inputs(name).values()]
        calls, compile_s = {}, {}
        for variant, options in VARIANTS.items():
            torch._dynamo.reset()
            calls[variant], compile_s[variant] = compiled(name, inputs, options)
        # outputs agree before anything is timed
        ref = calls["default"]()
        for variant, call in calls.items():
            out = call()
            a, b = (ref[0] if isinstance(ref, tuple) else ref), (out[0] if isinstance(out, tuple) else out)
            err = float((a - b).abs().max() / (a.abs().max() + 1e-12))
            if err > 1e-3:
                print(f"{name} {variant}: max rel err {err:.2e} against default", file=sys.stderr)
        one_call_s = min(measure(call, warmup=0, repeats=3, min_seconds=0).median_s for call in calls.values())
        timings = side_by_side(calls, args.rounds, one_call_s)
        base = timings["default"].samples_s
        for variant, t in timings.items():
            ratio = statistics.median(s / b for s, b in zip(t.samples_s, base))
            print(f"| {name} | {variant} | {compile_s[variant]:.1f} | {t.median_s * 1e3:.2f} "
                  f"({t.p10_s * 1e3:.2f}-{t.p90_s * 1e3:.2f}) | {ratio:.3f} |", flush=True)


if __name__ == "__main__":
    main()
