"""The DuckDB store: one embedded file, one versioned schema, short transactions.

Why short transactions: DuckDB lets one process hold a file for writing and then
refuses every other process, readers included ("Conflicting lock is held"). So
writers here open the file, write one batch in one transaction and close it again;
readers (the report, the dashboard) open it read-only and retry briefly while a
writer holds it. A long judge run therefore never locks the dashboard out for
longer than one batch takes to write.
"""

from __future__ import annotations

import contextlib
import gc
import os
import subprocess
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import duckdb
import orjson
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import BaseModel

from personagap.records import Attribute, Item, Label, LabelRow, Prompt, Run, User

SCHEMA_VERSION = 3
DEFAULT_DB = "personagap.duckdb"

# items and labels carry no PRIMARY KEY constraint: at 10^6 labels DuckDB's key index costs more than
# reading, checking and writing the rows together (measured: 2.6 s against 1.3 s for the insert and commit
# alone). Their keys (TABLES below) stay unique because every write goes through upsert_counted, which
# refuses a batch holding a key twice and replaces stored rows by key; tests/test_store_keys.py checks it.
_ITEMS_COLUMNS = """item_id TEXT NOT NULL, dataset TEXT NOT NULL, stage TEXT NOT NULL, user_id TEXT NOT NULL,
    prompt_index INTEGER, attribute TEXT, position INTEGER, payload JSON"""
_LABELS_COLUMNS = """item_id TEXT NOT NULL, rater TEXT NOT NULL, rater_kind TEXT NOT NULL, condition TEXT NOT NULL,
    label TEXT, raw TEXT, reason TEXT, error TEXT, run_id TEXT NOT NULL, meta JSON"""

