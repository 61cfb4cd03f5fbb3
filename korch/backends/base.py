"""The kernel-provider contract and registry.

A backend turns a candidate's standalone primitive graph into a compiled Kernel, or says why it
cannot. Legality ("can this backend run this graph at all") is `supports`; speed is measured by the
profiler, never guessed here.
"""

from __future__ import annotations

import ctypes
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from korch.ir.graph import Graph

if TYPE_CHECKING:
    import onnx


class Kernel(ABC):
    """A compiled candidate: `run(inputs)` takes arrays in graph.inputs order, returns graph.outputs order.

    Inputs are C-contiguous numpy arrays of the declared dtypes and shapes; a kernel must not modify
    them. Outputs are numpy arrays (they may share memory with the kernel's own buffers only until the
    next call if `reuses_outputs` is set).
    """

    reuses_outputs: bool = False

    @abstractmethod
    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]: ...


class KernelNotSaveable(Exception):
    """Why a compiled kernel cannot be saved to load without compiling (it then compiles at load)."""


class SavedKernelError(Exception):
    """A saved kernel that does not load as it was saved; the message names the file."""


@dataclass(frozen=True)
class CompileOptions:
    threads: int = 1
    # The kernel is its plan's only one (one engine running the whole model): nothing runs between its
    # calls, so a thread pool may keep spinning after a call and find its threads awake on the next.
    runs_alone: bool = False
    # CPUs the kernel's pool workers are held to, one each (backends/placement.py); () leaves them free.
    worker_cpus: tuple[int, ...] = ()

    @property
    def held_workers(self) -> tuple[int, ...]:
        """The CPUs the kernel's pool workers are held to: none for a kernel that runs alone (left to
        the engine, as its users run it)."""
        return () if self.runs_alone else tuple(self.worker_cpus)


class Backend(ABC):
    name: str = ""
    version: str = ""          # library versions that change generated code (part of profile keys)

    @abstractmethod
    def supports(self, graph: Graph) -> str | None:
        """None if this backend can compile `graph`, else the reason it cannot."""

    @abstractmethod
    def compile(self, graph: Graph, options: CompileOptions) -> Kernel:
        """Compile a graph that `supports` accepted. Constants are part of the kernel."""

    # Engines that run ONNX directly can take a region's original nodes instead of its primitives.
    accepts_onnx: bool = False
    # ... and that take a model's weights as arrays beside it (initializers at regions.SHARED_LOCATION),
    # rather than embedded in its protobuf: `compile_onnx(shared=...)`.
    shares_weights: bool = False
    # A kernel of this engine may run in a lane beside another (plan/schedule.py): compiled for a
    # lane's threads, it computes on the calling thread and threads of its own, releases the GIL
    # while it does, and keeps no process-wide thread setting. Inductor's kernels set torch's thread
    # count, which is process-wide (MKL's); OpenVINO's run on the plugin's own executor threads,
    # which korch does not hold to a lane's CPU.
    runs_in_lanes: bool = False

    # A compiled kernel of this engine can be written to a directory and loaded back without
    # compiling (`save_kernel`, `load_kernel`): a saved plan holds such kernels, so that loading it
    # needs no compiler and takes no compile time.
    saves_kernels: bool = False
    # Compiling one of its kernels (from primitives) takes seconds, mostly on one core, and its kernels
    # save (`saves_kernels`): the profiler compiles them ahead in worker processes (profile/ahead.py).
    compiles_ahead: bool = False
    # Its compile runs in native code with the GIL released, on one core, and is safe beside another
    # of its compiles in the process: the profiler compiles its kernels two at a time, in threads,
    # before timing them (ProfileSettings.compile_threads).
    compiles_in_threads: bool = False

    def save_kernel(self, kernel: Kernel, graph: Graph, directory: Path) -> None:
        """Write `kernel`, compiled from `graph` by this backend, into the new directory `directory`.
        Raises KernelNotSaveable (and writes nothing) if it cannot be loaded back without compiling."""
        raise KernelNotSaveable(f"backend {self.name} does not save kernels")

    def load_kernel(self, directory: Path, graph: Graph, options: CompileOptions) -> Kernel:
        """The kernel `save_kernel` wrote for `graph`. Raises SavedKernelError naming what is wrong."""
        raise SavedKernelError(f"{directory}: backend {self.name} does not load saved kernels")

    def compile_onnx(self, model: onnx.ModelProto, inputs: Sequence[str], outputs: Sequence[str],
                     options: CompileOptions, external_dir: Path | None = None,
                     shared: Mapping[str, np.ndarray] | None = None) -> Kernel:
        """`external_dir`: where the files of the model's EXTERNAL initializers are (their
        locations are relative to it); the engine reads them from there itself. `shared` (only where
        `shares_weights`): the data of the initializers at regions.SHARED_LOCATION, by name; an engine
        that keeps using the arrays' memory keeps them alive."""
        raise NotImplementedError(f"backend {self.name} does not run ONNX models")

    def compile_onnx_file(self, path: Path, inputs: Sequence[str], outputs: Sequence[str],
                          output_dtypes: Sequence[np.dtype], options: CompileOptions,
                          external_dir: Path | None = None) -> Kernel:
        """A saved plan's ready region model, by its file (korch/plan/plan.py, PREBUILT_BACKENDS): its
        inputs and outputs are `inputs` and `outputs`, in that order, of `output_dtypes`; its EXTERNAL
        initializers are relative to `external_dir`."""
        return self.compile_onnx(path.read_bytes(), inputs, outputs, options, external_dir)  # type: ignore[arg-type]


def writable_alias(array: np.ndarray) -> np.ndarray:
    """`array` itself, or, if it is read-only (korch's graph constants are), a writable array over the
    same memory, for an engine that takes weights without copying but only as writable memory it
    never writes to (OpenVINO's shared Constant, torch.from_numpy). The alias does not keep `array`
    alive: the kernel does."""
    if array.flags.writeable or array.nbytes == 0:
        return array
    if not array.flags.c_contiguous:
        raise ValueError("only a contiguous array can be shared")
    memory = (ctypes.c_byte * array.nbytes).from_address(array.ctypes.data)
    return np.frombuffer(memory, dtype=array.dtype).reshape(array.shape)


_REGISTRY: dict[str, Callable[[], Backend]] = {}
_INSTANCES: dict[str, Backend] = {}


class UnknownBackendError(KeyError):
    pass


def register_backend(name: str, factory: Callable[[], Backend]) -> None:
    if name in _REGISTRY:
        raise RuntimeError(f"backend {name!r} registered twice")
    _REGISTRY[name] = factory


def get_backend(name: str) -> Backend:
    if name not in _REGISTRY:
        raise UnknownBackendError(f"unknown backend {name!r}; known: {', '.join(sorted(_REGISTRY))}")
    if name not in _INSTANCES:
        _INSTANCES[name] = _REGISTRY[name]()
    return _INSTANCES[name]


def backend_names() -> list[str]:
    return sorted(_REGISTRY)
