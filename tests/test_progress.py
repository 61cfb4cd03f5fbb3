"""The optimize progress bar: an ETA from the current backend's own rate, and a line whenever the
backend changes or a long item has kept it silent (on a fake clock, into a string)."""

from __future__ import annotations

import io

from korch.cli import ProgressBar


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _profile(bar: ProgressBar, clock: Clock, items: list[tuple[str, float]]) -> None:
    """Items (backend, seconds), in the order given, reported as the profiler reports them."""
    totals = {what: sum(1 for w, _ in items if w == what) for what, _ in items}
    seen: dict[str, int] = {}
    for done, (what, each) in enumerate(items, 1):
        clock.now += each
        seen[what] = seen.get(what, 0) + 1
        bar(done, len(items), what, (seen[what], totals[what]))


def test_eta_adds_up_each_backends_own_rate_over_interleaved_items() -> None:
    clock, out = Clock(), io.StringIO()
    bar = ProgressBar("profiling", True, stream=out, clock=clock)
    items = [("onnxruntime", 0.1)] * 9 + [("inductor", 50.0)] + [("onnxruntime", 0.1)] * 11 + [("inductor", 50.0)]
    _profile(bar, clock, items)
    lines = out.getvalue().splitlines()
    # after 16: onnxruntime 15 done in 1.4 s (the first item is the clock's start), 5 left; inductor 1 of 2 at 50 s
    at_16 = next(line for line in lines if line.startswith("profiling 16/22"))
    assert "ETA 50s [onnxruntime 15/20]" in at_16, at_16
    # after 5: onnxruntime at 0.08 s each, 15 left; inductor not seen yet, its 2 counted apart
    at_5 = next(line for line in lines if line.startswith("profiling 5/22"))
    assert "ETA 1s + 2 more of other kinds" in at_5, at_5
    assert lines[-1].startswith("profiling 22/22 (100%) 102s elapsed, ETA 0s [inductor 2/2]"), lines[-1]


def test_a_line_per_tenth_per_new_backend_and_after_a_long_silence() -> None:
    clock, out = Clock(), io.StringIO()
    bar = ProgressBar("profiling", True, stream=out, clock=clock, quiet_s=60.0)
    # 970 quick items alternating between two backends, then inductor's 30 at 25 s each (750 s)
    items = [("onnxruntime" if k % 2 else "openvino", 0.01) for k in range(970)] + [("inductor", 25.0)] * 30
    _profile(bar, clock, items)
    lines = out.getvalue().splitlines()
    quick = [line for line in lines if "[inductor" not in line]
    assert len(quick) <= 12, quick                                   # not a line at every alternation
    inductor = [line for line in lines if "[inductor" in line]
    assert "[inductor 1/30]" in inductor[0] and len(inductor) >= 10, inductor    # every ~60 s, not only at 100%


def test_without_a_part_the_eta_is_the_overall_rate_and_a_disabled_bar_says_nothing() -> None:
    clock, out = Clock(), io.StringIO()
    bar = ProgressBar("calibrating", True, stream=out, clock=clock)
    for done in range(1, 5):
        clock.now += 2.0
        bar(done, 4, "boundary onnxruntime->openvino")
    assert out.getvalue().splitlines()[0] == "calibrating 1/4 (25%) 0s elapsed, ETA 0s [boundary onnxruntime->openvino]"
    quiet = io.StringIO()
    _profile(ProgressBar("profiling", False, stream=quiet, clock=clock), clock, [("onnxruntime", 1.0)] * 3)
    assert quiet.getvalue() == ""


def test_with_work_the_eta_is_per_unit_of_work_so_large_items_left_count_for_more() -> None:
    """Inductor's largest regions come last: 40 small kernels at 0.25 s, then 4 regions of work 100 at
    25 s each. Counting items, 4 left of 44 at 0.25 s read "ETA 1s"; by work, 400 units at 0.25 s."""
    clock, out = Clock(), io.StringIO()
    bar = ProgressBar("profiling", True, stream=out, clock=clock, quiet_s=1.0)
    sizes = [1.0] * 40 + [100.0] * 4
    total_work, worked = sum(sizes), 0.0
    for done, size in enumerate(sizes, 1):
        clock.now += 0.25 * size
        worked += size
        bar(done, len(sizes), "inductor", (done, len(sizes)), (worked, total_work))
    lines = out.getvalue().splitlines()
    at_40 = next(line for line in lines if line.startswith("profiling 40/44"))
    assert "ETA 98s [inductor 40/44]" in at_40, at_40    # 40 units in 9.75 s (the first item is the start): 400 x 0.244
    at_42 = next(line for line in lines if line.startswith("profiling 42/44"))
    assert "ETA 50s" in at_42, at_42


def test_a_count_of_zero_starts_the_clock_so_a_long_first_item_counts() -> None:
    """Compiling ahead: 4 regions, the first to finish after 57 s. Without the start, the bar's clock
    began at the first item's end and read "4/4 16s elapsed" after 73 s."""
    clock, out = Clock(), io.StringIO()
    bar = ProgressBar("profiling", True, stream=out, clock=clock)
    bar(0, 4, "compiling ahead", (0, 4), (0.0, 4.0))
    for done, at in enumerate([57.0, 60.0, 70.0, 73.0], 1):
        clock.now = at
        bar(done, 4, "compiling ahead", (done, 4), (float(done), 4.0))
    lines = out.getvalue().splitlines()
    assert lines[0] == "profiling 0/4 (0%) [compiling ahead 0/4]", lines
    assert lines[1].startswith("profiling 1/4 (25%) 57s elapsed, ETA 171s"), lines[1]
    assert lines[-1].startswith("profiling 4/4 (100%) 73s elapsed"), lines[-1]
    # a later bar without a start of its own still starts at its first item, as before
    clock.now = 100.0
    bar(1, 2, "onnxruntime", (1, 2))
    assert out.getvalue().splitlines()[-1].startswith("profiling 1/2 (50%) 0s elapsed"), out.getvalue()
