"""The Inductor backend: each candidate becomes its own torch module, traced to an FX graph and
compiled by Inductor without Dynamo (`torch._inductor.standalone_compile`).

On CPU Inductor emits C++ (OpenMP, SIMD) and calls oneDNN/MKL for matmul and convolution; on a
CUDA device the same path emits Triton. Constants are module buffers, traced into the graph as
constants, so `freezing` folds them and prepacks weights.

Why not torch.compile: a kernel compiled by torch.compile runs Dynamo's guards and wrappers on every
call. Measured with benchmarks/inductor_call.py (2 threads, the same module compiled both ways,
timed in alternation; µs per call, median of 15 rounds): relu + add over 64 floats 89.6 through
torch.compile against 13.3 standalone, over 65,536 floats 117.5 against 30.4; on kernels that call
oneDNN the difference is the same ~0.1 ms (a 3x3 conv over 32x56x56 with relu 859 against 739, a
64x768 @ 768x768 matmul with relu 1095 against 978). A standalone artifact has no guards: korch
calls it only with the shapes and dtypes it was compiled for, and with grad mode off.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import numpy as np
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from korch.backends.base import CompileOptions, Kernel, writable_alias
from korch.backends.inductor.attention import find_attention
from korch.backends.inductor.isa import checked_isa_config
from korch.backends.inductor.lowering import LOWERINGS, TORCH_DTYPES, Lowering, Prim, attention, unsupported_reason
from korch.backends.inductor.onednn import OneDnnLinears, onednn_available
from korch.backends.placement import hold_openmp_workers
from korch.ir.graph import Graph
from korch.ir.ops import PrimClass
from korch.ir.types import DType
from korch.logs import only_errors
from korch.verify import integer_input_bounds

log = logging.getLogger("korch.backends.inductor")

# Seed for the warm-up inputs that trigger compilation (their values do not matter, only types).
WARMUP_SEED = 0


@dataclass(frozen=True)
class Step:
    lower: Lowering
    prim: Prim
    inputs: tuple[str, ...]
    output: str
    dtype: torch.dtype          # the reference casts every result to the declared type; so do we


class CandidateModule(torch.nn.Module):
    """Runs one primitive graph. `forward` is traced once to an FX graph and never runs otherwise."""

    def __init__(self, graph: Graph, device: str, relayout: frozenset[int] = frozenset()) -> None:
        super().__init__()
        self.input_names = graph.inputs
        self.relayout = relayout          # outputs the kernel must write contiguous itself (compile_graph)
        self.constant_buffers: list[tuple[str, str]] = []
        for k, (name, array) in enumerate(graph.constants.items()):
            buffer = f"const{k}"          # graph value names ("%c3") are not attribute names
            # the graph's own memory, not a copy: frozen, Inductor folds and prepacks from it and never
            # writes to it, and what its code still reads (the original beside MKL's packed copy) is
            # then the graph's array, which the kernel keeps alive
            shared = writable_alias(array) if array.flags.c_contiguous else np.array(array, copy=True)
            self.register_buffer(buffer, torch.from_numpy(shared).to(device))
            self.constant_buffers.append((name, buffer))
        self.steps = lowered_steps(graph)
        self.output_names = graph.outputs
        self.last_reads = last_reads(self.steps, graph.outputs)

    def forward(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        env: dict[str, torch.Tensor] = dict(zip(self.input_names, inputs))
        for name, buffer in self.constant_buffers:
            env[name] = getattr(self, buffer)
        for step, done in zip(self.steps, self.last_reads):
            y = step.lower([env[i] for i in step.inputs], step.prim)
            env[step.output] = y if y.dtype == step.dtype else y.to(step.dtype)
            # Tracing (make_fx) runs the graph on real tensors: holding every intermediate to the end
            # held the whole model's activations at once (yolov4's whole graph: 2,234 MiB, the largest
            # part of its compile's peak), where freeing each after its last reader holds the live ones.
            for name in done:
                del env[name]
        # A view output (transpose, expand, slice) becomes a contiguous buffer written by the fused kernel.
        # `.contiguous()` of a tensor contiguous here traces nothing, so an output Inductor lays out
        # otherwise (channels-last, compile_graph) is asked for as an explicit contiguous copy instead.
        return tuple(torch.clone(env[name], memory_format=torch.contiguous_format) if k in self.relayout
                     else env[name].contiguous() for k, name in enumerate(self.output_names))


def last_reads(steps: Sequence[Step], outputs: Sequence[str]) -> list[tuple[str, ...]]:
    """Per step, the values no later step reads and no output is: what forward may drop after it
    (graph inputs and constants too; the caller and the module still hold those)."""
    last = {name: k for k, step in enumerate(steps) for name in step.inputs}
    done: list[list[str]] = [[] for _ in steps]
    for name, k in last.items():
        if name not in outputs:
            done[k].append(name)
    return [tuple(names) for names in done]


def lowered_steps(graph: Graph) -> list[Step]:
    """The graph's primitives as lowering steps, in order; each attention chain (attention.py) is one
    step, torch's fused scaled-dot-product attention, in place of its last primitive."""
    chains = {a.output: a for a in find_attention(graph)}
    replaced = {k for a in chains.values() for k in a.nodes}
    steps = []
    for k, n in enumerate(graph.nodes):
        dtype = TORCH_DTYPES[graph.types[n.output].dtype]
        chain = chains.get(n.output)
        if chain is not None:
            inputs = (chain.q, chain.kt, chain.v) + ((chain.mask,) if chain.mask is not None else ())
            types = [graph.types[i] for i in inputs]
            out = graph.types[n.output]
            prim = Prim("attention", {"scale": chain.scale, "masked_out": chain.masked_out},
                        tuple(t.shape for t in types), tuple(t.dtype for t in types), out.shape, out.dtype)
            steps.append(Step(attention, prim, inputs, n.output, dtype))
        elif k not in replaced:
            steps.append(Step(LOWERINGS[n.op], Prim.of(n, graph), n.inputs, n.output, dtype))
    return steps


