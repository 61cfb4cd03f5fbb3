"""A model file as an optimize takes it, remembered in the profile cache: loaded with its shapes
fixed, rewritten and checked, fissioned, its weights held once (regions.share_weights). A warm
optimize of yolov4 spent 5.4 of its 9.4 s (under cProfile) doing all of that again: loading and
checking 1.0 s, the rewrites 3.2 s, fission 1.0 s. It reads the stored form instead, the weights
mapped from one file (ir/packed.py).

An entry is keyed by everything its content depends on: the file's bytes, the input shapes asked
for, strict and rewrite, the rewrite check's seed and accuracy policy, korch's code, and the versions
of onnx, onnxruntime and numpy; a model's external data files are recorded with their digests and
compared. There is one entry per model file and shapes, which a miss replaces; an entry unused for
OptimizeSettings.kept_kernel_days is removed when another is stored (as compiled kernels are: the
entry of a model file deleted since is never found again). An entry is never
trusted as read: its graph and model are compared with the digests stored beside them, and its
constants with the digest of their values (which the optimize computes anyway, to key what it
remembers about these weights); any fault is a warning and a miss.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import onnx
from google.protobuf.message import DecodeError

from korch.frontend.fission.driver import OpaqueNode
from korch.io import prune_now_and_then, touch
from korch.ir.graph import Graph, constant_digest
from korch.ir.onnx_source import OnnxSource
from korch.ir.packed import PackedError, Placed, map_arrays, span, write_arrays
from korch.ir.serialize import graph_from_json, graph_to_json
from korch.settings import AccuracyPolicy
from korch.version import code_version

log = logging.getLogger("korch.frontend")

PREPARED_DIR = "prepared"
FORMAT = 1
ENTRY, GRAPH, MODEL, WEIGHTS = "entry.json", "graph.json", "model.onnx", "weights.bin"
# The bytes of an external-data record's key, "location" (field 1 of a StringStringEntryProto, 8 bytes
# long): a model file without them has no external data, and need not be parsed to know it.
_LOCATION_KEY = b"\x0a\x08location"
_READ_BLOCK = 1 << 24


@dataclass(frozen=True)
class Prepared:
    """The model korch optimizes, and how it came to be."""

    source: OnnxSource                  # the (rewritten) model, its weights the graph's constants (share_weights)
    graph: Graph                        # its primitive graph
    opaque: tuple[OpaqueNode, ...]      # ONNX nodes kept whole
    rewrites: tuple[str, ...]           # the rewrites kept, in words
    rewritten: bool                     # rewrites changed the model: plans are checked against the file as given
    load_seconds: float = 0.0
    fission_seconds: float = 0.0
    remembered: bool = False            # read back from an earlier run's entry, not prepared again


class PreparedError(ValueError):
    """A stored entry does not hold what it says it does."""


def _file_digest(path: Path) -> tuple[str, bool]:
    """SHA-256 of a file's bytes, and whether they hold an external-data record's key."""
    h, found, tail = hashlib.sha256(), False, b""
    with open(path, "rb") as f:
        while block := f.read(_READ_BLOCK):
            h.update(block)
            found = found or _LOCATION_KEY in tail + block[:len(_LOCATION_KEY)] or _LOCATION_KEY in block
            tail = block[-len(_LOCATION_KEY):]
    return h.hexdigest(), found


def _external_files(path: Path) -> list[str]:
    """The external data files a model file's tensors name, relative to its directory."""
    model = onnx.load(str(path), load_external_data=False)
    found: set[str] = set()

    def visit(graph: onnx.GraphProto) -> None:
        tensors = list(graph.initializer)
        for node in graph.node:
            for attr in node.attribute:
                tensors += [attr.t] if attr.HasField("t") else []
                tensors += list(attr.tensors)
                for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                    visit(sub)
        for t in tensors:
            if t.data_location == onnx.TensorProto.EXTERNAL:
                found.update(e.value for e in t.external_data if e.key == "location")
    visit(model.graph)
    return sorted(found)


