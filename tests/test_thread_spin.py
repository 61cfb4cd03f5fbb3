"""Importing korch first quiets numpy's OpenBLAS worker threads between calls (korch/__init__.py):
a worker spinning for ~0.1 s after a reference computation took a CPU from the next kernel timed.
Measured as the CPU the process's other threads use while the caller sleeps after each matmul."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

_SPIN = """
import os, sys, threading, time
if sys.argv[1] == "korch":
    import korch
import numpy as np
a = np.random.default_rng(0).standard_normal((512, 512))
me = str(threading.get_native_id())
def others():
    total = 0
    for t in os.listdir("/proc/self/task"):
        if t != me:
            f = open(f"/proc/self/task/{t}/stat").read().rsplit(")", 1)[1].split()
            total += int(f[11]) + int(f[12])
    return total
spun = 0
for _ in range(5):
    a @ a                      # OpenBLAS's workers compute, then wait for the next call
    before = others()
    time.sleep(0.05)
    spun += others() - before
print(spun)
"""


def _ticks_spun(first: str, timeout: str | None) -> int:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_THREAD_TIMEOUT", "OPENBLAS_NUM_THREADS",
                                                            "OMP_NUM_THREADS")}
    if timeout is not None:
        env["OPENBLAS_THREAD_TIMEOUT"] = timeout
    done = subprocess.run([sys.executable, "-c", _SPIN, first], capture_output=True, text=True, env=env, check=True)
    return int(done.stdout.split()[-1])


@pytest.mark.skipif(not sys.platform.startswith("linux") or (os.cpu_count() or 1) < 2,
                    reason="reads per-thread CPU time from /proc; OpenBLAS runs one thread on one CPU")
def test_numpys_blas_workers_sleep_after_each_call_once_korch_is_imported() -> None:
    assert _ticks_spun("korch", None) <= 2
    # the check sees spinning: without korch first, or where the user chose OpenBLAS's default
    assert _ticks_spun("numpy", None) >= 5
    assert _ticks_spun("korch", "28") >= 5


@pytest.mark.parametrize("numpy_first,state", [(False, "quiet"), (True, "spinning")])
def test_profile_records_name_whether_blas_workers_slept(numpy_first: bool, state: str) -> None:
    """Kernels timed beside a spinning OpenBLAS worker read slow: their records are kept apart from
    those taken with it asleep (a process that loaded numpy before korch cannot quiet it)."""
    code = ("import numpy; " if numpy_first else "") + (
        "from korch.backends import get_backend; from korch.profile.profiler import record_version; "
        "from korch.settings import ProfileSettings; print(record_version(get_backend('onnxruntime'), ProfileSettings()))")
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_THREAD_TIMEOUT"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout
    assert f"|blas-{state}|" in out.split()[-1]
