"""The profile database: round trips, persistence, refusal of bad files, kill safety, concurrent writers."""

from __future__ import annotations

import math
import os
import signal
import sqlite3
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from korch.errors import ExitCode, KorchError
from korch.profile.database import (
    GET_MANY_CHUNK,
    SCHEMA_VERSION,
    ProfileDB,
    ProfileDBError,
    Record,
    Rejection,
    Status,
    default_cache_dir,
    machine_fingerprint,
)
from korch.profile.timing import Timing

REPO = Path(__file__).resolve().parents[2]
MACHINE = "test cpu | 2 cpus | Linux x86_64"
CHILD_TIMEOUT_S = 60.0


def ok(key: str, *, backend: str = "inductor", version: str = "torch-2.13", threads: int = 2,
       median: float = 1e-5) -> Record:
    return Record.ok(key, backend, version, threads, MACHINE, Timing(median, median * 0.9, median * 1.2, 40))


def integrity(path: Path) -> list[str]:
    with sqlite3.connect(path) as conn:
        return [row[0] for row in conn.execute("PRAGMA integrity_check")]


def stored_keys(path: Path) -> set[str]:
    conn = sqlite3.connect(path)
    try:
        return {row[0] for row in conn.execute("SELECT candidate_key FROM profiles")}
    finally:
        conn.close()


# --- round trips ------------------------------------------------------------------------------------

def test_round_trip_ok_and_rejected(tmp_path: Path) -> None:
    measured = ok("k1")
    rejected = Record.rejected("k2", "inductor", "torch-2.13", 2, MACHINE, "disagrees with reference: rel err 3e-2",
                               Rejection.INACCURATE, "code-1", 3e-2)
    with ProfileDB(tmp_path / "p.sqlite") as db:
        db.put(measured)
        db.put(rejected)
        assert db.get("k1", "inductor", "torch-2.13", 2, MACHINE) == measured
        got = db.get("k2", "inductor", "torch-2.13", 2, MACHINE)
        assert got == rejected
        assert got is not None and got.status is Status.REJECTED and got.timing is None
        assert db.get("k3", "inductor", "torch-2.13", 2, MACHINE) is None
        assert db.count() == 2


@pytest.mark.parametrize("other", [dict(backend="onnxruntime"), dict(version="torch-2.14"), dict(threads=1),
                                   dict(machine="other machine")])
def test_every_key_field_separates_records(tmp_path: Path, other: dict[str, object]) -> None:
    with ProfileDB(tmp_path / "p.sqlite") as db:
        db.put(ok("k"))
        query = {"backend": "inductor", "backend_version": "torch-2.13", "threads": 2, "machine": MACHINE}
        query.update({("backend_version" if k == "version" else k): v for k, v in other.items()})
        assert db.get("k", **query) is None  # type: ignore[arg-type]


def test_put_replaces_a_record_with_the_same_key(tmp_path: Path) -> None:
    with ProfileDB(tmp_path / "p.sqlite") as db:
        db.put(ok("k", median=1e-5))
        db.put(ok("k", median=2e-5))
        got = db.get("k", "inductor", "torch-2.13", 2, MACHINE)
        assert got is not None and got.median_s == 2e-5
        assert db.count() == 1


def test_get_many_returns_only_stored_keys_across_chunks(tmp_path: Path) -> None:
    keys = [f"key{i}" for i in range(2 * GET_MANY_CHUNK + 37)]
    with ProfileDB(tmp_path / "p.sqlite") as db:
        db.put_many(ok(k) for k in keys[::2])
        db.put(ok("key1", threads=4))                          # same key, other thread count: not returned
        found = db.get_many(keys + keys[:5], "inductor", "torch-2.13", 2, MACHINE)
    assert set(found) == set(keys[::2])
    assert all(found[k].candidate_key == k for k in found)


