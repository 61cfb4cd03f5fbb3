"""The OpenVINO backend (Intel's inference engine, CPU plugin) as a kernel provider; see backend.py."""

from korch.backends.openvino.backend import OpenVinoBackend, OpenVinoError, OpenVinoKernel

__all__ = ["OpenVinoBackend", "OpenVinoError", "OpenVinoKernel"]
