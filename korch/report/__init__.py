"""Showing and explaining saved plans: the HTML report, `korch explain` and `korch diff`."""

from korch.report.alternatives import Outcome, ProfileIndex, Rival
from korch.report.diff import PlanDiff, diff_plans, format_diff
from korch.report.explain import explain
from korch.report.facts import Kernel, PlanFacts, load_facts
from korch.report.html import render_html, write_report

__all__ = ["Kernel", "Outcome", "PlanDiff", "PlanFacts", "ProfileIndex", "Rival", "diff_plans", "explain",
           "format_diff", "load_facts", "render_html", "write_report"]
