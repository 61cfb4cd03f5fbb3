"""Kernel providers behind one contract (see base.py), registered by name.

Factories import their libraries on first use, so a plan that uses no Inductor kernel never loads
torch (hundreds of MB of resident memory), and one with no OpenVINO kernel never loads openvino.
"""

import importlib.util

from korch.backends.base import Backend, CompileOptions, Kernel, backend_names, get_backend, register_backend


def _reference() -> Backend:
    from korch.backends.reference.backend import ReferenceBackend

    return ReferenceBackend()


def _onnxruntime() -> Backend:
    from korch.backends.onnxruntime import OnnxRuntimeBackend

    return OnnxRuntimeBackend()


def _inductor() -> Backend:
    from korch.backends.inductor import InductorBackend

    return InductorBackend()


def _openvino() -> Backend:
    from korch.backends.openvino import OpenVinoBackend

    return OpenVinoBackend()


register_backend("reference", _reference)
register_backend("onnxruntime", _onnxruntime)
if importlib.util.find_spec("torch") is not None:      # torch is an optional extra
    register_backend("inductor", _inductor)
if importlib.util.find_spec("openvino") is not None:   # so is openvino
    register_backend("openvino", _openvino)

__all__ = ["Backend", "CompileOptions", "Kernel", "backend_names", "get_backend", "register_backend"]
