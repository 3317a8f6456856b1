"""Every store connection has DuckDB's progress bar off: it prints to stdout for queries over 2 s, which at 10^6+
labels put it in front of `report --json` (no valid JSON then)."""

from __future__ import annotations

from pathlib import Path

from personagap.store import opened
from personagap.store.connection import connect


def _setting(con: object) -> object:
    return con.execute("SELECT current_setting('enable_progress_bar')").fetchone()[0]  # type: ignore[attr-defined]


def test_a_connection_and_its_cursors_print_no_progress_bar(tmp_path: Path) -> None:
    con = connect(tmp_path / "s.duckdb")
    try:
        assert _setting(con) is False
        assert _setting(con.cursor()) is False
    finally:
        con.close()
    with opened(tmp_path / "s.duckdb", read_only=True) as ro:
        assert _setting(ro) is False
