"""The profile database: measured kernel times, kept across runs in one SQLite file.

A record is keyed by (candidate_key, backend, backend_version, threads, machine): the candidate's
canonical structural key (so identical blocks share one measurement), the kernel provider and the
library versions that shape its code, the thread count the kernel was compiled and timed with, and
a fingerprint of the machine. Its value is a timing (median, 10th and 90th percentiles, runs) when
the kernel was measured, or a rejection with its reason (the backend could not compile it, or it
disagreed with the reference), so a later run neither re-times nor retries it; and the kernel's
error against the reference, so that the accuracy policy, not the first model that met a kernel,
decides whether it is accurate enough (a rejection for accuracy is retried under a looser tolerance).
A rejection carries its class (`Rejection`) and the korch code that made it (korch/version.py): it
is trusted only by that code, so a korch change retries it. A failure that says nothing about the
kernel (out of memory, a killed compiler, a missing compiler: `Rejection.TRANSIENT`) is never stored.

Durability: SQLite in WAL mode, each `put` its own committed transaction, so a measurement that `put`
returned from survives the process being killed at any moment; `synchronous=NORMAL` means only a
power loss can drop the last few commits, and never corrupts the file. Several processes may write
one file at once (WAL readers never block; writers wait up to BUSY_TIMEOUT_S for each other).

A second table remembers, per selection problem (the graph's profiled options, threads, machine),
the predicted boundary cost of the plan measured selection kept (column penalty_s, its old name),
the plan's measured time and, when
one engine's whole-model kernel beat the solver's plan side by side, that engine, so a warm
`korch optimize` solves once instead of compiling and timing every round again. That table and the
`error` column were added without a schema bump: a file without them gets them on open, and older
korch ignores them.

Two more tables feed the cost models (korch/costmodel): `features`, each candidate key's feature
vector (a function of the key, stored once, tagged with the feature set's version), and `sightings`,
which model(s) each key was seen in, so a model's own kernels can be held out when the cost models
are evaluated. A sixth, `guided`, lists the profiling problems whose guided profiling finished
(korch/profile/guided.py), so a warm optimize reads what was measured and solves nothing again.
All three are added to older files on open; a vector of another version is not read.

A third table keeps the machine's kernel-boundary calibration (korch/profile/boundaries.py): per
threads, engine versions and (producer, consumer, layout), the fixed and per-byte cost of a tensor
crossing from one kernel to the next. It is made once per machine and added to older files on open.
And `refills` (korch/profile/refill.py): kernels timed back to back and after a sweep of what a plan's
other kernels touch, keyed as a record is, with the bytes each touched and the sweep evicted; what a
split kernel not timed so is charged over its profile. Added to older files on open.

The file is the user's: a file that is not a korch profile database, is corrupt, or was written by a
newer korch is reported as a ProfileDBError and left byte for byte as it was, never repaired.
"""

from __future__ import annotations

import json
import logging
import math
import os
import platform
import sqlite3
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from types import MappingProxyType, TracebackType
from typing import Any, NamedTuple

from korch.errors import ExitCode, KorchError
from korch.profile.boundaries import Line
from korch.profile.refill import RefillSample
from korch.profile.timing import Timing

log = logging.getLogger("korch.profile")

# Bump when the tables change; a file with a higher version is refused, never rewritten.
SCHEMA_VERSION = 1
DB_FILENAME = "profiles.sqlite"
# A writer holds the lock for one small transaction; a minute covers a heavily loaded machine.
BUSY_TIMEOUT_S = 60.0
# Pause between attempts to open a file another process is switching to WAL or creating.
OPEN_RETRY_S = 0.01
# Keys per lookup query: under the 999 bound-parameter limit of older SQLite builds, with room to spare.
GET_MANY_CHUNK = 500

_ADVICE_DELETE = "Delete the file or pass another --cache directory"
_ADVICE_FOREIGN = "It is not korch's file: pass another --cache directory"
_ADVICE_OTHER_CACHE = "Check the disk and permissions, or pass another --cache directory"
_ADVICE_WAIT = "Wait for the other korch process, or pass another --cache directory"
_SQLITE_MAGIC = b"SQLite format 3\x00"
_KEY_COLUMNS = ("candidate_key", "backend", "backend_version", "threads", "machine")
_VALUE_COLUMNS = ("median_s", "p10_s", "p90_s", "runs", "status", "reason", "created_at", "error",  # Record's order
                  "rejection", "korch_code")
