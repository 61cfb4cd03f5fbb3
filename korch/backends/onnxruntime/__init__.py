"""The onnxruntime backend: a candidate runs as its own small onnxruntime session (ORT_ENABLE_ALL).

Kernels that run among others (every session but a whole model's) share one arena: an allocator
registered on onnxruntime's environment once per process (create_and_register_allocator), which a
session uses only when it asks (session.use_env_allocators). With an arena each, every session kept
its own activations' worth of memory: 60 sessions of a 64-channel 80x80 conv read 496 MB of peak RSS,
126 MB sharing one (benchmarks/ort_arenas.py). Sessions that do not ask (a user's, korch bench's
onnxruntime peer) are unaffected.

Each session still has its own intra-op pool. onnxruntime's global pool (set_global_thread_pool_sizes
with use_per_session_threads=False) would let a plan's kernels share one, but in onnxruntime 1.32's
Python API, once the global pool's sizes are set, every later session in the process must use it
("use_per_session_threads must be false when using a global thread pool", tried 2026-11-25, before
and after a per-session session existed). korch runs sessions that must keep their own pools in the
same process: onnxruntime's default session as `korch bench`'s peer and the plan check's reference,
and a whole-model kernel that spins between calls. So the shared pool would need every such session
moved to another process first.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import onnxruntime as ort

from korch.backends.base import Backend, CompileOptions, Kernel
from korch.ir.graph import Graph

if TYPE_CHECKING:
    import onnx


_shared_arena_registered = False     # onnxruntime's environment is per process, and so is this


def _register_shared_arena() -> None:
    """The environment's CPU arena (default arena settings, as a session's own), registered once."""
    global _shared_arena_registered
    if not _shared_arena_registered:
        info = ort.OrtMemoryInfo("Cpu", ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, ort.OrtMemType.DEFAULT)
        ort.create_and_register_allocator(info, ort.OrtArenaCfg(0, -1, -1, -1))
        _shared_arena_registered = True


def make_session(model: onnx.ModelProto | bytes | str, threads: int, stop_spinning: bool = False,
                 external_dir: Path | None = None, worker_cpus: Sequence[int] = (),
                 shared: Mapping[str, np.ndarray] | None = None) -> ort.InferenceSession:
    """An onnxruntime CPU session. `stop_spinning=True` for sessions that run one after another with
    other kernels: the pool spins during a run (fast hand-off between its ops) but parks when run()
    returns. A pool left spinning keeps both cores busy and slowed candy's 9-kernel plan from 60 ms
    to 136 ms; no spinning at all slowed its large regions ~2x (each op then waits for a wake-up).
    A kernel that runs alone (`CompileOptions.runs_alone`: one engine running the whole model) keeps
    spinning, as onnxruntime's default session does: parked after every call, yolox-nano's whole-model
    session read 5.2 ms in one measurement and 13.6 ms in another back to back (p90 ~3x the median)
    where the default session read 5.1 ms (2 threads, 2026-11-23).

    Sessions that stop spinning also share the environment's arena (module doc); one that runs
    alone keeps its own, as onnxruntime's default session does.

    `external_dir`: the directory the model's EXTERNAL initializers are relative to (a saved plan's
    weights file). onnxruntime maps them itself: bert-base's whole-model session peaks at 440 MB
    this way, 720 MB from the .onnx file with embedded weights.

    `worker_cpus`: one CPU per pool worker (threads - 1), each worker held to its own
    (backends/placement.py: a parked worker woken on its caller's CPU halves a kernel's speed).

    `shared`: the data of the model's initializers at regions.SHARED_LOCATION, by name. onnxruntime
    copies each once as it loads (`add_external_initializers`); nothing serialises them. Four
    chained 4096x4096 MatMuls (256 MB of weights): +770 MB peak embedded, +330 MB given this way,
    the same +~260 MB live after loading."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.log_severity_level = 4      # fatal only: a failed run raises, and korch reports it once (KernelRunError)
    options.add_session_config_entry("session.force_spinning_stop", "1" if stop_spinning else "0")
    if stop_spinning:
        _register_shared_arena()
        options.add_session_config_entry("session.use_env_allocators", "1")
    if external_dir is not None:
        options.add_session_config_entry("session.model_external_initializers_file_folder_path", str(external_dir))
    if worker_cpus:
        if len(worker_cpus) != threads - 1:
            raise ValueError(f"{threads} threads have {threads - 1} pool workers, not {len(worker_cpus)} CPUs for them")
        options.add_session_config_entry("session.intra_op_thread_affinities",
                                         ";".join(str(cpu + 1) for cpu in worker_cpus))   # numbered from 1
    if shared:
        add_shared_initializers(options, shared)
    # a path or serialized bytes go to onnxruntime as they are: nothing here parses them
    source = model if isinstance(model, (str, bytes)) else model.SerializeToString()
    return ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])


def add_shared_initializers(options: ort.SessionOptions, shared: Mapping[str, np.ndarray]) -> None:
    """Give a session the data of its model's initializers at regions.SHARED_LOCATION, by name:
    onnxruntime copies each once as it loads, and nothing serialises them."""
    names = list(shared)
    options.add_external_initializers(names, [ort.OrtValue.ortvalue_from_numpy(shared[n]) for n in names])


class OnnxRuntimeKernel(Kernel):
    def __init__(self, session: ort.InferenceSession, inputs: Sequence[str], outputs: Sequence[str]) -> None:
        self.session = session
        self.input_names = list(inputs)
        self.output_names = list(outputs)

    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        return self.session.run(self.output_names, dict(zip(self.input_names, inputs)))


class OnnxRuntimeBackend(Backend):
    name = "onnxruntime"
    # Session settings that change timings: pools park after a call, except a kernel that runs alone;
    # kernels that run among others share one arena and hold their workers to CPUs of their own.
    version = "onnxruntime-" + ort.__version__ + "-spinstop-alone-spins-shared-arena-placed"
    accepts_onnx = True
    shares_weights = True
    runs_in_lanes = True      # a one-thread session computes on the calling thread, the GIL released

    def supports(self, graph: Graph) -> str | None:
        return None          # every primitive lowers to a standard ONNX op (ir/onnx_export.py)

    def compile(self, graph: Graph, options: CompileOptions) -> Kernel:
        from korch.ir.onnx_export import to_onnx

        return self.compile_onnx(to_onnx(graph), graph.inputs, graph.outputs, options)

    def compile_onnx(self, model: onnx.ModelProto | bytes, inputs: Sequence[str], outputs: Sequence[str],
                     options: CompileOptions, external_dir: Path | None = None,
                     shared: Mapping[str, np.ndarray] | None = None) -> Kernel:
        """Compile an ONNX model directly (e.g. the original ONNX nodes of a region), in memory or
        serialized (a saved plan's ready model). `shared`: see make_session."""
        session = make_session(model, options.threads, stop_spinning=not options.runs_alone, external_dir=external_dir,
                               worker_cpus=options.held_workers, shared=shared)
        return OnnxRuntimeKernel(session, inputs, outputs)
