"""The Inductor backend's contract (name, version, supports, compile) without importing torch: the
profile database keys records by the backend's version, and a warm optimize that reads them only
(profiles, a remembered plan) spent 1.5 s importing torch for that string. Compiling imports
backend.py, and torch with it."""

from __future__ import annotations

import shutil
from functools import cached_property
from importlib import metadata
from pathlib import Path

from korch.backends.base import Backend, CompileOptions, Kernel, KernelNotSaveable
from korch.ir.graph import Graph

# Changes when a change to the lowering changes what kernels it compiles run like, so profiles taken
# with the old lowering are timed again ("sdpa": attention chains run as torch's fused attention;
# "relayout": outputs are written contiguous by the kernel, backend.compile_graph; "held": a kernel
# among others holds its OpenMP workers to their CPUs, placement.hold_openmp_workers, and profiles
# taken with them free read up to 20x slow). The version also says whether float32 linears are
# oneDNN's (onednn.py), which changes their time.
LOWERING = "sdpa-relayout-held"


class InductorBackend(Backend):
    name = "inductor"

    def __init__(self, device: str = "cpu", onednn_linears: bool | None = None) -> None:
        """`onednn_linears`: a float32 matmul by a constant runs as oneDNN's linear (onednn.py), not
        the MKL GEMM Inductor itself picks; None: on every CPU but Intel's (onednn_linears_here)."""
        self.device = device
        self.onednn_linears = onednn_linears_here() if onednn_linears is None else onednn_linears

    @cached_property
    def version(self) -> str:          # type: ignore[override]
        # Part of profile keys: the library (torch.__version__ is this same string), and how korch
        # compiles with it (standalone: no Dynamo; LOWERING: what its lowering emits, which changes
        # the time of the kernels it compiles).
        return f"torch-{metadata.version('torch')}-standalone-{LOWERING}" + ("-onednn" if self.onednn_linears else "")

    def supports(self, graph: Graph) -> str | None:
        from korch.backends.inductor.backend import unsupported

        return unsupported(graph)

    def compile(self, graph: Graph, options: CompileOptions) -> Kernel:
        from korch.backends.inductor.backend import compile_graph

        return compile_graph(graph, options, self.device, self.onednn_linears)

    saves_kernels = True
    compiles_ahead = True

    def save_kernel(self, kernel: Kernel, graph: Graph, directory: Path) -> None:
        from korch.backends.inductor.artifact import META, save_kernel
        from korch.backends.inductor.backend import InductorKernel

        if not isinstance(kernel, InductorKernel):
            raise TypeError(f"not an Inductor kernel: {type(kernel).__name__}")
        if kernel.saved_in is not None:          # a loaded kernel: its files, as they were saved
            if not (kernel.saved_in / META).is_file():
                raise KernelNotSaveable(f"loaded from {kernel.saved_in}, which is gone")
            shutil.copytree(kernel.saved_in, directory)
            return
        save_kernel(kernel, graph, directory)

    def load_kernel(self, directory: Path, graph: Graph, options: CompileOptions) -> Kernel:
        from korch.backends.inductor.artifact import load_kernel

        kernel = load_kernel(directory, graph, options.threads)
        kernel.worker_cpus = options.held_workers
        return kernel


def onednn_linears_here() -> bool:
    """Whether Inductor's float32 linears should be oneDNN's on this CPU: on all but Intel's. MKL is
    Intel's library and is tuned for Intel's cores: on this project's Xeon host its packed GEMM ran the
    transformers' linears 1.07-1.17x faster than oneDNN's; on both AMD hosts it was the slower, by
    1.06-1.2x on the first (EPYC Zen 1, AVX2) and 1.3-1.5x on five of six shapes on the Zen 4 host
    (benchmarks/linear_packing.py), where Inductor's whole bert-base ran 1.57x slower with it
    (benchmarks/inductor_linear.py, BENCHMARKS.md). Read from /proc/cpuinfo, without importing torch."""
    try:
        with open("/proc/cpuinfo") as f:
            vendor = next((line.split(":", 1)[1].strip() for line in f if line.startswith("vendor_id")), "")
    except OSError:
        vendor = ""
    return vendor != "GenuineIntel"
