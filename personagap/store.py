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
import subprocess
import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import orjson
import pandas as pd
import pyarrow as pa
from pydantic import BaseModel

from personagap.records import Attribute, Item, Label, LabelRow, Prompt, Run, User

SCHEMA_VERSION = 1
DEFAULT_DB = "personagap.duckdb"

_SCHEMA = """
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
CREATE TABLE IF NOT EXISTS items (
    item_id TEXT PRIMARY KEY, dataset TEXT NOT NULL, stage TEXT NOT NULL, user_id TEXT NOT NULL,
    prompt_index INTEGER, attribute TEXT, position INTEGER, payload JSON
);
CREATE TABLE IF NOT EXISTS labels (
    item_id TEXT NOT NULL, rater TEXT NOT NULL, rater_kind TEXT NOT NULL, condition TEXT NOT NULL,
    label TEXT, raw TEXT, reason TEXT, error TEXT, run_id TEXT NOT NULL, meta JSON,
    PRIMARY KEY (item_id, rater, condition)
);
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
    "judge_cache": (("key", "judge", "judge_version", "model", "label", "raw", "reason", "error", "usage",
                     "created_at"), ("key",)),
}

_LOCK_MARKERS = ("Conflicting lock", "Could not set lock", "database is locked")


class StoreError(RuntimeError):
    """The database file cannot be used (newer schema, held by a writer too long, ...)."""


def connect(path: str | Path, *, read_only: bool = False, wait_seconds: float = 10.0) -> duckdb.DuckDBPyConnection:
    """Open the store, creating the schema when writable.

    Retries while another process holds the file, because a writer here holds it
    only for one short batch.

    Args:
        path: The DuckDB file.
        read_only: Open read-only (the dashboard and reports do).
        wait_seconds: How long to retry on a lock conflict before giving up.

    Returns:
        An open connection.

    Raises:
        StoreError: The file is missing (read-only), locked for longer than
            ``wait_seconds``, or written by a newer PersonaGap.
    """
    path = Path(path)
    if read_only and not path.exists():
        raise StoreError(f"{path}: no such database; import data first (see `personagap import --help`)")
    deadline = time.monotonic() + wait_seconds
    delay = 0.02
    while True:
        try:
            con = duckdb.connect(str(path), read_only=read_only)
            break
        except duckdb.IOException as exc:
            if not any(m in str(exc) for m in _LOCK_MARKERS) or time.monotonic() > deadline:
                raise StoreError(f"{path}: {exc}") from exc
            time.sleep(delay)
            delay = min(delay * 2, 0.5)
    if not read_only:
        _ensure_schema(con, path)
    else:
        _check_version(con, path)
    return con


@contextlib.contextmanager
def opened(path: str | Path, *, read_only: bool = False) -> Iterator[duckdb.DuckDBPyConnection]:
    """Context manager around :func:`connect` that always closes the file."""
    con = connect(path, read_only=read_only)
    try:
        yield con
    finally:
        con.close()


def _ensure_schema(con: duckdb.DuckDBPyConnection, path: Path) -> None:
    # Writers reconnect for every batch: skip the DDL when the schema is already there.
    has_meta = con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'meta'").fetchall()[0][0]
    if has_meta:
        _check_version(con, path)
        return
    con.execute("BEGIN TRANSACTION")
    con.execute(_SCHEMA)
    con.execute("INSERT INTO meta VALUES ('schema_version', ?) ON CONFLICT (key) DO NOTHING", [str(SCHEMA_VERSION)])
    con.execute("COMMIT")
    _check_version(con, path)


def _check_version(con: duckdb.DuckDBPyConnection, path: Path) -> None:
    try:
        rows = con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchall()
    except duckdb.CatalogException as exc:
        raise StoreError(f"{path}: not a PersonaGap database (no meta table)") from exc
    found = int(rows[0][0]) if rows else None
    if found is None or found > SCHEMA_VERSION:
        raise StoreError(f"{path}: schema version {found} is not supported (this PersonaGap reads {SCHEMA_VERSION})")


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
    columns, key = TABLES[table]
    frame = rows if isinstance(rows, pd.DataFrame | pa.Table) else _rows_table(table, rows)
    n = frame.num_rows if isinstance(frame, pa.Table) else len(frame)
    if n == 0:
        return 0
    view = f"_incoming_{table}"
    con.register(view, frame)
    try:
        # Only new or changed rows are touched: they are deleted by key and inserted again. That is
        # INSERT ... ON CONFLICT DO UPDATE's result, ~3x faster at 10^6 fresh rows (DuckDB 2.0), and an
        # unchanged re-import rewrites nothing. Atomic inside the caller's transaction.
        col_list = ", ".join(columns)
        if not con.execute(f"SELECT EXISTS (SELECT 1 FROM {table})").fetchall()[0][0]:
            con.execute(f"INSERT INTO {table} ({col_list}) SELECT {col_list} FROM {view}").fetchall()
            return n
        on = " AND ".join(f"t.{k} = v.{k}" for k in key)
        differs = " OR ".join(f"t.{c} IS DISTINCT FROM v.{c}" for c in columns if c not in key) or "FALSE"
        changed = f"_changed_{table}"
        # fetchall: DuckDB 2 refuses further work on a connection until a result is consumed.
        con.execute(f"CREATE OR REPLACE TEMP TABLE {changed} AS SELECT v.* FROM {view} v "
                    f"LEFT JOIN {table} t ON {on} WHERE t.{key[0]} IS NULL OR {differs}").fetchall()
        match = " AND ".join(f"{table}.{k} = {changed}.{k}" for k in key)
        con.execute(f"DELETE FROM {table} USING {changed} WHERE {match}").fetchall()
        con.execute(f"INSERT INTO {table} ({col_list}) SELECT {col_list} FROM {changed}").fetchall()
        con.execute(f"DROP TABLE {changed}").fetchall()
    finally:
        con.unregister(view)
    return n


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


def write_batch(path: str | Path, batch: ImportBatch) -> dict[str, int]:
    """Write an import batch to the store in a single transaction.

    Either every row lands or none does: a failure rolls the whole batch back.

    Args:
        path: The DuckDB file (created if missing).
        batch: The validated rows.

    Returns:
        Row counts written per table.
    """
    with opened(path) as con:
        con.execute("BEGIN TRANSACTION")
        try:
            upsert(con, "runs", [r.model_dump() for r in batch.runs])
            upsert(con, "users", [u.model_dump() for u in batch.users.values()])
            upsert(con, "attributes", [a.model_dump() for a in batch.attributes.values()])
            upsert(con, "prompts", [p.model_dump() for p in batch.prompts.values()])
            upsert(con, "items", _records_table("items", list(batch.items.values())))
            bulk = batch.label_columns.columns
            upsert(con, "labels", columns_table("labels", {
                c: [getattr(lab, c) for lab in batch.labels] + bulk[c] for c in TABLES["labels"][0]}))
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise
    return batch.counts()


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
