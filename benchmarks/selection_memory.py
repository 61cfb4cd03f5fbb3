"""Where an optimize's memory sits when measured selection starts and at each duel (both contenders
compiled), second look and plan check (before and after each): resident memory by mapping, and the engine
sessions and ModelProtos alive.

    python benchmarks/selection_memory.py MODEL CACHE_DIR THREADS

Runs korch's optimize in this process (cold on an empty CACHE_DIR; on a filled one, profiling is
skipped and selection starts from a process that never profiled). Reports are taken by wrapping
korch.pipeline.measured_selection and korch.select.measured._duel; the optimize is otherwise
korch's own, with the engines `korch optimize` uses by default. Ends with the process's peak
(ru_maxrss).
"""

from __future__ import annotations

import collections
import gc
import logging
import os
import resource
import sys
import time

import korch.pipeline as pipeline
import korch.select.measured as measured
from korch.api import default_backends
from korch.profile.database import ProfileDB
from korch.settings import OptimizeSettings

sys.path.insert(0, os.path.dirname(__file__))
from smaps_breakdown import breakdown  # noqa: E402

WATCHED = ("ModelProto", "InferenceSession", "CompiledModel", "Kernel", "Session")
ENGINES = ("korch.", "onnxruntime.", "openvino.", "onnx.")
START = time.perf_counter()


def report(moment: str) -> None:
    gc.collect()
    groups = breakdown(os.getpid())
    print(f"\n=== {moment}: {time.perf_counter() - START:.0f} s, resident {sum(groups.values()) >> 10} MB: "
          + ", ".join(f"{name} {kb >> 10}" for name, kb in groups.most_common(6)), flush=True)
    alive: collections.Counter[str] = collections.Counter()
    protos = []
    for obj in gc.get_objects():
        kind = type(obj)
        name = f"{getattr(kind, '__module__', '')}.{getattr(kind, '__name__', '')}"
        if name.startswith(ENGINES) and any(w in name for w in WATCHED):
            alive[name] += 1
        if getattr(kind, "__name__", "") == "ModelProto":
            protos.append(obj.ByteSize() >> 20)
    print("alive:", dict(alive.most_common(10)), "; ModelProto MB:", sorted(protos, reverse=True)[:6], flush=True)


def main() -> None:
    if len(sys.argv) != 4:
        sys.exit(__doc__.split("\n\n")[1])
    model, cache, threads = sys.argv[1], sys.argv[2], int(sys.argv[3])
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", stream=sys.stdout)
    select, duel, look = pipeline.measured_selection, measured._duel, measured._second_look

    def selecting(*args, **kwargs):
        report("selection starts")
        return select(*args, **kwargs)

    def dueling(*args, **kwargs):
        report("a duel starts")
        return duel(*args, **kwargs)

    def looking(ctx, bar, champion, other, *args, **kwargs):
        report(f"a second look at {other.name}'s whole model starts (it is compiled)")
        joins = look(ctx, bar, champion, other, *args, **kwargs)
        report(f"the look at {other.name}'s whole model is done")
        return joins

    check = measured._Context.check

    def checking(self, plan, session):
        report(f"a check of {plan.steps[0].backend if len(plan.steps) == 1 else 'a split plan'} starts")
        result = check(self, plan, session)
        report("the check is done")
        return result

    pipeline.measured_selection, measured._duel, measured._second_look = selecting, dueling, looking
    measured._Context.check = checking
    with ProfileDB(os.path.join(cache, "profiles.sqlite")) as db:
        pipeline.optimize(model, db, OptimizeSettings(threads=threads, backends=default_backends()),
                          compile_session=False)
    report("optimize done")
    print(f"peak {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss >> 10} MB")


if __name__ == "__main__":
    main()
