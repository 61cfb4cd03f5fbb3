"""The Inductor backend's contract (name, version, supports, compile) without importing torch: the
profile database keys records by the backend's version, and a warm optimize that reads them only
(profiles, a remembered plan) spent 1.5 s importing torch for that string. Compiling imports
backend.py, and torch with it."""

from __future__ import annotations

from functools import cached_property
from importlib import metadata

from korch.backends.base import Backend, CompileOptions, Kernel
from korch.ir.graph import Graph


class InductorBackend(Backend):
    name = "inductor"

    def __init__(self, device: str = "cpu") -> None:
        self.device = device

    @cached_property
    def version(self) -> str:          # type: ignore[override]
        # Part of profile keys: the library (torch.__version__ is this same string), and how korch
        # compiles with it (standalone: no Dynamo).
        return f"torch-{metadata.version('torch')}-standalone"

    def supports(self, graph: Graph) -> str | None:
        from korch.backends.inductor.backend import unsupported

        return unsupported(graph)

    def compile(self, graph: Graph, options: CompileOptions) -> Kernel:
        from korch.backends.inductor.backend import compile_graph

        return compile_graph(graph, options, self.device)
