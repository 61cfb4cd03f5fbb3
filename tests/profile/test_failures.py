"""A kernel's failure is stored only when it says something about the kernel, and only for the korch
code that saw it: out of memory or a killed compiler is tried again next run, and so is any
rejection made by other korch code; timings are reused across korch code versions."""

from __future__ import annotations

import errno
import subprocess
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from korch.candidates import enumerate_candidates
from korch.pipeline import run_fission
from korch.profile.database import ProfileDB, Record, Rejection, Status
from korch.profile.failures import classify_failure
from korch.profile.profiler import profile, record_version
from korch.settings import QUICK_PROFILE
from korch.version import code_version

MACHINE = "test machine"


def _wrapped(inner: BaseException) -> RuntimeError:
    try:
        try:
            raise inner
        except BaseException as e:
            raise RuntimeError("backend compile failed") from e
    except RuntimeError as outer:
        return outer


class InvalidCxxCompiler(RuntimeError):        # named as torch names it; korch matches names, not imports
    pass


@pytest.mark.parametrize("error,kind", [
    (MemoryError(), Rejection.TRANSIENT),
    (OSError(errno.ENOSPC, "No space left on device"), Rejection.TRANSIENT),
    (FileNotFoundError(errno.ENOENT, "No such file or directory", "g++"), Rejection.TRANSIENT),
    (subprocess.CalledProcessError(-9, ["g++"]), Rejection.TRANSIENT),            # killed by the OOM killer
    (InvalidCxxCompiler("no working C++ compiler found"), Rejection.TRANSIENT),
    (RuntimeError("[ONNXRuntimeError] : 6 : RUNTIME_EXCEPTION : std::bad_alloc"), Rejection.TRANSIENT),
    (RuntimeError("g++: fatal error: Killed signal terminated program cc1plus"), Rejection.TRANSIENT),
    (_wrapped(MemoryError()), Rejection.TRANSIENT),                               # found through the cause
    (subprocess.CalledProcessError(1, ["g++"]), Rejection.FAILED),                # the compiler refused the code
    (ValueError("shapes (3,4) and (5,6) not aligned"), Rejection.FAILED),
    (_wrapped(KeyError("lowering")), Rejection.FAILED),
])
def test_failures_of_the_machine_are_transient_and_failures_of_the_kernel_are_not(error: BaseException,
                                                                                   kind: Rejection) -> None:
    assert classify_failure(error) is kind


def test_an_exception_chain_with_a_cycle_is_classified() -> None:
    a, b = ValueError("a"), ValueError("b")
    a.__context__, b.__context__ = b, a
    assert classify_failure(a) is Rejection.FAILED


def test_a_transient_record_is_never_stored(tmp_path: Path) -> None:
    record = Record.rejected("k", "flaky", "v", 1, MACHINE, "transient failure: MemoryError", Rejection.TRANSIENT,
                             code_version())
    with ProfileDB(tmp_path / "p.sqlite") as db:
        with pytest.raises(ValueError, match="never stored"):
            db.put(record)
        assert db.count() == 0


def _relu_add() -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"), helper.make_node("Add", ["r", "c"], ["y"], name="add")]
    c = numpy_helper.from_array(np.linspace(-1, 1, 32, dtype=np.float32).reshape(4, 8), "c")
    model = helper.make_model(helper.make_graph(nodes, "relu_add", [x], [y], [c]),
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.fixture
def flaky(monkeypatch: pytest.MonkeyPatch):
    """A backend (the reference's kernels) whose compiles raise what `flaky.error` holds, if anything."""
    import korch.backends.base as base
    from korch.backends.reference.backend import ReferenceBackend

    class FlakyBackend(ReferenceBackend):
        name = "flaky"
        version = "flaky-1"
        error: BaseException | None = None

        def compile(self, graph, options):
            if FlakyBackend.error is not None:
                raise FlakyBackend.error
            return super().compile(graph, options)

    monkeypatch.setitem(base._REGISTRY, "flaky", FlakyBackend)
    monkeypatch.setitem(base._INSTANCES, "flaky", FlakyBackend())
    return FlakyBackend


def _profile(db: ProfileDB):
    graph = run_fission(_relu_add()).graph
    pools = {"flaky": list(enumerate_candidates(graph))}
    return pools["flaky"], profile(graph, pools, db, 1, MACHINE, QUICK_PROFILE)


def test_a_kernel_that_failed_for_want_of_memory_is_profiled_again_next_run(flaky, tmp_path: Path) -> None:
    flaky.error = _wrapped(MemoryError())
    with ProfileDB(tmp_path / "p.sqlite") as db:
        candidates, first = _profile(db)
        assert first.measured == len({c.key for c in candidates}) > 0
        assert all(r.kind is Rejection.TRANSIENT and r.reason.startswith("transient failure")
                   for r in first.records.values())
        assert db.count() == 0                                # nothing ruled out for good
        flaky.error = None
        _, second = _profile(db)
        assert second.measured == first.measured and second.stored == 0
        assert all(r.status is Status.OK and r.code == code_version() for r in second.records.values())
        assert db.count() == first.measured


def test_a_kernel_that_failed_is_stored_for_this_korch_code_and_retried_by_another(flaky, tmp_path: Path) -> None:
    flaky.error = subprocess.CalledProcessError(1, ["g++"], output="error: 'vec' was not declared")
    with ProfileDB(tmp_path / "p.sqlite") as db:
        candidates, first = _profile(db)
        assert all(r.kind is Rejection.FAILED and r.code == code_version() for r in first.records.values())
        flaky.error = None
        _, again = _profile(db)                               # the same korch: the failure is trusted
        assert again.measured == 0 and again.stored == first.measured
        version = record_version(flaky(), QUICK_PROFILE)
        keys = sorted({c.key for c in candidates})
        older = [replace(r, code="0123456789abcdef") for r in db.get_many(keys, "flaky", version, 1, MACHINE).values()]
        db.put_many(older)                                    # as if written by other korch code
        _, upgraded = _profile(db)
        assert upgraded.measured == len(keys) and upgraded.stored == 0
        assert all(r.status is Status.OK for r in upgraded.records.values())
        # a timing stays valid whatever korch wrote it: it is keyed by the backend's version
        db.put_many([replace(r, code="0123456789abcdef") for r in upgraded.records.values()])
        _, timed = _profile(db)
        assert timed.measured == 0 and timed.stored == len(keys)
