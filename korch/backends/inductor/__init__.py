"""The Inductor backend (PyTorch's compiler) as a kernel provider; see backend.py. InductorBackend
(provider.py) imports torch only to compile."""

from korch.backends.inductor.provider import InductorBackend

__all__ = ["InductorBackend", "InductorKernel"]


def __getattr__(name: str) -> object:
    if name == "InductorKernel":
        from korch.backends.inductor.backend import InductorKernel

        return InductorKernel
    raise AttributeError(f"module 'korch.backends.inductor' has no attribute {name!r}")
