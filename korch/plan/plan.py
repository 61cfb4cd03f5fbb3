"""A plan: the primitive graph, the chosen kernels (steps) in topological order, and how it was made.

On disk a plan is a directory: plan.json (steps, settings, summary), the primitive graph
(graph.json + constants.npz), and, when a step runs original ONNX nodes (a region in onnxruntime),
original.onnx with the map from its values to the primitive graph's (value_map.json). The original
model's weights are kept apart in original.weights, page-aligned, where onnxruntime maps them
itself: a loaded plan holds no Python copy of them (bert-base runs in 440 MB, not 2.8 GB).
Each onnxruntime region is also saved as its ready model, kernels/<step>.onnx, whose weights stay in
original.weights: loading such a plan hands those bytes to onnxruntime and neither parses
original.onnx nor imports onnx (read on first use, for another engine's region or a save).
A kernel whose engine can save it compiled (backends/base.py `saves_kernels`: Inductor's) is saved
as it was compiled, in kernels/<step>/ (copied from Plan.artifacts, which optimize fills: plan/store.py),
so that loading the plan compiles nothing and needs no compiler.
Each weight is stored once: a graph constant whose bytes original.weights holds is mapped from there
(constants.json says where), not copied into constants.npz. manifest.json lists every file with its
size and SHA-256; a plan whose files do not match it is refused at load, naming the file.
It is written to a temporary directory beside the target and renamed into place; the constants file
of a plan it replaces is hard-linked, not written again, when no constant changed (a warm optimize).
"""

from __future__ import annotations

import hashlib
import json
import mmap
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from korch.errors import KorchError, OutputError
from korch.ir.graph import Graph
from korch.ir.onnx_source import OnnxSource, copy_fields
from korch.ir.serialize import CONSTANTS_FILE, Mapped, load_graph, save_graph
from korch.plan.schedule import Schedule, ScheduleError, check_schedule

if TYPE_CHECKING:
    import onnx

PLAN_FORMAT = 4
WEIGHTS_FILE = "original.weights"
# Every file of the plan with its size and SHA-256 (plan.json included), checked at load.
MANIFEST = "manifest.json"
# Initializers of at least this many bytes go to WEIGHTS_FILE; smaller ones (shapes, scalars) stay inline.
EXTERNAL_MIN_BYTES = 1024
# Page-aligned offsets let onnxruntime memory-map each initializer instead of reading it.
WEIGHTS_ALIGN = 4096
# Engines whose region kernels a saved plan holds as ready ONNX models (weights still in WEIGHTS_FILE), so
# that loading the plan neither parses original.onnx nor imports onnx: onnxruntime's in MODELS_DIR/<step>.onnx,
# OpenVINO's beside WEIGHTS_FILE as <step>.openvino.onnx (its ONNX reader follows a weights location only
# inside the model file's own directory). Cut at load instead, OpenVINO's regions imported onnx (+9 MB
# resident) and held a parse of the region: efficientvit-b1's plan peaked at 174 MB, 1.26x onnxruntime's.
PREBUILT_BACKENDS = frozenset({"onnxruntime", "openvino"})
MODELS_DIR = "kernels"
# Primitives listed when an error names a step: enough to find it, short enough to read.
_NAMED_NODES = 6


class PlanError(KorchError):
    """A plan directory that is missing, damaged, or made by another korch version or machine."""


@dataclass(frozen=True)
class Step:
    backend: str
    nodes: tuple[int, ...]            # indices into the plan graph's nodes (topological order)
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    key: str
    cost_s: float
    onnx_nodes: tuple[str, ...] = ()  # a region run as these original ONNX nodes; () runs primitives


