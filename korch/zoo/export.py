"""Building seeded zoo modules, drawing example inputs and exporting them to clean ONNX models."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
import uuid
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import onnx
import onnx.inliner
import torch
from torch import nn

from korch.logs import only_errors
from korch.zoo.files import export_fingerprint, exported_path  # noqa: F401  (export_fingerprint: re-exported)
from korch.zoo.registry import InputSpec, ZooModel, get_model

OPSET = 18
IR_VERSION = 10
BN_CALIBRATION_STEPS = 2


def _random_tensor(spec: InputSpec, gen: torch.Generator, batch: int | None = None) -> torch.Tensor:
    shape = spec.shape if batch is None else (batch, *spec.shape[1:])
    if spec.dtype == "int64":
        assert spec.high is not None
        return torch.randint(0, spec.high, shape, generator=gen, dtype=torch.int64)
    return torch.randn(shape, generator=gen, dtype=torch.float32)


def recalibrate_batchnorm(module: nn.Module, model: ZooModel, seed: int) -> None:
    """Re-estimate BN running stats: train mode, momentum=None (cumulative average), a few no-grad
    passes on random inputs of batch model.calibration_batch. The caller switches to eval mode."""
    bns = [m for m in module.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    if not bns:
        return
    for bn in bns:
        bn.reset_running_stats()
        bn.momentum = None
    gen = torch.Generator().manual_seed(seed + 7919)
    module.train()
    with torch.no_grad():
        for _ in range(BN_CALIBRATION_STEPS):
            module(*[_random_tensor(s, gen, model.calibration_batch) for s in model.inputs])


def build_module(name: str, seed: int = 0) -> nn.Module:
    """Deterministically initialised module in eval mode, with BatchNorm statistics recalibrated."""
    model = get_model(name)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        module = model.build()
    recalibrate_batchnorm(module, model, seed)
    module.eval()
    for p in module.parameters():
        p.requires_grad_(False)
    return module


def example_inputs(name: str, seed: int = 0) -> dict[str, np.ndarray]:
    """Random inputs keyed by input name: standard normal floats, uniform ints in [0, high)."""
    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    for spec in get_model(name).inputs:
        if spec.dtype == "int64":
            out[spec.name] = rng.integers(0, spec.high, size=spec.shape, dtype=np.int64)
        else:
            out[spec.name] = rng.standard_normal(spec.shape, dtype=np.float32)
    return out


def _check_standard_ops(proto: onnx.ModelProto) -> None:
    bad = {f"{n.domain}::{n.op_type}" for n in proto.graph.node if n.domain not in ("", "ai.onnx")}
    if proto.functions or bad:
        detail = f"functions={len(proto.functions)} ops={sorted(bad)}"
        raise RuntimeError(f"exported graph is not plain ONNX: {detail}")


def to_model_proto(name: str, seed: int = 0) -> onnx.ModelProto:
    """Export the seeded module with the dynamo exporter (opset 18, static shapes, embedded weights)."""
    model = get_model(name)
    module = build_module(name, seed)
    args = tuple(torch.from_numpy(a) for a in example_inputs(name, seed).values())
    quiet = contextlib.redirect_stdout(io.StringIO())
    # only_errors: the exporter logs informational lines (e.g. "torchvision is not installed")
    with warnings.catch_warnings(), quiet, only_errors("torch.onnx"):
        warnings.simplefilter("ignore")
        program = torch.onnx.export(
            module,
            args,
            dynamo=True,
            opset_version=OPSET,
            input_names=[s.name for s in model.inputs],
            output_names=list(model.outputs),
            external_data=False,
            optimize=True,
        )
    assert program is not None
    proto = program.model_proto
    if proto.functions:
        proto = onnx.inliner.inline_local_functions(proto)
    proto.ir_version = IR_VERSION
    proto.producer_name = "korch.zoo"
    proto.graph.name = name
    _check_standard_ops(proto)
    onnx.checker.check_model(proto, full_check=True)
    return proto


def export_onnx(name: str, path: str | os.PathLike, seed: int = 0) -> None:
    """Write the model to `path` atomically (temp file in the same directory, then os.replace)."""
    _write_atomic(to_model_proto(name, seed), path)


def cached_export(name: str, cache_dir: str | os.PathLike, seed: int = 0) -> Path:
    """The zoo model as an ONNX file under `cache_dir/zoo`, exported on first use.

    Building and exporting takes 3-30 s (most of a warm `korch optimize`); the file is keyed by
    model, seed and export_fingerprint(), so a changed zoo or exporter makes a new one. The export
    runs in a child process: torch's exporter keeps the module's parameters alive after it returns
    (bert-base: 414 MB, held through the rest of a cold optimize, which a user's own file never
    pays). Raises OSError if the child fails; building in this process then shows why."""
    get_model(name)    # unknown names fail here, before anything is written
    path = exported_path(name, cache_dir, seed)
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        _export_in_child(name, path, seed)
    return path


_CHILD_EXPORT = """
import sys
name, path, seed, root = sys.argv[1:]
if root not in sys.path:
    sys.path.insert(0, root)
