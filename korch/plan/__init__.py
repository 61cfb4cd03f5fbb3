"""Plans: the chosen kernels in execution order, saved as a directory and loaded back."""

from korch.plan.plan import Plan, PlanError, Step, load_plan, order_steps, save_plan

__all__ = ["Plan", "PlanError", "Step", "load_plan", "order_steps", "save_plan"]