_SELECTIONS = """
CREATE TABLE IF NOT EXISTS selections (
    problem_key TEXT PRIMARY KEY,
    penalty_s REAL NOT NULL,
    measured_s REAL NOT NULL,
    created_at REAL NOT NULL,
    whole_model_backend TEXT,
    reason TEXT,
    costs TEXT,
    checked TEXT,
    schedule TEXT,
    model TEXT,
    inputs TEXT
) WITHOUT ROWID;
"""
_BOUNDARIES = """
CREATE TABLE IF NOT EXISTS boundaries (
    machine TEXT NOT NULL,
    threads INTEGER NOT NULL,
    versions TEXT NOT NULL,
    producer TEXT NOT NULL,
    consumer TEXT NOT NULL,
    layout TEXT NOT NULL,
    fixed_s REAL NOT NULL,
    s_per_byte REAL NOT NULL,
    created_at REAL NOT NULL,
    PRIMARY KEY (machine, threads, versions, producer, consumer, layout)
) WITHOUT ROWID;
"""
_FEATURES = """
CREATE TABLE IF NOT EXISTS features (
    candidate_key TEXT PRIMARY KEY,
    version INTEGER NOT NULL,
    vector TEXT NOT NULL
) WITHOUT ROWID;
"""
_GUIDED = """
CREATE TABLE IF NOT EXISTS guided (
    problem_key TEXT PRIMARY KEY,
    created_at REAL NOT NULL
) WITHOUT ROWID;
"""
_SIGHTINGS = """
CREATE TABLE IF NOT EXISTS sightings (
    candidate_key TEXT NOT NULL,
    model TEXT NOT NULL,
    PRIMARY KEY (candidate_key, model)
) WITHOUT ROWID;
"""
_REFILLS = """
CREATE TABLE IF NOT EXISTS refills (
    candidate_key TEXT NOT NULL,
    backend TEXT NOT NULL,
    backend_version TEXT NOT NULL,
    threads INTEGER NOT NULL,
    machine TEXT NOT NULL,
    touched_bytes INTEGER NOT NULL,
    evict_bytes INTEGER NOT NULL,
    hot_s REAL NOT NULL,
    evicted_s REAL NOT NULL,
    created_at REAL NOT NULL,
    PRIMARY KEY (candidate_key, backend, backend_version, threads, machine)
) WITHOUT ROWID;
"""
_REWRITE_CHECKS = """
CREATE TABLE IF NOT EXISTS rewrite_checks (
    check_key TEXT PRIMARY KEY,
    created_at REAL NOT NULL
) WITHOUT ROWID;
"""
# The nearest core-link round trip read on each machine (korch/profile/link.py), by any run: what "near"
# is for a run that reads the link far throughout (a bench whose 30 rounds all read ~327 ns called them
# near, judged against its own nearest reading; the optimize before it had read 50 ns).
_LINKS = """
CREATE TABLE IF NOT EXISTS links (
    machine TEXT PRIMARY KEY,
    nearest_ns REAL NOT NULL,
    read_at REAL NOT NULL
) WITHOUT ROWID;
"""
# A graph's candidates (korch/candidates/store.py): a compressed blob of ~1 MB per model, so a rowid
# table (SQLite keeps large rows out of a WITHOUT ROWID table's b-tree poorly), and only the most
# recently stored CANDIDATE_SETS_KEPT of them.
_CANDIDATE_SETS = """
CREATE TABLE IF NOT EXISTS candidate_sets (
    set_key TEXT PRIMARY KEY,
    blob BLOB NOT NULL,
    created_at REAL NOT NULL
);
"""
CANDIDATE_SETS_KEPT = 32
# Columns added after the tables first shipped, added to older files on open (NULL in old rows).
_COLUMNS_ADDED = {"selections": (("whole_model_backend", "TEXT"), ("reason", "TEXT"), ("costs", "TEXT"),
                                  ("checked", "TEXT"), ("schedule", "TEXT"), ("model", "TEXT"), ("inputs", "TEXT")),
                  "profiles": (("error", "REAL"), ("rejection", "TEXT"), ("korch_code", "TEXT"))}
