"""The statements of the generic label importer (:mod:`personagap.human_data.labels`) on its private connection.

The importer reads the user's files with DuckDB into ``vl`` (one row per label, every column text) and groups
them per item into the temporary table ``it``; its checks and staged views are built from the label format's
SQL fragments (:mod:`personagap.human_data.label_sources`, :mod:`~personagap.human_data.label_checks`,
:mod:`~personagap.human_data.label_rows`). This module runs them: every statement the importer executes is here.
Identifiers and fragments passed in are the importer's static text, never user input (values are bound).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import duckdb
import pyarrow as pa

ROWS = "vl"
"""The registered Arrow table of the rows read (one per label)."""
ITEMS = "it"
"""The temporary table of the rows grouped per item."""


def _identifier(name: str) -> str:
    if not name.isidentifier():
        raise ValueError(f"not an identifier: {name!r}")
    return name


def private_connection() -> duckdb.DuckDBPyConnection:
    """A new in-memory connection of the importer's own that never loads an extension (never reaches the network)."""
    return duckdb.connect(config={"autoinstall_known_extensions": False, "autoload_known_extensions": False})


def register_arrow(con: duckdb.DuckDBPyConnection, name: str, table: pa.Table) -> str:
    """Make ``table`` readable by name on ``con`` (scanned in place, not copied); returns ``name``."""
    con.register(_identifier(name), table)
    return name


def set_variables(con: duckdb.DuckDBPyConnection, values: dict[str, tuple[object, str]]) -> None:
    """``SET VARIABLE name = CAST(? AS type)`` for each ``name -> (value, type)``: values stay data, never SQL."""
    for name, (value, kind) in values.items():
        con.execute(f"SET VARIABLE {_identifier(name)} = CAST(? AS {kind})", [value])


def describe(con: duckdb.DuckDBPyConnection, query: str) -> list[tuple[str, str]]:
    """(column name, DuckDB type) of every column of ``query``, in order."""
    return [(str(n), str(k)) for n, k, *_ in con.sql(f"DESCRIBE {query}").fetchall()]


def hold_rows(con: duckdb.DuckDBPyConnection, query: str) -> None:
    """Register ``query``'s rows as :data:`ROWS` (an Arrow table, streamed batch by batch).

    Held as Arrow, not as a temporary table: DuckDB fills an Arrow table ~30% faster than its own table storage
    and scans it in place (zero copy) in each later step; streamed, the result is never held twice.
    """
    con.register(ROWS, con.sql(query).to_arrow_reader(122_880).read_all())


def count_rows(con: duckdb.DuckDBPyConnection, query: str) -> int:
    """The number of rows of ``query`` (reads it all: how the importer finds which file fails to read)."""
    return int(con.sql(f"SELECT count(*) FROM ({query})").fetchall()[0][0])


def rows_per_file(con: duckdb.DuckDBPyConnection) -> dict[int, int]:
    """File index -> the number of rows read from it."""
    return {int(f): int(n) for f, n in con.sql(f"SELECT _file, count(*) FROM {ROWS} GROUP BY _file").fetchall()}


def first_row(con: duckdb.DuckDBPyConnection, query: str, params: list[Any] | None = None) -> tuple[Any, ...] | None:
    """The first row of a check's ``query`` over :data:`ROWS` in file order (``_file``, ``_row``), or None."""
    rows = con.execute(query + " ORDER BY _file, _row LIMIT 1", params or []).fetchall()
    return tuple(rows[0]) if rows else None


def row_value(con: duckdb.DuckDBPyConnection, column: str, file: int, row: int) -> Any:
    """The text of ``column`` on one row read (``_file``, ``_row``)."""
    return con.execute(f"SELECT {_identifier(column)} FROM {ROWS} WHERE _file = ? AND _row = ?",
                       [file, row]).fetchall()[0][0]


def any_value(con: duckdb.DuckDBPyConnection, column: str) -> bool:
    """Whether any row read gives ``column``."""
    return bool(con.sql(f"SELECT count({_identifier(column)}) > 0 FROM {ROWS}").fetchall()[0][0])