class InductorKernel(Kernel):
    """`copies`: indices of outputs that are not fresh buffers (see `outputs_to_copy`); run copies them.
    `worker_cpus` (CompileOptions's, where the kernel runs among others): the CPUs the calling
    thread's OpenMP workers are held to when it runs (placement.hold_openmp_workers)."""

    def __init__(self, fn: Callable[..., tuple[torch.Tensor, ...]], threads: int, device: str,
                 copies: tuple[int, ...], modules: Sequence[ModuleType] = (),
                 constants: Sequence[np.ndarray] = (), worker_cpus: tuple[int, ...] = ()) -> None:
        self.fn = fn
        self.worker_cpus = worker_cpus
        self.modules = tuple(modules)       # the generated code and its frozen constants: freed with the kernel
        self.constants = tuple(constants)   # the graph's arrays its frozen constants may share (CandidateModule)
        self.threads = threads
        self.device = device
        self.copies = copies
        # the directory it was loaded from (artifact.load_kernel): saved again, it is those files.
        # Its code is not what `save_kernel` analyses: it holds stand-ins for weights packed at load.
        self.saved_in: Path | None = None
        if device != "cpu":
            self.run = self._run_on_device          # type: ignore[method-assign]

    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        if torch.get_num_threads() != self.threads:
            torch.set_num_threads(self.threads)
        if self.worker_cpus:
            hold_openmp_workers(self.worker_cpus)
        # The artifact was compiled for inference: run it with grad mode off. Switching it directly
        # costs ~0.1 us where `with torch.no_grad()` costs ~1.2 us.
        grad = torch.is_grad_enabled()
        if grad:
            torch._C._set_grad_enabled(False)
        try:
            outputs = self.fn(*map(torch.from_numpy, inputs))
        finally:
            if grad:
                torch._C._set_grad_enabled(True)
        arrays = [y.numpy() for y in outputs]
        for k in self.copies:
            arrays[k] = arrays[k].copy()
        return arrays

    def _run_on_device(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        with torch.no_grad():
            outputs = self.fn(*(torch.from_numpy(x).to(self.device) for x in inputs))
        return [y.cpu().numpy() for y in outputs]


def unsupported(graph: Graph) -> str | None:
    """Why Inductor cannot compile `graph` here, or None (InductorBackend.supports)."""
    for node in graph.nodes:
        if node.klass == PrimClass.OPAQUE:
            return f"opaque ONNX node {node.origin} ({node.attrs['op_type']}): only an ONNX engine runs it"
    dynamic = next((name for name, t in graph.types.items() if not t.is_static), None)
    if dynamic is not None:
        return (f"value {dynamic!r} has a data-dependent shape ({graph.types[dynamic]}); Inductor kernels here "
                "are compiled for static shapes")
    for node in graph.nodes:
        reason = unsupported_reason(node, graph)
        if reason is not None:
            return reason
    return None


def compile_graph(graph: Graph, options: CompileOptions, device: str, onednn_linears: bool) -> Kernel:
    """InductorBackend.compile: the graph as one kernel, frozen (or, if freezing fails, plain).
    `onednn_linears`: frozen float32 linears run by oneDNN, not MKL (onednn.OneDnnLinears)."""
    reason = unsupported(graph)
    if reason is not None:
        raise ValueError(f"inductor cannot compile {graph.name}: {reason}")
    torch.set_num_threads(options.threads)
    # Read once and held by the kernel: the frozen constants share these arrays' memory. A loaded
    # plan's graph reads its constants lazily and holds none (serialize.LazyConstants), so an array
    # read for the module and then dropped was freed under the compiled code (a loaded resnet-50's
    # whole graph computed NaN).
    held = tuple(graph.constants.values())
    example = [torch.from_numpy(x).to(device) for x in warmup_inputs(graph)]
    fn, modules = _compile_kernel(graph, options, example, device, frozenset(), onednn_linears)
    relayout = strided_outputs(fn, example) if device == "cpu" else frozenset()
    if relayout:
        # Inductor chose a layout of its own for these outputs (channels-last for a concat of token
        # maps seen as images, as segformer-b0's decoder makes them). The copy `run` then made, strided
        # in numpy, cost its decoder region 126 ms for 64 MiB (benchmarks/inductor_output_layout.py);
        # compiled again, the kernel writes them contiguous itself.
        del fn, modules
        fn, modules = _compile_kernel(graph, options, example, device, relayout, onednn_linears)
    copies = outputs_to_copy(fn, example) if device == "cpu" else ()          # .cpu() copies anyway
    return InductorKernel(fn, options.threads, device, copies, modules, held, options.held_workers)


def _compile_kernel(graph: Graph, options: CompileOptions, example: list[torch.Tensor], device: str,
                    relayout: frozenset[int], onednn_linears: bool,
                    ) -> tuple[Callable[..., tuple[torch.Tensor, ...]], list[ModuleType]]:
    """The compiled function and the generated modules it owns: frozen, or, if freezing fails, plain."""
    with kernel_modules() as modules:
        try:
            fn = _compile(graph, options, example, device, True, relayout, onednn_linears)
        except Exception as error:          # any failure under freezing: retry the plain path once
            log.warning("inductor: compiling %s with freezing failed (%s: %s); compiling without freezing",
                        graph.name, type(error).__name__, error)
            fn = _compile(graph, options, example, device, False, relayout, onednn_linears)
    return fn, modules


def strided_outputs(fn: Callable[..., tuple[torch.Tensor, ...]], example: list[torch.Tensor]) -> frozenset[int]:
    """The outputs the compiled function returns not C-contiguous."""
    with torch.no_grad():
        outputs = fn(*example)
    return frozenset(k for k, y in enumerate(outputs) if not y.is_contiguous())


def _compile(graph: Graph, options: CompileOptions, example: list[torch.Tensor], device: str,
             freezing: bool, relayout: frozenset[int], onednn_linears: bool,
             ) -> Callable[..., tuple[torch.Tensor, ...]]:
    module = CandidateModule(graph, device, relayout).eval()
    # Inductor fixes the OpenMP thread count in the code it generates; cpp.threads also keys its cache.
    config = {"freezing": freezing, "cpp.threads": options.threads, **checked_isa_config()}
    if onednn_linears and freezing and device == "cpu" and onednn_available():
        config["post_grad_custom_post_pass"] = OneDnnLinears()          # float32 linears by oneDNN, not MKL
    if freezing and any(np.ndim(a) == 0 for a in graph.constants.values()):
        # torch 2.13: frozen 0-d constants are inlined as literals, but Inductor's FX graph cache
        # keys them without their values: a graph differing only in such a scalar gets stale code
        config["fx_graph_cache"] = False
    with torch.no_grad():
        traced = make_fx(module)(*example)        # the buffers become constants of the graph
        with torch._inductor.config.patch(config), only_errors(_STANDALONE_LOG):
            # static shapes: compiled for exactly the declared shapes, the fastest code
            return torch._inductor.standalone_compile(traced, example, dynamic_shapes="from_example_inputs",
                                                      donate_graph_module=True)


# standalone_compile warns on every frozen graph that it cannot make a saveable artifact (freezing
# keeps Inductor's caches out); korch does not save these, so the warning says nothing to its users.
_STANDALONE_LOG = "torch._inductor.standalone_compile"



@contextmanager
def kernel_modules() -> Iterator[list[ModuleType]]:
    """Collects the Python modules Inductor loads inside the block and takes them out of its global
    registries (PyCodeCache.modules and sys.modules), so they live as long as the kernel holding
    them. Inductor keeps every module it ever loads there, and a frozen graph's module holds the
    folded and prepacked constants as attributes: without this, every profiled candidate's weights
    stayed in memory until exit (benchmarks/inductor_retained.py: +33 MB per dropped kernel with a
    16 MB weight). Modules without constants (Inductor reuses them by path) stay registered."""
    from torch._inductor.codecache import PyCodeCache

    before = len(PyCodeCache.modules)
    modules: list[ModuleType] = []
    try:
        yield modules
    finally:
        modules.extend(PyCodeCache.modules[before:])
        del PyCodeCache.modules[before:]
        shared = {id(m) for m in PyCodeCache.modules_no_attr.values()}
        for module in modules:
            if id(module) not in shared and sys.modules.get(module.__name__) is module:
                del sys.modules[module.__name__]


def outputs_to_copy(fn: Callable[..., tuple[torch.Tensor, ...]], example: list[torch.Tensor]) -> tuple[int, ...]:
    """Outputs that are not fresh C-contiguous buffers. Inductor drops copies of unchanged values, so an
    output may be an input, a frozen constant or another output's buffer. Found by two calls: an
    output is fresh if its storage is neither an input's, nor another output's, nor the one the
    first call returned (still alive, so only a persistent constant can share it)."""
    with torch.no_grad():
        first = fn(*example)
        inputs = [x.clone() for x in example]
        second = fn(*inputs)
    taken = {x.untyped_storage().data_ptr() for x in inputs}
    copies = []
    for k, (old, new) in enumerate(zip(first, second)):
        ptr = new.untyped_storage().data_ptr()
        if ptr in taken or ptr == old.untyped_storage().data_ptr() or not new.is_contiguous():
            copies.append(k)
        taken.add(ptr)
    return tuple(copies)


def warmup_inputs(graph: Graph) -> list[np.ndarray]:
    """Arrays of the graph's input types; integers are 0 where they index a gather and 1 elsewhere
    (valid indices, non-zero divisors), so the warm-up call cannot fail on values."""
    rng = np.random.default_rng(WARMUP_SEED)
    index_inputs = integer_input_bounds(graph)
    arrays = []
    for name in graph.inputs:
        t = graph.types[name]
        if t.dtype.is_float:
            arrays.append(rng.standard_normal(t.shape).astype(t.dtype.numpy))
        elif t.dtype == DType.BOOL:
            arrays.append(rng.random(t.shape) < 0.5)
        else:
            arrays.append(np.full(t.shape, 0 if name in index_inputs else 1, t.dtype.numpy))
    return arrays