_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS korch_schema (version INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS profiles (
    candidate_key TEXT NOT NULL,
    backend TEXT NOT NULL,
    backend_version TEXT NOT NULL,
    threads INTEGER NOT NULL,
    machine TEXT NOT NULL,
    median_s REAL,
    p10_s REAL,
    p90_s REAL,
    runs INTEGER NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('ok', 'rejected')),
    reason TEXT NOT NULL,
    created_at REAL NOT NULL,
    error REAL,
    rejection TEXT,
    korch_code TEXT,
    PRIMARY KEY ({", ".join(_KEY_COLUMNS)})
) WITHOUT ROWID;
{_SELECTIONS}
{_BOUNDARIES}
{_FEATURES}
{_SIGHTINGS}
{_GUIDED}
{_REFILLS}
{_REWRITE_CHECKS}
{_CANDIDATE_SETS}
{_LINKS}
"""


class ProfileDBError(KorchError):
    """The profile database cannot be used: unreadable, corrupt, foreign, too new, or not writable."""

    exit_code = ExitCode.CACHE


class RememberedSelection(NamedTuple):
    """What measured selection kept for one selection problem: the kept plan's predicted boundary
    cost (penalty_s), the plan's measured time, the backend of the whole-model kernel when one engine running the
    whole model was kept (None when a split plan was kept), and why. `costs`: the in-plan costs
    (seconds, by "candidate key|backend") the final solve used in place of profiles (measured.py).
    `checked`: the kept plan's passed accuracy check and the weights it was checked on
    ({"weights": digest, "check": verify.PlanCheck.to_json()}), once the pipeline has checked it."""

    penalty_s: float
    measured_s: float
    whole_model_backend: str | None = None
    reason: str | None = None
    costs: Mapping[str, float] = MappingProxyType({})
    checked: Mapping[str, Any] | None = None
    # The kept split plan's schedule (select/measured.py _schedule_by_step): {"steps": each step named
    # by its engine and primitives ("onnxruntime|3,4,5"), in plan order; "stages": Schedule.to_json()
    # over those steps; "step_ms": each step's wide and narrow in-plan ms}. None: one step after another.
    schedule: Any = None


class TimedKernel(NamedTuple):
    """A timed kernel joined with its candidate's features (ProfileDB.timed_with_features)."""

    candidate_key: str
    backend_version: str
    threads: int
    median_s: float
    created_at: float
    features: tuple[float, ...]
    models: frozenset[str]


class Status(str, Enum):
    OK = "ok"
    REJECTED = "rejected"


class Rejection(str, Enum):
    """Why a kernel has no timing, which decides when korch asks again."""

    UNSUPPORTED = "unsupported"     # the backend's rules refuse the candidate
    FAILED = "failed"               # compiling it or its first run raised
    INACCURATE = "inaccurate"       # it ran and disagreed with the reference: retried when a tolerance allows it
    TRANSIENT = "transient"         # the machine, not the kernel (out of memory, a killed or missing compiler): never stored


@dataclass(frozen=True)
class Record:
    """One measurement (status OK, with a timing) or one rejection (status REJECTED, with a reason)."""

    candidate_key: str
    backend: str
    backend_version: str
    threads: int
    machine: str
    median_s: float | None
    p10_s: float | None
    p90_s: float | None
    runs: int
    status: Status
    reason: str = ""
    created_at: float = field(default_factory=time.time)
    # The kernel's largest error against the reference, relative to each output's scale (None: not
    # checked, e.g. it did not compile). Acceptance is the accuracy policy's call, made per model.
    error: float | None = None
    kind: Rejection | None = None   # a rejection's class (None: timed, or stored by korch before classes)
    code: str | None = None         # korch/version.py code_version() of the korch that made the record

    def __post_init__(self) -> None:
        object.__setattr__(self, "status", Status(self.status))
        if self.kind is not None:
            object.__setattr__(self, "kind", Rejection(self.kind))
        for name in ("median_s", "p10_s", "p90_s"):              # no timing: None (SQLite stores NaN as NULL)
            value = getattr(self, name)
            if value is not None and math.isnan(value):
                object.__setattr__(self, name, None)
        timed = (self.median_s, self.p10_s, self.p90_s)
        if self.status is Status.OK and (None in timed or self.runs < 1):
            raise ValueError(f"an ok record needs median_s, p10_s, p90_s and runs >= 1: {self}")
        if self.status is Status.REJECTED and not self.reason:
            raise ValueError(f"a rejected record needs a reason: {self}")

    @classmethod
    def ok(cls, candidate_key: str, backend: str, backend_version: str, threads: int, machine: str,
           timing: Timing, error: float | None = None, code: str | None = None) -> Record:
        return cls(candidate_key, backend, backend_version, threads, machine,
                   timing.median_s, timing.p10_s, timing.p90_s, timing.runs, Status.OK, error=error, code=code)

    @classmethod
    def rejected(cls, candidate_key: str, backend: str, backend_version: str, threads: int, machine: str,
                 reason: str, kind: Rejection, code: str | None, error: float | None = None) -> Record:
        return cls(candidate_key, backend, backend_version, threads, machine, None, None, None, 0, Status.REJECTED,
                   reason, error=error, kind=kind, code=code)

    @property
    def timing(self) -> Timing | None:
        if self.status is not Status.OK:
            return None
        assert self.median_s is not None and self.p10_s is not None and self.p90_s is not None
        return Timing(self.median_s, self.p10_s, self.p90_s, self.runs)


