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


def _profile(bar: ProgressBar, clock: Clock, kinds: list[tuple[str, int, float]]) -> None:
    """Items of each (backend, count, seconds each) in turn, as the profiler reports them."""
    total = sum(n for _, n, _ in kinds)
    done = 0
    for what, n, each in kinds:
        for k in range(1, n + 1):
            clock.now += each
            done += 1
            bar(done, total, what, (k, n))


def test_eta_is_the_current_backends_own_rate_and_says_what_follows() -> None:
    clock, out = Clock(), io.StringIO()
    bar = ProgressBar("profiling", True, stream=out, clock=clock)
    _profile(bar, clock, [("onnxruntime", 20, 0.1), ("inductor", 2, 50.0)])
    lines = out.getvalue().splitlines()
    ort_90 = next(line for line in lines if line.startswith("profiling 18/22"))
    assert "ETA 0s for onnxruntime, then 2 more [onnxruntime 18/20]" in ort_90, ort_90
    first_inductor = next(line for line in lines if line.startswith("profiling 21/22"))
    assert "ETA 50s for inductor [inductor 1/2]" in first_inductor, first_inductor
    assert lines[-1].startswith("profiling 22/22 (100%) 102s elapsed, ETA 0s for inductor")


def test_a_line_when_the_backend_changes_and_after_a_long_silence() -> None:
    clock, out = Clock(), io.StringIO()
    bar = ProgressBar("profiling", True, stream=out, clock=clock, quiet_s=60.0)
    # 1,000 items: 10% is 100 of them; inductor's 30 at 25 s each would be silent for 750 s
    _profile(bar, clock, [("onnxruntime", 970, 0.01), ("inductor", 30, 25.0)])
    lines = out.getvalue().splitlines()
    assert any("[inductor 1/30]" in line for line in lines)           # the change of backend
    inductor = [line for line in lines if "[inductor" in line]
    assert len(inductor) >= 10, inductor                              # every ~60 s, not only at 100%


def test_without_a_part_the_eta_is_the_overall_rate_and_a_disabled_bar_says_nothing() -> None:
    clock, out = Clock(), io.StringIO()
    bar = ProgressBar("calibrating", True, stream=out, clock=clock)
    for done in range(1, 5):
        clock.now += 2.0
        bar(done, 4, "boundary onnxruntime->openvino")
    assert out.getvalue().splitlines()[0] == "calibrating 1/4 (25%) 0s elapsed, ETA 0s [boundary onnxruntime->openvino]"
    quiet = io.StringIO()
    _profile(ProgressBar("profiling", False, stream=quiet, clock=clock), clock, [("onnxruntime", 3, 1.0)])
    assert quiet.getvalue() == ""
