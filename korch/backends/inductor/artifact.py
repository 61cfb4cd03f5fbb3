"""A compiled Inductor kernel saved with a plan, loaded back without compiling anything.

Compiling again at load took 14-15 s for a transformer's kernel and needs a C++ compiler wherever
the plan runs. What Inductor made is already runnable code: a Python wrapper module whose `call`
runs the graph, C++ kernels built as Python extension modules (`async_compile.cpp_pybinding`), and
the frozen constants the wrapper reads as module globals. A saved kernel is those pieces:

    artifact.json   what follows, the torch version and thread count it was built for
    wrapper.py      the wrapper's source, as Inductor wrote it
    k<i>.so         each C++ kernel's extension module
    tensors.npz     constants no graph constant holds (folded values, dense conv weights)
    check.npz       inputs and the outputs the kernel gave for them when saved

Loading runs the wrapper with its one `async_compile = AsyncCompile()` line pointed at the saved
extension modules instead of the compiler. A constant that is a view of one of the graph's
constants is stored as where it sits in that constant, so each weight is stored once.

Weights Inductor packed for MKL or oneDNN (opaque tensors, tied to their address) are not stored:
they are packed again at load, by the same op Inductor's freezing pass used, with the arguments
recorded from the one call that uses them; a oneDNN weight packed again is checked against the one
Inductor packed. A kernel that uses a packed weight any other way (a grouped transposed conv's), or
Triton, is not saved (KernelNotSaveable says why) and compiles at load as before. The wrapper's
`call` may take constants Inductor did not freeze before the kernel's inputs: which, is seen by
profiling the compiled kernel's one call, and they are saved as constants are. MKL's packed
linear keeps the plain weight beside the packed one, but reads only its shape at the batch it was
packed for: a loaded kernel gets a one-element stand-in of that shape, so the plain weight is freed
once packed (bert-base holds its linear weights once, not twice). After loading, the kernel runs the
saved inputs once and must give the saved outputs.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.machinery
import importlib.util
import json
import os
import shutil
import sys
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from korch.backends.base import KernelNotSaveable, SavedKernelError, writable_alias
from korch.backends.inductor.backend import InductorKernel, warmup_inputs
from korch.heap import release_freed_heap
from korch.ir.graph import Graph

ARTIFACT_FORMAT = 2
META = "artifact.json"
WRAPPER = "wrapper.py"
TENSORS = "tensors.npz"
CHECK = "check.npz"
# The wrapper line that makes Inductor's compiler front; a saved kernel replaces it.
COMPILER_LINE = "async_compile = AsyncCompile()"
_SAVED_KERNELS = "_korch_saved_kernels"
# A reloaded kernel runs the same code on the same weights as when saved, so its outputs should be
# equal; this bound (relative to the output's largest magnitude) only allows for a thread pool
# splitting a reduction differently.
CHECK_RTOL = 1e-5


# Names a wrapper imports from torch._inductor. Importing any of them imports Inductor and Dynamo
# (1.3 s, twice torch itself); a saved wrapper that uses none but `extern_kernels`, and only
# functions of torch's own there, gets those bound directly instead.
_INDUCTOR_NAMES = frozenset({"AsyncCompile", "extern_kernels", "run_intermediate_hooks", "maybe_profile", "align"})


# ---------------------------------------------------------------------------------------------
# Packed weights: how each is rebuilt, by the op that reads it (one entry per op family)


@dataclass(frozen=True)
class Repack:
    """How to pack a weight again: `plain(packed, call_args)` is the weight it was packed from (None
    where korch cannot tell), `make(plain, call_args)` packs it, where `call_args` are the arguments
    of the op that read it, by schema name (tensors as their shapes). A oneDNN-packed weight is
    checked at save: packing its plain weight again must give the same tensor."""

    weight_arg: str
    plain: Callable[[torch.Tensor, Mapping[str, Any]], torch.Tensor | None]
    make: Callable[[torch.Tensor, Mapping[str, Any]], torch.Tensor]
    recorded: tuple[str, ...]  # call arguments kept in the artifact (shapes of tensors, other values as is)
    unpacks: bool = True       # to_dense() reads the packed weight back (oneDNN's; not MKL's)


def _conv(dense: torch.Tensor, a: Mapping[str, Any]) -> torch.Tensor:
    return torch.ops.mkldnn._reorder_convolution_weight(dense, a["padding"], a["stride"], a["dilation"], a["groups"],
                                                        a["X"])


def _conv_transpose(dense: torch.Tensor, a: Mapping[str, Any]) -> torch.Tensor:
    return torch.ops.mkldnn._reorder_convolution_transpose_weight(dense, a["padding"], a["output_padding"],
                                                                  a["stride"], a["dilation"], a["groups"], a["X"])


def _unpacked_transposed(packed: torch.Tensor, a: Mapping[str, Any]) -> torch.Tensor | None:
    """A transposed conv's weight (in, out, kh, kw) unpacks as (out, in, kh, kw); with groups the
    layout is not known here."""
    return packed.to_dense().transpose(0, 1).contiguous() if a["groups"] == 1 else None


_CONV_ARGS = ("X", "padding", "stride", "dilation", "groups")
REPACKS: dict[str, Repack] = {
    # Inductor's freezing: packed = mkl._mkl_reorder_linear_weight(W transposed, batch), and the call
    # keeps that same W beside it (ORI_W)
    "mkl::_mkl_linear": Repack("MKL_W", lambda t, a: a["ORI_W"],
                               lambda w, a: torch.ops.mkl._mkl_reorder_linear_weight(w, a["batch_size"]),
                               ("batch_size",), unpacks=False),
    "mkldnn::_linear_pointwise": Repack("W", lambda t, a: t.to_dense(),
                                        lambda w, a: torch.ops.mkldnn._reorder_linear_weight(w.contiguous(), a["X"][0]),
                                        ("X",)),
    "mkldnn::_convolution_pointwise": Repack("W", lambda t, a: t.to_dense(), _conv, _CONV_ARGS),
    # the binary variant that adds into its `other` operand in place (a conv whose output is summed
    # with a buffer nothing else reads: residual adds in conv nets); its weight is packed the same way
    "mkldnn::_convolution_pointwise_": Repack("W", lambda t, a: t.to_dense(), _conv, _CONV_ARGS),
    "mkldnn::_convolution_transpose_pointwise": Repack("W", _unpacked_transposed, _conv_transpose,
                                                       _CONV_ARGS + ("output_padding",)),
}


@dataclass(frozen=True)
class _Use:
    op: str                    # the op's schema name, "mkl::_mkl_linear"
    arg: str                   # which of its arguments the tensor was
    args: dict[str, Any]       # all its arguments, by name


class _Uses(TorchDispatchMode):
    """Records, for each watched tensor (by id: the wrapper's constants, alive throughout), every op
    that reads it and that op's arguments. Only those ops' arguments are kept: recording every op
    would hold every intermediate value of the run alive."""

    def __init__(self, watched: Sequence[torch.Tensor]) -> None:
        super().__init__()
        self.watched = {id(t) for t in watched}
        self.uses: dict[int, list[_Use]] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204 (torch's signature)
        kwargs = kwargs or {}
        schema = func._schema
        named = dict(zip((a.name for a in schema.arguments), args)) | kwargs
        for arg, value in named.items():
            if isinstance(value, torch.Tensor) and id(value) in self.watched:
                self.uses.setdefault(id(value), []).append(_Use(schema.name, arg, named))
        return func(*args, **kwargs)


@dataclass(frozen=True)
class _Reads:
    """How often the wrapper reads each global name: at all, and as ORI_W of an mkl::_mkl_linear call."""

    any: Counter[str]
    as_ori_w: Counter[str]

    @staticmethod
    def of(tree: ast.Module) -> _Reads:
        reads: Counter[str] = Counter()
        as_ori_w: Counter[str] = Counter()
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                reads[node.id] += 1
            elif (isinstance(node, ast.Call) and ast.unparse(node.func) == "torch.ops.mkl._mkl_linear.default"
                  and len(node.args) > 2 and isinstance(node.args[2], ast.Name)):
                as_ori_w[node.args[2].id] += 1
        return _Reads(reads, as_ori_w)


def _only_shape_read(name: str, reads: _Reads, uses: Sequence[_Use]) -> bool:
    """Whether the wrapper's global `name` is read only for its shape: it is the plain weight kept
    beside MKL's packed one (ORI_W) in every `mkl::_mkl_linear` call that names it, and every such
    call's batch is the one the weight was packed for. That op then reads the packed weight alone
    and takes only the output width from ORI_W (torch's mkl_linear); a different batch would fall
    back to ORI_W's values. Checked in the source too, since a view made outside torch's ops (the
    wrapper's reinterpret_tensor) would hide a read from the recorded calls."""
    if not uses or any(u.op != "mkl::_mkl_linear" or u.arg != "ORI_W" or not u.args["MKL_W"].is_mkldnn
                       or u.args["X"].numel() // max(u.args["X"].shape[-1], 1) != u.args["batch_size"]
                       for u in uses):
        return False
    return reads.any[name] == reads.as_ori_w[name]


def _recorded(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return list(value.shape)
    if isinstance(value, (list, tuple)):
        return [_recorded(v) for v in value]
    return value


# ---------------------------------------------------------------------------------------------
# Saving


def save_kernel(kernel: InductorKernel, graph: Graph, directory: Path) -> None:
    """Write `kernel`, compiled from `graph`, into `directory` (which must not exist yet).
    Raises KernelNotSaveable, leaving nothing behind, if it cannot be loaded back without compiling
    (including for any failure of korch's reading of Inductor's code: saving is never worth a
    failed optimize; the kernel then compiles at load)."""
    try:
        saved = _analyse(kernel, graph)
    except KernelNotSaveable:
        raise
    except Exception as e:           # an Inductor output korch did not foresee
        raise KernelNotSaveable(f"korch could not read what Inductor made ({type(e).__name__}: {e})") from e
    directory.mkdir(parents=True)
    try:
        (directory / WRAPPER).write_text(saved.source)
        files = {}
        for k, (digest, fn) in enumerate(sorted(saved.kernels.items())):
            shutil.copyfile(fn.__self__.__file__, directory / f"k{k}.so")
            files[digest] = {"file": f"k{k}.so", "module": fn.__self__.__name__, "function": fn.__name__}
        np.savez(directory / TENSORS, **saved.stored)
        np.savez(directory / CHECK, **{f"in{k}": x for k, x in enumerate(saved.inputs)},
                 **{f"out{k}": y for k, y in enumerate(saved.outputs)})
        meta = {"format": ARTIFACT_FORMAT, "torch": torch.__version__, "threads": kernel.threads,
                "copies": list(kernel.copies), "compiler_line": saved.line, "inductor_imports": saved.imports,
                "kernels": files, "params": saved.params, "call": saved.slots}
        (directory / META).write_text(json.dumps(meta, indent=1))
    except BaseException:
        shutil.rmtree(directory, ignore_errors=True)
        raise


@dataclass(frozen=True)
class _Analysed:
    """Everything save_kernel writes, worked out before anything is written."""

    source: str                          # the wrapper
    line: int                            # its COMPILER_LINE
    kernels: dict[str, Any]              # C++ source digest -> the extension module's function
    imports: dict[str, Any] | None       # _inductor_imports
    params: dict[str, dict[str, Any]]    # the wrapper's tensor globals, as _param describes them
    slots: list[dict[str, Any]]          # the arguments of its call, as _slot describes them
    stored: dict[str, np.ndarray]        # arrays no graph constant holds
    inputs: list[np.ndarray]             # the check's inputs
    outputs: list[np.ndarray]            # and the compiled kernel's outputs for them


def _analyse(kernel: InductorKernel, graph: Graph) -> _Analysed:
    module = _wrapper_module(kernel)
    source = Path(module.__file__).read_text()
    tree = ast.parse(source)
    line = _compiler_line(source, tree)
    kernels = _extension_kernels(module, tree)
    imports = _inductor_imports(module, tree)
    tensors = {name: value for name, value in vars(module).items() if isinstance(value, torch.Tensor)}
    inputs = warmup_inputs(graph)
    feeds = [torch.from_numpy(x) for x in inputs]
    args = _call_args(kernel, module, feeds)
    recorder = _Uses(list(tensors.values()))
    with torch.no_grad(), recorder:
        through_call = [y.numpy().copy() for y in module.call(list(args))]
    outputs = kernel.run(inputs)            # what the check at load must find: the compiled kernel's own
    if _differ(through_call, outputs) is not None:
        raise KernelNotSaveable("its wrapper's call gives other outputs than the compiled kernel")
    stored: dict[str, np.ndarray] = {}
    reads = _Reads.of(tree)
    params = {name: _param(name, t, reads, recorder.uses.get(id(t), []), graph, stored)
              for name, t in tensors.items()}
    slots = [_slot(k, a, feeds, graph, stored) for k, a in enumerate(args)]
    return _Analysed(source, line, kernels, imports, params, slots, stored, inputs, outputs)


def _call_args(kernel: InductorKernel, module: ModuleType, feeds: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """The arguments the compiled kernel passes its wrapper's `call` for `feeds`: the feeds, after
    any constant Inductor did not freeze (one it returns as an output, say), which the compiled
    kernel's runtime holds and passes first. Seen by profiling the one call."""
    code = getattr(module.call, "__code__", None) or module.call.__func__.__code__
    seen: list[list[torch.Tensor]] = []

    def watch(frame, event, arg):  # noqa: ANN001, ANN202 (sys.setprofile's signature)
        if event == "call" and frame.f_code is code and not seen:
            seen.append(list(frame.f_locals["args"]))

    previous = sys.getprofile()
    sys.setprofile(watch)
    try:
        with torch.no_grad():
            kernel.fn(*feeds)
    finally:
        sys.setprofile(previous)
    if len(seen) != 1:
        raise KernelNotSaveable("the compiled kernel did not call its wrapper once")
    return seen[0]


def _slot(k: int, arg: object, feeds: Sequence[torch.Tensor], graph: Graph,
          stored: dict[str, np.ndarray]) -> dict[str, Any]:
    """What the wrapper's `call` takes as its k-th argument: one of the kernel's inputs, or a constant."""
    index = next((i for i, feed in enumerate(feeds) if arg is feed), None)
    if index is not None:
        return {"input": index}
    if not isinstance(arg, torch.Tensor):
        raise KernelNotSaveable(f"its wrapper takes a {type(arg).__name__} as argument {k}")
    return {"constant": _dense(f"argument {k} of its wrapper", arg, graph, stored)}


def _wrapper_module(kernel: InductorKernel) -> ModuleType:
    if kernel.device != "cpu":
        raise KernelNotSaveable(f"kernels for {kernel.device} are compiled at load")
    wrappers = [m for m in kernel.modules if callable(getattr(m, "call", None))]
    if len(wrappers) != 1:
        raise KernelNotSaveable(f"{len(wrappers)} generated wrapper modules, expected one")
    return wrappers[0]


def _compiler_line(source: str, tree: ast.Module) -> int:
    """The line number of the wrapper's one top-level COMPILER_LINE statement."""
    lines = source.splitlines()
    found = [node.lineno for node in tree.body
             if isinstance(node, ast.Assign) and lines[node.lineno - 1] == COMPILER_LINE]
    if len(found) != 1:
        raise KernelNotSaveable(f"the wrapper does not make its compiler in one {COMPILER_LINE!r} line")
    return found[0]


def _inductor_imports(module: ModuleType, tree: ast.Module) -> dict[str, Any] | None:
    """The wrapper's top-level `from torch._inductor... import` lines, and the torch functions its
    `extern_kernels` are, if loading can bind those instead of importing Inductor; None if not."""
    lines, names = [], set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("torch._inductor"):
            if node.lineno != node.end_lineno:
                return None
            lines.append(node.lineno)
            names.update(alias.asname or alias.name for alias in node.names)
    if not names <= _INDUCTOR_NAMES:
        return None
    imported = {id(node) for node in tree.body if isinstance(node, ast.ImportFrom)}
    used: set[str] = set()
    extern: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and id(node) not in imported:
            used.add(node.id)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "extern_kernels":
            extern.add(node.attr)
    if used & (_INDUCTOR_NAMES - {"AsyncCompile", "extern_kernels"}):
        return None
    namespace = getattr(module, "extern_kernels", None)
    if any(getattr(namespace, name, None) is not getattr(torch, name, object()) for name in extern):
        return None
    return {"lines": lines, "extern_kernels": sorted(extern)}


def _extension_kernels(module: ModuleType, tree: ast.Module) -> dict[str, Any]:
    """sha256 of each C++ kernel's source -> its loaded function; KernelNotSaveable for any other kind."""
    kernels = {}
    for node in tree.body:
        if not (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)):
            continue
        call = node.value.func
        if not (isinstance(call, ast.Attribute) and isinstance(call.value, ast.Name)
                and call.value.id == "async_compile"):
            continue
        if call.attr != "cpp_pybinding" or len(node.value.args) != 2 or len(node.targets) != 1:
            raise KernelNotSaveable(f"the wrapper builds a kernel with async_compile.{call.attr}")
        code = node.value.args[1]
        name = node.targets[0]
        if not (isinstance(code, ast.Constant) and isinstance(code.value, str) and isinstance(name, ast.Name)):
            raise KernelNotSaveable("a cpp_pybinding kernel whose source is not a literal")
        fn = getattr(module, name.id, None)
        owner = getattr(fn, "__self__", None)
        if not (isinstance(owner, ModuleType) and str(getattr(owner, "__file__", "")).endswith(".so")):
            raise KernelNotSaveable(f"kernel {name.id} is not a function of a loaded extension module")
        kernels[_digest(code.value)] = fn
    return kernels


def _digest(code: str) -> str:
    return hashlib.sha256(code.encode()).hexdigest()


def _param(name: str, t: torch.Tensor, reads: _Reads, uses: Sequence[_Use], graph: Graph,
           stored: dict[str, np.ndarray]) -> dict[str, Any]:
    """How to make the wrapper's global `name` again: a view of a graph constant, a stored array, a
    weight packed again from one of those, or, for a tensor read only for its shape, any tensor of
    that shape (so the plain copy of an MKL-packed weight is not kept once packed)."""
    if not t.is_mkldnn:
        if _only_shape_read(name, reads, uses):
            return {"kind": "shape", "size": list(t.shape), "dtype": _numpy_dtype(name, t).str}
        return _dense(name, t, graph, stored)
    ops = sorted({u.op for u in uses})
    if len(ops) != 1 or ops[0] not in REPACKS:
        raise KernelNotSaveable(f"packed weight {name} is read by {', '.join(ops) or 'nothing'}; "
                                f"korch repacks only for {', '.join(REPACKS)}")
    repack = REPACKS[ops[0]]
    args = uses[0].args
    if any(u.arg != repack.weight_arg for u in uses) or any(
            _recorded(u.args[k]) != _recorded(args[k]) for u in uses for k in repack.recorded):
        raise KernelNotSaveable(f"packed weight {name} is read by {ops[0]} with different arguments")
    recorded = {k: _recorded(args[k]) for k in repack.recorded}
    plain = repack.plain(t, args)
    if plain is None:
        raise KernelNotSaveable(f"packed weight {name}: korch cannot tell what {ops[0]}'s weight was packed from")
    if repack.unpacks:
        with torch.no_grad():
            again = repack.make(plain, recorded)
        if again.shape != t.shape or not torch.equal(again.to_dense(), t.to_dense()):
            raise KernelNotSaveable(f"packed weight {name}: packing its plain weight again gives another tensor")
    dense = _dense(f"{name}'s plain weight", plain, graph, stored)
    return {"kind": "packed", "op": ops[0], "dense": dense, "args": recorded}


def _numpy_dtype(name: str, t: torch.Tensor) -> np.dtype:
    try:
        return np.dtype(torch.empty(0, dtype=t.dtype).numpy().dtype)
    except TypeError:
        raise KernelNotSaveable(f"constant {name} has dtype {t.dtype}, which numpy cannot hold") from None


def _dense(name: str, t: torch.Tensor, graph: Graph, stored: dict[str, np.ndarray]) -> dict[str, Any]:
    if t.layout != torch.strided or t.device.type != "cpu" or any(s < 0 for s in t.stride()):
        raise KernelNotSaveable(f"constant {name} is a {t.layout} tensor on {t.device}")
    dtype = _numpy_dtype(name, t)
    view = {"size": list(t.shape), "stride": list(t.stride()), "dtype": dtype.str}
    start = t.data_ptr()
    for constant, array in graph.constants.items():
        base = array.__array_interface__["data"][0]
        if array.dtype == dtype and array.flags.c_contiguous and base <= start < base + max(array.nbytes, 1):
            offset, rest = divmod(start - base, dtype.itemsize)
            if rest == 0 and offset + _span(t.shape, t.stride()) <= array.size:
                return {"kind": "constant", "constant": constant, "offset": offset, **view}
    if t.is_contiguous():              # a weight the graph holds as it is (a conv's, once unpacked)
        for constant, array in graph.constants.items():
            if array.shape == tuple(t.shape) and array.dtype == dtype and np.array_equal(array, t.numpy()):
                return {"kind": "constant", "constant": constant, "offset": 0, **view}
        if t.dim() == 2:               # ... or transposed (a linear's (out, in) weight, once unpacked)
            for constant, array in graph.constants.items():
                if array.shape == tuple(t.shape)[::-1] and array.dtype == dtype and array.flags.c_contiguous \
                        and np.array_equal(array.T, t.numpy()):
                    return {"kind": "constant", "constant": constant, "offset": 0, "size": list(t.shape),
                            "stride": [1, int(t.shape[0])], "dtype": dtype.str}
    key = f"t{len(stored)}"
    span = _span(t.shape, t.stride())
    stored[key] = torch.as_strided(t, (span,), (1,)).numpy().copy() if span else np.empty(0, dtype)
    return {"kind": "stored", "array": key, **view}


def _span(size: Sequence[int], stride: Sequence[int]) -> int:
    """Elements from a view's first to its last, through its strides (0 for an empty one)."""
    return 1 + sum((n - 1) * s for n, s in zip(size, stride)) if all(size) else 0


# ---------------------------------------------------------------------------------------------
# Loading


def load_kernel(directory: Path, graph: Graph, threads: int) -> InductorKernel:
    """The kernel saved in `directory` for `graph`, checked against the outputs it gave when saved.
    Raises SavedKernelError naming what does not match."""
    meta = _read_meta(directory, threads)
    try:
        return _load(directory, graph, threads, meta)
    except (KeyError, TypeError, ValueError, IndexError) as e:
        raise SavedKernelError(f"{directory / META}: not as korch wrote it ({type(e).__name__}: {e})") from None


def _load(directory: Path, graph: Graph, threads: int, meta: Mapping[str, Any]) -> InductorKernel:
    saved = _SavedKernels(directory, meta["kernels"])
    stored = _npz(directory / TENSORS)
    # the graph's arrays its constants are views of (a view does not hold them), read first; the
    # plain weights it packs again are read one at a time and not held, nor those it reads only
    # for their shape
    try:
        held = tuple({id(a): a for a in (graph.constants[p["constant"]] for p in meta["params"].values()
                                         if p["kind"] == "constant")}.values())
    except KeyError as e:
        raise SavedKernelError(f"{directory / META}: a constant is a view of {e}, which the graph does not have") from None
    constants = {name: _make(directory, name, param, graph, stored) for name, param in meta["params"].items()}
    module = ModuleType(f"korch_saved_{_digest(str(directory))[:16]}")
    module.__file__ = str(directory / WRAPPER)
    vars(module)[_SAVED_KERNELS] = saved
    lines = (directory / WRAPPER).read_text().splitlines()
    line = meta["compiler_line"]
    if not (isinstance(line, int) and 0 < line <= len(lines) and lines[line - 1] == COMPILER_LINE):
        raise SavedKernelError(f"{directory / WRAPPER}: line {line} is not the one korch saved")
    lines[line - 1] = f"async_compile = {_SAVED_KERNELS}"
    imports = meta.get("inductor_imports")
    if imports is not None:
        for k in imports["lines"]:
            if not (isinstance(k, int) and 0 < k <= len(lines) and lines[k - 1].startswith("from torch._inductor")):
                raise SavedKernelError(f"{directory / WRAPPER}: line {k} is not the import korch saved")
            lines[k - 1] = "pass"
        vars(module)["extern_kernels"] = SimpleNamespace(**{n: getattr(torch, n) for n in imports["extern_kernels"]})
    source = "\n".join(lines) + "\n"
    exec(compile(source, module.__file__, "exec"), vars(module))  # noqa: S102 (the plan's own checked code)
    vars(module).update(constants)
    slots = []
    for slot in meta["call"]:
        if "input" in slot:
            slots.append((int(slot["input"]), None))
        else:
            tensor, array = _view(directory, "an argument of its wrapper", slot["constant"], graph, stored)
            held += (array,)
            slots.append((None, tensor))
    kernel = InductorKernel(_caller(module, slots), threads, "cpu", tuple(meta["copies"]), (module,), held)
    _check(directory, kernel)
    kernel.saved_in = directory
    return kernel


def _read_meta(directory: Path, threads: int) -> dict[str, Any]:
    try:
        meta = json.loads((directory / META).read_text())
    except (OSError, ValueError) as e:
        raise SavedKernelError(f"{directory / META}: {type(e).__name__}: {e}") from None
    found = meta.get("format") if isinstance(meta, dict) else None
    if found != ARTIFACT_FORMAT:
        raise SavedKernelError(f"{directory / META}: format {found} is not {ARTIFACT_FORMAT}; re-run korch optimize")
    if meta["torch"] != torch.__version__:
        raise SavedKernelError(f"{directory}: compiled with torch {meta['torch']}, this is torch {torch.__version__}; "
                               "re-run korch optimize with this torch")
    if meta["threads"] != threads:
        raise SavedKernelError(f"{directory}: compiled for {meta['threads']} threads, asked for {threads}")
    return meta


class _SavedKernels:
    """Stands in for Inductor's AsyncCompile in a saved wrapper: hands back the saved extension
    module's function for each kernel source, compiling nothing."""

    def __init__(self, directory: Path, files: Mapping[str, Mapping[str, str]]) -> None:
        self.directory = directory
        self.files = files

    def cpp_pybinding(self, argtypes: Sequence[str], code: str) -> Callable[..., Any]:
        entry = self.files.get(_digest(code))
        if entry is None:
            raise SavedKernelError(f"{self.directory / WRAPPER}: a kernel whose source no saved module was built from")
        path = self.directory / entry["file"]
        if not path.is_file():          # (checked here: a module this process loaded before would load without it)
            raise SavedKernelError(f"{path}: missing")
        # A kernel module reads, when loaded, where torch's tensor data pointer function is from this
        # variable, which Inductor sets the same way before it loads one (codecache.py)
        address = getattr(torch._C._dynamo.guards, "_torchinductor_pyobject_tensor_data_ptr", None)
        if address is None:
            raise SavedKernelError(f"{path}: this torch does not say where its kernels find tensor data")
        os.environ["_TORCHINDUCTOR_PYOBJECT_TENSOR_DATA_PTR"] = str(address)
        loader = importlib.machinery.ExtensionFileLoader(entry["module"], str(path))
        spec = importlib.util.spec_from_file_location(entry["module"], path, loader=loader)
        try:
            extension = importlib.util.module_from_spec(spec)
            loader.exec_module(extension)
        except ImportError as e:
            raise SavedKernelError(f"{path}: cannot load ({e})") from None
        return getattr(extension, entry["function"])

    def wait(self, scope: dict[str, Any]) -> None:
        """Every kernel was ready when made."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise SavedKernelError(f"{self.directory / WRAPPER}: asks its compiler for {name}, which korch does not save")


def _npz(path: Path) -> Mapping[str, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as f:
            return {k: f[k] for k in f.files}
    except (OSError, ValueError) as e:
        raise SavedKernelError(f"{path}: {type(e).__name__}: {e}") from None


def _make(directory: Path, name: str, param: Mapping[str, Any], graph: Graph,
          stored: Mapping[str, np.ndarray]) -> torch.Tensor:
    """The tensor `param` describes. A view of a graph constant does not hold the array it views:
    load_kernel holds those (the array of a plain weight packed here is held only until packed)."""
    if param["kind"] == "packed":
        plain, owner = _view(directory, name, param["dense"], graph, stored)
        with torch.no_grad():
            packed = REPACKS[param["op"]].make(plain, param["args"])
        del plain, owner
        release_freed_heap()             # else each dropped weight stays in the heap until the load ends
        return packed
    if param["kind"] == "shape":          # read for its shape alone: one element, broadcast
        dtype = torch.from_numpy(np.empty(0, np.dtype(param["dtype"]))).dtype
        return torch.zeros((1,) * len(param["size"]), dtype=dtype).expand(param["size"])
    return _view(directory, name, param, graph, stored)[0]


def _view(directory: Path, name: str, param: Mapping[str, Any], graph: Graph,
          stored: Mapping[str, np.ndarray]) -> tuple[torch.Tensor, np.ndarray]:
    """A view of a graph constant or a stored array, and that array (which the view does not hold)."""
    if param["kind"] == "constant":
        if param["constant"] not in graph.constants:
            raise SavedKernelError(f"{directory / META}: {name} is a view of {param['constant']}, not in the graph")
        array = graph.constants[param["constant"]]
        offset = param["offset"]
    else:
        array = np.ascontiguousarray(stored[param["array"]])
        offset = 0
    if array.dtype.str != param["dtype"] or not array.flags.c_contiguous:
        raise SavedKernelError(f"{directory / META}: {name} is {param['dtype']}, its array {array.dtype}")
    flat = torch.from_numpy(writable_alias(array).reshape(-1))
    if offset + _span(param["size"], param["stride"]) > flat.numel():
        raise SavedKernelError(f"{directory / META}: {name} reaches past its array")
    return flat.as_strided(param["size"], param["stride"], offset), array


def _caller(module: ModuleType, slots: Sequence[tuple[int | None, torch.Tensor | None]]
            ) -> Callable[..., tuple[torch.Tensor, ...]]:
    """The kernel's function: `call` of the wrapper, given the inputs in its order and the constants
    it takes as arguments (slots: (input index, None) or (None, constant))."""
    call = module.call
    if all(k == i for i, (k, _) in enumerate(slots)):
        def run(*inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
            return call(list(inputs))
    else:
        def run(*inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
            return call([inputs[k] if k is not None else c for k, c in slots])
    return run


def _check(directory: Path, kernel: InductorKernel) -> None:
    check = _npz(directory / CHECK)
    inputs = [check[f"in{k}"] for k in range(sum(k.startswith("in") for k in check))]
    expected = [check[f"out{k}"] for k in range(sum(k.startswith("out") for k in check))]
    k = _differ(kernel.run(inputs), expected)
    if k is not None:
        raise SavedKernelError(f"{directory}: output {k} differs from what the kernel gave when saved; "
                               "re-run korch optimize")


def _differ(got: Sequence[np.ndarray], expected: Sequence[np.ndarray], block: int = 1 << 20) -> int | None:
    """The first output of `got` that is not `expected`'s: another shape or dtype, other integers, or
    floats further apart than CHECK_RTOL of the output's largest finite magnitude (NaN matches NaN).
    Floats are compared `block` elements at a time (4 MB of float32): whole-array temporaries for
    gpt2-small's 26 MB of logits were the peak of its plan's load, 120 MB over what it holds running."""
    for k, (y, want) in enumerate(zip(got, expected)):
        if y.shape != want.shape or y.dtype != want.dtype:
            return k
        if want.dtype.kind == "f":
            flat_y, flat_want = np.ravel(y), np.ravel(want)
            blocks = [slice(i, i + block) for i in range(0, flat_want.size, block)]
            largest = (np.abs(np.nan_to_num(flat_want[b], nan=0.0, posinf=0.0, neginf=0.0)).max(initial=0.0)
                       for b in blocks)
            atol = CHECK_RTOL * max(1.0, max((float(m) for m in largest), default=0.0))
            if not all(np.allclose(flat_y[b], flat_want[b], rtol=0.0, atol=atol, equal_nan=True) for b in blocks):
                return k
        elif not np.array_equal(y, want):
            return k
    return None if len(got) == len(expected) else min(len(got), len(expected))