class ProfileDB:
    """Profile records in one SQLite file. One object per process (or thread); close it, or use `with`."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._conn: sqlite3.Connection | None = _open(self.path)

    def __enter__(self) -> ProfileDB:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def get(self, candidate_key: str, backend: str, backend_version: str, threads: int,
            machine: str) -> Record | None:
        return self.get_many([candidate_key], backend, backend_version, threads, machine).get(candidate_key)

    def get_many(self, candidate_keys: Iterable[str], backend: str, backend_version: str, threads: int,
                 machine: str) -> dict[str, Record]:
        """The stored records among `candidate_keys` for one backend, version, thread count and machine.

        One query per GET_MANY_CHUNK keys. Keys without a record are absent from the result.
        """
        columns = ", ".join(_KEY_COLUMNS + _VALUE_COLUMNS)
        sql = (f"SELECT {columns} FROM profiles WHERE backend = ? AND backend_version = ? AND threads = ? "
               "AND machine = ? AND candidate_key IN ({})")
        rows = self._rows_for_keys(sql, (backend, backend_version, threads, machine), candidate_keys)
        return {row[0]: Record(*row) for row in rows}

    def _rows_for_keys(self, sql: str, params: Sequence[object], candidate_keys: Iterable[str]) -> list[tuple]:
        """The rows of `sql`, whose last condition is `candidate_key IN ({})`, over `candidate_keys`:
        one query per GET_MANY_CHUNK keys (SQLite bounds the parameters of one statement)."""
        keys = list(dict.fromkeys(candidate_keys))
        rows: list[tuple] = []
        for start in range(0, len(keys), GET_MANY_CHUNK):
            chunk = keys[start:start + GET_MANY_CHUNK]
            rows += self._query(sql.format(", ".join("?" * len(chunk))), (*params, *chunk))
        return rows

    def put(self, record: Record) -> None:
        """Store one record (replacing one with the same key), committed before this returns."""
        self.put_many([record])

    def put_many(self, records: Iterable[Record]) -> None:
        """Store records in one transaction: all of them are committed when this returns, or none."""
        records = list(records)
        transient = [r for r in records if r.kind is Rejection.TRANSIENT]
        if transient:
            raise ValueError(f"a transient failure is not a property of the kernel and is never stored: {transient[0]}")
        rows = [_row(r) for r in records]
        if not rows:
            return
        names = _KEY_COLUMNS + _VALUE_COLUMNS
        self._write_many(f"INSERT OR REPLACE INTO profiles ({', '.join(names)}) "
                         f"VALUES ({', '.join('?' * len(names))})", rows)

    def _write_many(self, sql: str, rows: Sequence[Sequence[object]]) -> None:
        """Run `sql` for every row in one transaction: all committed when this returns, or none."""
        self._transaction([(sql, rows)])

    def _transaction(self, statements: Sequence[tuple[str, Sequence[Sequence[object]]]]) -> None:
        """Run each (sql, rows) in one transaction: all committed when this returns, or none."""
        conn = self._connection()
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                for sql, rows in statements:
                    conn.executemany(sql, rows)
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        except sqlite3.Error as e:
            raise _error(self.path, f"cannot write: {e}", advice=_ADVICE_OTHER_CACHE) from e

    def get_selection(self, problem_key: str) -> RememberedSelection | None:
        """What measured selection settled on for this selection problem, or None."""
        rows = self._query("SELECT penalty_s, measured_s, whole_model_backend, reason, costs, checked, schedule "
                           "FROM selections WHERE problem_key = ?", (problem_key,))
        if not rows:
            return None
        penalty, measured, backend, reason, costs, checked, schedule = rows[0]
        try:
            parsed = {str(k): float(v) for k, v in json.loads(costs).items()} if costs else {}
        except (ValueError, TypeError, AttributeError):
            log.warning("%s: remembered selection %s has unreadable costs; deciding it again", self.path,
                        problem_key[:12])
            return None
        try:
            check = json.loads(checked) if checked else None
        except ValueError:
            check = None                                   # unreadable: the plan is checked again
        try:
            lanes = json.loads(schedule) if schedule else None
        except ValueError:
            lanes = None                                   # unreadable: the plan runs one step after another
        return RememberedSelection(float(penalty), float(measured), backend, reason, MappingProxyType(parsed),
                                   check if isinstance(check, dict) else None, lanes)

    def remember_check(self, problem_key: str, checked: Mapping[str, Any]) -> None:
        """Store the passed check of the plan kept for `problem_key` (RememberedSelection.checked)."""
        conn = self._connection()
        try:
            conn.execute("UPDATE selections SET checked = ? WHERE problem_key = ?", (json.dumps(checked), problem_key))
        except sqlite3.Error as e:
            raise _error(self.path, f"cannot write: {e}", advice=_ADVICE_OTHER_CACHE) from e

    def put_selection(self, problem_key: str, penalty_s: float, measured_s: float,
                      whole_model_backend: str | None = None, reason: str | None = None,
                      costs: Mapping[str, float] | None = None, schedule: Any = None,
                      model: str | None = None, inputs: Mapping[str, Sequence[str]] | None = None) -> None:
        """`schedule`: RememberedSelection.schedule's JSON form. `model` and `inputs`: the model the
        problem is of and the problem as text (measured.selection_problem), for `last_selection_inputs`;
        the model's older selections drop theirs."""
        conn = self._connection()
        try:
            conn.execute("INSERT OR REPLACE INTO selections (problem_key, penalty_s, measured_s, created_at, "
                         "whole_model_backend, reason, costs, schedule, model, inputs) "
                         "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                         (problem_key, penalty_s, measured_s, time.time(), whole_model_backend, reason,
                          json.dumps(dict(costs)) if costs else None,
                          json.dumps(schedule) if schedule is not None else None, model,
                          json.dumps({k: list(v) for k, v in inputs.items()}) if inputs is not None else None))
            if model is not None and inputs is not None:      # only the latest is compared with (tens of kB each)
                conn.execute("UPDATE selections SET inputs = NULL WHERE model = ? AND problem_key != ?",
                             (model, problem_key))
        except sqlite3.Error as e:
            raise _error(self.path, f"cannot write: {e}", advice=_ADVICE_OTHER_CACHE) from e

    def last_selection_inputs(self, model: str) -> dict[str, list[str]] | None:
        """The problem (as put_selection's `inputs`) of the latest selection stored for `model`; None if
        there is none or it cannot be read."""
        rows = self._query("SELECT inputs FROM selections WHERE model = ? AND inputs IS NOT NULL "
                           "ORDER BY created_at DESC LIMIT 1", (model,))
        if not rows:
            return None
        try:
            parsed = json.loads(rows[0][0])
            return {str(k): [str(x) for x in v] for k, v in parsed.items()} if isinstance(parsed, dict) else None
        except (ValueError, TypeError):
            return None

    def get_boundaries(self, machine: str, threads: int, versions: str) -> dict[tuple[str, str, str], Line] | None:
        """The stored boundary-cost lines (korch/profile/boundaries.py) per (producer, consumer, layout)."""
        rows = self._query("SELECT producer, consumer, layout, fixed_s, s_per_byte FROM boundaries "
                           "WHERE machine = ? AND threads = ? AND versions = ?", (machine, threads, versions))
        return {(p, c, layout): Line(float(f), float(b)) for p, c, layout, f, b in rows} if rows else None

    def put_boundaries(self, machine: str, threads: int, versions: str,
                       lines: Mapping[tuple[str, str, str], Line]) -> None:
        now = time.time()
        self._write_many("INSERT OR REPLACE INTO boundaries (machine, threads, versions, producer, consumer, layout, "
                         "fixed_s, s_per_byte, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                         [(machine, threads, versions, p, c, layout, line.fixed_s, line.s_per_byte, now)
                          for (p, c, layout), line in lines.items()])

    def put_features(self, model: str, version: int, vectors: Mapping[str, Sequence[float]],
                     seen: Iterable[str] = ()) -> None:
        """Store each key's feature vector (kept if one of this version is there), and that `model` saw
        it and each key of `seen` (keys whose vector is stored already)."""
        keys = list(dict.fromkeys([*vectors, *seen]))
        if not keys:
            return
        self._transaction([
            ("INSERT INTO features (candidate_key, version, vector) VALUES (?, ?, ?) ON CONFLICT(candidate_key) "
             "DO UPDATE SET version = excluded.version, vector = excluded.vector "
             "WHERE features.version != excluded.version",
             [(k, version, json.dumps(list(v))) for k, v in vectors.items()]),
            ("INSERT OR IGNORE INTO sightings (candidate_key, model) VALUES (?, ?)", [(k, model) for k in keys]),
        ])

    def keys_with_features(self, candidate_keys: Iterable[str], version: int) -> set[str]:
        """Those of `candidate_keys` whose feature vector of `version` is stored."""
        rows = self._rows_for_keys("SELECT candidate_key FROM features WHERE version = ? AND candidate_key IN ({})",
                                   (version,), candidate_keys)
        return {row[0] for row in rows}

    def features(self, candidate_keys: Iterable[str], version: int) -> dict[str, tuple[float, ...]]:
        """The stored feature vector of `version` of each of `candidate_keys` that has one (an unreadable
        one is left out, to be computed again)."""
        rows = self._rows_for_keys(
            "SELECT candidate_key, vector FROM features WHERE version = ? AND candidate_key IN ({})", (version,),
            candidate_keys)
        out = {}
        for key, vector in rows:
            try:
                out[key] = tuple(float(x) for x in json.loads(vector))
            except (ValueError, TypeError):
                log.warning("%s: unreadable feature vector for %s; computed again", self.path, key[:12])
        return out

    def timed_with_features(self, backend: str, machine: str, version: int) -> list[TimedKernel]:
        """Every timed (ok) record of `backend` on `machine` whose key has a feature vector of `version`,
        newest first, with the models its key was seen in: what a cost model learns from."""
        rows = self._query(
            "SELECT p.candidate_key, p.backend_version, p.threads, p.median_s, p.created_at, f.vector, "
            "(SELECT group_concat(s.model, char(31)) FROM sightings s WHERE s.candidate_key = p.candidate_key) "
            "FROM profiles p JOIN features f ON f.candidate_key = p.candidate_key "
            "WHERE p.backend = ? AND p.machine = ? AND p.status = 'ok' AND f.version = ? "
            "ORDER BY p.created_at DESC", (backend, machine, version))
        out = []
        for key, backend_version, threads, median, created, vector, models in rows:
            try:
                values = tuple(float(x) for x in json.loads(vector))
            except (ValueError, TypeError):
                log.warning("%s: unreadable feature vector for %s; skipped", self.path, key[:12])
                continue
            out.append(TimedKernel(key, backend_version, int(threads), float(median), float(created), values,
                                   frozenset(models.split(chr(31))) if models else frozenset()))
        return out

    def guided_done(self, problem_key: str) -> bool:
        """Whether guided profiling of this problem finished before (korch/profile/guided.py)."""
        return bool(self._query("SELECT 1 FROM guided WHERE problem_key = ?", (problem_key,)))

    def put_guided_done(self, problem_key: str) -> None:
        self._write_many("INSERT OR REPLACE INTO guided (problem_key, created_at) VALUES (?, ?)",
                         [(problem_key, time.time())])

    def nearest_link(self, machine: str) -> float | None:
        """The nearest core link (ns) any run has read on `machine` (None: never read)."""
        rows = self._query("SELECT nearest_ns FROM links WHERE machine = ?", (machine,))
        return float(rows[0][0]) if rows else None

    def put_link(self, machine: str, nearest_ns: float) -> None:
        """A run's nearest core-link reading on `machine`, kept if nearer than the one stored."""
        self._write_many("INSERT INTO links (machine, nearest_ns, read_at) VALUES (?, ?, ?) "
                         "ON CONFLICT (machine) DO UPDATE SET nearest_ns = excluded.nearest_ns, "
                         "read_at = excluded.read_at WHERE excluded.nearest_ns < links.nearest_ns",
                         [(machine, float(nearest_ns), time.time())])

    def rewrites_passed(self, check_key: str) -> bool:
        """Whether a model's rewrites passed their check before (frontend/rewrite_check.py rewrite_check_key)."""
        return bool(self._query("SELECT 1 FROM rewrite_checks WHERE check_key = ?", (check_key,)))

    def put_rewrites_passed(self, check_key: str) -> None:
        self._write_many("INSERT OR REPLACE INTO rewrite_checks (check_key, created_at) VALUES (?, ?)",
                         [(check_key, time.time())])

    def candidate_set(self, set_key: str) -> bytes | None:
        """A graph's stored candidates (korch/candidates/store.py), or None."""
        rows = self._query("SELECT blob FROM candidate_sets WHERE set_key = ?", (set_key,))
        return bytes(rows[0][0]) if rows and isinstance(rows[0][0], (bytes, memoryview)) else None

    def put_candidate_set(self, set_key: str, blob: bytes) -> None:
        """Store a graph's candidates, and drop all but the CANDIDATE_SETS_KEPT most recently stored
        sets (a replaced row takes a new rowid)."""
        self._transaction([
            ("INSERT OR REPLACE INTO candidate_sets (set_key, blob, created_at) VALUES (?, ?, ?)",
             [(set_key, blob, time.time())]),
            ("DELETE FROM candidate_sets WHERE set_key NOT IN "
             "(SELECT set_key FROM candidate_sets ORDER BY rowid DESC LIMIT ?)", [(CANDIDATE_SETS_KEPT,)])])

    def put_refills(self, samples: Iterable[RefillSample], backend_version: Mapping[str, str], threads: int,
                    machine: str) -> None:
        """Store kernels timed back to back and after a sweep (korch/profile/refill.py), each under its
        backend's record version (`backend_version`: backend -> version)."""
        now = time.time()
        self._write_many("INSERT OR REPLACE INTO refills (candidate_key, backend, backend_version, threads, machine, "
                         "touched_bytes, evict_bytes, hot_s, evicted_s, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                         [(s.candidate_key, s.backend, backend_version[s.backend], threads, machine, s.touched_bytes,
                           s.evict_bytes, s.hot_s, s.evicted_s, now) for s in samples])

    def refills(self, backend: str, backend_version: str, threads: int, machine: str) -> list[RefillSample]:
        """The refill samples of `backend` at this version, threads and machine, oldest first (a row
        that does not make a sample is skipped with a warning)."""
        rows = self._query("SELECT candidate_key, touched_bytes, evict_bytes, hot_s, evicted_s FROM refills WHERE "
                           "backend = ? AND backend_version = ? AND threads = ? AND machine = ? ORDER BY created_at",
                           (backend, backend_version, threads, machine))
        out = []
        for key, touched, evict, hot, evicted in rows:
            try:
                out.append(RefillSample(key, backend, int(touched), int(evict), float(hot), float(evicted)))
            except (TypeError, ValueError) as e:
                log.warning("%s: unreadable refill sample for %s (%s); skipped", self.path, str(key)[:12], e)
        return out

    def count(self) -> int:
        return int(self._query("SELECT COUNT(*) FROM profiles", ())[0][0])

    def _query(self, sql: str, params: Sequence[object]) -> list[tuple]:
        try:
            return self._connection().execute(sql, params).fetchall()
        except sqlite3.Error as e:
            raise _error(self.path, f"cannot read: {e}", advice=_ADVICE_OTHER_CACHE) from e

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            raise ValueError(f"profile database {self.path} is closed")
        return self._conn


