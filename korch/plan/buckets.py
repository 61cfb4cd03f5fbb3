"""A plan per shape bucket, for a model whose inputs have symbolic dims (korch/shapes.py).

On disk a bucketed plan is a directory: buckets.json (each bucket's input shapes and its plan's
subdirectory, and the model's inputs and outputs as declared, symbolic dims included), one plan
directory per bucket (bucket-0, bucket-1, ...; each a plan as plan.py saves it, checked by its own
manifest), and model/: the model itself, with its symbolic dims (original.onnx, its weights in
original.weights), which onnxruntime runs for inputs no bucket fits. A bucket whose weights file
holds the same bytes as model/original.weights (the usual case: fission leaves initializers as they
are) is a hard link to it where the file system allows, so each weight is stored once however many
buckets there are. manifest.json covers buckets.json and model/. Written to a temporary directory
beside the target and renamed into place.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from korch.ir.onnx_source import OnnxSource
from korch.plan.plan import (
    MANIFEST,
    WEIGHTS_FILE,
    Plan,
    PlanError,
    WeightsFile,
    _check_manifest,
    _save_source,
    _write_manifest,
    load_plan,
    save_plan,
    staged,
)
from korch.shapes import Dims, Shape, dims_of

if TYPE_CHECKING:
    import onnx

BUCKETS_FILE = "buckets.json"
BUCKETS_FORMAT = 1
FALLBACK_DIR = "model"
# The declared type of a model input or output: element type (ONNX's number) and dims, where a
# symbolic dim is its name and an unnamed one None.
Declared = tuple[int, Dims]


@dataclass(frozen=True)
class Bucket:
    shapes: Mapping[str, Shape]           # every input's static shape
    plan: Plan


@dataclass(frozen=True)
class BucketedPlan:
    """One plan per bucket, and the model's declared inputs and outputs for anything else."""

    buckets: tuple[Bucket, ...]
    inputs: Mapping[str, Declared]
    outputs: Mapping[str, Declared]
    # The model itself, with its symbolic dims: in memory after optimizing, read from model/ on first
    # use after loading (to save the plan again).
    source: OnnxSource | None = None

    @property
    def threads(self) -> int:
        return self.buckets[0].plan.threads


def declared(values) -> dict[str, Declared]:
    """Name -> (element type, dims) of ONNX value infos (graph inputs or outputs)."""
    return {v.name: (v.type.tensor_type.elem_type, dims_of(v)) for v in values}


def is_bucketed(directory: str | os.PathLike) -> bool:
    return (Path(directory) / BUCKETS_FILE).is_file()


def save_bucketed(plans: BucketedPlan, directory: str | os.PathLike) -> Path:
    if plans.source is None:
        raise ValueError("a bucketed plan is saved with its ONNX model (BucketedPlan.source)")
    with staged(directory) as tmp:
        (tmp / FALLBACK_DIR).mkdir()
        saved = _save_source(plans.source, tmp / FALLBACK_DIR)
        (tmp / FALLBACK_DIR / "value_map.json").unlink()
        weights = tmp / FALLBACK_DIR / WEIGHTS_FILE
        with open(weights, "rb") as f:
            digest = hashlib.file_digest(f, "sha256").hexdigest()
        # A bucket whose plan has no ONNX model of its own (kernels all from primitives) maps its
        # constants from the model's weights, as ../model/original.weights.
        shared = WeightsFile.of(saved, tmp / FALLBACK_DIR, f"../{FALLBACK_DIR}/{WEIGHTS_FILE}")
        entries = []
        for k, bucket in enumerate(plans.buckets):
            name = f"bucket-{k}"
            save_plan(bucket.plan, tmp / name, shared)
            _link_if_same(weights, digest, tmp / name)
            entries.append({"shapes": {n: list(s) for n, s in bucket.shapes.items()}, "plan": name})
        meta = {"format": BUCKETS_FORMAT, "buckets": entries,
                "inputs": {n: [t, list(d)] for n, (t, d) in plans.inputs.items()},
                "outputs": {n: [t, list(d)] for n, (t, d) in plans.outputs.items()}}
        (tmp / BUCKETS_FILE).write_text(json.dumps(meta, indent=1))
        _write_manifest(tmp, skip_dirs=tuple(e["plan"] for e in entries))
    return Path(directory)


def _link_if_same(weights: Path, digest: str, bucket: Path) -> None:
    """Make the bucket's weights file a hard link to `weights` when both hold the same bytes (the
    bucket's manifest says which), so each weight is stored once; a copy stays where links are refused."""
    entry = json.loads((bucket / MANIFEST).read_text())["files"].get(WEIGHTS_FILE)
    if entry is None or entry["sha256"] != digest:
        return
    linked = bucket / f".{WEIGHTS_FILE}.link"
    try:
        os.link(weights, linked)
    except OSError:
        return
    os.replace(linked, bucket / WEIGHTS_FILE)


def load_bucketed(directory: str | os.PathLike, korch_version: str, machine: str,
                  check_origin: bool = True) -> BucketedPlan:
    path = Path(directory)
    try:
        meta = json.loads((path / BUCKETS_FILE).read_text())
    except (OSError, ValueError) as e:
        raise PlanError(f"{path}: damaged plan ({BUCKETS_FILE}: {type(e).__name__}: {e})") from None
    if not isinstance(meta, dict) or meta.get("format") != BUCKETS_FORMAT:
        raise PlanError(f"{path}: bucketed plan format {meta.get('format') if isinstance(meta, dict) else None} "
                        f"is not {BUCKETS_FORMAT}; re-run korch optimize")
    _check_manifest(path)
    try:
        entries = [(dict((n, tuple(int(d) for d in s)) for n, s in e["shapes"].items()), str(e["plan"]))
                   for e in meta["buckets"]]
        inputs = {n: (int(t), tuple(d)) for n, (t, d) in meta["inputs"].items()}
        outputs = {n: (int(t), tuple(d)) for n, (t, d) in meta["outputs"].items()}
    except (KeyError, TypeError, ValueError) as e:
        raise PlanError(f"{path}: damaged plan ({BUCKETS_FILE}: {type(e).__name__}: {e})") from None
    if not entries:
        raise PlanError(f"{path}: damaged plan ({BUCKETS_FILE} lists no bucket)")
    buckets = []
    for shapes, name in entries:
        if "/" in name or name.startswith("."):
            raise PlanError(f"{path}: damaged plan ({BUCKETS_FILE} names bucket directory {name!r})")
        buckets.append(Bucket(shapes, load_plan(path / name, korch_version, machine, check_origin)))
    return BucketedPlan(tuple(buckets), inputs, outputs, OnnxSource.deferred(lambda: _read_model(path), path / FALLBACK_DIR))


def _read_model(path: Path) -> tuple[onnx.ModelProto, dict[str, str]]:
    """model/original.onnx without its weights (they stay in model/original.weights)."""
    import onnx

    try:
        return onnx.load(str(fallback_model(path)), load_external_data=False), {}
    except (OSError, ValueError) as e:
        raise PlanError(f"{path}: damaged plan ({FALLBACK_DIR}/original.onnx: {type(e).__name__}: {e})") from None


def fallback_model(directory: str | os.PathLike) -> Path:
    """The model itself, as saved in a bucketed plan (its weights beside it)."""
    return Path(directory) / FALLBACK_DIR / "original.onnx"