@dataclass(frozen=True)
class Plan:
    graph: Graph
    steps: tuple[Step, ...]
    threads: int
    machine: str
    korch_version: str
    source: OnnxSource | None = None          # the original model, when some step runs ONNX nodes
    summary: Mapping[str, Any] = field(default_factory=dict)
    # A loaded plan's ready ONNX models, by step (PREBUILT_BACKENDS' region steps); a step not here
    # is compiled from the source or the primitive graph.
    models: Mapping[Step, Path] = field(default_factory=dict)
    # Compiled kernels saved by their engine (Backend.save_kernel), by step: a loaded plan's own, or
    # those kept in the profile cache (plan/store.py). A step not here compiles at load.
    artifacts: Mapping[Step, Path] = field(default_factory=dict)
    # Which steps run side by side, on how many threads each (plan/schedule.py); None: one after
    # another in plan order, each on all `threads`.
    schedule: Schedule | None = None

    def step_threads(self) -> tuple[int, ...]:
        """The thread count each step's kernel is compiled for."""
        if self.schedule is None:
            return (self.threads,) * len(self.steps)
        return self.schedule.step_threads(len(self.steps))

    def check_schedule(self, schedule: Schedule) -> None:
        """Raises ScheduleError if `schedule` cannot run this plan's steps (plan/schedule.py)."""
        check_schedule(schedule, self.graph.inputs, [s.inputs for s in self.steps], [s.outputs for s in self.steps],
                       self.threads)

    def kernels_by_backend(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for s in self.steps:
            counts[s.backend] = counts.get(s.backend, 0) + 1
        return counts


def order_steps(steps: Iterable[Step], available: Iterable[str]) -> tuple[Step, ...]:
    """Topological order: a step runs once all its inputs exist. Ties keep the given order."""
    pending = list(steps)
    ready = set(available)
    ordered: list[Step] = []
    while pending:
        for k, step in enumerate(pending):
            if all(i in ready for i in step.inputs):
                ordered.append(pending.pop(k))
                ready.update(step.outputs)
                break
        else:
            raise PlanError(f"steps cannot be ordered: {_why_unordered(pending, ready)}")
    return tuple(ordered)


def _why_unordered(pending: list[Step], ready: set[str]) -> str:
    """Values no step produces, else a cycle of steps each waiting on the next one's output."""
    makers = {t: s for s in pending for t in s.outputs}
    missing = sorted({i for s in pending for i in s.inputs if i not in ready and i not in makers})
    if missing:
        return f"values {missing[:5]} are never produced"
    path: list[Step] = [pending[0]]
    needs: list[str] = []
    while True:      # every missing input has a pending maker: follow them until a step repeats
        value = next(i for i in path[-1].inputs if i not in ready)
        step = makers[value]
        needs.append(value)
        if step in path:
            cycle = path[path.index(step):] + [step]
            needs = needs[path.index(step):]
            break
        path.append(step)
    links = ", ".join(f"{_name(a)} needs {t!r} from {_name(b)}" for a, b, t in zip(cycle, cycle[1:], needs))
    return f"steps wait on each other in a cycle: {links}"


def step_onnx_nodes(graph: Graph, step: Step) -> tuple[str, ...]:
    """The ONNX nodes a step computes: its region's, else those its primitives came from, in order."""
    return step.onnx_nodes or tuple(dict.fromkeys(graph.nodes[i].origin for i in step.nodes))


def step_graph(plan: Plan, step: Step, read_constants: bool = True) -> Graph:
    """The step's primitives as the standalone graph its kernel is compiled from (and a saved
    kernel loaded for); `read_constants=False` reads each constant only when asked for."""
    from korch.candidates import Candidate
    from korch.candidates.candidate import extract_subgraph

    candidate = Candidate(step.nodes, step.inputs, step.outputs, step.key, step.onnx_nodes)
    return extract_subgraph(plan.graph, candidate, read_constants)


def _name(step: Step) -> str:
    shown = ", ".join(map(str, step.nodes[:_NAMED_NODES])) + (", ..." if len(step.nodes) > _NAMED_NODES else "")
    return f"the {step.backend} kernel of primitives [{shown}]"


def save_plan(plan: Plan, directory: str | os.PathLike, shared: WeightsFile | None = None) -> Path:
    """`shared`: a weights file beside the plan (a bucketed plan's model) whose initializers the
    graph's constants may be mapped from, when the plan has no model of its own to map them from."""
    with staged(directory) as tmp:
        models: dict[str, str] = {}
        mapped: dict[str, Mapped] = {}
        if plan.source is not None:
            saved = _save_source(plan.source, tmp, Path(directory) / WEIGHTS_FILE)
            mapped = _constants_in(plan.graph, WeightsFile.of(saved, tmp), saved.value_map)
            models = _save_models(plan, saved, tmp)
        artifacts = _save_kernels(plan, tmp)
        if shared is not None:          # (fission names a weight it keeps as the initializer's name)
            mapped.update(_constants_in(plan.graph, shared, {n: n for n in shared.index}, skip=mapped))
        known = _save_graph(plan.graph, tmp, mapped, Path(directory))
        meta = {"format": PLAN_FORMAT, "korch_version": plan.korch_version, "machine": plan.machine,
                "threads": plan.threads, "steps": [asdict(s) for s in plan.steps], "summary": dict(plan.summary),
                "models": models, "artifacts": artifacts,
                "schedule": plan.schedule.to_json() if plan.schedule is not None else None}
        (tmp / "plan.json").write_text(json.dumps(meta, indent=1))
        _write_manifest(tmp, known=known)
    return Path(directory)


def _save_graph(graph: Graph, tmp: Path, mapped: dict[str, Mapped], target: Path) -> dict[str, dict[str, Any]]:
    """save_graph into `tmp`, keeping the constants file of the plan at `target` that it replaces when
    nothing in it changed (a warm optimize) and the file is still the one that plan's manifest lists.
    Returns the manifest entry of a kept file (hashed once here, not again for the manifest)."""
    if not save_graph(graph, tmp, mapped, target if (target / MANIFEST).is_file() else None):
        return {}
    entry = _file_entry(tmp / CONSTANTS_FILE)
    try:
        listed = json.loads((target / MANIFEST).read_text())["files"][CONSTANTS_FILE]
    except (OSError, ValueError, KeyError, TypeError):
        listed = None
    if listed == entry:
        return {CONSTANTS_FILE: entry}
    (tmp / CONSTANTS_FILE).unlink()         # changed or damaged since its plan was written: write it anew
    save_graph(graph, tmp, mapped)
    return {}


# Files that mark a directory as a korch plan (one plan, or one per shape bucket): only such a
# directory is replaced by a save.
PLAN_MARKERS = ("plan.json", "buckets.json")


@contextmanager
def staged(directory: str | os.PathLike) -> Iterator[Path]:
    """A temporary directory beside `directory` to write a plan into, renamed into place when the
    block ends without error (an older plan there is replaced, anything else refused) and removed
    otherwise: a plan is written whole or not at all."""
    target = Path(directory)
    parent = target.parent
    if not parent.is_dir():
        raise OutputError(f"{target}: directory {parent} does not exist")
    if target.exists() and not any((target / marker).is_file() for marker in PLAN_MARKERS):
        raise OutputError(f"{target}: exists and is not a korch plan; refusing to replace it")
    try:
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=parent))
    except OSError as e:
        raise OutputError(f"{target}: cannot write here ({e.strerror})") from None
    try:
        yield tmp
        old = None
        if target.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{target.name}.old.", dir=parent))
            os.replace(target, old / "plan")
        os.replace(tmp, target)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except OSError as e:
        raise OutputError(f"{target}: cannot write the plan ({e.strerror or e})") from None
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def load_plan(directory: str | os.PathLike, korch_version: str, machine: str, check_origin: bool = True) -> Plan:
    path = Path(directory)
    meta_path = path / "plan.json"
    if not meta_path.is_file():
        if (path / "buckets.json").is_file():
            raise PlanError(f"{path}: a plan per shape bucket; name one bucket's plan, e.g. {path / 'bucket-0'} "
                            "(buckets.json lists each bucket's shapes)")
        raise PlanError(f"{path}: not a korch plan directory (no plan.json)")
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, ValueError) as e:
        raise PlanError(f"{path}: damaged plan (plan.json: {type(e).__name__}: {e})") from None
    if not isinstance(meta, dict) or meta.get("format") != PLAN_FORMAT:
        found = meta.get("format") if isinstance(meta, dict) else None
        raise PlanError(f"{path}: plan format {found} is not {PLAN_FORMAT}; re-run korch optimize")
    if check_origin and meta.get("korch_version") != korch_version:
        raise PlanError(f"{path}: made by korch {meta.get('korch_version')}, this is {korch_version}; "
                        "re-run korch optimize")
    if check_origin and meta.get("machine") != machine:
        raise PlanError(f"{path}: made on another machine ({meta.get('machine')}); kernels were chosen by timings "
                        "there, so re-run korch optimize here")
    _check_manifest(path)
    try:
        graph = load_graph(path)
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise PlanError(f"{path}: damaged plan ({type(e).__name__}: {e})") from None
    steps = tuple(Step(s["backend"], tuple(s["nodes"]), tuple(s["inputs"]), tuple(s["outputs"]), s["key"],
                       s["cost_s"], tuple(s["onnx_nodes"])) for s in meta["steps"])
    source = None
    if (path / "original.onnx").exists():
        source = OnnxSource.deferred(lambda: _load_source(path), path)
    models = {}
    for k, name in meta.get("models", {}).items():
        if not (isinstance(name, str) and k.isdigit() and int(k) < len(steps)):
            raise PlanError(f"{path}: damaged plan (plan.json names model {name!r} for step {k!r})")
        file = path / name
        if not file.is_file():
            raise PlanError(f"{path}: damaged plan (step {int(k) + 1}'s model {name} is missing)")
        models[steps[int(k)]] = file
    artifacts = {}
    for k, name in meta.get("artifacts", {}).items():
        if not (isinstance(name, str) and k.isdigit() and int(k) < len(steps)):
            raise PlanError(f"{path}: damaged plan (plan.json names kernel {name!r} for step {k!r})")
        if not (path / name).is_dir():
            raise PlanError(f"{path}: damaged plan (step {int(k) + 1}'s kernel {name} is missing)")
        artifacts[steps[int(k)]] = path / name
    plan = Plan(graph, steps, meta["threads"], meta["machine"], meta["korch_version"], source, meta["summary"],
                models, artifacts=artifacts)
    if meta.get("schedule") is not None:
        try:
            schedule = Schedule.from_json(meta["schedule"])
            plan.check_schedule(schedule)
        except ScheduleError as e:
            raise PlanError(f"{path}: damaged plan (plan.json's schedule: {e})") from None
        plan = replace(plan, schedule=schedule)
    return plan


