"""Run an importer through the CLI, snapshot a store, and check the one-line error contract (exit 2, no traceback)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import duckdb
from click.testing import CliRunner

from personagap.cli import cli
from personagap.store import TABLES


def run_import(command: str, path: Path, db: Path) -> tuple[int, str, str, BaseException | None]:
    result = CliRunner().invoke(cli, ["import", command, str(path), "--db", str(db)])
    return result.exit_code, result.stdout, result.stderr, result.exception


def snapshot(db: Path) -> dict[str, tuple[int, str]]:
    """Row count and a checksum of every row of every table."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        out = {}
        for table in TABLES:
            rows = con.execute(f"SELECT * FROM {table} ORDER BY ALL").fetchall()
            out[table] = (len(rows), hashlib.sha256(repr(rows).encode()).hexdigest())
        return out
    finally:
        con.close()


def assert_one_line(code: int, stdout: str, stderr: str, exc: BaseException | None, *expected: str) -> str:
    """Exit 2, one line on stderr holding every ``expected`` text, no traceback; returns the line."""
    assert code == 2, (code, stdout, stderr, exc)
    assert isinstance(exc, SystemExit), exc  # anything else escaped run_or_exit as a traceback
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert "Traceback" not in stdout + stderr
    for text in expected:
        assert text in lines[0], (text, lines[0])
    assert len(lines[0]) < 800, len(lines[0])  # echoed values are cut
    return lines[0]
