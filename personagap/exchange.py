"""The store as Parquet: export every table (partitioned by dataset) with a schema.json, and merge exports back.

Why Parquet: a team shards judge runs over several machines and merges them (``import parquet``), and a
store too big for one machine is queried where it lies (``read_parquet('DIR/labels/**/*.parquet',
hive_partitioning = true)`` in DuckDB, ``spark.read.parquet('DIR/labels')`` in Spark).

Layout of an export folder::

    schema.json                      # format, schema version, per table: columns, key, partitioning, rows
    meta/data_0.parquet              # tables without a dataset: meta, runs, judge_cache
    items/dataset=NAME/data_0.parquet
    labels/dataset=NAME/data_0.parquet   # labels carry their item's dataset as the partition column
    ...
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from personagap import __version__
from personagap.human_data._jsonl import DataError
from personagap.store import SCHEMA_VERSION, TABLES, StoreError, opened, set_meta, upsert
from personagap.store.atomic import transaction
from personagap.store.exchange_io import NO_ITEM as NO_ITEM
from personagap.store.exchange_io import (
    copy_to_parquet,
    export_columns,
    export_rows,
    parquet_reader,
    read_parquet_files,
)

FORMAT = "personagap-export"
FORMAT_VERSION = 1
SCHEMA_FILE = "schema.json"
#: Tables partitioned by their own ``dataset`` column; ``labels`` by its item's dataset.
PARTITIONED = ("users", "attributes", "prompts", "items", "labels")
#: Written in this order on import (items before labels, like every import).
_ORDER = ("runs", "users", "attributes", "prompts", "items", "labels", "judge_cache")
_META_SKIP = frozenset({"schema_version"})


@dataclass(frozen=True)
class ExchangeSummary:
    """Rows per table written to (export) or merged from (import) a Parquet folder."""

    action: str
    folder: str
    db: str
    rows: dict[str, int]

    def render(self) -> str:
        """Plain-text summary for the terminal."""
        verb = "Exported" if self.action == "export" else "Merged"
        where = f"{self.db} -> {self.folder}" if self.action == "export" else f"{self.folder} -> {self.db}"
        return f"{verb} {where}:\n  " + ", ".join(f"{n} {t}" for t, n in self.rows.items())


def export_store(db: str | Path, out: str | Path) -> ExchangeSummary:
    """Write every table of ``db`` as Parquet under ``out``, plus ``schema.json``.

    Args:
        db: The DuckDB file (opened read-only).
        out: A folder that does not exist yet or is empty.

    Returns:
        Rows written per table.

    Raises:
        StoreError: ``out`` holds files already, or the database cannot be read.
    """
    folder = Path(out)
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise StoreError(f"{folder}: exists and is not an empty folder; choose a new --out")
    tables: dict[str, Any] = {}
    with opened(db, read_only=True) as con:
        folder.mkdir(parents=True, exist_ok=True)
        for table in ("meta", *TABLES):
            n = export_rows(con, table)
            target = folder / table
            partition = table in PARTITIONED
            if n:
                target.mkdir(exist_ok=True)
                copy_to_parquet(con, table, target if partition else target / "data_0.parquet", partition=partition)
            columns = [{"name": name, "type": kind} for name, kind in export_columns(con, table)]
            tables[table] = {"path": table, "rows": n, "columns": columns,
                             "key": ["key"] if table == "meta" else list(TABLES[table][1]),
                             "partition_by": "dataset" if partition else None}
    schema = {"format": FORMAT, "format_version": FORMAT_VERSION, "schema_version": SCHEMA_VERSION,
              "personagap_version": __version__, "exported_at": datetime.now(UTC).isoformat(timespec="seconds"),
              "source": Path(db).name, "tables": tables}
    (folder / SCHEMA_FILE).write_text(json.dumps(schema, indent=2) + "\n", encoding="utf-8")
    return ExchangeSummary("export", str(folder), str(db), {t: v["rows"] for t, v in tables.items()})


def read_schema(folder: str | Path) -> dict[str, Any]:
    """Read and check an export's ``schema.json``.

    Raises:
        DataError: Missing or malformed, another format, a newer schema, or tables/columns PersonaGap does not
            have (one line naming the file and field).
    """
    path = Path(folder) / SCHEMA_FILE
    if not Path(folder).is_dir():
        raise DataError(folder, None, None, "no such folder (give the --out folder of `personagap export`)")
    try:
        schema = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DataError(path, None, None, "missing: not a PersonaGap export (`personagap export --out DIR`)") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DataError(path, None, None, f"cannot read: {exc}") from None
    if not isinstance(schema, dict) or schema.get("format") != FORMAT:
        raise DataError(path, None, "format", f"expected {FORMAT!r}")
    version = schema.get("schema_version")
    if not isinstance(version, int) or version > SCHEMA_VERSION:
        raise DataError(path, None, "schema_version",
                        f"{version!r} is not supported (this PersonaGap reads up to {SCHEMA_VERSION})")
    tables = schema.get("tables")
    if not isinstance(tables, dict):
        raise DataError(path, None, "tables", "expected an object of tables")
    for table, spec in tables.items():
        expected = ("key", "value") if table == "meta" else TABLES[table][0] if table in TABLES else None
        if expected is None:
            raise DataError(path, None, f"tables.{table}", "unknown table")
        if not isinstance(spec, dict) or not isinstance(spec.get("rows"), int) or spec["rows"] < 0:
            raise DataError(path, None, f"tables.{table}.rows", "expected a row count")
        names = [c.get("name") for c in spec.get("columns", []) if isinstance(c, dict)]
        if [n for n in names if n != "dataset" or table != "labels"] != list(expected):
            raise DataError(path, None, f"tables.{table}.columns",
                            f"columns {names} differ from this PersonaGap's {list(expected)}")
    return schema


def _read_table(con: duckdb.DuckDBPyConnection, folder: Path, table: str, rows: int) -> pa.Table:
    target = folder / table
    files = sorted(str(p) for p in target.rglob("*.parquet")) if target.is_dir() else []
    if not files:
        raise DataError(target, None, None, f"no Parquet files, but schema.json says {rows} rows")
    columns = ("key", "value") if table == "meta" else TABLES[table][0]
    try:
        arrow = read_parquet_files(con, files, columns)
    except duckdb.Error as exc:
        raise DataError(target, None, None, f"cannot read: {str(exc).splitlines()[0][:300]}") from None
    if arrow.num_rows != rows:
        raise DataError(target, None, None, f"{arrow.num_rows} rows, but schema.json says {rows}: incomplete export")
    return arrow


def import_export(folder: str | Path, db: str | Path) -> ExchangeSummary:
    """Merge an export folder into ``db`` in one transaction (same key: the export's row wins).

    Args:
        folder: An export folder (:func:`export_store`).
        db: The DuckDB file (created if missing).

    Returns:
        Rows merged per table.

    Raises:
        DataError: The folder is not a complete, compatible export; nothing is written.
    """
    path = Path(folder)
    schema = read_schema(path)
    tables: dict[str, int] = {t: int(v["rows"]) for t, v in schema["tables"].items()}
    with parquet_reader() as reader:
        data = {t: _read_table(reader, path, t, n) for t, n in tables.items() if n}
    with opened(db) as con, transaction(con):
        for table in _ORDER:
            if table in data:
                upsert(con, table, data[table])
        if "meta" in data:
            meta = data["meta"].to_pydict()
            set_meta(con, {k: v for k, v in zip(meta["key"], meta["value"], strict=True) if k not in _META_SKIP})
    return ExchangeSummary("import", str(path), str(db), tables)
