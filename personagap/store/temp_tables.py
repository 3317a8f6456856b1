"""Temporary tables a report holds on its connection while several of its queries read them.

A temporary table is private to its connection and allowed on a read-only one. A table is built once per
connection: a nested hold of the same table (an inner function that would build it when called alone, called by an
outer one that already holds it) reuses the outer table and leaves dropping it to the outer hold.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import duckdb

_HELD: set[tuple[int, str]] = set()
"""(connection id, table name) of every table held now."""


@contextlib.contextmanager
def held_table(con: duckdb.DuckDBPyConnection, name: str, select_sql: str) -> Iterator[str]:
    """Hold ``CREATE TEMP TABLE name AS select_sql`` on ``con`` for the block; dropped when the outermost hold ends.

    Args:
        con: An open store connection.
        name: The table's name: a module constant, never user input (anything but an identifier is refused).
        select_sql: The query (static text) whose rows the table holds.

    Yields:
        ``name``.

    Raises:
        ValueError: ``name`` is not an identifier.
    """
    if not name.isidentifier():
        raise ValueError(f"not a table name: {name!r}")
    key = (id(con), name)
    if key in _HELD:
        yield name
        return
    con.execute(f"CREATE OR REPLACE TEMP TABLE {name} AS {select_sql}")
    _HELD.add(key)
    try:
        yield name
    finally:
        _HELD.discard(key)
        con.execute(f"DROP TABLE IF EXISTS {name}")