_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY, kind TEXT NOT NULL, source TEXT NOT NULL, rater TEXT,
    judge_version INTEGER, git_sha TEXT, started_at TIMESTAMP NOT NULL, finished_at TIMESTAMP,
    status TEXT NOT NULL, parameters JSON
);
CREATE TABLE IF NOT EXISTS users (
    dataset TEXT NOT NULL, user_id TEXT NOT NULL, profile_text TEXT, PRIMARY KEY (dataset, user_id)
);
CREATE TABLE IF NOT EXISTS attributes (
    dataset TEXT NOT NULL, user_id TEXT NOT NULL, attribute TEXT NOT NULL, reason TEXT, confidence DOUBLE,
    PRIMARY KEY (dataset, user_id, attribute)
);
CREATE TABLE IF NOT EXISTS prompts (
    dataset TEXT NOT NULL, user_id TEXT NOT NULL, prompt_index INTEGER NOT NULL, prompt_text TEXT,
    PRIMARY KEY (dataset, user_id, prompt_index)
);
CREATE TABLE IF NOT EXISTS items ({_ITEMS_COLUMNS});
CREATE TABLE IF NOT EXISTS labels ({_LABELS_COLUMNS});
CREATE TABLE IF NOT EXISTS import_items (run_id TEXT NOT NULL, item_id TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS judge_cache (
    key TEXT PRIMARY KEY, judge TEXT NOT NULL, judge_version INTEGER NOT NULL, model TEXT NOT NULL,
    label TEXT, raw TEXT, reason TEXT, error TEXT, usage JSON, created_at TIMESTAMP NOT NULL
);
"""

# Column order of each table, and its natural key (what an upsert replaces on).
TABLES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "runs": (
        ("run_id", "kind", "source", "rater", "judge_version", "git_sha", "started_at", "finished_at",
         "status", "parameters"),
        ("run_id",),
    ),
    "users": (("dataset", "user_id", "profile_text"), ("dataset", "user_id")),
    "attributes": (("dataset", "user_id", "attribute", "reason", "confidence"), ("dataset", "user_id", "attribute")),
    "prompts": (("dataset", "user_id", "prompt_index", "prompt_text"), ("dataset", "user_id", "prompt_index")),
    "items": (("item_id", "dataset", "stage", "user_id", "prompt_index", "attribute", "position", "payload"),
              ("item_id",)),
    "labels": (("item_id", "rater", "rater_kind", "condition", "label", "raw", "reason", "error", "run_id", "meta"),
               ("item_id", "rater", "condition")),
    "import_items": (("run_id", "item_id"), ("run_id", "item_id")),
    "judge_cache": (("key", "judge", "judge_version", "model", "label", "raw", "reason", "error", "usage",
                     "created_at"), ("key",)),
}

# How to bring a database of an older schema version up to the next one (run in one transaction).
_MIGRATIONS: dict[int, str] = {
    # 1 -> 2: which imported file mentioned which item, so that a re-import can remove items it no longer has.
    # No key index: rows are only ever changed per run by an anti-join, and an index costs seconds per import.
    1: "CREATE TABLE IF NOT EXISTS import_items (run_id TEXT NOT NULL, item_id TEXT NOT NULL)",
    # 2 -> 3: items and labels without their key index (see _ITEMS_COLUMNS); DuckDB cannot drop a primary
    # key, so each table is copied into a keyless one that takes its name.
    2: "".join(f"""CREATE TABLE _{table}_v3 ({columns}); INSERT INTO _{table}_v3 SELECT * FROM {table};
              DROP TABLE {table}; ALTER TABLE _{table}_v3 RENAME TO {table};"""
               for table, columns in (("items", _ITEMS_COLUMNS), ("labels", _LABELS_COLUMNS))),
}
_TABLE_SINCE = {"import_items": 2}
"""Tables added by a migration: a read-only reader of an older database does without them."""

RELEASE_KEY = "release"
"""Key of an import run's ``parameters`` holding its file's release identity (``recenter:stage2/...``): what
names the run, wherever the release lies (``human_data/_jsonl.Release``)."""

_T = TypeVar("_T")
_LOCK_MARKERS = ("Conflicting lock", "Could not set lock", "database is locked")


class StoreError(RuntimeError):
    """The database file cannot be used (newer schema, held by a writer too long, ...)."""


FORCE_SCHEMA = False
"""Add PersonaGap's tables to a DuckDB file that already holds other tables (set by ``--force-schema``)."""

# Never reach the network: a SQLite or other foreign file would otherwise make DuckDB download an extension.
_CONFIG = {"autoinstall_known_extensions": False, "autoload_known_extensions": False}
# Errors that come from the file (damaged, truncated, unwritable), not from our SQL.
_FILE_ERRORS: tuple[type[BaseException], ...] = (
    duckdb.IOException, duckdb.SerializationException, duckdb.InternalException, duckdb.FatalException,
    duckdb.PermissionException)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    line = text[0] if text else type(exc).__name__
    return line if len(line) <= 200 else line[:200] + "…"


def connect(path: str | Path, *, read_only: bool = False, wait_seconds: float = 10.0,
            force_schema: bool | None = None) -> duckdb.DuckDBPyConnection:
    """Open the store, creating the schema when writable.

    Retries while another process holds the file, because a writer here holds it
    only for one short batch. Extension autoloading is off, so opening a foreign file never
    reaches the network.

    Args:
        path: The DuckDB file.
        read_only: Open read-only (the dashboard and reports do).
        wait_seconds: How long to retry on a lock conflict before giving up.
        force_schema: Add PersonaGap's tables to a DuckDB file holding other tables
            (default :data:`FORCE_SCHEMA`); otherwise such a file is refused.

    Returns:
        An open connection.

    Raises:
        StoreError: The file is missing (read-only), not a DuckDB database, damaged, locked
            for longer than ``wait_seconds``, another program's database, or of a schema
            version this PersonaGap does not read.
    """
    path = Path(path)
    if read_only and not path.exists():
        raise StoreError(f"{path}: no such database; import data first (see `personagap import --help`)")
    _check_location(path, read_only=read_only)
    con = _while_locked(path, wait_seconds,
                        lambda: duckdb.connect(str(path), read_only=read_only, config=dict(_CONFIG)))
    try:
        _ensure_schema(con, path, read_only=read_only,
                       force=FORCE_SCHEMA if force_schema is None else force_schema)
    except StoreError:
        con.close()
        raise
    except _FILE_ERRORS as exc:
        con.close()
        raise StoreError(f"{path}: {_first_line(exc)}") from exc
    return con


def _while_locked(path: Path, wait_seconds: float, open_file: Callable[[], _T]) -> _T:
    """``open_file()``, retried while another process holds the file (a writer holds it for one batch)."""
    deadline = time.monotonic() + wait_seconds
    delay = 0.02
    while True:
        try:
            return open_file()
        except duckdb.Error as exc:
            locked = isinstance(exc, duckdb.IOException) and any(m in str(exc) for m in _LOCK_MARKERS)
            if not locked or time.monotonic() > deadline:
                raise StoreError(f"{path}: cannot open as a PersonaGap database: {_first_line(exc)}") from exc
            time.sleep(delay)
            delay = min(delay * 2, 0.5)


@contextlib.contextmanager
def attached(con: duckdb.DuckDBPyConnection, path: str | Path,
             wait_seconds: float = 10.0) -> Iterator[duckdb.DuckDBPyConnection]:
    """Make the store file ``con``'s default database for the block: rows staged on ``con`` go in by SQL.

    ``con`` is a private in-memory connection whose relations hold rows already validated (the generic
    label importer's): written with ``INSERT ... SELECT`` they never become Python objects. The file is
    attached under the rules of :func:`connect` (waits for a lock; created, migrated and checked as there);
    the staged relations stay visible by name.

    Raises:
        StoreError: As :func:`connect`; also when this process already has the file open elsewhere.
    """
    path = Path(path)
    _check_location(path, read_only=False)
    home = con.execute("SELECT current_database()").fetchall()[0][0]
    # The path is bound, never spliced into the SQL text (it may hold quotes).
    _while_locked(path, wait_seconds, lambda: con.execute("ATTACH ? AS _store", [str(path)]))
    try:
        con.execute("USE _store")
        _ensure_schema(con, path, read_only=False, force=FORCE_SCHEMA)
        yield con
    except _FILE_ERRORS as exc:
        raise StoreError(f"{path}: {_first_line(exc)}") from exc
    finally:
        with contextlib.suppress(duckdb.Error):
            con.execute(f"USE {home}")
            con.execute("DETACH _store")


@contextlib.contextmanager
def opened(path: str | Path, *, read_only: bool = False) -> Iterator[duckdb.DuckDBPyConnection]:
    """Context manager around :func:`connect` that always closes the file.

    Errors the file itself raises inside the block (a damaged or truncated file, a folder
    that cannot be written) become a :class:`StoreError` naming the file; errors in our
    own SQL stay what they are, so bugs are not hidden.
    """
    con = connect(path, read_only=read_only)
    try:
        yield con
    except _FILE_ERRORS as exc:
        raise StoreError(f"{path}: {_first_line(exc)}") from exc
    finally:
        with contextlib.suppress(duckdb.Error):
            con.close()


_SQLITE_MAGIC = b"SQLite format 3\x00"


def _check_location(path: Path, *, read_only: bool) -> None:
    """Refuse, with one clear line, what DuckDB would refuse with a confusing one (or try to download for)."""
    if path.is_dir():
        raise StoreError(f"{path}: is a directory; give a database file")
    if path.is_file():
        try:
            with path.open("rb") as handle:
                head = handle.read(16)
        except OSError as exc:
            raise StoreError(f"{path}: cannot read the database: {exc.strerror or exc}") from exc
        if head == _SQLITE_MAGIC:
            raise StoreError(f"{path}: is a SQLite database, not a PersonaGap (DuckDB) one; give another --db file")
    if read_only:
        return
    folder = path.parent if str(path.parent) else Path(".")
    if folder.is_dir() and not os.access(folder, os.W_OK):
        # DuckDB writes a .wal file beside the database: an unwritable folder fails the commit, after the work.
        raise StoreError(f"{path}: cannot write here: the folder {folder} is read-only (DuckDB keeps a .wal file "
                         "beside the database); give a --db file in a writable folder")
    if path.exists() and not os.access(path, os.W_OK):
        raise StoreError(f"{path}: the database file is read-only; give a writable --db file")


def _tables(con: duckdb.DuckDBPyConnection) -> set[str]:
    rows = con.execute("SELECT table_name FROM duckdb_tables() WHERE database_name = current_database() "
                       "AND schema_name = 'main' AND NOT temporary").fetchall()
    return {r[0] for r in rows}


def _ensure_schema(con: duckdb.DuckDBPyConnection, path: Path, *, read_only: bool, force: bool) -> None:
    # Writers reconnect for every batch: skip the DDL when the schema is already there.
    tables = _tables(con)
    if "meta" in tables:
        found = _check_version(con, path, tables, read_only=read_only)
        if found < SCHEMA_VERSION and not read_only:
            _migrate(con, path, found)
        return
    if read_only:
        raise StoreError(f"{path}: not a PersonaGap database (no meta table)")
    if tables and not force:
        shown = ", ".join(sorted(tables)[:5]) + (", …" if len(tables) > 5 else "")
        raise StoreError(f"{path}: another program's DuckDB database (tables: {shown}); PersonaGap will not add "
                         "its tables to it: give another --db file, or --force-schema to add them anyway")
    con.execute("BEGIN TRANSACTION")
    con.execute(_SCHEMA)
    con.execute("INSERT INTO meta VALUES ('schema_version', ?) ON CONFLICT (key) DO NOTHING", [str(SCHEMA_VERSION)])
    con.execute("COMMIT")
    _check_version(con, path, _tables(con), read_only=False)


def _migrate(con: duckdb.DuckDBPyConnection, path: Path, found: int) -> None:
    """Bring an older PersonaGap database up to :data:`SCHEMA_VERSION`, all steps in one transaction."""
    con.execute("BEGIN TRANSACTION")
    try:
        for version in range(found, SCHEMA_VERSION):
            con.execute(_MIGRATIONS[version])
        con.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", [str(SCHEMA_VERSION)])
        con.execute("COMMIT")
    except duckdb.Error as exc:
        with contextlib.suppress(duckdb.Error):
            con.execute("ROLLBACK")
        raise StoreError(f"{path}: cannot migrate schema version {found} to {SCHEMA_VERSION}: "
                         f"{_first_line(exc)}") from exc


def _check_version(con: duckdb.DuckDBPyConnection, path: Path, tables: set[str], *, read_only: bool) -> int:
    """The database's schema version, if this PersonaGap can read it (older ones: migrate when writing)."""
    try:
        rows = con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchall()
    except duckdb.CatalogException as exc:
        raise StoreError(f"{path}: not a PersonaGap database (no meta table)") from exc
    if not rows:
        raise StoreError(f"{path}: not a PersonaGap database (no schema_version in its meta table)")
    text = str(rows[0][0]).strip()
    if not text.isdigit():
        raise StoreError(f"{path}: schema version {text[:40]!r} is not a number: not a PersonaGap database, "
                         "or a damaged one; give another --db file")
    found = int(text)
    if found > SCHEMA_VERSION:
        raise StoreError(f"{path}: schema version {found} is newer than this PersonaGap reads ({SCHEMA_VERSION}); "
                         "upgrade PersonaGap")
    if found < min(_MIGRATIONS, default=SCHEMA_VERSION):
        # No PersonaGap release wrote such a schema, so there is nothing to migrate from: refuse.
        raise StoreError(f"{path}: schema version {found} predates this PersonaGap ({SCHEMA_VERSION}) and cannot "
                         "be migrated; import into a new --db file")
    missing = sorted(t for t in set(TABLES) - tables if _TABLE_SINCE.get(t, 1) <= found)
    if missing:
        raise StoreError(f"{path}: damaged PersonaGap database: missing table(s) {', '.join(missing)}; "
                         "import into a new --db file")
    return found


def git_sha() -> str | None:
    """Return the git commit of the PersonaGap checkout, or None outside a checkout."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=Path(__file__).resolve().parent, capture_output=True,
            text=True, timeout=5, check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def now() -> datetime:
    """Return the current UTC time without tzinfo (DuckDB TIMESTAMP)."""
    return datetime.now(UTC).replace(tzinfo=None)


_JSON_COLUMNS = frozenset({"payload", "parameters", "usage", "meta"})
# Arrow type of every non-text column (all others are text; JSON columns are written as their text).
_ARROW_TYPES: dict[str, pa.DataType] = {
    "prompt_index": pa.int64(), "position": pa.int64(), "judge_version": pa.int64(), "confidence": pa.float64(),
    "started_at": pa.timestamp("us"), "finished_at": pa.timestamp("us"), "created_at": pa.timestamp("us"),
}


def columns_table(table: str, columns: dict[str, list[Any]]) -> pa.Table:
    """An Arrow table in ``table``'s column order from one list per column (JSON columns encoded).

    Arrow, not pandas: DuckDB scans it without converting Python objects row by row, and building it
    from lists is several times cheaper than a DataFrame of object columns at 10^6 rows.

    Args:
        table: One of :data:`TABLES`.
        columns: Every column of the table -> its values (dicts/lists for JSON columns).
    """
    names, _ = TABLES[table]
    arrays = []
    for name in names:
        values = columns[name]
        if name in _JSON_COLUMNS:
            values = [None if v is None else _json_text(v) for v in values]
        arrays.append(pa.array(values, type=_ARROW_TYPES.get(name, pa.string())))
    return pa.Table.from_arrays(arrays, names=list(names))


def _json_text(value: Any) -> str:
    # orjson: ~10x the stdlib's json.dumps per value, which matters at 10^5 payloads per import.
    return orjson.dumps(value, default=str, option=orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY).decode()


def _rows_table(table: str, rows: Sequence[dict[str, Any]]) -> pa.Table:
    names, _ = TABLES[table]
    return columns_table(table, {c: [r.get(c) for r in rows] for c in names})


@dataclass(frozen=True)
class TableCounts:
    """What a write did to one table."""

    inserted: int = 0
    updated: int = 0
    removed: int = 0
    unchanged: int = 0

    @property
    def changed(self) -> bool:
        """Whether any row was inserted, updated or removed."""
        return bool(self.inserted or self.updated or self.removed)

    def render(self) -> str:
        """E.g. ``3 inserted, 1 updated, 2 removed, 14,899 unchanged`` (zero counts left out)."""
        parts = [f"{n:,} {what}" for what, n in (("inserted", self.inserted), ("updated", self.updated),
                                                  ("removed", self.removed), ("unchanged", self.unchanged)) if n]
        return ", ".join(parts) or "nothing"


@dataclass
class WriteSummary:
    """What :func:`write_batch` did, per table: rows inserted, updated, removed and left unchanged."""

    tables: dict[str, TableCounts] = field(default_factory=dict)
    gone: list[str] = field(default_factory=list)
    """Files imported earlier from the same folders that are no longer there (their rows were removed)."""

    def __getitem__(self, table: str) -> TableCounts:
        """The counts of one table (all zero for a table the batch did not touch)."""
        return self.tables.get(table, TableCounts())

    @property
    def changed(self) -> bool:
        """Whether the write changed anything at all."""
        return any(c.changed for c in self.tables.values())

    def gone_line(self) -> str:
        """``; no longer in the folder: FILE, ...`` when earlier-imported files have gone, else ''."""
        shown = ", ".join(self.gone[:5]) + (f" and {len(self.gone) - 5} more" if len(self.gone) > 5 else "")
        return f"; no longer in the folder, so removed with their rows: {shown}" if self.gone else ""

    def render(self) -> str:
        """One line for the terminal: ``unchanged (...)`` when nothing changed, else the counts per table."""
        if not self.changed:
            held = ", ".join(f"{c.unchanged:,} {table}" for table, c in self.tables.items() if c.unchanged)
            return f"unchanged (the database already held every row: {held or 'none'})"
        return "; ".join(f"{table} {c.render()}" for table, c in self.tables.items()
                         if c.changed or c.unchanged) + self.gone_line()


def upsert(con: duckdb.DuckDBPyConnection, table: str,
           rows: Sequence[dict[str, Any]] | pd.DataFrame | pa.Table) -> int:
    """Insert rows, replacing any row with the same natural key.

    Runs inside whatever transaction the caller holds.

    Args:
        con: Open writable connection.
        table: One of :data:`TABLES`.
        rows: Dicts, a DataFrame or an Arrow table with exactly the table's columns.

    Returns:
        The number of rows written.
    """
    counts = upsert_counted(con, table, rows)
    return counts.inserted + counts.updated + counts.unchanged


class DuplicateKeyError(ValueError):
    """A batch holds the same key twice: a bug in the importer that built it (importers locate duplicates)."""


def upsert_counted(con: duckdb.DuckDBPyConnection, table: str,
                   rows: Sequence[dict[str, Any]] | pd.DataFrame | pa.Table | str,
                   ignore: frozenset[str] = frozenset(), *, keys_checked: bool = False) -> TableCounts:
    """:func:`upsert`, saying how many rows were inserted, updated and left unchanged.

    Args:
        con: Open writable connection.
        table: One of :data:`TABLES`.
        rows: Dicts, a DataFrame or an Arrow table with exactly the table's columns, or the name of a
            relation on ``con`` giving them (rows staged in SQL never pass through Python; see :func:`attached`).
        ignore: Columns whose difference alone does not make a row "updated" (e.g. an import
            run's timestamps: an unchanged re-import rewrites nothing).
        keys_checked: The caller has already proved that no key occurs twice in ``rows`` (the generic
            label importer does, to name the offending line); otherwise it is checked here.

    Raises:
        DuplicateKeyError: ``rows`` holds a key twice (nothing is written).
    """
    columns, key = TABLES[table]
    if isinstance(rows, str):
        view, n = rows, None  # counted only when needed: counting a staged join runs it
    else:
        frame = rows if isinstance(rows, pd.DataFrame | pa.Table) else _rows_table(table, rows)
        n = frame.num_rows if isinstance(frame, pa.Table) else len(frame)
        if n == 0:
            return TableCounts()
        view = f"_incoming_{table}"
        con.register(view, frame)
    try:
        if not keys_checked:
            # Items and labels have no key index (see _ITEMS_COLUMNS): their keys are unique because of this.
            twice = con.execute(f"SELECT {', '.join(key)} FROM {view} GROUP BY ALL HAVING count(*) > 1 "
                                "LIMIT 1").fetchall()
            if twice:
                raise DuplicateKeyError(f"{table}: the batch holds key {twice[0]!r} twice; nothing was written")
        # Only new or changed rows are touched: they are deleted by key and inserted again. That is
        # INSERT ... ON CONFLICT DO UPDATE's result, ~3x faster at 10^6 fresh rows (DuckDB 2.0), and an
        # unchanged re-import rewrites nothing. Atomic inside the caller's transaction.
        col_list = ", ".join(columns)
        if not con.execute(f"SELECT EXISTS (SELECT 1 FROM {table})").fetchall()[0][0]:
            written = con.execute(f"INSERT INTO {table} ({col_list}) SELECT {col_list} FROM {view}").fetchall()
            return TableCounts(inserted=int(written[0][0]))
        if n is None:
            n = int(con.execute(f"SELECT count(*) FROM {view}").fetchall()[0][0])
        on = " AND ".join(f"t.{k} = v.{k}" for k in key)
        differs = " OR ".join(f"t.{c} IS DISTINCT FROM v.{c}" for c in columns
                              if c not in key and c not in ignore) or "FALSE"
        changed = f"_changed_{table}"
        # fetchall: DuckDB 2 refuses further work on a connection until a result is consumed.
        con.execute(f"CREATE OR REPLACE TEMP TABLE {changed} AS SELECT v.*, t.{key[0]} IS NULL AS _is_new "
                    f"FROM {view} v LEFT JOIN {table} t ON {on} WHERE t.{key[0]} IS NULL OR {differs}").fetchall()
        inserted, total = con.execute(f"SELECT count(*) FILTER (WHERE _is_new), count(*) FROM {changed}").fetchall()[0]
        match = " AND ".join(f"{table}.{k} = {changed}.{k}" for k in key)
        con.execute(f"DELETE FROM {table} USING {changed} WHERE {match}").fetchall()
        con.execute(f"INSERT INTO {table} ({col_list}) SELECT {col_list} FROM {changed}").fetchall()
        con.execute(f"DROP TABLE {changed}").fetchall()
    finally:
        if not isinstance(rows, str):
            con.unregister(view)
    return TableCounts(inserted=int(inserted), updated=int(total - inserted), unchanged=int(n - total))


class ImportBatch:
    """Everything one import writes, collected first and written in one transaction."""

    def __init__(self) -> None:
        """Start an empty batch."""
        self.runs: list[Run] = []
        self.users: dict[tuple[str, str], User] = {}
        self.attributes: dict[tuple[str, str, str], Attribute] = {}
        self.prompts: dict[tuple[str, str, int], Prompt] = {}
        self.items: dict[str, Item] = {}
        self.labels: list[Label | LabelRow] = []
        self.label_columns = LabelColumns()
        """Bulk labels, column-wise (what large adapters append to); written together with ``labels``."""
        self.written: WriteSummary | None = None
        """What :func:`write_batch` did with this batch, once it has been written."""
        self.folders: list[str] = []
        """Real paths of folders this import reads completely: files imported from them before that the batch
        no longer holds (deleted from the release) have their rows removed too."""
        self.releases: list[str] = []
        """Scopes of releases this import reads completely (``recenter:``; see ``_jsonl.Release.scope``): files
        of the release imported before, from whatever folder, that the batch no longer holds go too."""
        self.meta: dict[str, str] = {}
        """Meta entries written with the batch (dataset records: :func:`personagap.datasets.record_meta`)."""
        self.owned: dict[str, set[str]] = {}
        """Run id -> the items its file mentions. A re-import removes items a file mentioned before and no
        longer does, once no file and no label refers to them (see :func:`write_batch`)."""

    def own(self, run_id: str, item_ids: Iterable[str]) -> None:
        """Record that the file of ``run_id`` mentions ``item_ids``."""
        self.owned.setdefault(run_id, set()).update(item_ids)

    def counts(self) -> dict[str, int]:
        """Return how many rows of each kind the batch holds."""
        return {
            "runs": len(self.runs), "users": len(self.users), "attributes": len(self.attributes),
            "prompts": len(self.prompts), "items": len(self.items),
            "labels": len(self.labels) + len(self.label_columns),
        }


class LabelColumns:
    """Labels kept as one list per column: at 10^6 labels, per-row objects cost more than the insert.

    Appenders must keep :class:`~personagap.records.Label`'s invariant (label is None iff error is set);
    :meth:`append` checks it.
    """

    def __init__(self) -> None:
        """Start empty."""
        self.columns: dict[str, list[Any]] = {c: [] for c in TABLES["labels"][0]}

    def __len__(self) -> int:
        return len(self.columns["item_id"])

    def append(self, item_id: str, rater: str, rater_kind: str, condition: str, label: str | None,
               raw: str | None, reason: str | None, error: str | None, run_id: str) -> None:
        """Add one label (``meta`` is left empty for bulk labels)."""
        if (label is None) != (error is not None):
            raise ValueError("a label is None exactly when error says why")
        c = self.columns
        c["item_id"].append(item_id)
        c["rater"].append(rater)
        c["rater_kind"].append(rater_kind)
        c["condition"].append(condition)
        c["label"].append(label)
        c["raw"].append(raw)
        c["reason"].append(reason)
        c["error"].append(error)
        c["run_id"].append(run_id)
        c["meta"].append(None)

    def extend(self, item_ids: list[str], rater: str, rater_kind: str, condition: str, labels: list[str | None],
               raws: list[str | None], reasons: list[str | None], errors: list[str | None], run_id: str) -> None:
        """Add many labels by one rater in one run (column-wise; the bulk path of large imports)."""
        n = len(item_ids)
        if not (len(labels) == len(raws) == len(reasons) == len(errors) == n):
            raise ValueError("label columns differ in length")
        if any((lab is None) != (err is not None) for lab, err in zip(labels, errors, strict=True)):
            raise ValueError("a label is None exactly when error says why")
        c = self.columns
        c["item_id"].extend(item_ids)
        c["rater"].extend([rater] * n)
        c["rater_kind"].extend([rater_kind] * n)
        c["condition"].extend([condition] * n)
        c["label"].extend(labels)
        c["raw"].extend(raws)
        c["reason"].extend(reasons)
        c["error"].extend(errors)
        c["run_id"].extend([run_id] * n)
        c["meta"].extend([None] * n)

    def rows(self) -> Iterator[LabelRow]:
        """Iterate the labels as typed rows."""
        for values in zip(*self.columns.values(), strict=True):
            yield LabelRow(*values)


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector around a bulk import (a decorator or a ``with`` block).

    An import allocates millions of small objects that form no cycles; the collector would rescan the
    growing heap again and again and free nothing: measured, a quarter of a 10^6-label import.
    The previous state is restored on exit, also on error.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


_IMPORT_RUN_VOLATILE = frozenset({"started_at", "finished_at", "git_sha"})
"""Run columns that differ on every import of the same file: alone, they do not make the run 'updated'."""


def write_batch(path: str | Path, batch: ImportBatch) -> WriteSummary:
    """Write an import batch to the store in a single transaction, replacing what its files wrote before.

    Either every row lands or none does: a failure rolls the whole batch back. For each run of
    ``batch.runs`` (one per imported file; its id derives from the file's path), labels that run
    wrote earlier and the batch no longer holds are removed in the same transaction, so a
    re-import leaves exactly what the files now hold. Items that only those labels referenced,
    and then the prompts and users that only those items referenced, are removed with them.

    Args:
        path: The DuckDB file (created if missing).
        batch: The validated rows.

    Returns:
        Rows inserted / updated / removed / unchanged per table (also kept as ``batch.written``).

    Raises:
        StoreError: The file cannot be opened or written (nothing is changed).
    """
    summary = WriteSummary()
    with opened(path) as con:
        con.execute("BEGIN TRANSACTION")
        try:
            t = summary.tables
            t["runs"] = upsert_counted(con, "runs", [r.model_dump() for r in batch.runs], _IMPORT_RUN_VOLATILE)
            t["users"] = upsert_counted(con, "users", [u.model_dump() for u in batch.users.values()])
            t["attributes"] = upsert_counted(con, "attributes", [a.model_dump() for a in batch.attributes.values()])
            t["prompts"] = upsert_counted(con, "prompts", [p.model_dump() for p in batch.prompts.values()])
            items = _records_table("items", list(batch.items.values()))
            t["items"] = upsert_counted(con, "items", items)
            bulk = batch.label_columns.columns
            labels = columns_table("labels", {
                c: [getattr(lab, c) for lab in batch.labels] + bulk[c] for c in TABLES["labels"][0]})
            t["labels"] = upsert_counted(con, "labels", labels)
            gone, superseded = _gone_runs(con, batch), _superseded_runs(con, batch)
            dropped = [g for g, _ in gone] + superseded
            remove_stale(con, summary, [r.run_id for r in batch.runs] + dropped, labels, items, _owned_table(batch))
            if dropped:
                con.execute("DELETE FROM runs WHERE run_id IN (SELECT unnest(?))", [dropped]).fetchall()
                summary.tables["runs"] = replace(summary["runs"], removed=len(dropped))
                summary.gone = [source for _, source in gone]
            set_meta(con, batch.meta)
            try:
                con.execute("COMMIT")
            except (duckdb.TransactionException, duckdb.IOException) as exc:
                # E.g. the .wal file cannot be created: the transaction is lost, the file unchanged.
                raise StoreError(f"{path}: cannot write the database ({_first_line(exc)}); nothing was "
                                 "changed") from exc
        except BaseException:
            # A failed ROLLBACK (e.g. the folder became unwritable) must not hide the first error.
            with contextlib.suppress(duckdb.Error):
                con.execute("ROLLBACK")
            raise
    batch.written = summary
    return summary


def _gone_runs(con: duckdb.DuckDBPyConnection, batch: ImportBatch) -> list[tuple[str, str]]:
    """(run id, source) of earlier imports of files deleted from a release (or folder) this batch reads completely.

    A release is matched by its identity scope, wherever it was imported from; a folder by its real path.
    """
    if not batch.folders and not batch.releases:
        return []
    prefixes = [f.rstrip("/") + "/" for f in batch.folders]
    rows = con.execute(f"""
        SELECT run_id, source FROM runs
        WHERE kind = 'import' AND run_id NOT IN (SELECT unnest(?))
          AND (list_bool_or([starts_with(json_extract_string(parameters, '$.path'), p) FOR p IN ?])
               OR list_bool_or([starts_with(json_extract_string(parameters, '$.{RELEASE_KEY}'), s) FOR s IN ?]))
        ORDER BY source
    """, [[r.run_id for r in batch.runs], prefixes, batch.releases]).fetchall()
    return [(str(r[0]), str(r[1])) for r in rows]


def _superseded_runs(con: duckdb.DuckDBPyConnection, batch: ImportBatch) -> list[str]:
    """Runs written before releases had identities (named by absolute path) of the files this batch imports.

    Such a run is the same file of the same release when its path ends with the file's place in the release
    (``/stage2/llm_relevance/gpt-5.4.jsonl``) and it has the same rater and adapter: the batch replaces it, so
    a store written by an older PersonaGap follows a re-import from a new folder too.
    """
    named = [(r.run_id, str(r.parameters[RELEASE_KEY]).partition(":")[2], r.rater, r.parameters.get("adapter"))
             for r in batch.runs if r.parameters and RELEASE_KEY in r.parameters]
    if not named:
        return []
    rows = con.execute(f"""
        SELECT DISTINCT o.run_id FROM runs o, (SELECT unnest(?) AS run_id, unnest(?) AS file, unnest(?) AS rater,
                                                      unnest(?) AS adapter) n
        WHERE o.kind = 'import' AND o.run_id <> n.run_id
          AND json_extract_string(o.parameters, '$.{RELEASE_KEY}') IS NULL
          AND ends_with(json_extract_string(o.parameters, '$.path'), '/' || n.file)
          AND o.rater IS NOT DISTINCT FROM n.rater
          AND json_extract_string(o.parameters, '$.adapter') IS NOT DISTINCT FROM n.adapter
          AND o.run_id NOT IN (SELECT unnest(?))
        ORDER BY o.run_id
    """, [[n[0] for n in named], [n[1] for n in named], [n[2] for n in named], [n[3] for n in named],
          [r.run_id for r in batch.runs]]).fetchall()
    return [str(r[0]) for r in rows]


def set_meta(con: duckdb.DuckDBPyConnection, values: dict[str, str]) -> None:
    """Insert or replace meta entries, bound as parameters (within the caller's transaction)."""
    if values:
        con.execute("INSERT INTO meta SELECT unnest(?), unnest(?) ON CONFLICT (key) DO UPDATE SET value = "
                    "excluded.value", [list(values), list(values.values())]).fetchall()


def _owned_table(batch: ImportBatch) -> pa.Table:
    runs = [r for r, ids in batch.owned.items() for _ in ids]
    items = [i for ids in batch.owned.values() for i in ids]
    return pa.table({"run_id": pa.array(runs, pa.string()), "item_id": pa.array(items, pa.string())})


def remove_stale(con: duckdb.DuckDBPyConnection, summary: WriteSummary, run_ids: list[str],
                 labels: pa.Table | str, items: pa.Table | str, owned: pa.Table | None = None) -> None:
    """Delete what the batch's runs wrote before and the batch no longer holds (inside the caller's transaction).

    Labels of ``run_ids`` whose key is not in ``labels`` go first. Then an item goes if this batch
    does not hold it, no label refers to it, and no file claims it any more (``import_items``); it is
    considered only if a removed label referred to it or one of these runs claimed it before. Prompts
    and users that only removed items referred to go last.

    Args:
        con: Writable connection inside a transaction.
        summary: Gets the removed counts.
        run_ids: The runs (files) being re-imported.
        labels: The batch's labels (at least item_id, rater, condition, and run_id when the batch has it),
            as Arrow or the name of a relation on ``con``.
        items: The batch's items (at least item_id), likewise.
        owned: (run_id, item_id) the files of ``run_ids`` mention now; None leaves ``import_items`` alone.
    """
    if not run_ids:
        return
    if isinstance(labels, str):
        con.execute(f"CREATE OR REPLACE TEMP VIEW _batch_labels AS SELECT item_id, rater, condition FROM {labels}")
        ours = con.execute(f"SELECT count(*) FROM {labels} WHERE run_id IN (SELECT unnest(?))",
                           [run_ids]).fetchall()[0][0]
    else:
        con.register("_batch_labels", labels.select(["item_id", "rater", "condition"]))
        ours = pc.sum(pc.is_in(labels["run_id"], value_set=pa.array(run_ids, pa.string()))).as_py() or 0 \
            if "run_id" in labels.column_names else 0
    if isinstance(items, str):
        con.execute(f"CREATE OR REPLACE TEMP VIEW _batch_items AS SELECT item_id FROM {items}")
    else:
        con.register("_batch_items", items.select(["item_id"]))
    try:
        touched: set[str] = set()
        # After the upsert every batch label of these runs is stored under its run: when the runs hold no
        # more labels than the batch brings, nothing is stale (an unchanged re-import skips the anti-join).
        stored = con.execute("SELECT count(*) FROM labels WHERE run_id IN (SELECT unnest(?))",
                             [run_ids]).fetchall()[0][0]
        if stored > ours:
            removed = con.execute("""
                DELETE FROM labels l WHERE l.run_id IN (SELECT unnest(?))
                  AND NOT EXISTS (SELECT 1 FROM _batch_labels b
                                  WHERE b.item_id = l.item_id AND b.rater = l.rater AND b.condition = l.condition)
                RETURNING l.item_id
            """, [run_ids]).fetchall()
            touched.update(r[0] for r in removed)
            summary.tables["labels"] = replace(summary["labels"], removed=len(removed))
        if owned is not None:
            touched.update(_replace_owned(con, run_ids, owned))
        if touched:
            _remove_items(con, summary, touched)
    finally:
        for name, given in (("_batch_labels", labels), ("_batch_items", items)):
            if isinstance(given, str):
                con.execute(f"DROP VIEW IF EXISTS {name}")
            else:
                con.unregister(name)


def _replace_owned(con: duckdb.DuckDBPyConnection, run_ids: list[str], owned: pa.Table) -> set[str]:
    """Make ``import_items`` of ``run_ids`` equal ``owned``, touching only rows that differ; returns items let go."""
    con.register("_owned", owned)
    try:
        dropped = con.execute("""
            DELETE FROM import_items o WHERE o.run_id IN (SELECT unnest(?))
              AND NOT EXISTS (SELECT 1 FROM _owned n WHERE n.run_id = o.run_id AND n.item_id = o.item_id)
            RETURNING o.item_id
        """, [run_ids]).fetchall()
        con.execute("""
            INSERT INTO import_items SELECT DISTINCT n.run_id, n.item_id FROM _owned n
            WHERE NOT EXISTS (SELECT 1 FROM import_items o WHERE o.run_id = n.run_id AND o.item_id = n.item_id)
        """).fetchall()
    finally:
        con.unregister("_owned")
    return {r[0] for r in dropped}


_remove_stale = remove_stale  # the name the generic label importer (personagap/labels_api.py) imports


def _remove_items(con: duckdb.DuckDBPyConnection, summary: WriteSummary, touched: set[str]) -> None:
    con.register("_touched", pa.table({"item_id": pa.array(sorted(touched), pa.string())}))
    # An item is removed only when nothing refers to it any more: not this batch, not a label, not a file.
    gone = con.execute("""
        DELETE FROM items i WHERE i.item_id IN (SELECT item_id FROM _touched)
          AND i.item_id NOT IN (SELECT item_id FROM _batch_items)
          AND NOT EXISTS (SELECT 1 FROM labels l WHERE l.item_id = i.item_id)
          AND NOT EXISTS (SELECT 1 FROM import_items o WHERE o.item_id = i.item_id)
        RETURNING i.dataset, i.user_id, i.prompt_index
    """).fetchall()
    con.unregister("_touched")
    if not gone:
        return
    summary.tables["items"] = replace(summary["items"], removed=len(gone))
    con.register("_gone", pa.table({"dataset": pa.array([g[0] for g in gone], pa.string()),
                                    "user_id": pa.array([g[1] for g in gone], pa.string()),
                                    "prompt_index": pa.array([g[2] for g in gone], pa.int64())}))
    try:
        prompts = con.execute("""
            DELETE FROM prompts p WHERE EXISTS (SELECT 1 FROM _gone g WHERE g.dataset = p.dataset
                                                AND g.user_id = p.user_id AND g.prompt_index = p.prompt_index)
              AND NOT EXISTS (SELECT 1 FROM items i WHERE i.dataset = p.dataset AND i.user_id = p.user_id
                              AND i.prompt_index = p.prompt_index)
            RETURNING 1
        """).fetchall()
        users = con.execute("""
            DELETE FROM users u WHERE EXISTS (SELECT 1 FROM _gone g WHERE g.dataset = u.dataset
                                              AND g.user_id = u.user_id)
              AND NOT EXISTS (SELECT 1 FROM items i WHERE i.dataset = u.dataset AND i.user_id = u.user_id)
              AND NOT EXISTS (SELECT 1 FROM prompts p WHERE p.dataset = u.dataset AND p.user_id = u.user_id)
              AND NOT EXISTS (SELECT 1 FROM attributes a WHERE a.dataset = u.dataset AND a.user_id = u.user_id)
            RETURNING 1
        """).fetchall()
    finally:
        con.unregister("_gone")
    if prompts:
        summary.tables["prompts"] = replace(summary["prompts"], removed=len(prompts))
    if users:
        summary.tables["users"] = replace(summary["users"], removed=len(users))


def _records_table(table: str, records: Sequence[BaseModel | LabelRow]) -> pa.Table:
    """Column-wise table of typed records (model_dump per row costs seconds at 10^5-10^6 rows)."""
    return columns_table(table, {c: [getattr(r, c) for r in records] for c in TABLES[table][0]})


def write_labels(con: duckdb.DuckDBPyConnection, labels: Sequence[Label | LabelRow]) -> int:
    """Upsert labels within the caller's transaction."""
    return upsert(con, "labels", _records_table("labels", labels))


def load_labels(con: duckdb.DuckDBPyConnection, *, dataset: str | None = None, stage: str | None = None,
                condition: str | None = None) -> pd.DataFrame:
    """Return labels joined with their items, filtered by bound parameters.

    Args:
        con: Open connection.
        dataset: Keep only this dataset.
        stage: Keep only this stage.
        condition: Keep only this condition.

    Returns:
        One row per label with the item's dataset, stage, user, prompt and attribute.
    """
    where, params = ["TRUE"], []
    for col, value in (("i.dataset", dataset), ("i.stage", stage), ("l.condition", condition)):
        if value is not None:
            where.append(f"{col} = ?")
            params.append(value)
    sql = f"""
        SELECT l.item_id, l.rater, l.rater_kind, l.condition, l.label, l.raw, l.reason, l.error, l.run_id, l.meta,
               i.dataset, i.stage, i.user_id, i.prompt_index, i.attribute, i.position
        FROM labels l JOIN items i USING (item_id)
        WHERE {' AND '.join(where)}
    """
    return con.execute(sql, params).df()
