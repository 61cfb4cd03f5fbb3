"""The OpenVINO backend: a region of original ONNX nodes, or a candidate's primitives, on OpenVINO's CPU plugin.

OpenVINO reads ONNX itself, so like onnxruntime it takes regions as their original nodes (its own
fusions and blocked layouts stay available) and a primitive graph through korch's ONNX export.

Settings (`COMPILE_CONFIG`): the latency hint with one stream and `threads` inference threads (one
inference at a time on all of a kernel's threads, as korch runs kernels one after another), and f32
inference precision (the plugin would pick bf16 on AMX machines; every korch kernel is fp32).

What the CPU plugin computes differently from ONNX (read from its results, 2026.4.1): float64 in
float32, int64 arithmetic in int32 (2**40 * 3 gives 0), 8-bit integer arithmetic saturating instead
of wrapping. `supports` refuses graphs that compute in float64 or 8-bit integers; int64 is accepted,
since models pass token ids and indices in it, and values past int32 would wrap.

A kernel korch compiles returns views of its request's output buffers (`share_outputs=True`,
`Kernel.reuses_outputs`): the next call overwrites them, and korch's runtime copies only the values
it hands to its caller (Session.run). Copying every output out of the request cost a kernel boundary
a pass over the tensor's bytes: 0.3 ms of a 4 MiB Relu's 0.73 ms, 1.3 of 2.7 ms at 16 MiB
(benchmarks/engine_outputs.py). Writing into fresh caller-owned arrays set as output tensors was no
faster than the copy. `compile_file` (korch bench's OpenVINO peer, run as its users run it) copies, as
OpenVINO does by default. Inputs are shared without a copy (`share_inputs=True`: a sync request reads
them only while it runs).

THREAD POOL. Measured with benchmarks/engine_handoff.py (2 threads, quiet machine, 20 rounds; one
call of a 16x128 MLP kernel B timed after 10 warm calls of B and one call of a 128x384 MLP on engine
A; µs median [p10-p90], and the ratio to B alone):

    PYTHONPATH=. python benchmarks/engine_handoff.py --threads 2 --rounds 20 --gaps 0,1 \
        --engines ort-spinstop,ort-default,openvino,inductor
    (again with openvino-pin in place of openvino: a separate run, one process each)

- After a call returns, OpenVINO's pool keeps one thread spinning ~1 ms, then parks (CPU time of the
  process while the caller sleeps: 1.08 ms by 1 ms, 1.18 by 5 ms, 1.47 by 100 ms). For comparison:
  onnxruntime with force_spinning_stop 0.06 ms, libgomp (Inductor) 0.35 ms, onnxruntime's default
  session ~38 ms.
- The next kernel of another engine is slow right after an OpenVINO call: a spin-stopped onnxruntime
  kernel (korch's kind) took 2243 [100-4814], 66x its 34 [29-45] alone; but no better after an
  Inductor call, 2959 [138-3831] (87x), 1 ms after the OpenVINO call, 2362 [704-4626], or 1 ms after
  a call of its own engine, 2291 [93-4393] (67x). So the cost is mostly the next kernel's own pool
  waking from sleep on this VM, not OpenVINO's 1 ms spin; OpenVINO after OpenVINO: 104 [65-157], 2.0x
  its 52 [41-62] alone; after onnxruntime 128-150 (2.4-2.9x).
- No OpenVINO setting shortens the spin (its CPU plugin exposes no wait policy), and a short yield
  does not pay (above). So no yield: the profiler times each kernel alone, and measured selection
  (korch/select/measured.py) prices what hand-offs cost a whole plan. Pools that wake slowly at
  every kernel boundary are the boundary cost that one shared runtime environment per plan must fix.
- ENABLE_CPU_PINNING (OpenVINO's default under the latency hint) is off for kernels that run among
  others: it did not shorten the spin (1.07 ms) nor the hand-off to onnxruntime (2025 [102-4189],
  70x), and a pinned worker cannot leave a core another engine's thread spins on (OpenVINO right
  after a default onnxruntime session: 257 [80-5753] pinned, 6.1x; 128 [73-245] not, 2.4x).
- A kernel that runs alone (one engine running the whole model: `CompileOptions.runs_alone`, and
  `compile_file`, the model as OpenVINO's users compile it) keeps OpenVINO's default, pinned, so a
  whole-model plan is compiled exactly as the bench's OpenVINO peer. (Stop 66 chose this for a
  speed it credited to pinning: yolov4 with its 3x3 convolutions in Winograd's form, 1,900 small
  nodes, ran at ~228 or ~275 ms, which looked chosen per process. It is not: one process reading the
  model for minutes moves between the two speeds, in step with the round trip of a cache line
  between the VM's two vCPUs, 52-75 ns or 310-735 ns as the host places them; pinned or not, one
  compiled model or two. benchmarks/machine_drift.py, BENCHMARKS.md, 2026-12-05.)
"""

