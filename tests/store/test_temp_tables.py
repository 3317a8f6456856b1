"""A temporary table held by a report: built once per connection, dropped by the outermost hold only."""

from __future__ import annotations

import duckdb
import pytest

from personagap.store.temp_tables import held_table


def _tables(con: duckdb.DuckDBPyConnection) -> set[str]:
    return {str(r[0]) for r in con.execute("SELECT table_name FROM duckdb_tables() WHERE temporary").fetchall()}


def test_a_nested_hold_reuses_the_outer_table_and_leaves_it_standing() -> None:
    con = duckdb.connect()
    con.execute("CREATE TABLE src AS SELECT 1 AS x")
    with held_table(con, "_t", "SELECT x FROM src") as outer:
        con.execute("INSERT INTO src VALUES (2)")
        with held_table(con, "_t", "SELECT x FROM src") as inner:
            assert inner == outer
            # Not rebuilt: the row added after the outer hold is not in it.
            assert con.execute("SELECT count(*) FROM _t").fetchall() == [(1,)]
        assert "_t" in _tables(con)  # the inner hold did not drop the outer's table
    assert "_t" not in _tables(con)
    # Held anew after the outermost hold ended: rebuilt from the source as it is now.
    with held_table(con, "_t", "SELECT x FROM src"):
        assert con.execute("SELECT count(*) FROM _t").fetchall() == [(2,)]


def test_another_connection_builds_its_own() -> None:
    a, b = duckdb.connect(), duckdb.connect()
    with held_table(a, "_t", "SELECT 1 AS x"), held_table(b, "_t", "SELECT 2 AS x"):
        assert a.execute("SELECT x FROM _t").fetchall() == [(1,)]
        assert b.execute("SELECT x FROM _t").fetchall() == [(2,)]


def test_a_failing_block_drops_the_table_and_the_hold() -> None:
    con = duckdb.connect()
    with pytest.raises(RuntimeError), held_table(con, "_t", "SELECT 1 AS x"):
        raise RuntimeError("boom")
    assert "_t" not in _tables(con)
    with held_table(con, "_t", "SELECT 3 AS x"):  # not mistaken for a nested hold
        assert con.execute("SELECT x FROM _t").fetchall() == [(3,)]


def test_only_an_identifier_names_a_table() -> None:
    with pytest.raises(ValueError, match="not a table name"), held_table(duckdb.connect(), "_t; DROP TABLE x",
                                                                          "SELECT 1"):
        pass