class PreparedEntry:
    """Where a model file's prepared form is stored in `cache_dir`, and the key it must carry."""

    def __init__(self, cache_dir: Path, model_file: str | os.PathLike, input_shapes: Mapping[str, Sequence[int]] | None,
                 strict: bool, rewrite: bool, seed: int, accuracy: AccuracyPolicy, max_age_s: float) -> None:
        import onnxruntime

        self.max_age_s = max_age_s
        self.model_file = Path(model_file).resolve()
        shapes = {k: [int(d) for d in v] for k, v in sorted((input_shapes or {}).items())}
        where = json.dumps([str(self.model_file), shapes])
        self.directory = Path(cache_dir) / PREPARED_DIR / hashlib.sha256(where.encode()).hexdigest()[:24]
        digest, self.has_external = _file_digest(self.model_file)
        asked = {"file": digest, "shapes": shapes, "strict": strict, "rewrite": rewrite, "seed": seed,
                 "accuracy": repr(accuracy), "korch": code_version(), "onnx": onnx.__version__,
                 "onnxruntime": onnxruntime.__version__, "numpy": np.__version__}
        self.key = hashlib.sha256(json.dumps(asked, sort_keys=True).encode()).hexdigest()

    def load(self) -> Prepared | None:
        """The stored form, if this key's and intact; None (a miss) otherwise, with a warning for a damaged one."""
        if not (self.directory / ENTRY).is_file():
            return None
        try:
            meta = json.loads((self.directory / ENTRY).read_text())
            if not isinstance(meta, dict) or meta.get("format") != FORMAT:
                raise PreparedError(f"{ENTRY} is not of format {FORMAT}")
            if meta.get("key") != self.key:
                log.info("fission: the model, its options or korch changed since %s was stored", self.directory)
                return None
            for name, digest in meta["external"].items():
                try:
                    now = _file_digest(self.model_file.parent / name)[0]
                except OSError:
                    now = None                  # (gone or unreadable: loading the model says so)
                if now != digest:
                    log.info("fission: the model's external data %s changed since it was stored", name)
                    return None
            prepared = self._read(meta)
            touch(self.directory)
            return prepared
        except (OSError, ValueError, KeyError, TypeError, PackedError, DecodeError) as e:
            log.warning("fission: the stored form of %s in %s is damaged (%s); preparing the model again",
                        self.model_file, self.directory, e)
            return None

    def _read(self, meta: dict) -> Prepared:
        texts = {}
        for name in (GRAPH, MODEL):
            texts[name] = (self.directory / name).read_bytes()
            if hashlib.sha256(texts[name]).hexdigest() != meta["files"][name]:
                raise PreparedError(f"{name} differs from the digest stored with it")
        placed = {f"c/{n}": Placed.from_json(e) for n, e in meta["constants"].items()}
        placed.update({f"a/{n}": Placed.from_json(e) for n, e in meta["arrays"].items()})
        mapped = map_arrays(self.directory / WEIGHTS, placed)
        graph = graph_from_json(json.loads(texts[GRAPH]), {n: mapped[f"c/{n}"] for n in meta["constants"]})
        if graph.constants_digest() != meta["digest"]:
            raise PreparedError(f"the constants in {WEIGHTS} differ from the digest stored with them")
        arrays = {n: mapped[f"a/{n}"] for n in meta["arrays"]}
        for name, digest in meta["unshared"].items():
            if constant_digest(arrays[name]) != digest:
                raise PreparedError(f"initializer {name!r} in {WEIGHTS} differs from the digest stored with it")
        model = onnx.ModelProto()
        model.ParseFromString(texts[MODEL])
        source = OnnxSource(model, {str(k): str(v) for k, v in meta["value_map"].items()}, arrays=arrays)
        return Prepared(source, graph, tuple(OpaqueNode(**o) for o in meta["opaque"]), tuple(meta["rewrites"]),
                        bool(meta["rewritten"]), remembered=True)

    def store(self, prepared: Prepared) -> None:
        """Replace the entry with `prepared`, written whole beside it first: a reader never sees half of
        one. A failure to write is a warning; the optimize goes on without it."""
        parent = self.directory.parent
        staging = None
        try:
            parent.mkdir(parents=True, exist_ok=True)
            staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=parent))
            staging.chmod(0o755)                # (mkdtemp's 0o700: the cache's other directories are 0o755)
            self._write(staging, prepared)
            if self.directory.exists():
                old = Path(tempfile.mkdtemp(prefix=".old-", dir=parent))
                os.replace(self.directory, old / "entry")
                shutil.rmtree(old, ignore_errors=True)
            os.replace(staging, self.directory)
            staging = None
            prune_now_and_then(parent, self.max_age_s, what="prepared model(s)")
        except (OSError, ValueError, PackedError) as e:
            log.warning("fission: cannot store the prepared model in %s (%s); the next run prepares it again",
                        parent, e)
        finally:
            if staging is not None:
                shutil.rmtree(staging, ignore_errors=True)

    def _write(self, directory: Path, prepared: Prepared) -> None:
        graph, source = prepared.graph, prepared.source
        placed = write_arrays(directory / WEIGHTS, {**{f"c/{n}": a for n, a in graph.constants.items()},
                                                    **{f"a/{n}": a for n, a in source.arrays.items()}})
        texts = {GRAPH: json.dumps(graph_to_json(graph)).encode(), MODEL: source.model.SerializeToString()}
        for name, text in texts.items():
            (directory / name).write_bytes(text)
        spans = {span(a) for a in graph.constants.values() if a.size}
        external = _external_files(self.model_file) if self.has_external else []
        meta = {
            "format": FORMAT, "key": self.key,
            "files": {name: hashlib.sha256(text).hexdigest() for name, text in texts.items()},
            "external": {name: _file_digest(self.model_file.parent / name)[0] for name in external},
            "constants": {n: placed[f"c/{n}"].to_json() for n in graph.constants},
            "arrays": {n: placed[f"a/{n}"].to_json() for n in source.arrays},
            "digest": graph.constants_digest(),
            # initializers that are not a constant's memory, which the constants' digest does not cover
            "unshared": {n: constant_digest(a) for n, a in source.arrays.items() if a.size and span(a) not in spans},
            "value_map": dict(source.value_map), "opaque": [asdict(o) for o in prepared.opaque],
            "rewrites": list(prepared.rewrites), "rewritten": prepared.rewritten,
        }
        (directory / ENTRY).write_text(json.dumps(meta))