def default_cache_dir(environ: Mapping[str, str] | None = None) -> Path:
    """`$XDG_CACHE_HOME/korch`, or `~/.cache/korch`. For the CLI's default `--cache`; the only env read here."""
    env = os.environ if environ is None else environ
    xdg = env.get("XDG_CACHE_HOME", "")
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".cache"   # XDG: ignore relative
    return base / "korch"


def machine_fingerprint(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """CPU model, CPU count and platform: the same string on every run on one machine. Virtual machines
    often name only the vendor line ("AMD EPYC"), so the CPU family and model numbers, the vector
    instruction sets kernels are specialised for and the cache size are part of it too: profiles and
    plans from a Zen 2 host are not reused on a Zen 4 host that calls itself the same."""
    fields = _cpuinfo_fields(cpuinfo)
    model = _cpu_model(fields) or platform.processor() or "unknown cpu"
    details = []
    if fields.get("cpu family", "").isdigit() and fields.get("model", "").isdigit():
        details.append(f"family {fields['cpu family']} model {fields['model']}")
    flags = set((fields.get("flags") or fields.get("features") or "").split())
    isa = [f for f in _VECTOR_ISA if f in flags]
    if isa:
        details.append(" ".join(isa))
    if fields.get("cache size"):
        details.append(f"cache {fields['cache size']}")
    described = f"{model} ({', '.join(details)})" if details else model
    return f"{described} | {os.cpu_count()} cpus | {platform.system()} {platform.machine()}"


# Instruction sets that change which kernels the engines run (/proc/cpuinfo flags on x86, features on ARM).
_VECTOR_ISA = ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "avx512_fp16", "avx_vnni", "amx_tile",
               "asimd", "sve", "sve2")