def test_persists_across_reopen_in_wal_mode(tmp_path: Path) -> None:
    path = tmp_path / "p.sqlite"
    with ProfileDB(path) as db:
        db.put_many(ok(f"k{i}") for i in range(10))
    with ProfileDB(path) as db:
        assert set(db.get_many([f"k{i}" for i in range(12)], "inductor", "torch-2.13", 2, MACHINE)) == {
            f"k{i}" for i in range(10)}
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("SELECT version FROM korch_schema").fetchall() == [(SCHEMA_VERSION,)]


def test_selections_persist_and_older_files_gain_the_table(tmp_path: Path) -> None:
    path = tmp_path / "p.sqlite"
    with ProfileDB(path) as db:
        db.put(ok("k"))
        assert db.get_selection("problem") is None
        db.put_selection("problem", 2.5e-4, 1.25e-2)
    with sqlite3.connect(path) as conn:          # a file from before the selections table existed
        conn.execute("DROP TABLE selections")
    with ProfileDB(path) as db:
        assert db.get_selection("problem") is None and db.get("k", "inductor", "torch-2.13", 2, MACHINE)
        db.put_selection("problem", 2.5e-4, 1.25e-2)
    with ProfileDB(path) as db:
        assert db.get_selection("problem")[:4] == (2.5e-4, 1.25e-2, None, None)
        db.put_selection("other", 0.0, 1e-2, "onnxruntime", "it measured faster")
        assert db.get_selection("other").reason == "it measured faster"
        db.put_selection("split", 1e-4, 2e-2, None, "split won", {"k1|openvino": 1.5e-3, "k2|onnxruntime": 2e-5})
        assert dict(db.get_selection("split").costs) == {"k1|openvino": 1.5e-3, "k2|onnxruntime": 2e-5}
    with sqlite3.connect(path) as conn:          # a file from before the whole_model_backend column
        conn.execute("DROP TABLE selections")
        conn.execute("CREATE TABLE selections (problem_key TEXT PRIMARY KEY, penalty_s REAL NOT NULL, "
                     "measured_s REAL NOT NULL, created_at REAL NOT NULL) WITHOUT ROWID")
        conn.execute("INSERT INTO selections VALUES ('problem', 2.5e-4, 1.25e-2, 0)")
    with ProfileDB(path) as db:
        assert db.get_selection("problem")[:4] == (2.5e-4, 1.25e-2, None, None)
        assert dict(db.get_selection("problem").costs) == {}
        db.put_selection("other", 0.0, 1e-2, "onnxruntime")
        assert db.get_selection("other").whole_model_backend == "onnxruntime"
    with sqlite3.connect(path) as conn:          # damaged costs: the selection is decided again, not trusted
        conn.execute("UPDATE selections SET costs = '{\"k\": \"fast\"' WHERE problem_key = 'other'")
    with ProfileDB(path) as db:
        assert db.get_selection("other") is None


def test_records_keep_their_error_and_older_files_gain_the_column(tmp_path: Path) -> None:
    """A kernel's error against the reference is stored with it; a file from before the column opens,
    gains it, keeps its rows (error unknown) and stores errors from then on."""
    path = tmp_path / "p.sqlite"
    with ProfileDB(path) as db:
        db.put(replace(ok("k"), error=3.5e-4))
        assert db.get("k", "inductor", "torch-2.13", 2, MACHINE).error == 3.5e-4
    with sqlite3.connect(path) as conn:
        conn.execute("ALTER TABLE profiles DROP COLUMN error")
    with ProfileDB(path) as db:
        assert db.get("k", "inductor", "torch-2.13", 2, MACHINE).error is None
        db.put(replace(ok("j"), error=1e-6))
        assert db.get("j", "inductor", "torch-2.13", 2, MACHINE).error == 1e-6