def fills(con: duckdb.DuckDBPyConnection, context: Sequence[str]) -> tuple[bool, list[bool], list[int]]:
    """What the rows read fill: any user other than its item, each ``context`` column, the (rater, condition) keys.

    Returns:
        Whether any row's user differs from its item; per ``context`` column whether any row fills it; the
        distinct hashes of (rater, condition).
    """
    columns = "".join(f"count({_identifier(c)}) > 0, " for c in context)
    *given, keys = con.execute(f"SELECT bool_or(user_key <> item_id), {columns}"
                               f"list(DISTINCT hash(rater, cond)) FROM {ROWS}").fetchall()[0]
    return bool(given[0]), [bool(g) for g in given[1:]], list(keys or [])


def build_items(con: duckdb.DuckDBPyConnection, select_list: str) -> None:
    """Create :data:`ITEMS`: ``SELECT item_id AS source_id, <select_list> FROM vl GROUP BY item_id``."""
    con.execute(f"CREATE TEMP TABLE {ITEMS} AS SELECT item_id AS source_id, {select_list} "
                f"FROM {ROWS} GROUP BY item_id")


def pair_counts(con: duckdb.DuckDBPyConnection) -> tuple[int, int]:
    """(items that are pairs, items) of :data:`ITEMS`."""
    pairs, total = con.execute(f"SELECT count(*) FILTER (WHERE is_pair), count(*) FROM temp.{ITEMS}").fetchall()[0]
    return int(pairs), int(total)


def first_conflict(con: duckdb.DuckDBPyConnection) -> tuple[str, list[bool], str | None] | None:
    """The first item (in file order) whose rows disagree on a fact of the item: id, per-column flags, pair message."""
    hit = con.execute(f"SELECT source_id, conflicts, pair_conflict FROM {ITEMS} "
                      "WHERE list_bool_or(conflicts) OR pair_conflict IS NOT NULL ORDER BY first_at LIMIT 1").fetchall()
    return (hit[0][0], list(hit[0][1]), hit[0][2]) if hit else None


def may_hold_twice(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether any item of :data:`ITEMS` may hold a (rater, condition) twice (its ``maybe_twice`` flag)."""
    return bool(con.sql(f"SELECT coalesce(bool_or(maybe_twice), FALSE) FROM {ITEMS}").fetchall()[0][0])


def first_labels(con: duckdb.DuckDBPyConnection, order: str, limit: int) -> list[tuple[str, Any, Any]]:
    """The first ``limit`` distinct stored labels of single-response rows, by first appearance: (label, file, row).

    ``_file`` and ``_row`` are NULL (None) where ``order`` is (rows read without their numbers).
    """
    return [(str(s), f, r) for s, f, r in con.execute(
        f"SELECT stored, arg_min(_file, {order}), arg_min(_row, {order}) FROM {ROWS} "
        f"WHERE NOT is_pair AND stored IS NOT NULL GROUP BY stored ORDER BY min({order}), stored LIMIT ?",
        [int(limit)]).fetchall()]


def first_of_each(con: duckdb.DuckDBPyConnection, column: str, order: str) -> list[tuple[Any, Any, str]]:
    """Per distinct value of ``column``, the first row giving it (by ``order``): (``_file``, ``_row``, value).

    ``_file`` and ``_row`` are NULL (None) where ``order`` is (rows read without their numbers).
    """
    c = _identifier(column)
    return [(f, r, str(t)) for f, r, t in con.sql(
        f"SELECT arg_min(_file, {order}), arg_min(_row, {order}), {c} FROM {ROWS} "
        f"WHERE {c} IS NOT NULL GROUP BY {c}").fetchall()]


def item_rows(con: duckdb.DuckDBPyConnection, item: str, column: str, order: str) -> list[tuple[Any, Any, Any]]:
    """(``_file``, ``_row``, ``column``) of every row of ``item`` giving ``column``, in ``order``."""
    c = _identifier(column)
    return [(f, r, v) for f, r, v in con.execute(
        f"SELECT _file, _row, {c} FROM {ROWS} WHERE item_id = ? AND {c} IS NOT NULL ORDER BY {order}",
        [item]).fetchall()]


def stage_view(con: duckdb.DuckDBPyConnection, table: str, query: str) -> str:
    """Create the temporary view ``staged_<table>`` over ``query``; returns its qualified name."""
    con.execute(f"CREATE TEMP VIEW staged_{_identifier(table)} AS {query}")
    return f"temp.staged_{table}"