from __future__ import annotations

import logging
import mmap
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import openvino as ov

from korch.backends.base import Backend, CompileOptions, Kernel
from korch.backends.openvino.pages import dropping_pages, dropping_ranges, read_only_maps
from korch.ir.graph import Graph
from korch.ir.ops import PrimClass
from korch.ir.types import DType

if TYPE_CHECKING:       # onnx is imported where a model is cut or parsed: a saved plan's kernels load without it
    import onnx

log = logging.getLogger("korch.backends.openvino")

DEVICE = "CPU"
# Pinning OpenVINO's worker threads, for a kernel among others and for one that runs alone: see THREAD
# POOL in the module docstring for the measurements.
CPU_PINNING = False
CPU_PINNING_ALONE = True
# One request at a time on all threads (korch runs its kernels one after another), in fp32.
COMPILE_CONFIG = {"PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": 1, "INFERENCE_PRECISION_HINT": "f32"}
# Part of profile keys: the library and the settings above that change timings (outputs shared, not
# copied out: see the module doc).
VERSION = (f"openvino-{ov.__version__.split('-releases')[0]}-latency-f32-pin{int(CPU_PINNING)}"
           f"-alone-pin{int(CPU_PINNING_ALONE)}-shared-out")
# The CPU plugin computes these in another precision (see the module docstring).
WIDENED_TYPES = {DType.FLOAT64: "float64 is computed in float32",
                 DType.INT8: "8-bit integer arithmetic saturates instead of wrapping",
                 DType.UINT8: "8-bit integer arithmetic saturates instead of wrapping"}
# What OpenVINO's messages wrap around the cause (the profiler keeps a reason's first 200 characters).
_NOISE = tuple(re.compile(pattern) for pattern in (
    r"Exception from \S+:\d+:",                                   # the source line of each layer passed through
    r"Check '.*?' failed at \S+:\d+:",                            # the internal check that fired
    r"While validating node '.*?' with friendly_name '[^']*':",   # the internal node it fired on
    r"FrontEnd API failed with OpConversionFailure: Model wasn't fully converted\. Failed operations "
    r"detailed log: --",                                         # the ONNX reader's preamble,
    r"with a message:",
    r"Summary: -- Conversion is failed for: .*$",                 # and its summary of the failed ops
))


class OpenVinoError(RuntimeError):
    """OpenVINO could not read, compile or run a model: its message without the source-line trail."""


def _failure(action: str, error: Exception) -> OpenVinoError:
    message = " ".join(str(error).split())
    for pattern in _NOISE:
        message = pattern.sub(" ", message)
    message = " ".join(message.split())
    return OpenVinoError(f"OpenVINO cannot {action}: {message or type(error).__name__}")


def compile_config(threads: int, runs_alone: bool = False) -> dict[str, object]:
    return {**COMPILE_CONFIG, "INFERENCE_NUM_THREADS": threads,
            "ENABLE_CPU_PINNING": CPU_PINNING_ALONE if runs_alone else CPU_PINNING}