@dataclass(frozen=True)
class WeightsFile:
    """A saved weights file a plan's constants may be mapped from: where it is now, how the plan
    names it (relative to the plan's directory), and which initializer is where in it."""

    path: Path
    name: str
    index: Mapping[str, tuple[int, int, str, tuple[int, ...]]]   # initializer -> (offset, bytes, dtype, dims)

    @staticmethod
    def of(saved: OnnxSource, directory: Path, name: str = WEIGHTS_FILE) -> WeightsFile:
        """The weights file `_save_source` wrote into `directory` for `saved`, as the plan in
        `directory` names it by `name`."""
        import onnx
        from onnx import helper

        index = {}
        for tensor in saved.model.graph.initializer:
            if tensor.data_location != onnx.TensorProto.EXTERNAL:
                continue
            location, offset, length = _external_info(tensor)
            if location == WEIGHTS_FILE:
                index[tensor.name] = (offset, length, np.dtype(helper.tensor_dtype_to_np_dtype(tensor.data_type)).str,
                                      tuple(tensor.dims))
        return WeightsFile(directory / WEIGHTS_FILE, name, index)


def _constants_in(graph: Graph, weights: WeightsFile, names: Mapping[str, str],
                  skip: Iterable[str] = ()) -> dict[str, Mapped]:
    """The graph's constants whose bytes `weights` already holds, so each is stored once (candy's plan
    held its 37 MB of weights twice): an initializer fission kept as it was (a conv's or a matmul's
    weight), found by `names` (initializer -> constant); else, by content, one it reshaped (a bias
    made (C, 1, 1)) or transposed (a Gemm's weight: efficientvit-b1's plan held 16 MB of those
    twice). Every match is compared byte for byte with what was written."""
    mapped: dict[str, Mapped] = {}
    skip = set(skip)
    with open(weights.path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            return mapped
        written = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    with written:
        mapped.update(_by_name(graph, weights, names, skip, written))
        mapped.update(_by_content(graph, weights, skip | set(mapped), written))
    return mapped


def _by_name(graph: Graph, weights: WeightsFile, names: Mapping[str, str], skip: set[str],
             written: mmap.mmap) -> dict[str, Mapped]:
    mapped: dict[str, Mapped] = {}
    for initializer, (offset, length, dtype, _) in weights.index.items():
        name = names.get(initializer)
        if name not in graph.constants or name in skip:
            continue
        array = graph.constants[name]
        if array.dtype != np.dtype(dtype) or array.nbytes != length or offset + length > len(written):
            continue
        stored = np.frombuffer(written, array.dtype, array.size, offset).reshape(array.shape)
        if _same_bits(stored, array):
            mapped[name] = Mapped(weights.name, offset, dtype, tuple(array.shape))
        del stored                         # (no view may outlive the mapping)
        _let_go(written, offset, length)
    return mapped


def _let_go(written: mmap.mmap, offset: int, length: int) -> None:
    """Drop the pages of written[offset:offset + length] from this process once compared. Each page
    read stays resident while the file is mapped: comparing gpt2-small's 500 MB of weights took the
    optimize's resident memory 750 MB up while it saved the plan (benchmarks/plan_save_memory.py).
    The file's pages stay in the page cache; only this mapping lets them go."""
    start = offset - offset % mmap.PAGESIZE
    end = min(len(written), offset + length)
    if end > start and hasattr(mmap, "MADV_DONTNEED"):
        written.madvise(mmap.MADV_DONTNEED, start, end - start)


def _by_content(graph: Graph, weights: WeightsFile, skip: set[str], written: mmap.mmap) -> dict[str, Mapped]:
    """Constants of at least EXTERNAL_MIN_BYTES whose bytes an initializer of the same size holds as
    they are, or, for a matrix, transposed."""
    candidates: dict[tuple[str, int], list[tuple[int, tuple[int, ...]]]] = {}
    for offset, length, dtype, dims in weights.index.values():
        if offset + length <= len(written):
            candidates.setdefault((dtype, length), []).append((offset, dims))
    mapped: dict[str, Mapped] = {}
    for name, array in graph.constants.items():
        if name in skip or array.nbytes < EXTERNAL_MIN_BYTES:
            continue
        for offset, dims in candidates.get((array.dtype.str, array.nbytes), ()):
            layout = _held_as(written, offset, dims, array)
            _let_go(written, offset, array.nbytes)
            if layout is not None:
                mapped[name] = Mapped(weights.name, offset, array.dtype.str, *layout)
                break
    return mapped


def _held_as(written: mmap.mmap, offset: int, dims: tuple[int, ...],
             array: np.ndarray) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """How the bytes at `offset` (an initializer of `dims`) hold `array`, bit for bit: (its shape, ())
    as they are, ((cols, rows), (1, 0)) transposed, else None."""
    stored = np.frombuffer(written, array.dtype, array.size, offset)
    held = None
    try:
        if _same_bits(stored.reshape(array.shape), array):
            return tuple(array.shape), ()
        if array.ndim != 2 or tuple(dims) != array.shape[::-1]:
            return None
        held = stored.reshape(dims)
        if not _same_bits(held[:, 0], array[0]):
            return None                   # (the first row settles most non-matches at once)
        if _same_bits(held.T, array):
            return tuple(dims), (1, 0)
        return None
    finally:
        del stored, held                  # (no view may outlive the mapping)


# The most bytes of either side `_same_bits` copies at a time (one row, if a row is larger).
_COMPARE_BLOCK = 8 << 20


def _same_bits(x: np.ndarray, y: np.ndarray, block: int = _COMPARE_BLOCK) -> bool:
    """Whether x and y (one shape and dtype, any strides) hold the same bytes (-0.0 is not 0.0, a NaN
    equals the same NaN), a block of rows at a time: comparing whole weights made a contiguous copy
    of each side and a mask as large, and gpt2-small's 154 MB embedding matrix, held transposed, put
    the save's peak 590 MB above what the optimize held (benchmarks/plan_save_memory.py)."""
    if x.shape != y.shape or x.dtype != y.dtype:
        return False
    if x.ndim == 0:
        x, y = x.reshape(1), y.reshape(1)
    step = max(1, block // max(1, x[:1].nbytes))
    for i in range(0, len(x), step):
        a, b = np.ascontiguousarray(x[i:i + step]), np.ascontiguousarray(y[i:i + step])
        if not np.array_equal(a.reshape(-1).view(np.uint8), b.reshape(-1).view(np.uint8)):
            return False
    return True


def _write_manifest(directory: Path, skip_dirs: tuple[str, ...] = (),
                    known: Mapping[str, dict[str, Any]] | None = None) -> None:
    """MANIFEST: every file of the plan (plan.json included) with its size and SHA-256, so that a
    missing, truncated or edited file is refused at load by name instead of running a different plan.
    `skip_dirs`: subdirectories with manifests of their own (a bucketed plan's buckets). `known`: the
    entries of files already hashed."""
    files = {}
    for file in sorted(directory.rglob("*")):
        relative = file.relative_to(directory)
        if not file.is_file() or relative.as_posix() == MANIFEST or relative.parts[0] in skip_dirs:
            continue
        files[relative.as_posix()] = (known or {}).get(relative.as_posix()) or _file_entry(file)
    (directory / MANIFEST).write_text(json.dumps({"files": files}, indent=1))


def _file_entry(file: Path) -> dict[str, Any]:
    with open(file, "rb") as f:
        return {"bytes": os.fstat(f.fileno()).st_size, "sha256": hashlib.file_digest(f, "sha256").hexdigest()}


def _check_manifest(path: Path) -> None:
    """Every file the manifest lists is there, of its size and checksum (files added since, such as
    `korch bench`'s bench.json, are not the plan's and are ignored)."""
    try:
        files = json.loads((path / MANIFEST).read_text())["files"]
        listed = {str(name): (int(entry["bytes"]), str(entry["sha256"])) for name, entry in files.items()}
    except FileNotFoundError:
        raise PlanError(f"{path}: damaged plan ({MANIFEST} is missing)") from None
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise PlanError(f"{path}: damaged plan ({MANIFEST}: {type(e).__name__}: {e})") from None
    for name, (size, digest) in listed.items():
        file = path / name
        if not file.is_file():
            raise PlanError(f"{path}: damaged plan ({name} is missing)")
        with open(file, "rb") as f:
            found = os.fstat(f.fileno()).st_size
            if found != size:
                raise PlanError(f"{path}: damaged plan ({name} is {found} bytes, the plan wrote {size})")
            if hashlib.file_digest(f, "sha256").hexdigest() != digest:
                raise PlanError(f"{path}: damaged plan ({name} changed after the plan was written: "
                                "its SHA-256 differs from the manifest's)")


def _save_models(plan: Plan, saved: OnnxSource, directory: Path) -> dict[str, str]:
    """A ready model for every region step of PREBUILT_BACKENDS, cut from the source as saved (its
    weights in WEIGHTS_FILE); returns step index -> file name relative to `directory`."""
    from korch.candidates import Candidate
    from korch.frontend.regions import region_model

    models = {}
    for k, step in enumerate(plan.steps):
        if step.backend not in PREBUILT_BACKENDS or not step.onnx_nodes:
            continue
        candidate = Candidate(step.nodes, step.inputs, step.outputs, step.key, step.onnx_nodes)
        name = f"{k}.openvino.onnx" if step.backend == "openvino" else f"{MODELS_DIR}/{k}.onnx"
        (directory / name).parent.mkdir(exist_ok=True)
        (directory / name).write_bytes(region_model(saved, plan.graph, candidate).SerializeToString())
        models[str(k)] = name
    return models


def _save_kernels(plan: Plan, directory: Path) -> dict[str, str]:
    """MODELS_DIR/<k>/ for every step the plan holds compiled (plan.artifacts); returns step index ->
    directory name relative to `directory`."""
    saved = {}
    for k, step in enumerate(plan.steps):
        if step in plan.artifacts:
            name = f"{MODELS_DIR}/{k}"
            shutil.copytree(plan.artifacts[step], directory / name)
            saved[str(k)] = name
    return saved


def _save_source(source: OnnxSource, directory: Path, previous: Path | None = None) -> OnnxSource:
    """original.onnx with its large initializers moved to WEIGHTS_FILE, and value_map.json; returns
    the source as saved.

    The saved model is built field by field, each large initializer without its data: copying the
    whole model first (and then each weight out of the copy twice more) held the weights three times
    over for a moment, gpt2-small's optimize peaking 830 MB above its selection while it saved the
    plan (benchmarks/plan_save_memory.py, BENCHMARKS.md). `previous`: the weights file of the plan
    this save replaces, linked instead of written again where it holds the same bytes
    (`_WeightsWriter`)."""
    import onnx
    from onnx import numpy_helper

    from korch.frontend.regions import is_shared

    mappable = {onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16, onnx.TensorProto.BOOL,
                onnx.TensorProto.INT8, onnx.TensorProto.INT16, onnx.TensorProto.INT32, onnx.TensorProto.INT64,
                onnx.TensorProto.UINT8, onnx.TensorProto.UINT16, onnx.TensorProto.UINT32, onnx.TensorProto.UINT64}
    model = copy_fields(source.model, onnx.ModelProto(), skip=("graph",))
    copy_fields(source.model.graph, model.graph, skip=("initializer",))
    offset = 0
    with _WeightsWriter(directory / WEIGHTS_FILE, previous) as f:
        for original in source.model.graph.initializer:
            if is_shared(original):
                array = source.arrays[original.name]                        # (regions.share_weights)
            elif original.data_location == onnx.TensorProto.EXTERNAL:
                array = _read_external(original, source.weights_dir)      # a loaded plan, saved again
            elif original.data_type in mappable and _value_bytes(original) >= EXTERNAL_MIN_BYTES:
                array = numpy_helper.to_array(original)
            else:
                model.graph.initializer.add().CopyFrom(original)
                continue
            tensor = copy_fields(original, model.graph.initializer.add(), skip=_TENSOR_DATA + ("external_data",))
            pad = -offset % WEIGHTS_ALIGN
            f.write(b"\0" * pad)
            offset += pad
            length = array.nbytes
            f.write(memoryview(np.ascontiguousarray(array)).cast("B"))
            del array
            tensor.data_location = onnx.TensorProto.EXTERNAL
            for key, value in (("location", WEIGHTS_FILE), ("offset", str(offset)), ("length", str(length))):
                entry = tensor.external_data.add()
                entry.key, entry.value = key, value
            offset += length
    (directory / "original.onnx").write_bytes(model.SerializeToString())
    (directory / "value_map.json").write_text(json.dumps(dict(source.value_map)))
    return OnnxSource(model, source.value_map, directory)


class _WeightsWriter:
    """Writes a weights file, or links `previous` in its place when it holds exactly the bytes written.

    A warm optimize saves the same weights over the plan it replaces: writing them again was 1.2 s of
    bert-base's 3.7 s warm optimize (435 MB). So while `previous` holds the same bytes so far, each
    write is compared with it instead, a block at a time (`_same_bits`); at the first difference its
    matching prefix is copied into `path` and writing goes on from there. A file that matched to its
    end is hard-linked (copied where links are refused): the plan being replaced is removed by the
    rename that puts the new one in place (`staged`), and no plan's file is ever written in place."""

    def __init__(self, path: Path, previous: Path | None) -> None:
        self.path, self.previous, self.offset = path, previous, 0
        self.out = None
        self.old: mmap.mmap | None = None
        if previous is not None and previous.is_file():
            with open(previous, "rb") as f:
                if os.fstat(f.fileno()).st_size > 0:
                    self.old = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        if self.old is None:
            self.out = open(path, "wb")

    def write(self, data: bytes | memoryview) -> None:
        data = memoryview(data).cast("B")
        if self.old is not None and not self._matches(data):
            self._diverge()
        if self.out is not None:
            self.out.write(data)
        self.offset += len(data)

    def _matches(self, data: memoryview) -> bool:
        assert self.old is not None
        if self.offset + len(data) > len(self.old):
            return False
        stored = np.frombuffer(self.old, np.uint8, len(data), self.offset)
        try:
            return _same_bits(stored, np.frombuffer(data, np.uint8))
        finally:
            del stored                      # (no view may outlive the mapping)
            _let_go(self.old, self.offset, len(data))

    def _diverge(self) -> None:
        """From here on write: `path` starts as the prefix both files share."""
        assert self.old is not None and self.previous is not None
        self.old.close()
        self.old = None
        self.out = open(self.path, "wb")
        with open(self.previous, "rb") as f:
            left = self.offset
            while left:
                block = f.read(min(left, _COMPARE_BLOCK))
                if not block:               # shortened since it was mapped
                    raise OSError(f"{self.previous} changed while it was compared")
                self.out.write(block)
                left -= len(block)

    def __enter__(self) -> _WeightsWriter:
        return self

    def __exit__(self, kind, value, traceback) -> None:
        if self.old is not None:
            whole = self.offset == len(self.old)
            if not whole and kind is None:
                self._diverge()
            else:
                self.old.close()
                self.old = None
                if kind is None:
                    try:
                        os.link(self.previous, self.path)
                    except OSError:
                        shutil.copyfile(self.previous, self.path)
        if self.out is not None:
            self.out.close()


# The fields of a TensorProto that hold its values (string_data is never moved out).
_TENSOR_DATA = ("raw_data", "float_data", "int32_data", "int64_data", "double_data", "uint64_data")


def _value_bytes(tensor: onnx.TensorProto) -> int:
    """The bytes of a tensor's values as an array of its (numeric) type, from its dims."""
    from onnx import helper

    dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tensor.data_type))
    return dtype.itemsize * int(np.prod(tuple(tensor.dims), dtype=np.int64))


