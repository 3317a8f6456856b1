"""One error map for every command (defect 8): a DuckDB error met mid-query is one line and exit 2, not a traceback."""

from __future__ import annotations

import shutil
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

from personagap.cli import cli
from tests.support.cli_checks import assert_one_line

_HEADER = 3 * 4096
"""DuckDB's file header: the main header and two database headers of 4 KiB each; blocks follow."""


def _block_size(db: Path) -> int:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return int(con.execute("SELECT block_size FROM pragma_database_size()").fetchall()[0][0])
    finally:
        con.close()


def _opens_but_labels_fail(db: Path) -> bool:
    """Plain DuckDB (not our code) opens the file and lists its tables, but reading the labels' keys fails."""
    try:
        con = duckdb.connect(str(db), read_only=True)
    except duckdb.Error:
        return False
    try:
        con.execute("SELECT count(*) FROM meta").fetchall()
        try:
            # The columns every report and diagnose read (their aggregates skip raw text and reasons).
            con.execute("SELECT item_id, rater, rater_kind, condition, label FROM labels").fetchall()
        except duckdb.Error:
            return True
        return False
    finally:
        con.close()


@pytest.fixture(scope="module")
def corrupt_db(recenter_db: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real Re-Centering store with one data block overwritten: it opens, and reading the labels fails.

    The block is found, not assumed: starting mid-file, the first block whose damage plain DuckDB only meets
    when it reads the labels (so opening, which reads the catalog, still works).
    """
    size = _block_size(recenter_db)
    n_blocks = (recenter_db.stat().st_size - _HEADER) // size
    folder = tmp_path_factory.mktemp("corrupt")
    for block in [*range(n_blocks // 2, n_blocks), *range(n_blocks // 2)]:
        db = folder / "corrupt.duckdb"
        shutil.copy(recenter_db, db)
        with db.open("r+b") as handle:
            handle.seek(_HEADER + block * size + 64)  # past the block's checksum: DuckDB finds the mismatch on read
            handle.write(b"\xa5" * 4096)
        if _opens_but_labels_fail(db):
            return db
    pytest.fail("no block of the real store holds label data only")


@pytest.mark.parametrize("command", [["report", "relevance"], ["diagnose"]])
def test_a_corrupt_page_met_mid_query_is_one_line_naming_the_file(corrupt_db: Path, command: list[str]) -> None:
    result = CliRunner().invoke(cli, [*command, "--db", str(corrupt_db)])
    line = assert_one_line(result.exit_code, result.stdout, result.stderr, result.exception, str(corrupt_db))
    # What DuckDB said, so the user knows the file is damaged (not that PersonaGap has a bug).
    assert "Corrupt database file" in line


def test_an_error_in_our_own_sql_keeps_its_traceback() -> None:
    from personagap._cli_base import exit_for

    assert exit_for(duckdb.BinderException("Referenced column \"x\" not found"), "f.duckdb") is None
    assert exit_for(ValueError("a bug"), "f.duckdb") is None
    code, line = exit_for(duckdb.Error("Corrupt database file: computed checksum 1"), "f.duckdb") or (0, "")
    assert code == 2 and line.startswith("f.duckdb: ") and "Corrupt database file" in line
