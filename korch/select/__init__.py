"""Kernel selection: the exact binary linear program of the Korch method."""

from korch.select.blp import Option, Selection, SelectionError, SolveStats, SolveTally, solve

__all__ = ["Option", "Selection", "SelectionError", "SolveStats", "SolveTally", "solve"]
