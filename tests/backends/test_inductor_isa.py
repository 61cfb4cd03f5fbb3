"""korch checks only the vector ISA Inductor would pick; the ISA picked must not change."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

pytest.importorskip("torch")

from korch.backends.inductor.isa import checked_isa_config  # noqa: E402

# Each in a fresh process: Inductor caches its list of valid ISAs for the process's life.
ON_ITS_OWN = "from torch._inductor import cpu_vec_isa; print(cpu_vec_isa.pick_vec_isa())"
AFTER_KORCH = """
import torch
from torch._inductor import cpu_vec_isa
from korch.backends.inductor.isa import best_flagged_isa, checked_isa_config
with torch._inductor.config.patch(checked_isa_config()):
    print(cpu_vec_isa.pick_vec_isa())
print(checked_isa_config())
try:                                  # the best ISA the CPU's flags allow (x86 only)
    print(best_flagged_isa())
except Exception:
    print("none")
"""


def _run(code: str) -> list[str]:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return out.stdout.strip().splitlines()


def test_the_isa_picked_is_the_one_inductor_picks_on_its_own():
    own = _run(ON_ITS_OWN)[-1]
    picked, config, best = _run(AFTER_KORCH)[-3:]
    assert picked == own
    # where Inductor picks the best ISA the CPU's flags allow, the check of the others is skipped;
    # where that one fails its build (and Inductor picks one below it), Inductor checks them all
    if platform.machine() == "x86_64" and own == best:
        assert config == "{'cpp.vec_isa_ok': True}"
    else:
        assert config == "{}"


def test_a_user_chosen_isa_is_left_to_inductor(monkeypatch):
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
    assert checked_isa_config.__wrapped__() == {}
