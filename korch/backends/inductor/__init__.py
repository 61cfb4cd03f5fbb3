"""The Inductor backend (PyTorch's compiler) as a kernel provider; see backend.py."""

from korch.backends.inductor.backend import InductorBackend, InductorKernel

__all__ = ["InductorBackend", "InductorKernel"]
