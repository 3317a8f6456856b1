"""The store's side of a Parquet export and of merging one back (:mod:`personagap.exchange`)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from pathlib import Path

import duckdb
import pyarrow as pa

from personagap.store.schema import TABLES

NO_ITEM = "__no_item__"
"""Partition of labels whose item is not in the store (kept, so that a merge loses nothing)."""


def _select(table: str) -> tuple[str, list[str]]:
    """The query exporting ``table`` and its parameters (static SQL: every value is bound)."""
    cols = ", ".join(f"t.{c}" for c in (("key", "value") if table == "meta" else TABLES[table][0]))
    if table == "labels":
        return (f"SELECT {cols}, coalesce(i.dataset, ?) AS dataset FROM labels t "
                "LEFT JOIN items i USING (item_id) ORDER BY t.item_id, t.rater, t.condition", [NO_ITEM])
    key = ("key",) if table == "meta" else TABLES[table][1]
    return f"SELECT {cols} FROM {table} t ORDER BY {', '.join('t.' + k for k in key)}", []


def _known(table: str) -> str:
    if table != "meta" and table not in TABLES:
        raise ValueError(f"not a store table: {table!r}")
    return table


def export_rows(con: duckdb.DuckDBPyConnection, table: str) -> int:
    """How many rows exporting ``table`` (``meta`` or one of :data:`TABLES`) writes."""
    query, params = _select(_known(table))
    return int(con.execute(f"SELECT count(*) FROM ({query})", params).fetchall()[0][0])


def export_columns(con: duckdb.DuckDBPyConnection, table: str) -> list[tuple[str, str]]:
    """(name, DuckDB type) of every column an export of ``table`` writes, in order."""
    query, params = _select(_known(table))
    return [(str(name), str(kind)) for name, kind, *_ in con.execute(f"DESCRIBE {query}", params).fetchall()]


def copy_to_parquet(con: duckdb.DuckDBPyConnection, table: str, path: Path, *, partition: bool) -> None:
    """Write ``table``'s export as Parquet: into folder ``path`` partitioned by ``dataset``, else as file ``path``."""
    query, params = _select(_known(table))
    options = "FORMAT parquet, PARTITION_BY (dataset), OVERWRITE_OR_IGNORE true" if partition else "FORMAT parquet"
    # The path is bound, never spliced into the SQL text (a path may hold quotes).
    con.execute(f"COPY ({query}) TO ? ({options})", [*params, str(path)]).fetchall()


@contextlib.contextmanager
def parquet_reader() -> Iterator[duckdb.DuckDBPyConnection]:
    """A private in-memory connection that never loads an extension (so never reaches the network)."""
    with duckdb.connect() as reader:
        reader.execute("SET autoinstall_known_extensions = false; SET autoload_known_extensions = false")
        yield reader


def read_parquet_files(con: duckdb.DuckDBPyConnection, files: Sequence[str], columns: Sequence[str]) -> pa.Table:
    """``columns`` of Parquet ``files`` (hive partitions kept as text) as one Arrow table.

    Raises:
        duckdb.Error: A file cannot be read or lacks a column.
    """
    # Partition values stay text ("2024" is a dataset name, not a number); the store's own columns are inside.
    source = "read_parquet(?, hive_partitioning = true, hive_types_autocast = false, union_by_name = true)"
    # The file list is bound as a parameter: folder and dataset names never become SQL text.
    return con.sql(f"SELECT {', '.join(columns)} FROM {source}", params=[list(files)]).to_arrow_table()
