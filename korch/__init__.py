"""korch: optimal kernel orchestration for ONNX inference graphs (after Korch, ASPLOS 2024)."""

import os as _os
import sys as _sys

# A plan runs Inductor (OpenMP) kernels next to onnxruntime ones. libgomp's default busy-wait of
# 300,000 spins after each parallel region keeps both cores busy while the next onnxruntime kernel
# runs: candy's plan took 81.7 ms with 1,000,000 spins, 55.2 ms with 100,000, 49.4 ms with 10,000
# (its kernels' profiled sum: 43.1 ms); torch.compile of the whole candy model runs at the same
# speed with 10,000 (43.1 ms) as with the default (43.2 ms). libgomp reads this when torch loads,
# so it only takes effect if korch is imported first; a value the user set is kept.
OPENMP_SPIN_COUNT = "10000"
if "torch" not in _sys.modules:
    _os.environ.setdefault("GOMP_SPINCOUNT", OPENMP_SPIN_COUNT)

# numpy's OpenBLAS likewise keeps its worker threads spinning for 2^28 cycles (~0.1 s) after each
# call. The profiler computes reference values with numpy between kernels: an Inductor kernel timed
# right after a numpy matmul ran 2.2x slow (7.3 against 3.3 ms, a 128x768 @ 768x3072 linear), its
# OpenMP worker sharing a CPU with OpenBLAS's spinning one, and bert-base's Inductor kernels profiled
# at 3 or 6-7 ms from one run to the next. 2^4 cycles: they sleep at once. Read when numpy loads.
OPENBLAS_SPIN_EXPONENT = "4"
if "numpy" not in _sys.modules:
    _os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", OPENBLAS_SPIN_EXPONENT)
# Whether they do in this process (numpy loaded after this, with at most 2^4 cycles): profile records
# say so (profiler.record_version), since kernels timed beside a spinning one read slow.
OPENBLAS_QUIET = "numpy" not in _sys.modules and _os.environ["OPENBLAS_THREAD_TIMEOUT"].strip() in ("1", "2", "3", "4")

from korch.errors import KorchError  # noqa: E402  (after the spin settings, as every import here)

# The public API, imported on first use: running a saved plan (korch.runtime) should not load the
# optimizer (korch.api -> pipeline -> selection, with scipy's solvers: ~20 MB of resident memory or
# more), and a submodule imported on its own pays only for what it imports.
_PUBLIC = {"compile": "korch.api", "load": "korch.api", "optimize": "korch.api", "save": "korch.api",
           "fission": "korch.frontend", "load_model": "korch.frontend",
           "DType": "korch.ir", "Graph": "korch.ir", "PrimClass": "korch.ir", "TensorType": "korch.ir",
           "VerifyReport": "korch.verify", "verify_graph": "korch.verify"}
__all__ = ["KorchError", *sorted(_PUBLIC)]


def __getattr__(name: str) -> object:
    if name == "__version__":               # the installed package's metadata (korch/version.py)
        from korch.version import package_version

        return package_version()
    if name not in _PUBLIC:
        raise AttributeError(f"module 'korch' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(_PUBLIC[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_PUBLIC, "__version__"})
