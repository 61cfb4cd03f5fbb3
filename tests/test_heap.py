"""The C heap's policy (korch/heap.py): large blocks are reused, not mapped afresh on every call.

Each case runs in a fresh process, since the policy is set once per process and glibc's thresholds
then stay as set."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

# Allocate, touch and free a 64 MiB array a few times: above glibc's largest dynamic mmap threshold
# (32 MiB), so without the policy every allocation is mapped afresh (with numpy's huge pages that
# is ~540 faults a time here, not 16,384), which glibc's mallinfo2 counts while the block lives.
_MALLINFO = textwrap.dedent("""
    import ctypes
    class Mallinfo2(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in
                    ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
                     "fordblks", "keepcost")]
    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = Mallinfo2
""")
_PROBE = _MALLINFO + textwrap.dedent("""
    import ctypes, json, resource, sys
    import numpy as np
    from korch.heap import keep_freed_blocks
    from korch.profile.profiler import record_version
    from korch.backends import get_backend
    from korch.settings import ProfileSettings
    policy = keep_freed_blocks() if sys.argv[1] == "set" else None
    version = record_version(get_backend("onnxruntime"), ProfileSettings())
    mapped = []
    def once():
        a = np.empty(64 << 20, np.uint8)
        a[::4096] = 1                 # touch every page
        mapped.append(libc.mallinfo2().hblkhd)     # bytes in blocks glibc mapped on their own
        del a
    once()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(4):
        once()
    faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 4
    print(json.dumps({"policy": policy, "version": version, "faults": faults, "mapped": min(mapped)}))
""")

def _glibc_with_mallinfo2() -> bool:
    try:
        import ctypes

        return hasattr(ctypes.CDLL("libc.so.6"), "mallinfo2")
    except OSError:
        return False


pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux") or not _glibc_with_mallinfo2(),
                                reason="glibc's malloc (2.33 or later)")


def _probe(mode: str, switch: str | None = None) -> dict:
    env = dict(os.environ)
    env.pop("KORCH_KEEP_FREED_BLOCKS", None)
    if switch is not None:
        env["KORCH_KEEP_FREED_BLOCKS"] = switch
    done = subprocess.run([sys.executable, "-c", _PROBE, mode], capture_output=True, text=True, env=env,
                          check=True, timeout=120)
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_kept_blocks_are_reused_without_page_faults():
    kept = _probe("set")
    assert kept["policy"] == "kept"
    assert kept["mapped"] < 64 << 20, kept      # the block comes from the heap,
    assert kept["faults"] < 100, kept           # and once freed is handed out again, its pages resident
    assert kept["version"].endswith("|heap-kept")


def test_switched_off_leaves_glibc_mapping_each_block_afresh():
    system = _probe("set", switch="0")
    assert system["policy"] == "system"
    assert system["mapped"] >= 64 << 20, system  # every allocation is a mapping of fresh pages of its own
    assert system["version"].endswith("|heap-system")


def test_profile_keys_set_the_policy_they_name():
    """Asking for a record's key applies the policy, so a kernel is timed under the policy its record names."""
    keyed = _probe("key-only")
    assert keyed["version"].endswith("|heap-kept")
    assert keyed["faults"] < 100, keyed


_RETURNED = _MALLINFO + textwrap.dedent("""
    import ctypes, json, sys
    import numpy as np
    from korch.heap import blocks_returned, keep_freed_blocks
    def mapped(mib):
        a = np.empty(mib << 20, np.uint8)
        a[::4096] = 1
        return libc.mallinfo2().hblkhd     # bytes in blocks glibc mapped on their own, while `a` lives
    if sys.argv[1] == "set":
        keep_freed_blocks()
    before = mapped(64)
    with blocks_returned():                # (larger than the block freed before, which it would reuse)
        inside = mapped(96)
    print(json.dumps({"before": before, "inside": inside, "after": mapped(128),
                      "applied": keep_freed_blocks.cache_info().currsize}))
""")


@pytest.mark.parametrize("mode", ["set", "never-set"])
def test_blocks_are_returned_inside_a_one_off_step_and_kept_again_after_it(mode):
    """blocks_returned: under the kept policy, a large block made inside is mapped (given back when
    freed) and one made after comes from the heap again; where the policy was never set, it sets none."""
    done = subprocess.run([sys.executable, "-c", _RETURNED, mode], capture_output=True, text=True,
                          env={k: v for k, v in os.environ.items() if k != "KORCH_KEEP_FREED_BLOCKS"},
                          check=True, timeout=120)
    got = json.loads(done.stdout.strip().splitlines()[-1])
    if mode == "set":
        assert got["before"] < 64 << 20 and got["after"] < 64 << 20, got
        assert got["inside"] >= 64 << 20, got
    else:
        assert got["applied"] == 0, got
        assert all(got[k] >= 64 << 20 for k in ("before", "inside", "after")), got   # glibc's own: mapped