from korch.zoo.export import export_onnx
export_onnx(name, path, int(seed))
"""


def _export_in_child(name: str, path: Path, seed: int) -> None:
    """A fresh interpreter running export_onnx from this very korch. (Not multiprocessing: spawn
    re-runs the caller's __main__, a user's script, in the child.) The directory holding this korch
    goes on the child's path only if it is not there already: put ahead of everything through
    PYTHONPATH, an installed korch's site-packages would come before the standard library."""
    root = str(Path(__file__).resolve().parents[2])
    child = subprocess.run([sys.executable, "-c", _CHILD_EXPORT, name, os.fspath(path), str(seed), root],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if child.returncode != 0:
        lines = [line for line in child.stderr.splitlines() if line.strip()]
        reason = lines[-1] if lines else f"the exporting process exited with code {child.returncode}"
        raise OSError(f"exporting zoo model {name} to {path} failed: {reason}")


def _write_atomic(proto: onnx.ModelProto, path: str | os.PathLike) -> None:
    target = os.fspath(path)
    directory, base = os.path.split(os.path.abspath(target))
    tmp = os.path.join(directory, f".{base}.{uuid.uuid4().hex}.tmp")
    try:
        with open(tmp, "xb") as f:  # "x": never clobber; default permissions honour the umask
            f.write(proto.SerializeToString())
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def torch_compiled(module: nn.Module, args: Sequence[torch.Tensor], freezing: bool) -> Callable[[], object]:
    """`module` under torch.compile, called on `args` with grad off, compiled (by its first call, here)
    with Inductor's freezing on or off. Dynamo reads the flag while it traces, so it is set around
    that call: `torch.compile(options={"freezing": True})` sets it only inside Inductor, after Dynamo
    has traced, and froze nothing (gpt2-small at 2 threads: 81.7 ms with it, 81.6 ms off, 64.0 ms
    frozen, 2026-11-26). korch bench's torch.compile peer."""
    compiled = torch.compile(module)

    def call() -> object:
        with torch.no_grad():
            return compiled(*args)

    with torch._inductor.config.patch(freezing=freezing):
        call()
    return call


def fastest_torch_compiled(build: Callable[[], nn.Module], args: Sequence[torch.Tensor],
                           seconds: Callable[[Callable[[], object]], float]
                           ) -> tuple[Callable[[], object], bool, nn.Module]:
    """The faster by `seconds` of a module from `build` under torch.compile with freezing off and on:
    the call, whether it is frozen, and its module. Each is compiled alone, after torch._dynamo.reset():
    Dynamo keeps every graph it compiled for the module's forward, and a call runs the newest one
    whose guards pass, so a module compiled frozen ran an unfrozen twin's code once that was compiled
    (gpt2-small at 2 threads: 69.2 ms alone, 89.7 ms after the twin, 2026-11-26)."""
    times = {}
    for freezing in (False, True):
        torch._dynamo.reset()
        module = build()
        call = torch_compiled(module, args, freezing)
        times[freezing] = seconds(call)
    if times[False] < times[True]:           # the frozen one was compiled last: compile the other alone again
        torch._dynamo.reset()
        module = build()
        return torch_compiled(module, args, False), False, module
    return call, True, module