def test_features_and_sightings_feed_cost_models_and_older_files_gain_the_tables(tmp_path: Path) -> None:
    """A key's feature vector is stored once per feature version, with every model it was seen in;
    only timed records of the asked backend and machine, with a vector of the asked version, are read."""
    path = tmp_path / "p.sqlite"
    with ProfileDB(path) as db:
        db.put_many([ok("a", median=2e-5), ok("b", median=3e-5), ok("c", backend="onnxruntime"),
                     Record.rejected("d", "inductor", "torch-2.13", 2, MACHINE, "unsupported: x", Rejection.UNSUPPORTED,
                                     "code-1")])
        db.put_features("model-1", 1, {"a": (1.0, 2.0), "b": (3.0, 4.0), "d": (0.0, 0.0)})
        db.put_features("model-2", 1, {"a": (9.0, 9.0)})          # same key, same version: first vector kept
        rows = {r.candidate_key: r for r in db.timed_with_features("inductor", MACHINE, 1)}
        assert set(rows) == {"a", "b"}                            # c: other backend; d: rejected
        assert rows["a"].features == (1.0, 2.0) and rows["a"].models == {"model-1", "model-2"}
        assert rows["b"].median_s == 3e-5 and rows["b"].models == {"model-1"} and rows["b"].threads == 2
        assert db.timed_with_features("inductor", "other machine", 1) == []
        assert db.timed_with_features("inductor", MACHINE, 2) == []
        db.put_features("model-3", 2, {"a": (5.0, 6.0, 7.0)})      # a new feature version replaces the vector
        assert [r.features for r in db.timed_with_features("inductor", MACHINE, 2)] == [(5.0, 6.0, 7.0)]
        # what a second model need not compute again: keys with a vector of the version asked
        assert db.keys_with_features(["a", "b", "z"], 1) == {"b"} and db.keys_with_features(["a", "b"], 2) == {"a"}
        assert db.features(["a", "b", "z"], 1) == {"b": (3.0, 4.0)} and db.features(["a"], 2) == {"a": (5.0, 6.0, 7.0)}
        db.put_features("model-4", 2, {}, seen=["a"])              # seen, its vector known: only the sighting
        assert next(iter(db.timed_with_features("inductor", MACHINE, 2))).models == {"model-1", "model-2", "model-3",
                                                                                      "model-4"}
    with sqlite3.connect(path) as conn:            # a file from before the cost-model tables
        conn.execute("DROP TABLE features")
        conn.execute("DROP TABLE sightings")
    with ProfileDB(path) as db:
        assert db.timed_with_features("inductor", MACHINE, 1) == [] and db.get("a", "inductor", "torch-2.13", 2, MACHINE)
        db.put_features("model-1", 1, {"b": (3.0, 4.0)})
        assert [r.candidate_key for r in db.timed_with_features("inductor", MACHINE, 1)] == ["b"]
    with sqlite3.connect(path) as conn:            # a damaged vector is skipped, not trusted
        conn.execute("UPDATE features SET vector = '[1, ' WHERE candidate_key = 'b'")
    with ProfileDB(path) as db:
        assert db.timed_with_features("inductor", MACHINE, 1) == [] and db.features(["b"], 1) == {}