def _cpuinfo_fields(cpuinfo: Path) -> dict[str, str]:
    """The first CPU's fields of /proc/cpuinfo (lower-case names), {} if it cannot be read."""
    try:
        text = cpuinfo.read_text(errors="replace")
    except OSError:
        return {}
    fields: dict[str, str] = {}
    for line in text.splitlines():
        name, sep, value = line.partition(":")
        if sep and value.strip():
            fields.setdefault(name.strip().lower(), " ".join(value.split()))
    return fields


def _cpu_model(fields: dict[str, str]) -> str | None:
    for name in ("model name", "cpu model", "model", "hardware", "processor"):   # x86, MIPS, ARM boards
        if name in fields and not fields[name].isdigit():
            return fields[name]
    return None


def _row(record: Record) -> tuple[object, ...]:
    return (record.candidate_key, record.backend, record.backend_version, record.threads, record.machine,
            record.median_s, record.p10_s, record.p90_s, record.runs, record.status.value, record.reason,
            record.created_at, record.error, record.kind.value if record.kind is not None else None, record.code)


def _error(path: Path, problem: str, advice: str = _ADVICE_DELETE) -> ProfileDBError:
    return ProfileDBError(f"profile database {path}: {problem}. {advice}.")


def _open(path: Path) -> sqlite3.Connection:
    """Connect and prepare the file, retrying while another process holds a lock that SQLite will not wait on.

    Switching a new file to WAL needs an exclusive lock and SQLite reports "locked" at once, without
    its busy timeout, when another process is doing the same; every step before the schema commit
    only reads or is idempotent, so the whole opening is simply tried again.
    """
    _ensure_dir(path.parent)
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    while True:
        try:
            return _open_once(path)
        except sqlite3.Error as e:
            if not _is_busy(e):
                raise _error(path, f"cannot open: {e}", advice=_ADVICE_OTHER_CACHE) from e
            if time.monotonic() > deadline:
                raise _error(path, f"still locked by another process after {BUSY_TIMEOUT_S:.0f} s",
                             advice=_ADVICE_WAIT) from e
            time.sleep(OPEN_RETRY_S)


