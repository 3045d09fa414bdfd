"""The runs database: one SQLite row per measurement, with the full results JSON.

Location, first that applies: ``--db PATH``; ``$HOSTGAP_DB``; ``$XDG_DATA_HOME/hostgap/runs.sqlite``;
``~/.local/share/hostgap/runs.sqlite``.

Schema (version :data:`SCHEMA_VERSION`, kept in table ``meta``): table ``runs`` has the columns
people filter and sort on (preset, engine, device, mode, batch, prompt length, per-step wall /
device-active / host-exposed, host fraction, HDBI, verdict, cell key, run directory) and the
complete ``results.json`` text in ``results``. Every write is one transaction, so an interrupted
sweep leaves either the whole row or none.

Run directories are stored as absolute paths, so a run is found by id from any folder. Rows
written before that keep the relative path of the folder ``hostgap measure`` ran in; reads
resolve such a path against the current folder, then the database's folder
(:func:`resolve_run_dir`), and return it absolute when it exists there.

>>> db = RunsDB(":memory:")
>>> db.add({"run_id": "r1", "preset": "tiny", "batch": 1, "differencing": {"t_step_ns": 4e6}})
>>> db.get("r1")["preset"], len(db.results())
('tiny', 1)
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from pathlib import Path
from typing import cast

from hostgap.checks import reasons
from hostgap.errors import HostgapError

SCHEMA_VERSION = 2
"""2: columns ``valid``, ``invalid_reasons`` (one per line) and ``contended`` (added to a
version-1 database on open, filled from each row's results)."""

COLUMNS = (
    ("run_id", "TEXT PRIMARY KEY"),
    ("created", "TEXT NOT NULL"),
    ("cell_key", "TEXT"),
    ("preset", "TEXT"),
    ("engine", "TEXT"),
    ("device", "TEXT"),
    ("device_name", "TEXT"),
    ("mode", "TEXT"),
    ("batch", "INTEGER"),
    ("prompt_len", "INTEGER"),
    ("dtype", "TEXT"),
    ("n1", "INTEGER"),
    ("n2", "INTEGER"),
    ("threads", "INTEGER"),
    ("t_step_ns", "REAL"),
    ("g_step_ns", "REAL"),
    ("h_step_ns", "REAL"),
    ("host_fraction", "REAL"),
    ("hdbi", "REAL"),
    ("verdict", "TEXT"),
    ("activity", "TEXT"),
    ("run_dir", "TEXT"),
    ("valid", "INTEGER"),
    ("invalid_reasons", "TEXT"),
    ("contended", "INTEGER"),
    ("results", "TEXT NOT NULL"),
)
ADDED_IN_2 = ("valid", "invalid_reasons", "contended")

SUMMARY_COLUMNS = tuple(c for c, _ in COLUMNS if c != "results")

ENERGY_COLUMNS = (
    ("energy_step_j", "$.energy.step_j"),
    ("energy_fixed_j", "$.energy.fixed_j"),
    ("energy_request_j", "$.energy.request_j"),
    ("energy_token_j", "$.energy.token_j"),
    ("energy_power_w", "$.energy.power_w"),
    ("energy_source", "$.energy.source"),
)
"""Summary columns read from each run's stored results (docs/energy.md): a sweep's energy against
batch, context and output length in ``runs --csv``; NULL where a run measured no energy."""


def default_path() -> Path:
    """Where the runs database lives unless ``--db`` says otherwise."""
    env = os.environ.get("HOSTGAP_DB")
    if env:
        return Path(env)
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(base) / "hostgap" / "runs.sqlite"


def _absolute_run_dir(result: dict) -> dict:
    """``result`` with its ``run_dir`` made absolute (against the current folder, where the run
    was just written): a relative path would point nowhere from another folder."""
    rd = result.get("run_dir")
    if not rd or os.path.isabs(str(rd)):
        return result
    return {**result, "run_dir": os.path.abspath(str(rd))}


def resolve_run_dir(run_dir: str | None, db_path: str | os.PathLike | None = None) -> Path | None:
    """The run directory a stored ``run_dir`` names, or None when it is not found. Absolute
    paths are taken as they are; a relative one (rows written before paths were stored
    absolute) is tried against the current folder, then the database's folder."""
    if not run_dir:
        return None
    p = Path(run_dir)
    if p.is_absolute():
        return p if p.is_dir() else None
    bases = [Path.cwd()]
    if db_path is not None and str(db_path) != ":memory:":
        bases.append(Path(db_path).resolve().parent)
    for base in bases:
        if (base / p).is_dir():
            return (base / p).resolve()
    return None


def _row_of(result: dict) -> dict:
    # an attached server run has no differencing: its per-step medians fill the same columns
    d = result.get("differencing") or result.get("step_medians") or {}
    v = result.get("verdict") or {}
    return {
        "run_id": result["run_id"],
        "created": result.get("created") or time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "cell_key": result.get("cell_key"),
        "preset": result.get("preset"),
        "engine": result.get("engine"),
        "device": result.get("device"),
        "device_name": result.get("device_name"),
        "mode": result.get("mode"),
        "batch": result.get("batch"),
        "prompt_len": result.get("prompt_len"),
        "dtype": result.get("dtype"),
        "n1": result.get("n1"),
        "n2": result.get("n2"),
        "threads": result.get("threads"),
        "t_step_ns": d.get("t_step_ns"),
        "g_step_ns": d.get("g_step_ns"),
        "h_step_ns": d.get("h_step_ns"),
        "host_fraction": d.get("host_fraction"),
        "hdbi": result.get("hdbi"),
        "verdict": v.get("verdict") if isinstance(v, dict) else v,
        "activity": d.get("activity"),
        "run_dir": result.get("run_dir"),
        **_validity_of(result),
        "results": json.dumps(result, default=_json_default),
    }


def _validity_of(result: dict) -> dict:
    """The validity columns of a results dict; a result from before validity existed is judged
    by its numbers (:func:`hostgap.checks.reasons`)."""
    d = result.get("differencing") or {}
    if "valid" in result:
        why = list(result.get("invalid_reasons") or [])
        valid = bool(result["valid"])
    else:
        why = reasons(d) if d else []
        valid = not why
    contended = d.get("contended")
    return {
        "valid": int(valid),
        "invalid_reasons": "\n".join(why) or None,
        "contended": None if contended is None else int(bool(contended)),
    }


def _json_default(o):
    if hasattr(o, "tolist"):
        return o.tolist()
    if hasattr(o, "to_dict"):
        return o.to_dict()
    return str(o)


class RunsDB:
    """The runs database at ``path`` (created on first use; ``":memory:"`` for tests)."""

    def __init__(self, path: str | os.PathLike | None = None):
        self.path = str(path) if path is not None else str(default_path())
        if self.path != ":memory:":
            p = Path(self.path)
            if p.is_dir():
                raise HostgapError(self.path, "runs database path is a directory")
            try:
                p.parent.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise HostgapError(self.path, f"cannot create the database directory ({e.strerror or e})") from None
        try:
            self._conn = sqlite3.connect(self.path, timeout=30)
            self._conn.row_factory = sqlite3.Row
            self._init()
        except sqlite3.DatabaseError as e:
            raise HostgapError(self.path, f"not a hostgap runs database ({e})") from None

    # -- schema ---------------------------------------------------------------------------
    def _init(self) -> None:
        """Check the schema, creating it in an empty file. Creation runs in one ``BEGIN
        IMMEDIATE`` transaction (the file's write lock), so processes creating the same new
        database at once serialise: one creates, the others find it made. A file that holds
        other tables is refused before anything is written to it."""
        if self._tables():
            self._check_schema()
            return
        self._under_write_lock(self._create)
        self._check_schema()

    def _create(self) -> None:
        if not self._tables():  # nobody created it while this process waited
            cols = ", ".join(f"{c} {t}" for c, t in COLUMNS)
            self._conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)")
            self._conn.execute(f"CREATE TABLE runs ({cols})")
            self._conn.execute("CREATE INDEX runs_cell ON runs(cell_key)")
            self._conn.execute("INSERT INTO meta(key, value) VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))

    def _under_write_lock(self, work) -> None:
        """Run ``work()`` in one ``BEGIN IMMEDIATE`` transaction (DDL included): processes doing
        the same at once serialise, and ``work`` rechecks what it found before the lock."""
        saved = self._conn.isolation_level
        self._conn.isolation_level = None  # explicit transactions
        try:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                work()
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
        finally:
            self._conn.isolation_level = saved

    def _tables(self) -> set[str]:
        return {r[0] for r in self._conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}

    def _check_schema(self) -> None:
        """Refuse (without writing) a file that is not a hostgap runs database or is newer."""
        tables = self._tables()
        row = None
        if {"meta", "runs"} <= tables:
            try:
                row = self._conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
            except sqlite3.DatabaseError:
                row = None
        version = _int_or_none(row["value"]) if row is not None else None
        if version is None:
            shown = ", ".join(sorted(tables)[:5]) + (" ..." if len(tables) > 5 else "")
            raise HostgapError(
                self.path, f"not a hostgap runs database (an SQLite file with tables {shown}); give another --db path"
            )
        if version > SCHEMA_VERSION:
            raise HostgapError(
                self.path,
                f"runs database schema {version} is newer than this hostgap ({SCHEMA_VERSION}); upgrade hostgap",
            )
        if version < SCHEMA_VERSION:
            self._upgrade()

    def _upgrade(self) -> None:
        """Migrate an older hostgap database under the write lock; a process that waited finds
        it already migrated."""

        def work():
            row = self._conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
            # an int: _check_schema found one, and the lock keeps the file a hostgap database
            if cast(int, _int_or_none(row["value"])) < SCHEMA_VERSION:
                self._migrate()

        self._under_write_lock(work)

    def _migrate(self) -> None:
        """Version 1 -> 2 in the caller's transaction: add the validity columns and fill
        them from each row's results JSON."""
        have = {r["name"] for r in self._conn.execute("PRAGMA table_info(runs)")}
        types = dict(COLUMNS)
        for col in ADDED_IN_2:
            if col not in have:
                self._conn.execute(f"ALTER TABLE runs ADD COLUMN {col} {types[col]}")
        for r in self._conn.execute("SELECT run_id, results FROM runs").fetchall():
            v = _validity_of(json.loads(r["results"]))
            self._conn.execute(
                "UPDATE runs SET valid = ?, invalid_reasons = ?, contended = ? WHERE run_id = ?",
                (v["valid"], v["invalid_reasons"], v["contended"], r["run_id"]),
            )
        self._conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION),))

    @property
    def schema_version(self) -> int:
        row = self._conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        return int(row["value"])

    # -- writes ---------------------------------------------------------------------------
    def add(self, result: dict) -> None:
        """Insert (or replace, same run_id) one run, in one transaction."""
        if "run_id" not in result:
            raise HostgapError("result", "has no run_id")
        row = _row_of(_absolute_run_dir(result))
        cols = ", ".join(row)
        marks = ", ".join("?" for _ in row)
        with self._conn:
            self._conn.execute(f"INSERT OR REPLACE INTO runs ({cols}) VALUES ({marks})", tuple(row.values()))

    def delete(self, run_id: str) -> bool:
        with self._conn:
            cur = self._conn.execute("DELETE FROM runs WHERE run_id = ?", (run_id,))
        return cur.rowcount > 0

    # -- reads ----------------------------------------------------------------------------
    def results(self, **where) -> list[dict]:
        """Full results dicts, oldest first; ``where``: equality filters on summary columns."""
        sql, args = self._where(where)
        rows = self._conn.execute(f"SELECT results FROM runs{sql} ORDER BY created, run_id", args)
        return [self._loaded(r["results"]) for r in rows]

    def rows(self, limit: int | None = None, **where) -> list[dict]:
        """Summary rows (no results JSON), newest first."""
        sql, args = self._where(where)
        cols = ", ".join(
            SUMMARY_COLUMNS + tuple(f"json_extract(results, '{path}') AS {c}" for c, path in ENERGY_COLUMNS)
        )
        q = f"SELECT {cols} FROM runs{sql} ORDER BY created DESC, run_id DESC"
        if limit:
            q += f" LIMIT {int(limit)}"
        return [dict(r) for r in self._conn.execute(q, args)]

    def get(self, run_id: str) -> dict | None:
        """One run's results by id, or by a unique id prefix; None when absent."""
        row = self._conn.execute("SELECT results FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        if row is None:
            found = self._conn.execute(
                "SELECT run_id, results FROM runs WHERE run_id LIKE ? ESCAPE '\\' LIMIT 2",
                (_like_prefix(run_id),),
            ).fetchall()
            if len(found) > 1:
                raise HostgapError(run_id, "ambiguous run id prefix; give more characters")
            row = found[0] if found else None
        return self._loaded(row["results"]) if row else None

    def _loaded(self, text: str) -> dict:
        """One stored results JSON, its ``run_dir`` made absolute where it can be found."""
        result = json.loads(text)
        rd = result.get("run_dir")
        if rd and not os.path.isabs(str(rd)):
            found = resolve_run_dir(rd, self.path)
            if found is not None:
                result["run_dir"] = str(found)
        return result

    def has_cell(self, key: str) -> bool:
        """Whether a run of this grid cell (see ``protocol.cell_key``) is stored."""
        row = self._conn.execute("SELECT 1 FROM runs WHERE cell_key = ? LIMIT 1", (key,)).fetchone()
        return row is not None

    def count(self) -> int:
        return int(self._conn.execute("SELECT COUNT(*) FROM runs").fetchone()[0])

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> RunsDB:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @staticmethod
    def _where(where: dict) -> tuple[str, tuple]:
        bad = set(where) - set(SUMMARY_COLUMNS)
        if bad:
            raise HostgapError("filter", f"unknown run field(s): {', '.join(sorted(bad))}")
        items = [(k, v) for k, v in where.items() if v is not None]
        if not items:
            return "", ()
        return " WHERE " + " AND ".join(f"{k} = ?" for k, _ in items), tuple(v for _, v in items)


def _int_or_none(v) -> int | None:
    try:
        return int(v)
    except (TypeError, ValueError):
        return None


def _like_prefix(s: str) -> str:
    return s.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def find_run(ref: str, db: str | os.PathLike | None = None) -> dict:
    """A stored run's results: ``ref`` a run directory or its ``results.json``, else a run id (or
    unique prefix) in the runs database ``db``. HostgapError naming ``ref`` when it is neither."""
    from hostgap.store.rundir import read_json

    p = Path(ref)
    if p.is_dir() and (p / "results.json").is_file():
        p = p / "results.json"
    if p.is_file():
        return read_json(p)
    with RunsDB(db) as rdb:
        r = rdb.get(ref)
        where = rdb.path
    if r is None:
        raise HostgapError(ref, f"no such run in {where} (and not a run directory)")
    return r
