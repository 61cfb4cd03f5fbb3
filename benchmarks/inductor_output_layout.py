"""An Inductor kernel's outputs in the layout Inductor chose, copied by the caller, against the
same outputs written contiguous by the kernel itself.

    python benchmarks/inductor_output_layout.py MODEL [START:END ...] [--threads 2] [--rounds 15] [--all]

Inductor may give an output a layout of its own (channels-last for a concat of token maps seen as
images); the kernel's caller (InductorKernel.run) then copies it to the C-contiguous array a plan
passes on, in numpy, strided. korch's Inductor backend now compiles such a kernel again with those
outputs asked for as contiguous copies (backends/inductor/backend.py, compile_graph), which the
kernel writes directly.

For each primitive range START:END of MODEL's fissioned graph (default: the whole graph), as a
region candidate: both compiles (one, if no output needs it), the outputs' strides from the first,
and their `run` side by side (korch's timing protocol: a pause and one untimed call per turn),
medians with p10-p90 and the round-by-round ratio. With --all, a third compile asks for every
output as a contiguous copy, which would spare the second compile if it never cost a kernel
anything. Nothing is written.
"""

from __future__ import annotations

import argparse

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", help="an .onnx file or a zoo model name")
    parser.add_argument("ranges", nargs="*", help="START:END primitive ranges (default: the whole graph)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--all", action="store_true",
                        help="also compile once with every output asked for as a contiguous copy (no second "
                             "compile), and time it beside the others")
    args = parser.parse_args()

    import torch

    from korch.backends import CompileOptions
    from korch.backends.inductor.backend import (
        InductorKernel,
        _compile_kernel,
        outputs_to_copy,
        strided_outputs,
        warmup_inputs,
    )
    from korch.backends.inductor.provider import onednn_linears_here
    from korch.candidates.candidate import extract_subgraph
    from korch.candidates.regions import _region
    from korch.heap import keep_freed_blocks
    from korch.pipeline import run_fission
    from korch.profile.timing import measure, paired_ratio, side_by_side

    keep_freed_blocks()              # as korch profiles and runs kernels (korch/heap.py)
    graph = run_fission(args.model).graph
    ranges = [tuple(map(int, r.split(":"))) for r in args.ranges] or [(0, len(graph.nodes))]
    options = CompileOptions(threads=args.threads)
    torch.set_num_threads(args.threads)
    rng = np.random.default_rng(0)
    for start, end in ranges:
        sub = extract_subgraph(graph, _region(graph, start, end))
        example = [torch.from_numpy(x) for x in warmup_inputs(sub)]

        def compiled(relayout: frozenset[int]) -> InductorKernel:
            fn, modules = _compile_kernel(sub, options, example, "cpu", relayout, onednn_linears_here())
            return InductorKernel(fn, args.threads, "cpu", outputs_to_copy(fn, example), modules)

        kernels = {"as laid out": compiled(frozenset())}
        strided = strided_outputs(kernels["as laid out"].fn, example)
        with torch.no_grad():
            layouts = [(tuple(y.shape), y.stride()) for y in kernels["as laid out"].fn(*example)]
        if strided:                        # what korch compiles again; with none, the kernel above is korch's
            kernels["contiguous"] = compiled(strided)
        if args.all:                       # every output cloned, compiled once
            kernels["all cloned"] = compiled(frozenset(range(len(sub.outputs))))
        print(f"primitives [{start}, {end}) of {len(graph.nodes)}: outputs {layouts}; "
              f"not contiguous: {sorted(strided) or 'none'}")
        inputs = [rng.standard_normal(sub.types[n].shape).astype(sub.types[n].dtype.numpy)
                  if sub.types[n].dtype.is_float else x.numpy() for n, x in zip(sub.inputs, example)]
        first = kernels["as laid out"].run(inputs)
        for name in kernels:
            for a, b in zip(first, kernels[name].run(inputs)):
                assert a.flags.c_contiguous and b.flags.c_contiguous and np.allclose(a, b, rtol=1e-5, atol=1e-5)
        one = measure(lambda: kernels["as laid out"].run(inputs), warmup=1, repeats=3, min_seconds=0.1).median_s
        timings = side_by_side({k: (lambda k=k: kernels[k].run(inputs)) for k in kernels}, args.rounds, one)
        for name, t in timings.items():
            print(f"  {name:12s} {t.median_s * 1e3:8.2f} ms ({t.p10_s * 1e3:.2f}-{t.p90_s * 1e3:.2f})")
        for name in timings:
            if name != "as laid out":
                ratio = paired_ratio(timings["as laid out"], timings[name])
                print(f"  {name} / as laid out, round by round: {ratio:.3f}")


if __name__ == "__main__":
    main()
