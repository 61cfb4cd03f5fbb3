"""Inductor on korch's graph against Inductor on the model's own torch module, where the time goes.

    python benchmarks/inductor_vs_torch_compile.py ZOO_NAME [--threads 2] [--rounds 15] [--top 12]
                                                   [--realize-reads-threshold N] [--kernels]

Two compiles of the same zoo model, both frozen, both with grad off: korch's whole-model Inductor
kernel (the fissioned primitive graph of the exported ONNX model, as korch's Inductor backend
compiles it) and torch.compile of the zoo's torch module (zoo.torch_compiled, korch bench's peer).
Prints their times side by side (interleaved, p10-p90), their largest difference, and for each the
aten ops and generated kernels that took the most time in torch.profiler over a few calls.
With --realize-reads-threshold, korch's graph is also compiled with Inductor's
`realize_reads_threshold` at N (default 4: a value read more often is stored, not recomputed)
and timed in the same rounds; the profiles are skipped. With --kernels, both are compiled with
Inductor's per-kernel profiling (`cpp.enable_kernel_profile`), so the profiles name each generated
C++ kernel, and a line per compile counts the generated kernels and their own time per call; the
timed comparison then includes that instrumentation's cost.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile

import numpy as np
import torch

from korch import zoo
from korch.backends import CompileOptions, get_backend
from korch.heap import keep_freed_blocks
from korch.pipeline import run_fission
from korch.profile.timing import measure, paired_ratio, side_by_side


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("name")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("--realize-reads-threshold", type=int)
    parser.add_argument("--kernels", action="store_true", help="name each generated C++ kernel in the profiles")
    args = parser.parse_args()
    if args.kernels:
        torch._inductor.config.cpp.enable_kernel_profile = True
        torch._inductor.config.fx_graph_cache = False          # cached code would lack the instrumentation
    torch.set_num_threads(args.threads)
    keep_freed_blocks()             # the C heap as korch bench's process has it once a plan is compiled
    feeds = zoo.example_inputs(args.name)
    with tempfile.TemporaryDirectory() as cache:
        graph = run_fission(zoo.cached_export(args.name, cache)).graph
    kernel = get_backend("inductor").compile(graph, CompileOptions(threads=args.threads))
    arrays = [feeds[n] for n in graph.inputs]
    tensors = [torch.from_numpy(feeds[i.name]) for i in zoo.get_model(args.name).inputs]
    module = zoo.torch_compiled(zoo.build_module(args.name), tensors, freezing=True)
    ours, theirs = kernel.run(arrays)[0], module()
    theirs = theirs[0] if isinstance(theirs, (tuple, list)) else theirs
    scale = float(np.abs(theirs.numpy()).max())
    print(f"{args.name}: largest difference {float(np.abs(ours - theirs.numpy()).max()) / scale:.1e} of the output's scale")

    fns = {"korch graph": lambda: kernel.run(arrays), "torch module": module}
    if args.realize_reads_threshold is not None:
        with torch._inductor.config.patch(realize_reads_threshold=args.realize_reads_threshold, fx_graph_cache=False):
            other = get_backend("inductor").compile(graph, CompileOptions(threads=args.threads))
        fns[f"korch graph, reads {args.realize_reads_threshold}"] = lambda: other.run(arrays)
    one = statistics.mean(measure(f, warmup=1, repeats=3, min_seconds=0.0).median_s for f in fns.values())
    t = side_by_side(fns, args.rounds, one, warmup=2)
    for name, timing in t.items():
        print(f"  {name:22s} {timing.median_s * 1e3:8.2f} ms ({timing.p10_s * 1e3:.2f}-{timing.p90_s * 1e3:.2f})")
    for name in t:
        if name != "torch module":
            print(f"  {name} / torch module, round by round: {paired_ratio(t['torch module'], t[name]):.3f}")
    if args.realize_reads_threshold is not None:
        return

    calls = 5
    for name, fn in fns.items():
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            for _ in range(calls):
                fn()
        events = prof.key_averages()
        print(f"\n{name}: self CPU time over {calls} calls, top {args.top}")
        print(events.table(sort_by="self_cpu_time_total", row_limit=args.top, max_name_column_width=60))
        if args.kernels:
            generated = [e for e in events if "cpp_fused" in e.key]        # named graph_N_cpp_fused_... or cpp_fused_...
            ms = sum(e.self_cpu_time_total for e in generated) / 1e3 / calls
            print(f"{name}: {len(generated)} distinct generated kernels, {sum(e.count for e in generated) // calls} "
                  f"calls and {ms:.2f} ms of their own time per model call")


if __name__ == "__main__":
    main()