def test_creates_missing_cache_directories(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "profiles.sqlite"
    with ProfileDB(path) as db:
        db.put(ok("k"))
    assert path.is_file()


def test_record_validation() -> None:
    with pytest.raises(ValueError, match="needs median_s"):
        Record("k", "inductor", "v", 1, MACHINE, None, None, None, 0, Status.OK)
    with pytest.raises(ValueError, match="needs median_s"):
        Record("k", "inductor", "v", 1, MACHINE, math.nan, 1e-5, 2e-5, 10, Status.OK)
    with pytest.raises(ValueError, match="needs a reason"):
        Record("k", "inductor", "v", 1, MACHINE, None, None, None, 0, Status.REJECTED)


def test_rejected_record_from_text_status_and_nan_timings_round_trips(tmp_path: Path) -> None:
    nan = math.nan
    record = Record("k", "b", "v", 1, MACHINE, nan, nan, nan, 0, "rejected", "unsupported: x")  # type: ignore[arg-type]
    assert record.status is Status.REJECTED and record.median_s is None
    with ProfileDB(tmp_path / "p.sqlite") as db:
        db.put(record)
        assert db.get("k", "b", "v", 1, MACHINE) == record


def test_closed_database_refuses_use(tmp_path: Path) -> None:
    db = ProfileDB(tmp_path / "p.sqlite")
    db.close()
    db.close()                                                 # idempotent
    with pytest.raises(ValueError, match="closed"):
        db.get("k", "inductor", "v", 1, MACHINE)


# --- files korch must refuse and leave alone ---------------------------------------------------------

def assert_refused(path: Path, match: str) -> None:
    before = path.read_bytes()
    siblings = set(path.parent.iterdir())
    with pytest.raises(ProfileDBError, match=match) as info:
        ProfileDB(path)
    assert str(path) in str(info.value)
    assert "--cache" in str(info.value)
    assert path.read_bytes() == before
    assert set(path.parent.iterdir()) == siblings


def test_error_is_a_korch_error_with_the_cache_exit_code() -> None:
    assert issubclass(ProfileDBError, KorchError)
    assert ProfileDBError.exit_code is ExitCode.CACHE == 8


def test_non_sqlite_file_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "profiles.sqlite"
    path.write_bytes(os.urandom(4096))
    assert_refused(path, "not an SQLite database")


def test_corrupt_pages_are_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "profiles.sqlite"
    with ProfileDB(path) as db:
        db.put_many(ok(f"key-{i:05d}-" + "x" * 200) for i in range(300))   # many pages
    data = bytearray(path.read_bytes())
    page = int.from_bytes(data[16:18], "big")
    assert len(data) > 6 * page
    data[3 * page:5 * page] = os.urandom(2 * page)            # keep the header, wreck two b-tree pages
    path.write_bytes(bytes(data))
    assert_refused(path, "corrupt")


def test_foreign_sqlite_database_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "profiles.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE photos (id INTEGER PRIMARY KEY, name TEXT)")
        conn.execute("INSERT INTO photos (name) VALUES ('holiday')")
    conn.close()
    assert_refused(path, "not a korch profile database")


def test_newer_schema_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "profiles.sqlite"
    with ProfileDB(path) as db:
        db.put(ok("k"))
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("UPDATE korch_schema SET version = ?", (SCHEMA_VERSION + 1,))
    conn.close()
    assert_refused(path, "newer korch")


def test_cache_dir_that_is_a_file_is_an_error(tmp_path: Path) -> None:
    blocker = tmp_path / "cache"
    blocker.write_text("not a directory")
    with pytest.raises(ProfileDBError, match="cannot create the profile cache directory") as info:
        ProfileDB(blocker / "korch" / "profiles.sqlite")
    assert str(blocker / "korch") in str(info.value)
    assert blocker.read_text() == "not a directory"


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores directory permissions")
def test_read_only_cache_dir_is_an_error(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        with pytest.raises(ProfileDBError, match="not writable"):
            ProfileDB(locked / "profiles.sqlite")
    finally:
        locked.chmod(0o700)


def test_path_that_is_a_directory_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ProfileDBError, match="is a directory"):
        ProfileDB(tmp_path)


# --- processes ------------------------------------------------------------------------------------------

WRITER = """
import sys, time
from pathlib import Path
from korch.profile.database import ProfileDB, Record
from korch.profile.timing import Timing

path, prefix, count, go = sys.argv[1], sys.argv[2], int(sys.argv[3]), Path(sys.argv[4])
print("ready", flush=True)
while not go.exists():
    time.sleep(0.001)
with ProfileDB(path) as db:
    i = 0
    while count < 0 or i < count:
        key = f"{prefix}{i}"
        db.put(Record.ok(key, "inductor", "torch-2.13", 2, "test machine", Timing(1e-5, 9e-6, 2e-5, 40)))
        db.put(Record.ok("shared", "inductor", "torch-2.13", 2, "test machine", Timing(1e-5, 9e-6, 2e-5, i + 1)))
        print(key, flush=True)
        i += 1
print("done", flush=True)
"""


def spawn_writer(path: Path, prefix: str, count: int, go: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path), prefix, str(count), str(go)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready", proc.stderr.read() if proc.stderr else ""
    return proc