def _open_once(path: Path) -> sqlite3.Connection:
    """Check the file before anything writes to it, then switch to WAL and create the tables if needed."""
    existing = _check_existing_file(path)
    uri = f"{path.resolve().as_uri()}?mode={'rw' if existing else 'rwc'}"
    conn = sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_S, isolation_level=None)
    try:
        version = None
        if existing:
            _check_integrity(conn, path)
            version = _schema_version(conn, path)    # refuses foreign and newer files before WAL touches them
        mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        if mode.lower() != "wal":
            raise _error(path, f"cannot use WAL journal mode (got {mode!r})", advice=_ADVICE_OTHER_CACHE)
        conn.execute("PRAGMA synchronous=NORMAL")
        if version is None:
            _create_schema(conn, path)
        else:
            _add_new_columns(conn)        # version-1 files from before the selections table or later columns
    except BaseException:
        conn.close()
        raise
    return conn


def _add_new_columns(conn: sqlite3.Connection) -> None:
    for table in (_SELECTIONS, _BOUNDARIES, _FEATURES, _SIGHTINGS, _GUIDED, _REFILLS, _REWRITE_CHECKS,
                  _CANDIDATE_SETS, _LINKS):
        conn.execute(table)
    for table, columns in _COLUMNS_ADDED.items():
        have = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
        for name, sql_type in columns:
            if name not in have:
                conn.execute(f"ALTER TABLE {table} ADD COLUMN {name} {sql_type}")


