"""The schema: tables, their columns and keys, and migrations from older versions."""

from __future__ import annotations

import contextlib
from pathlib import Path

import duckdb

from personagap.store.defaults import DEFAULT_DB as DEFAULT_DB  # re-exported beside the schema
from personagap.store.errors import StoreError
from personagap.store.errors import first_line as _first_line

SCHEMA_VERSION = 4

# items and labels carry no PRIMARY KEY constraint: at 10^6 labels DuckDB's key index costs more than
# reading, checking and writing the rows together (measured: 2.6 s against 1.3 s for the insert and commit
# alone). Their keys (TABLES below) stay unique because every write goes through upsert_counted, which
# refuses a batch holding a key twice and replaces stored rows by key; tests/store/test_keys.py checks it.
_ITEMS_COLUMNS = """item_id TEXT NOT NULL, dataset TEXT NOT NULL, stage TEXT NOT NULL, user_id TEXT NOT NULL,
    prompt_index INTEGER, attribute TEXT, position INTEGER, payload JSON"""
_LABELS_COLUMNS = """item_id TEXT NOT NULL, rater TEXT NOT NULL, rater_kind TEXT NOT NULL, condition TEXT NOT NULL,
    label TEXT, raw TEXT, reason TEXT, error TEXT, run_id TEXT NOT NULL, meta JSON"""

_ROUTE_AUDIT_COLUMNS = """stage TEXT NOT NULL, dataset TEXT NOT NULL, item_id TEXT NOT NULL,
    draw_order INTEGER NOT NULL, seed BIGINT NOT NULL, kept_sha TEXT NOT NULL, drawn_at TIMESTAMP NOT NULL,
    PRIMARY KEY (stage, dataset, item_id)"""
"""The audit draw of ``personagap route --audit N`` (issue 30): kept items drawn at random for people to label, with
the seed that drew them and a hash of the kept set it was drawn from (personagap/store/route_audit.py)."""

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
CREATE TABLE IF NOT EXISTS route_audit ({_ROUTE_AUDIT_COLUMNS});
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
    "route_audit": (("stage", "dataset", "item_id", "draw_order", "seed", "kept_sha", "drawn_at"),
                    ("stage", "dataset", "item_id")),
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
    # 3 -> 4: the audit draw of `personagap route --audit N` (issue 30).
    3: f"CREATE TABLE IF NOT EXISTS route_audit ({_ROUTE_AUDIT_COLUMNS})",
}
_TABLE_SINCE = {"import_items": 2, "route_audit": 4}
"""Tables added by a migration: a read-only reader of an older database does without them."""


def _tables(con: duckdb.DuckDBPyConnection) -> set[str]:
    rows = con.execute("SELECT table_name FROM duckdb_tables() WHERE database_name = current_database() "
                       "AND schema_name = 'main' AND NOT temporary").fetchall()
    return {r[0] for r in rows}


def ensure_schema(con: duckdb.DuckDBPyConnection, path: Path, *, read_only: bool, force: bool) -> None:
    """Create the schema in a new file, migrate an older one (when writable), refuse what is not ours.

    Args:
        con: The connection, whose current database is the store file.
        path: The file (named in errors).
        read_only: The file is opened read-only: check, never create or migrate.
        force: Add the tables to a DuckDB file holding other tables (``--force-schema``).

    Raises:
        StoreError: Not a PersonaGap database, another program's, damaged, or of an unreadable version.
    """
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
