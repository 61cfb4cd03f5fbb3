"""Where an exported zoo model is cached, computed without torch (korch/zoo/export.py writes it)."""

from __future__ import annotations

import hashlib
import os
from importlib import metadata
from pathlib import Path


def export_fingerprint() -> str:
    """What an exported zoo model depends on: the zoo's own source and the exporting libraries."""
    h = hashlib.sha256()
    for source in sorted(Path(__file__).parent.glob("*.py")):
        h.update(source.name.encode() + b"\0" + source.read_bytes())
    for package in ("torch", "onnx", "onnxscript"):
        try:
            h.update(f"{package}={metadata.version(package)};".encode())
        except metadata.PackageNotFoundError:
            h.update(f"{package}=none;".encode())
    return h.hexdigest()[:16]


def exported_path(name: str, cache_dir: str | os.PathLike, seed: int = 0) -> Path:
    """The file `cached_export` writes for this model and seed, keyed by export_fingerprint()."""
    return Path(cache_dir) / "zoo" / f"{name}-seed{seed}-{export_fingerprint()}.onnx"
