"""Database files and locations a user may point --db at: each is one line, exit 2, and the file is untouched."""

from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from personagap import store
from personagap.store import StoreError
from tests.support.cli_checks import assert_one_line, run_import
from tests.support.db_files import altered as _altered
from tests.support.release_builders import IMPORTERS, write_release

PERSONAGAP = Path(sys.executable).parent / "personagap"


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _report(db: Path) -> tuple[int, str, str, BaseException | None]:
    from click.testing import CliRunner

    from personagap.cli import cli

    result = CliRunner().invoke(cli, ["report", "relevance", "--db", str(db)])
    return result.exit_code, result.stdout, result.stderr, result.exception


@pytest.fixture(scope="module")
def release(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_release(tmp_path_factory.mktemp("release"), IMPORTERS["recenter"].build())


@pytest.fixture(scope="module")
def good_db(release: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("good") / "good.duckdb"
    assert run_import("recenter", release, db)[0] == 0
    return db


def _version_sql(value: str) -> str:
    return "UPDATE meta SET value = '" + value.replace("'", "''") + "' WHERE key = 'schema_version'"


def _both_refuse(db: Path, release: Path, *expected: str) -> None:
    """Import and report each give one line naming the file; the file's bytes do not change."""
    before = _digest(db)
    assert_one_line(*run_import("recenter", release, db), str(db), *expected)
    assert_one_line(*_report(db), str(db), *expected)
    assert _digest(db) == before


def test_random_bytes(tmp_path: Path, release: Path) -> None:
    db = tmp_path / "random.duckdb"
    db.write_bytes(os.urandom(50_000))
    _both_refuse(db, release, "not a valid DuckDB database file")


def test_zero_byte_file(tmp_path: Path, release: Path) -> None:
    db = tmp_path / "empty.duckdb"
    db.write_bytes(b"")
    _both_refuse(db, release, "cannot open")


def test_truncated_in_the_header(tmp_path: Path, release: Path, good_db: Path) -> None:
    db = tmp_path / "short.duckdb"
    db.write_bytes(good_db.read_bytes()[:12_288])
    _both_refuse(db, release)


def test_truncated_data_fails_on_report_as_one_line(tmp_path: Path, shared_data: Path) -> None:
    # A real-size database whose tail is cut: it opens, and fails only when the report reads the lost blocks.
    db = tmp_path / "cut.duckdb"
    from personagap.api import import_recenter

    import_recenter(shared_data / "recenter", db)
    size = db.stat().st_size
    with db.open("r+b") as handle:
        handle.truncate(size // 3)
    before = _digest(db)
    assert_one_line(*_report(db), str(db))
    assert _digest(db) == before


def test_sqlite_file_never_reaches_for_an_extension(tmp_path: Path, release: Path) -> None:
    db = tmp_path / "other.db"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE t (x)")
    con.commit()
    con.close()
    before = _digest(db)
    line = assert_one_line(*run_import("recenter", release, db), str(db), "SQLite")
    assert "xtension" not in line and "download" not in line
    assert_one_line(*_report(db), str(db), "SQLite")
    assert _digest(db) == before


def test_connections_never_autoload_or_autoinstall_extensions(tmp_path: Path) -> None:
    con = store.connect(tmp_path / "x.duckdb")
    try:
        settings = dict(con.execute("SELECT name, value FROM duckdb_settings() WHERE name IN "
                                    "('autoload_known_extensions', 'autoinstall_known_extensions')").fetchall())
    finally:
        con.close()
    assert settings == {"autoload_known_extensions": "false", "autoinstall_known_extensions": "false"}


@pytest.mark.parametrize(("version", "expected"), [
    ("0", "schema version 0 predates"),
    ("-1", "is not a number"),
    ("one", "is not a number"),
    ("", "is not a number"),
    ("99", "schema version 99 is newer"),
])
def test_schema_versions_it_cannot_read(version: str, expected: str, tmp_path: Path, release: Path,
                                        good_db: Path) -> None:
    db = _altered(good_db, tmp_path / "v.duckdb", _version_sql(version))
    _both_refuse(db, release, expected)


def test_a_version_1_database_is_read_and_migrated_on_write(tmp_path: Path, release: Path, good_db: Path) -> None:
    db = _altered(good_db, tmp_path / "v1.duckdb", "DROP TABLE import_items", _version_sql("1"))
    assert _report(db)[0] == 0  # readers need nothing new
    code, out, err, exc = run_import("recenter", release, db)
    assert code == 0, (out, err, exc)
    con = duckdb.connect(str(db), read_only=True)
    version = con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchall()
    assert version == [(str(store.SCHEMA_VERSION),)]
    assert con.execute("SELECT count(*) FROM import_items").fetchall()[0][0] > 0
    con.close()


def test_a_missing_table_is_named(tmp_path: Path, release: Path, good_db: Path) -> None:
    db = _altered(good_db, tmp_path / "damaged.duckdb", "DROP TABLE judge_cache")
    _both_refuse(db, release, "missing table(s) judge_cache")


def test_another_programs_duckdb_is_refused_unless_forced(tmp_path: Path, release: Path) -> None:
    db = tmp_path / "theirs.duckdb"
    con = duckdb.connect(str(db))
    con.execute("CREATE TABLE invoices (id INTEGER, total DOUBLE)")
    con.execute("INSERT INTO invoices VALUES (1, 9.5)")
    con.close()
    before = _digest(db)
    assert_one_line(*run_import("recenter", release, db), str(db), "another program's", "invoices",
                    "--force-schema")
    assert_one_line(*_report(db), str(db), "not a PersonaGap database")
    assert _digest(db) == before
    from click.testing import CliRunner

    from personagap.cli import cli

    result = CliRunner().invoke(cli, ["import", "recenter", str(release), "--db", str(db), "--force-schema"])
    assert result.exit_code == 0, (result.output, result.exception)
    assert store.FORCE_SCHEMA is True
    # The flag lasts one command: the next one without it sees the default again.
    assert run_import("recenter", release, db)[0] == 0 and store.FORCE_SCHEMA is False
    con = duckdb.connect(str(db), read_only=True)
    assert con.execute("SELECT total FROM invoices").fetchall() == [(9.5,)]
    assert con.execute("SELECT count(*) FROM labels").fetchall()[0][0] > 0
    con.close()


def test_missing_folder(tmp_path: Path, release: Path) -> None:
    db = tmp_path / "no" / "such" / "folder" / "x.duckdb"
    assert_one_line(*run_import("recenter", release, db), str(db))
    assert not db.parent.exists()


def test_report_on_a_missing_database(tmp_path: Path) -> None:
    db = tmp_path / "never.duckdb"
    assert_one_line(*_report(db), str(db), "no such database")
    assert not db.exists()


def test_a_directory_as_database(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="is a directory"):
        store.connect(tmp_path)


# --------------------------------------------------------------------------- permissions (root without DAC override)

def _unprivileged(*args: str) -> subprocess.CompletedProcess[str]:
    """Run as this user without the capabilities that let root ignore file permissions."""
    return subprocess.run(["setpriv", "--bounding-set", "-dac_override,-dac_read_search",
                           "--inh-caps", "-dac_override,-dac_read_search", "--", *args],
                          capture_output=True, text=True, timeout=120, check=False)


def _permissions_apply(tmp_path: Path) -> bool:
    probe = tmp_path / "probe"
    probe.mkdir()
    probe.chmod(0o555)
    try:
        if os.geteuid() != 0:
            return not os.access(probe, os.W_OK)
        if shutil.which("setpriv") is None:
            return False
        return _unprivileged("sh", "-c", f"touch {probe}/x").returncode != 0
    finally:
        probe.chmod(0o755)


def _import_cmd(release: Path, db: Path) -> list[str]:
    return [str(PERSONAGAP), "import", "recenter", str(release), "--db", str(db)]


def _run_restricted(release: Path, db: Path) -> subprocess.CompletedProcess[str]:
    cmd = _import_cmd(release, db)
    if os.geteuid() == 0:
        return _unprivileged(*cmd)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)


def _assert_cli_line(proc: subprocess.CompletedProcess[str], *expected: str) -> None:
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    for text in expected:
        assert text in lines[0], lines[0]


def test_existing_database_in_a_read_only_folder(tmp_path: Path, release: Path, good_db: Path) -> None:
    if not _permissions_apply(tmp_path):
        pytest.skip("file permissions cannot be enforced here (root without setpriv)")
    folder = tmp_path / "ro"
    folder.mkdir()
    db = folder / "x.duckdb"
    shutil.copy(good_db, db)
    shutil.rmtree(release / "pilot")  # a different release: the import would change the database
    before = _digest(db)
    folder.chmod(0o555)
    try:
        proc = _run_restricted(release, db)
    finally:
        folder.chmod(0o755)
    _assert_cli_line(proc, str(db), "read-only")
    assert _digest(db) == before
    assert sorted(p.name for p in folder.iterdir()) == ["x.duckdb"]


def test_read_only_database_file(tmp_path: Path, release: Path, good_db: Path) -> None:
    if not _permissions_apply(tmp_path):
        pytest.skip("file permissions cannot be enforced here (root without setpriv)")
    db = tmp_path / "x.duckdb"
    shutil.copy(good_db, db)
    db.chmod(0o444)
    before = _digest(db)
    proc = _run_restricted(release, db)
    _assert_cli_line(proc, str(db), "read-only")
    assert _digest(db) == before


def test_unreadable_release_file(tmp_path: Path, release: Path) -> None:
    if not _permissions_apply(tmp_path):
        pytest.skip("file permissions cannot be enforced here (root without setpriv)")
    copy = tmp_path / "release"
    shutil.copytree(release, copy)
    target = copy / "stage2" / "task6_items.jsonl"
    target.chmod(0o000)
    db = tmp_path / "x.duckdb"
    proc = _run_restricted(copy, db)
    _assert_cli_line(proc, f"{target}: cannot read: Permission denied")
    assert not db.exists()