class OpenVinoKernel(Kernel):
    """One compiled model and one infer request, reused for every call.

    `keep`: arrays whose memory the compiled model shares (mapped weights); they live as long as it.
    `share_outputs`: return views of the request's output buffers, valid until the next call
    (`reuses_outputs`), instead of copies (module doc)."""

    def __init__(self, compiled: ov.CompiledModel, inputs: Sequence[int | None], outputs: Sequence[int],
                 output_dtypes: Sequence[np.dtype], keep: Sequence[np.ndarray] = (), share_outputs: bool = True) -> None:
        self.compiled = compiled
        self.reuses_outputs = share_outputs
        self.request = compiled.create_infer_request()
        # (position in run's inputs, the compiled model's input index); OpenVINO drops unused inputs
        self.feeds = tuple((k, port) for k, port in enumerate(inputs) if port is not None)
        self.outputs = tuple(outputs)         # the compiled model's output index of each output, in order
        self.output_dtypes = tuple(output_dtypes)
        self.keep = tuple(keep)

    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        try:
            feeds = {port: inputs[k] for k, port in self.feeds}
            results = self.request.infer(feeds, share_inputs=True, share_outputs=self.reuses_outputs).to_tuple()
        except RuntimeError as e:
            raise _failure("run the model", e) from None
        chosen = [results[k] for k in self.outputs]
        return [y if y.dtype == dtype else y.astype(dtype) for y, dtype in zip(chosen, self.output_dtypes)]


def _input_index(compiled: ov.CompiledModel, name: str) -> int | None:
    """The compiled model's input named `name`; None if OpenVINO dropped it (nothing reads it)."""
    for k, port in enumerate(compiled.inputs):
        if name in port.get_names():
            return k
    return None


def _output_indices(model: onnx.ModelProto, compiled: ov.CompiledModel, outputs: Sequence[str]) -> list[int]:
    """Outputs by their position among the model's declared outputs, not by name: OpenVINO may give an
    Identity's output the names of the value it copies, or the other way round."""
    declared = [o.name for o in model.graph.output]
    if len(compiled.outputs) != len(declared):
        raise OpenVinoError(f"OpenVINO compiled {len(compiled.outputs)} outputs; the model declares {len(declared)}")
    missing = [name for name in outputs if name not in declared]
    if missing:
        raise OpenVinoError(f"outputs {missing} are not outputs of the model")
    return [declared.index(name) for name in outputs]