def test_records_committed_before_sigkill_survive(tmp_path: Path) -> None:
    path, go = tmp_path / "profiles.sqlite", tmp_path / "go"
    go.touch()
    proc = spawn_writer(path, "k", -1, go)                    # writes until killed
    assert proc.stdout is not None
    committed: list[str] = []
    deadline = time.monotonic() + CHILD_TIMEOUT_S
    while len(committed) < 300 and time.monotonic() < deadline:
        line = proc.stdout.readline()
        assert line, proc.stderr.read() if proc.stderr else ""
        committed.append(line.strip())
    os.kill(proc.pid, signal.SIGKILL)
    rest, _ = proc.communicate(timeout=CHILD_TIMEOUT_S)
    committed += [line for line in rest.split() if line]       # printed (hence committed) before the kill
    assert proc.returncode == -signal.SIGKILL
    assert len(committed) >= 300
    with ProfileDB(path) as db:                                 # reopens: integrity check passes
        found = db.get_many(committed, "inductor", "torch-2.13", 2, "test machine")
    assert set(found) == set(committed)
    assert integrity(path) == ["ok"]


def test_two_processes_writing_at_once_lose_nothing(tmp_path: Path) -> None:
    path, go = tmp_path / "new" / "profiles.sqlite", tmp_path / "go"
    per_writer = 300
    writers = [spawn_writer(path, prefix, per_writer, go) for prefix in ("a", "b")]
    go.touch()                                                   # both create the file and write at once
    for proc in writers:
        out, err = proc.communicate(timeout=CHILD_TIMEOUT_S)
        assert proc.returncode == 0, err
        assert out.split()[-1] == "done"
    expected = {f"{p}{i}" for p in ("a", "b") for i in range(per_writer)} | {"shared"}
    assert stored_keys(path) == expected
    assert integrity(path) == ["ok"]


# --- environment helpers ------------------------------------------------------------------------------

def test_default_cache_dir_follows_xdg() -> None:
    assert default_cache_dir({"XDG_CACHE_HOME": "/var/cache/me"}) == Path("/var/cache/me/korch")
    assert default_cache_dir({}) == Path.home() / ".cache" / "korch"
    assert default_cache_dir({"XDG_CACHE_HOME": "relative/dir"}) == Path.home() / ".cache" / "korch"


def test_machine_fingerprint_is_stable_and_reads_cpuinfo(tmp_path: Path) -> None:
    assert machine_fingerprint() == machine_fingerprint()
    assert f"{os.cpu_count()} cpus" in machine_fingerprint()
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nmodel name\t: Example   CPU  9000\n\nprocessor\t: 1\n"
                       "model name\t: Example   CPU  9000\n")
    assert machine_fingerprint(cpuinfo).startswith("Example CPU 9000 | ")
    assert machine_fingerprint(tmp_path / "missing") != ""


def test_machine_fingerprint_tells_hosts_with_one_name_apart(tmp_path: Path) -> None:
    """A VM that names only "AMD EPYC": family/model numbers, vector ISA and cache size tell hosts apart;
    flags that do not change kernels (sse, a hypervisor bit) do not."""
    def fingerprint(model: str, flags: str, cache: str = "16384 KB") -> str:
        path = tmp_path / "cpuinfo"
        path.write_text(f"processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 23\nmodel\t\t: {model}\n"
                        f"model name\t: AMD EPYC\ncache size\t: {cache}\nflags\t\t: {flags}\n")
        return machine_fingerprint(path)

    zen2 = fingerprint("49", "fpu sse sse2 avx fma avx2 sha_ni")
    assert zen2.startswith("AMD EPYC (family 23 model 49, avx2 fma, cache 16384 KB) | ")
    assert fingerprint("49", "fpu sse sse2 avx fma avx2 sha_ni hypervisor") == zen2
    assert fingerprint("17", "fpu sse sse2 avx fma avx2 sha_ni") != zen2
    assert fingerprint("49", "fpu sse avx fma avx2 avx512f avx512_vnni") != zen2
    assert fingerprint("49", "fpu sse sse2 avx fma avx2 sha_ni", cache="32768 KB") != zen2
