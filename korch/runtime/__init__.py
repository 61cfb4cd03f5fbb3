"""Running a plan: compile its steps once, then dispatch them with as little overhead as possible."""

from korch.runtime.session import KernelRunError, RunError, Session, compile_plan, load

__all__ = ["KernelRunError", "RunError", "Session", "compile_plan", "load"]
