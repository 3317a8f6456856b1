"""Items and labels carry no key index (schema 3): their keys stay unique because of how the store writes.

What is checked is what the database holds after real writes (imports, re-imports, a label changed, a
duplicate refused), and what a version-2 file (with its key indexes) becomes when it is opened for writing.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pandas as pd
import pyarrow as pa
import pytest

from personagap import store
from personagap.api import import_labels, import_recenter
from personagap.human_data.labels import LabelSpec, Source, load_label_sources
from personagap.records import LabelRow, Run
from personagap.store import TABLES, DuplicateKeyError, ImportBatch, StoreError, now, write_batch
from tests.support.cli_checks import assert_one_line, snapshot
from tests.support.db_files import HOLDER
from tests.support.db_files import altered as _altered

# The version-2 tables exactly as that schema created them (with their primary keys).
_V2_ITEMS = """CREATE TABLE items (
    item_id TEXT PRIMARY KEY, dataset TEXT NOT NULL, stage TEXT NOT NULL, user_id TEXT NOT NULL,
    prompt_index INTEGER, attribute TEXT, position INTEGER, payload JSON)"""
_V2_LABELS = """CREATE TABLE labels (
    item_id TEXT NOT NULL, rater TEXT NOT NULL, rater_kind TEXT NOT NULL, condition TEXT NOT NULL,
    label TEXT, raw TEXT, reason TEXT, error TEXT, run_id TEXT NOT NULL, meta JSON,
    PRIMARY KEY (item_id, rater, condition))"""


def duplicate_keys(db: Path) -> dict[str, int]:
    """Per keyed table, how many keys occur more than once."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        return {table: con.execute(f"SELECT count(*) FROM (SELECT 1 FROM {table} GROUP BY {', '.join(key)} "
                                   "HAVING count(*) > 1)").fetchall()[0][0]
                for table, (_, key) in TABLES.items() if table != "import_items"}
    finally:
        con.close()


def primary_keys(db: Path) -> set[str]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return {r[0] for r in con.execute("SELECT table_name FROM duckdb_constraints() "
                                          "WHERE constraint_type = 'PRIMARY KEY'").fetchall()}
    finally:
        con.close()


def test_new_databases_have_no_key_index_on_items_and_labels(tmp_path: Path) -> None:
    db = tmp_path / "new.duckdb"
    store.connect(db).close()
    keyed = primary_keys(db)
    assert "labels" not in keyed and "items" not in keyed
    assert {"meta", "runs", "users", "prompts", "attributes", "judge_cache"} <= keyed


@pytest.mark.slow
def test_real_imports_and_reimports_leave_every_key_once(recenter_db_copy: Path, shared_data: Path) -> None:
    db = recenter_db_copy
    before = snapshot(db)
    import_recenter(shared_data / "recenter", db)  # the same release again: replaced, not appended
    assert snapshot(db) == before
    labels = pd.DataFrame({"item_id": ["a", "a", "b", "b"], "rater": ["h1", "h2", "h1", "gpt"],
                           "rater_kind": ["human", "human", "human", "llm"], "label": ["yes", "no", "no", "yes"]})
    import_labels(labels, stage="relevance", dataset="team", db=db)
    labels.loc[3, "label"] = "no"  # one label changed on re-import: updated in place
    summary = import_labels(labels, stage="relevance", dataset="team", db=db)
    assert (summary.written["labels"].updated, summary.written["labels"].inserted) == (1, 0)
    assert duplicate_keys(db) == dict.fromkeys(duplicate_keys(db), 0)
    con = duckdb.connect(str(db), read_only=True)
    stored = con.execute("SELECT label FROM labels l JOIN items i USING (item_id) "
                         "WHERE i.dataset = 'team' AND rater = 'gpt'").fetchall()
    con.close()
    assert stored == [("no",)]


def test_a_batch_holding_a_key_twice_is_refused_and_writes_nothing(recenter_db_copy: Path) -> None:
    db = recenter_db_copy
    con = duckdb.connect(str(db), read_only=True)
    item = con.execute("SELECT item_id FROM items LIMIT 1").fetchall()[0][0]
    con.close()
    before = snapshot(db)
    batch = ImportBatch()
    batch.runs.append(Run(run_id="dup-run", kind="import", source="test", started_at=now(), status="finished"))
    row = LabelRow(item_id=item, rater="h", rater_kind="human", condition="", label="yes", raw=None,
                   reason=None, error=None, run_id="dup-run", meta=None)
    batch.labels += [row, row._replace(label="no")]
    with pytest.raises(DuplicateKeyError, match="labels: the batch holds key"):
        write_batch(db, batch)
    assert snapshot(db) == before


@pytest.mark.slow
def test_a_version_2_database_loses_its_key_indexes_and_keeps_its_rows(recenter_db: Path, tmp_path: Path,
                                                                         shared_data: Path) -> None:
    db = tmp_path / "v2.duckdb"
    shutil.copy(recenter_db, db)
    con = duckdb.connect(str(db))
    for table, ddl in (("items", _V2_ITEMS), ("labels", _V2_LABELS)):
        con.execute(f"ALTER TABLE {table} RENAME TO _old_{table}")
        con.execute(ddl)
        con.execute(f"INSERT INTO {table} SELECT * FROM _old_{table}")
        con.execute(f"DROP TABLE _old_{table}")
    con.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")
    con.close()
    assert {"items", "labels"} <= primary_keys(db)
    rows = snapshot(db)

    store.connect(db, read_only=True).close()  # a reader reads version 2 as it is
    assert {"items", "labels"} <= primary_keys(db)

    store.connect(db).close()  # a writer migrates
    assert not {"items", "labels"} & primary_keys(db)
    migrated = snapshot(db)
    assert {t: v for t, v in migrated.items() if t != "meta"} == {t: v for t, v in rows.items() if t != "meta"}
    con = duckdb.connect(str(db), read_only=True)
    assert con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchall() == [
        (str(store.SCHEMA_VERSION),)]
    nullable = con.execute("SELECT column_name FROM duckdb_columns() WHERE table_name = 'labels' "
                           "AND NOT is_nullable ORDER BY column_name").fetchall()
    con.close()
    assert [c for (c,) in nullable] == ["condition", "item_id", "rater", "rater_kind", "run_id"]
    import_recenter(shared_data / "recenter", db)  # and it takes writes as before
    assert snapshot(db)["labels"] == rows["labels"]


