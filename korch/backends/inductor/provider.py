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
# taken with them free read up to 20x slow).
LOWERING = "sdpa-relayout-held"


class InductorBackend(Backend):
    name = "inductor"

    def __init__(self, device: str = "cpu") -> None:
        self.device = device

    @cached_property
    def version(self) -> str:          # type: ignore[override]
        # Part of profile keys: the library (torch.__version__ is this same string), and how korch
        # compiles with it (standalone: no Dynamo; LOWERING: what its lowering emits, which changes
        # the time of the kernels it compiles).
        return f"torch-{metadata.version('torch')}-standalone-{LOWERING}"

    def supports(self, graph: Graph) -> str | None:
        from korch.backends.inductor.backend import unsupported

        return unsupported(graph)

    def compile(self, graph: Graph, options: CompileOptions) -> Kernel:
        from korch.backends.inductor.backend import compile_graph

        return compile_graph(graph, options, self.device)

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