def _is_busy(e: sqlite3.Error) -> bool:
    code = getattr(e, "sqlite_errorcode", None)                 # Python >= 3.11
    if code is not None:
        return code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
    return "locked" in str(e) or "busy" in str(e)


def _ensure_dir(directory: Path) -> None:
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ProfileDBError(f"cannot create the profile cache directory {directory}: {e.strerror or e}. "
                             f"Pass another --cache directory.") from e
    if not os.access(directory, os.W_OK | os.X_OK):
        raise ProfileDBError(f"the profile cache directory {directory} is not writable. "
                             f"Pass another --cache directory.")


def _check_existing_file(path: Path) -> bool:
    """True if `path` holds data; raises if it is not an SQLite file. Reads only; an empty file counts as new."""
    if path.is_dir():
        raise _error(path, "is a directory, not a file")
    try:
        with path.open("rb") as f:
            header = f.read(len(_SQLITE_MAGIC))
    except FileNotFoundError:
        return False
    except OSError as e:
        raise _error(path, f"cannot read: {e.strerror or e}") from e
    if not header:
        return False
    if header != _SQLITE_MAGIC:
        raise _error(path, "is not an SQLite database (corrupt, or some other file)")
    return True


def _check_integrity(conn: sqlite3.Connection, path: Path) -> None:
    try:
        problems = [row[0] for row in conn.execute("PRAGMA integrity_check").fetchall()]
    except sqlite3.DatabaseError as e:
        if _is_busy(e):
            raise
        raise _error(path, f"is corrupt ({e})") from e
    if problems != ["ok"]:
        raise _error(path, f"is corrupt (integrity check: {'; '.join(problems[:3])})")


def _schema_version(conn: sqlite3.Connection, path: Path) -> int | None:
    """The file's schema version; None for a database with no tables yet. Raises if korch cannot use it."""
    tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if not tables:
        return None
    if "korch_schema" not in tables or "profiles" not in tables:
        raise _error(path, f"is an SQLite database but not a korch profile database (tables: {sorted(tables)})",
                     advice=_ADVICE_FOREIGN)
    versions = [row[0] for row in conn.execute("SELECT version FROM korch_schema")]
    if len(versions) != 1 or not isinstance(versions[0], int) or versions[0] < 1:
        raise _error(path, f"has an unknown schema version {versions}")
    if versions[0] > SCHEMA_VERSION:
        raise _error(path, f"was written by a newer korch (schema version {versions[0]}; "
                           f"this korch reads version {SCHEMA_VERSION})")
    return versions[0]


def _create_schema(conn: sqlite3.Connection, path: Path) -> None:
    """Create the tables unless present; under the write lock, so two processes creating one file agree."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        if _schema_version(conn, path) is None:
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    conn.execute(statement)
            conn.execute("INSERT INTO korch_schema (version) VALUES (?)", (SCHEMA_VERSION,))
            log.debug("created profile database %s (schema version %d)", path, SCHEMA_VERSION)
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
