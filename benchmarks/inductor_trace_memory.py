"""Memory of compiling Inductor's whole model in place: RSS before, the peak while make_fx traces the
candidate module, the peak while the whole compile runs (trace included), and RSS once the kernel is
dropped and the heap trimmed.

    python benchmarks/inductor_trace_memory.py MODEL [--cache DIR] [--threads 2] [--trace-only]

MODEL is a zoo name or an ONNX file, fissioned as `korch optimize` does (rewrites on). The module
runs on real tensors while make_fx traces it, so what it holds while tracing is held at the
optimize's peak where its whole model compiles in place (bert-base, vit-b16, gpt2-small, yolov4).
RSS is sampled every 20 ms in a thread (MiB). Run it with PYTHONPATH=CHECKOUT to measure another
korch checkout: it uses only CandidateModule, warmup_inputs and the pipeline's fission and candidates.
"""

from __future__ import annotations

import argparse
import gc
import sys
import threading
import time
from pathlib import Path

# appended, not put first: a checkout given by PYTHONPATH is the korch measured
sys.path.append(str(Path(__file__).resolve().parent.parent))

from check_memory import resident_mib  # noqa: E402


class Sampler:
    """The largest RSS read since `reset`, every 20 ms."""

    def __init__(self) -> None:
        self.peak = 0.0
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while True:
            self.peak = max(self.peak, resident_mib())
            time.sleep(0.02)

    def reset(self) -> None:
        self.peak = resident_mib()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model")
    parser.add_argument("--cache", type=Path)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--trace-only", action="store_true", help="trace the module, do not compile it")
    args = parser.parse_args()

    import korch
    from korch.heap import keep_freed_blocks, release_freed_heap
    from korch.pipeline import enumerate_all, run_fission
    from korch.settings import OptimizeSettings

    keep_freed_blocks()                  # as korch optimize runs
    sampler = Sampler()
    settings = OptimizeSettings(threads=args.threads)
    graph = run_fission(args.model, cache_dir=args.cache, rewrite=settings.rewrites, seed=settings.seed,
                        accuracy=settings.accuracy).graph
    whole = next(c for c in enumerate_all(graph, settings).regions if c.size == len(graph.nodes))

    import torch
    from torch.fx.experimental.proxy_tensor import make_fx

    from korch.backends import get_backend
    from korch.backends.base import CompileOptions
    from korch.backends.inductor.backend import CandidateModule, warmup_inputs
    from korch.candidates import extract_subgraph

    sub = extract_subgraph(graph, whole)
    activations = sum(sub.types[n.output].nbytes for n in sub.nodes if sub.types[n.output].is_static) / 2**20

    def settle() -> float:
        gc.collect()
        release_freed_heap()
        return resident_mib()

    print(f"korch {Path(korch.__file__).parent.parent}; {args.model}: {len(sub.nodes)} primitives, "
          f"every intermediate together {activations:,.0f} MiB")
    before = settle()
    sampler.reset()
    example = [torch.from_numpy(x) for x in warmup_inputs(sub)]
    with torch.no_grad():
        traced = make_fx(CandidateModule(sub, "cpu").eval())(*example)
    traced_peak = sampler.peak
    del traced
    print(f"make_fx trace: RSS {before:,.0f} MiB before, peak {traced_peak:,.0f} (+{traced_peak - before:,.0f})")
    if args.trace_only:
        return
    before = settle()
    sampler.reset()
    t0 = time.perf_counter()
    kernel = get_backend("inductor").compile(sub, CompileOptions(threads=args.threads))
    seconds = time.perf_counter() - t0
    compiled_peak = sampler.peak
    del kernel
    after = settle()
    print(f"whole-model compile ({seconds:.1f} s): RSS {before:,.0f} MiB before, peak {compiled_peak:,.0f} "
          f"(+{compiled_peak - before:,.0f}), {after:,.0f} once dropped")


if __name__ == "__main__":
    main()