def _hold(db: Path, seconds: float) -> subprocess.Popen[str]:
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(db), str(seconds)], stdout=subprocess.PIPE,
                              text=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "LOCKED"
    return holder


def test_a_label_import_waits_for_a_database_another_process_holds(recenter_db_copy: Path) -> None:
    db = recenter_db_copy
    frame = pd.DataFrame({"item_id": ["a", "b"], "rater": ["h1", "h1"], "label": ["yes", "no"]})
    holder = _hold(db, 2)
    summary = import_labels(frame, stage="relevance", dataset="held", db=db)  # would fail at once without waiting
    assert holder.wait(timeout=30) == 0
    assert summary.written["labels"].inserted == 2


@pytest.mark.slow
def test_a_staged_import_gives_up_on_a_file_held_too_long_and_changes_nothing(recenter_db_copy: Path) -> None:
    db = recenter_db_copy
    before = snapshot(db)
    frame = pd.DataFrame({"item_id": ["a"], "rater": ["h1"], "label": ["yes"]})
    with load_label_sources([Source(name="frame", kind="frame", frame=frame)],
                            LabelSpec(stage="relevance", dataset="held")) as staged:
        holder = _hold(db, 4)
        with pytest.raises(StoreError, match="cannot open as a PersonaGap database"), \
                store.attached(staged.con, db, wait_seconds=0.5):
            pass
        assert holder.wait(timeout=30) == 0
        assert staged.con.execute("SELECT current_database()").fetchall() == [("memory",)]
    assert snapshot(db) == before


def _import_labels_cli(tmp_path: Path, db: Path, *extra: str) -> tuple[int, str, str, BaseException | None]:
    from click.testing import CliRunner

    from personagap.cli import cli

    path = tmp_path / "team.csv"
    path.write_text("item_id,rater,label\na,h1,yes\na,h2,no\n", encoding="utf-8")
    result = CliRunner().invoke(cli, ["import", "labels", str(path), "--stage", "relevance", "--dataset", "team",
                                      "--db", str(db), *extra])
    return result.exit_code, result.stdout, result.stderr, result.exception


@pytest.mark.parametrize(("sql", "expected"), [
    (("UPDATE meta SET value = '99' WHERE key = 'schema_version'",), "schema version 99 is newer"),
    (("DELETE FROM meta WHERE key = 'schema_version'",), "no schema_version"),
    (("DROP TABLE judge_cache",), "missing table(s) judge_cache"),
])
def test_label_imports_refuse_databases_they_cannot_use_with_one_line(recenter_db: Path, tmp_path: Path,
                                                                     sql: tuple[str, ...], expected: str) -> None:
    """The staged import attaches the file under connect()'s rules: the same refusals, the file unchanged."""
    db = _altered(recenter_db, tmp_path / "x.duckdb", *sql)
    before = db.read_bytes()
    assert_one_line(*_import_labels_cli(tmp_path, db), str(db), expected)
    assert db.read_bytes() == before


def test_label_imports_refuse_another_programs_database_unless_forced(tmp_path: Path) -> None:
    db = tmp_path / "theirs.duckdb"
    con = duckdb.connect(str(db))
    con.execute("CREATE TABLE invoices (id INTEGER, total DOUBLE)")
    con.close()
    before = db.read_bytes()
    assert_one_line(*_import_labels_cli(tmp_path, db), str(db), "another program's", "--force-schema")
    assert db.read_bytes() == before
    assert _import_labels_cli(tmp_path, db, "--force-schema")[0] == 0
    con = duckdb.connect(str(db), read_only=True)
    assert con.execute("SELECT count(*) FROM labels").fetchall() == [(2,)]
    assert con.execute("SELECT count(*) FROM invoices").fetchall() == [(0,)]
    con.close()


def test_label_imports_migrate_a_version_1_database(recenter_db: Path, tmp_path: Path) -> None:
    db = _altered(recenter_db, tmp_path / "v1.duckdb", "DROP TABLE import_items",
                       "UPDATE meta SET value = '1' WHERE key = 'schema_version'")
    assert _import_labels_cli(tmp_path, db)[0] == 0
    con = duckdb.connect(str(db), read_only=True)
    assert con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchall() == [
        (str(store.SCHEMA_VERSION),)]
    assert con.execute("SELECT count(*) FROM import_items").fetchall() == [(0,)]
    con.close()


@pytest.mark.parametrize("shape", ["dicts", "pandas", "arrow"])
def test_upsert_takes_dicts_dataframes_and_arrow(tmp_path: Path, shape: str) -> None:
    rows = [{"dataset": "d", "user_id": f"u{i}", "profile_text": None} for i in range(3)]
    given: object = {"dicts": rows, "pandas": pd.DataFrame(rows), "arrow": pa.Table.from_pylist(rows)}[shape]
    with store.opened(tmp_path / "x.duckdb") as con:
        assert store.upsert(con, "users", given) == 3  # type: ignore[arg-type]
        assert store.upsert(con, "users", given) == 3  # type: ignore[arg-type]  # replaced, not added
        assert con.execute("SELECT count(*) FROM users").fetchall() == [(3,)]
