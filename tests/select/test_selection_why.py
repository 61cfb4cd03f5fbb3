"""What measured selection says it kept, and why, names the comparison that decided it."""

from __future__ import annotations

from types import SimpleNamespace

from korch.select.measured import SPLIT, Duel, _why_whole
from korch.settings import SelectionSettings


def test_a_split_plan_that_beat_one_engine_and_lost_to_another_is_reported_by_the_duel_it_lost() -> None:
    ctx = SimpleNamespace(settings=SimpleNamespace(selection=SelectionSettings(multi_kernel_margin=0.98)))
    split = SimpleNamespace(plan=SimpleNamespace(steps=tuple(range(8))), measured_s=0.0806, predicted_s=0.079)
    duels = [Duel(SPLIT, "openvino", 0.0806, 0.0826, SPLIT),          # the split plan wins this one
             Duel(SPLIT, "inductor", 0.0830, 0.0842, "inductor")]     # and loses this one, by the margin
    why = _why_whole(ctx, "inductor", split, duels, {})               # type: ignore[arg-type]
    assert why == ("one engine runs the whole model: the best split plan (8 kernels) measured 83.0 ms side by "
                   "side with inductor's whole model 84.2 ms; a split plan must be 2% faster to pay for its "
                   "boundaries; kept inductor's whole model 84.2 ms (other whole models, side by side: "
                   "openvino's 82.6 ms)")
