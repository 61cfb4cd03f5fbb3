"""Inductor's choice of vector instruction set, checked once for the one it picks instead of for all.

Before its first CPU kernel in a process, Inductor decides which of its vector ISAs this machine can
use: for every ISA whose CPU flags are present (on this project's Xeon: AMX, AVX-512 VNNI, AVX-512,
AVX2) it builds a test program with g++ into its cache and loads it in a child Python, then picks
the first that passed. Only the first is ever used. Measured in fresh processes on this project's
Xeon (benchmarks/inductor_first_compile.py, BENCHMARKS.md; torch's import included): with an empty
Inductor cache, choosing took 10.2 s of the first kernel's 14.0 s, checking the first ISA alone 3.4 s
of 7.5; with a warm cache (every later process, each compile worker too) 3.3 s of 4.9 against 2.1 of
3.8.

`checked_isa_config` runs Inductor's own check (`VecISA.check_build`, the same build and load) for
the first ISA the flags allow. If it passes, Inductor would pick it, so its compiles may skip the
check of the rest (`cpp.vec_isa_ok`): the ISA picked is the same. If it fails, or anything here does
not match the pinned torch's internals, nothing is patched and Inductor checks as it always does.
Where the user chose the ISA (ATEN_CPU_CAPABILITY, `cpp.simdlen`, `cpp.vec_isa_ok`), korch leaves
the choice to Inductor.
"""

from __future__ import annotations

import functools
import logging
import os
import platform

log = logging.getLogger("korch.backends.inductor")


@functools.cache
def checked_isa_config() -> dict[str, object]:
    """Inductor config to compile under: {"cpp.vec_isa_ok": True} if the ISA Inductor would pick
    passed its check here, else {} (Inductor checks every ISA itself). Checked once per process."""
    if platform.machine() not in ("x86_64", "AMD64") or os.environ.get("ATEN_CPU_CAPABILITY"):
        return {}
    try:
        from torch._inductor import config
        from torch._inductor import cpu_vec_isa as isa

        if config.cpp.vec_isa_ok is not None or config.cpp.simdlen is not None:
            return {}
        first = best_flagged_isa()
        if first is None:
            return {}
        if not first.check_build(isa.VecISA._avx_code):
            log.debug("inductor: %s fails its build check; Inductor checks every ISA", first)
            return {}
    except Exception as e:  # noqa: BLE001  (torch internals moved: Inductor's own check, as without korch)
        log.debug("inductor: vector ISA not checked ahead (%s: %s)", type(e).__name__, e)
        return {}
    return {"cpp.vec_isa_ok": True}


def best_flagged_isa():
    """The first of Inductor's vector ISAs, in its order of preference, whose CPU flags this machine
    has (x86; torch._inductor.cpu_vec_isa's internals): the one Inductor picks if its build check
    passes. None if no ISA's flags are all present."""
    from torch._inductor import cpu_vec_isa as isa

    flags = set(isa.x86_isa_checker())
    return next((v for v in isa.supported_vec_isa_list if all(f in flags for f in str(v).split())), None)