class OpenVinoBackend(Backend):
    name = "openvino"
    version = VERSION
    accepts_onnx = True
    shares_weights = True
    # compile_model runs on one core with the GIL released, and a Core compiles in several threads at
    # once: 120 of yolox-nano's regions took 6.6-7.0 s one at a time, 3.8 s two at a time
    # (benchmarks/threaded_compile.py). onnxruntime gains nothing: creating a session keeps both cores
    # busy already (3.3 against 3.1-3.2 s).
    compiles_in_threads = True

    def __init__(self) -> None:
        self.core = ov.Core()       # one Core per process: each one loads the plugins again

    def supports(self, graph: Graph) -> str | None:
        for node in graph.nodes:
            dtype = graph.types[node.output].dtype
            if dtype == DType.FLOAT64 or (dtype in WIDENED_TYPES and node.klass != PrimClass.LAYOUT):
                return f"{node.op} computes {dtype.value}: in OpenVINO's CPU plugin {WIDENED_TYPES[dtype]}"
        return None

    def compile(self, graph: Graph, options: CompileOptions) -> Kernel:
        from korch.ir.onnx_export import to_onnx

        return self.compile_onnx(to_onnx(graph), graph.inputs, graph.outputs, options)

    def compile_onnx(self, model: onnx.ModelProto, inputs: Sequence[str], outputs: Sequence[str],
                     options: CompileOptions, external_dir: Path | None = None,
                     shared: Mapping[str, np.ndarray] | None = None) -> Kernel:
        """Compile an ONNX model (a region's original nodes, or a whole model) for `threads` threads."""
        from onnx import helper

        ov_model, keep, maps = self.read(model, external_dir, shared)
        try:
            with dropping_pages(maps):       # the plugin copies the weights it reads (see weights.py)
                compiled = self.core.compile_model(ov_model, DEVICE, compile_config(options.threads, options.runs_alone))
        except RuntimeError as e:
            raise _failure("compile the model", e) from None
        positions = _output_indices(model, compiled, outputs)
        dtypes = [np.dtype(helper.tensor_dtype_to_np_dtype(model.graph.output[k].type.tensor_type.elem_type))
                  for k in positions]
        return OpenVinoKernel(compiled, [_input_index(compiled, name) for name in inputs], positions, dtypes, keep)

    def compile_onnx_file(self, path: Path, inputs: Sequence[str], outputs: Sequence[str],
                          output_dtypes: Sequence[np.dtype], options: CompileOptions,
                          external_dir: Path | None = None) -> Kernel:
        """A saved plan's ready region model, read by OpenVINO's own ONNX reader, which maps the
        model's weights file itself: it must be in the model file's directory (`external_dir` is not
        needed). The pages of that map are dropped while the plugin compiles, as a map of korch's
        would be (pages.py). Nothing parses the model in Python: onnx is not imported."""
        if external_dir is not None and Path(external_dir).resolve() != path.parent.resolve():
            raise OpenVinoError(f"{path}: OpenVINO reads a model's weights only from its own directory, "
                                f"not {external_dir}")
        try:
            before = read_only_maps(path.parent)
            ov_model = self.core.read_model(str(path))          # maps the weights file, reads little of it
            with dropping_ranges(read_only_maps(path.parent) - before):
                compiled = self.core.compile_model(ov_model, DEVICE, compile_config(options.threads, options.runs_alone))
        except RuntimeError as e:
            raise _failure("compile the model", e) from None
        if len(compiled.outputs) != len(outputs):
            raise OpenVinoError(f"{path}: OpenVINO compiled {len(compiled.outputs)} outputs; the plan's step has "
                                f"{len(outputs)}")
        # outputs by position, as declared (regions.py declares the step's outputs in order; see _output_indices)
        return OpenVinoKernel(compiled, [_input_index(compiled, name) for name in inputs], range(len(outputs)),
                              output_dtypes)

    def compile_file(self, path: str | Path, threads: int) -> tuple[OpenVinoKernel, list[str]]:
        """A whole model compiled from its ONNX file, as OpenVINO's users compile it (korch bench's
        peer). Returns the kernel and the names of its inputs, in the order `run` takes them."""
        try:
            compiled = self.core.compile_model(str(path), DEVICE, compile_config(threads, runs_alone=True))
        except RuntimeError as e:
            raise _failure("compile the model", e) from None
        dtypes = [np.dtype(port.get_element_type().to_dtype()) for port in compiled.outputs]
        kernel = OpenVinoKernel(compiled, range(len(compiled.inputs)), range(len(compiled.outputs)), dtypes,
                                share_outputs=False)
        return kernel, [port.get_any_name() for port in compiled.inputs]

    def read(self, model: onnx.ModelProto, external_dir: Path | None,
             shared: Mapping[str, np.ndarray] | None = None) -> tuple[ov.Model, list[np.ndarray], list[mmap.mmap]]:
        """The model in OpenVINO's form, the weight arrays it shares (`shared`, and views of mapped
        files for EXTERNAL initializers) and the maps (see weights.py)."""
        from korch.backends.openvino.weights import bind_constants, detach_external, external_initializers

        arrays: dict[str, np.ndarray] = {}
        maps: list[mmap.mmap] = []
        if external_initializers(model):
            try:
                model, arrays, maps = detach_external(model, external_dir, shared or {})
            except ValueError as e:
                raise OpenVinoError(f"cannot read the model's EXTERNAL initializers: {e}") from None
        try:
            ov_model = self.core.read_model(model.SerializeToString())
            bind_constants(ov_model, arrays)
        except RuntimeError as e:
            raise _failure("read the model", e) from None
        return ov_model, list(arrays.values()), maps
