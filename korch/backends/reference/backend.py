"""The reference backend as a kernel provider: every graph, numpy, slow. Used to check others."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from korch.backends.base import Backend, CompileOptions, Kernel
from korch.backends.reference import run_graph
from korch.ir.graph import Graph


class ReferenceKernel(Kernel):
    def __init__(self, graph: Graph) -> None:
        self.graph = graph

    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        result = run_graph(self.graph, dict(zip(self.graph.inputs, inputs)))
        return [result[name] for name in self.graph.outputs]


class ReferenceBackend(Backend):
    name = "reference"
    version = "numpy-" + np.__version__

    def supports(self, graph: Graph) -> str | None:
        return None

    def compile(self, graph: Graph, options: CompileOptions) -> Kernel:
        return ReferenceKernel(graph)
