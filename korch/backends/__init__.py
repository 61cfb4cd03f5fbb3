"""Kernel providers behind one contract (see base.py), registered by name."""

from korch.backends.base import Backend, CompileOptions, Kernel, backend_names, get_backend, register_backend


def _register_builtin() -> None:
    from korch.backends.onnxruntime import OnnxRuntimeBackend
    from korch.backends.reference.backend import ReferenceBackend

    register_backend("reference", ReferenceBackend)
    register_backend("onnxruntime", OnnxRuntimeBackend)
    try:
        from korch.backends.inductor import InductorBackend
    except ImportError:          # torch is an optional extra
        return
    register_backend("inductor", InductorBackend)


_register_builtin()

__all__ = ["Backend", "CompileOptions", "Kernel", "backend_names", "get_backend", "register_backend"]