def _external_info(tensor: onnx.TensorProto) -> tuple[str, int, int]:
    info = {e.key: e.value for e in tensor.external_data}
    return info.get("location", ""), int(info.get("offset", 0)), int(info.get("length", -1))


def _read_external(tensor: onnx.TensorProto, directory: Path | None) -> np.ndarray:
    from onnx import helper

    location, offset, length = _external_info(tensor)
    if directory is None:
        raise ValueError(f"initializer {tensor.name!r} is external but its directory is unknown")
    dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tensor.data_type))
    return np.fromfile(directory / location, dtype=dtype, count=length // dtype.itemsize, offset=offset)


def _load_source(path: Path) -> tuple[onnx.ModelProto, dict[str, str]]:
    """original.onnx without its weights, and its value map; the weights' records are checked against
    WEIGHTS_FILE's size. Called on first use of a loaded plan's source (a step that cuts a region)."""
    try:
        return _read_source(path)
    except (OSError, ValueError, KeyError) as e:
        raise PlanError(f"{path}: damaged plan ({type(e).__name__}: {e})") from None


def _read_source(path: Path) -> tuple[onnx.ModelProto, dict[str, str]]:
    import onnx

    model = onnx.load(str(path / "original.onnx"), load_external_data=False)
    weights_path = path / WEIGHTS_FILE
    size = weights_path.stat().st_size if weights_path.exists() else 0
    for tensor in model.graph.initializer:
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            continue
        location, offset, length = _external_info(tensor)
        if location != WEIGHTS_FILE or offset < 0 or offset + length > size or length != _value_bytes(tensor):
            raise ValueError(f"initializer {tensor.name!r} points outside {WEIGHTS_FILE} "
                             f"({location}, offset {offset}, length {length}, file size {size})")
    return model, json.loads((path / "value_map.json").read_text())
