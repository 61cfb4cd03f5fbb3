"""A plan's schedule: which of its kernels run side by side, on how many threads each, in which order.

A schedule is a sequence of stages run one after another. A stage is one or more lanes that run at
the same time, each a chain of steps (indices into the plan's steps) run in order on its own
threads; a stage ends when all its lanes have. Lanes of one stage get disjoint thread budgets whose
sum is at most the plan's threads, so nothing is oversubscribed. A plan without a schedule runs its
steps one after another, each on all the plan's threads (`sequential`).

Legality is checked here, apart from how a schedule is chosen (korch/select/coschedule.py): every
step exactly once; each step's inputs are the graph's inputs, or made by a step of an earlier
stage, or by an earlier step of its own lane (never by another lane of its stage, which runs at the
same time).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from korch.errors import KorchError


class ScheduleError(KorchError):
    """A schedule that does not run its plan's steps once each, in an order their inputs allow."""


@dataclass(frozen=True)
class Lane:
    steps: tuple[int, ...]        # plan step indices, run in this order
    threads: int                  # the threads each of its kernels was compiled for


@dataclass(frozen=True)
class Schedule:
    stages: tuple[tuple[Lane, ...], ...]

    @property
    def concurrent_steps(self) -> int:
        """Steps that run beside another lane."""
        return sum(len(lane.steps) for stage in self.stages if len(stage) > 1 for lane in stage)

    @property
    def lanes(self) -> int:
        """The most lanes any stage runs at once."""
        return max((len(stage) for stage in self.stages), default=1)

    def step_threads(self, steps: int) -> tuple[int, ...]:
        """The thread count of each of `steps` steps."""
        threads = [0] * steps
        for stage in self.stages:
            for lane in stage:
                for k in lane.steps:
                    threads[k] = lane.threads
        return tuple(threads)

    def renumbered(self, steps: Sequence[int]) -> Schedule:
        """The same schedule with step k called steps[k] (raises IndexError for a step out of range)."""
        return Schedule(tuple(tuple(Lane(tuple(steps[k] for k in lane.steps), lane.threads) for lane in stage)
                              for stage in self.stages))

    def to_json(self) -> list[list[dict[str, object]]]:
        return [[{"steps": list(lane.steps), "threads": lane.threads} for lane in stage] for stage in self.stages]

    @staticmethod
    def from_json(data: object) -> Schedule:
        """Raises ScheduleError on anything that is not a list of stages of lanes."""
        try:
            stages = tuple(tuple(Lane(tuple(int(k) for k in lane["steps"]), int(lane["threads"])) for lane in stage)
                           for stage in data)  # type: ignore[union-attr]
        except (TypeError, KeyError, ValueError) as e:
            raise ScheduleError(f"not a schedule ({type(e).__name__}: {e})") from None
        return Schedule(stages)


def narrow_threads(threads: int) -> int:
    """A lane's threads when two run side by side (0: too few threads for two lanes)."""
    return threads // 2


def sequential(steps: int, threads: int) -> Schedule:
    """Each step alone, on all threads, in plan order."""
    return Schedule(tuple((Lane((k,), threads),) for k in range(steps)))


def check_schedule(schedule: Schedule, inputs: Sequence[str], step_inputs: Sequence[Sequence[str]],
                   step_outputs: Sequence[Sequence[str]], threads: int) -> None:
    """Raises ScheduleError naming the first step the schedule cannot run (module doc)."""
    n = len(step_inputs)
    seen: set[int] = set()
    ready = set(inputs)
    for s, stage in enumerate(schedule.stages, 1):
        if not stage or any(not lane.steps for lane in stage):
            raise ScheduleError(f"stage {s} has an empty lane")
        budget = sum(lane.threads for lane in stage)
        if any(lane.threads < 1 for lane in stage) or budget > threads:
            raise ScheduleError(f"stage {s} gives its lanes {[lane.threads for lane in stage]} threads; "
                                f"each needs at least 1 and the plan has {threads}")
        made = []
        for lane in stage:
            own = set(ready)
            for k in lane.steps:
                if not 0 <= k < n:
                    raise ScheduleError(f"stage {s} names step {k + 1}; the plan has {n}")
                if k in seen:
                    raise ScheduleError(f"step {k + 1} is scheduled twice")
                seen.add(k)
                missing = [v for v in step_inputs[k] if v not in own]
                if missing:
                    raise ScheduleError(f"step {k + 1} (stage {s}) reads {missing[:3]} before any step of an "
                                        "earlier stage or of its own lane makes them")
                own.update(step_outputs[k])
                made.extend(step_outputs[k])
        ready.update(made)
    if len(seen) != n:
        raise ScheduleError(f"steps {sorted(set(range(n)) - seen)[:5]} are never scheduled")
