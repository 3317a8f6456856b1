"""A re-import leaves exactly what the files now hold, and says what it changed (issue 11, defect 4).

Copies of the real release files (in tmp_path, never in the repository) are imported, changed
and imported again; every expected figure is recounted from the files themselves.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

from personagap.api import import_recenter, report_relevance
from personagap.cli import cli
from personagap.human_data.recenter import PIPELINE_RATER, STAGE2
from personagap.stages.response import import_prism
from personagap.store import ImportBatch, write_batch
from tests.support.release_builders import IMPORTERS, write_release

LLM = "gpt-5.4"


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _write_rows(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def _labels_of(db: Path, rater: str, dataset: str) -> int:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute("SELECT count(*) FROM labels l JOIN items i USING (item_id) "
                           "WHERE l.rater = ? AND i.dataset = ?", [rater, dataset]).fetchall()[0][0]
    finally:
        con.close()


@pytest.fixture
def stage2_copy(shared_data: Path, tmp_path: Path) -> Path:
    root = tmp_path / "recenter"
    shutil.copytree(shared_data / "recenter" / "stage2", root / "stage2")
    return root


def _judge_n(db: Path) -> tuple[int, int]:
    report = report_relevance(db).to_json_dict()
    rows = [j for j in report["judges"] if j["judge"] == LLM and j["dataset"] == STAGE2]
    assert len(rows) == 1, rows
    return rows[0]["n"], rows[0]["n"] + rows[0]["failures"] + rows[0]["unmatched"]


def test_shortened_llm_file_leaves_no_stale_label(stage2_copy: Path, tmp_path: Path) -> None:
    db = tmp_path / "db.duckdb"
    llm_file = stage2_copy / "stage2" / "llm_relevance" / f"{LLM}.jsonl"
    rows = _rows(llm_file)
    full = sum(len(r["items"]) for r in rows)
    first = import_recenter(stage2_copy, db)
    assert _labels_of(db, LLM, STAGE2) == full
    n_full, judged_full = _judge_n(db)
    assert judged_full == full

    kept = rows[: len(rows) // 2]
    short = sum(len(r["items"]) for r in kept)
    _write_rows(llm_file, kept)
    again = import_recenter(stage2_copy, db)

    assert _labels_of(db, LLM, STAGE2) == short < full
    # The report now counts exactly the shortened file's labels.
    n_short, judged_short = _judge_n(db)
    assert judged_short == short and n_short < n_full
    assert first.written["labels"].inserted == _labels_of(db, LLM, STAGE2) + (full - short) + (
        _labels_of(db, "human_majority", STAGE2) + _labels_of(db, "google_gemma-4-31b-it", STAGE2)
        + _labels_of(db, PIPELINE_RATER, STAGE2))
    labels = again.written["labels"]
    assert labels.removed == full - short
    assert labels.inserted == 0 and labels.updated == 0
    assert labels.unchanged == (_labels_of(db, LLM, STAGE2) + _labels_of(db, "human_majority", STAGE2)
                                + _labels_of(db, "google_gemma-4-31b-it", STAGE2)
                                + _labels_of(db, PIPELINE_RATER, STAGE2))
    assert f"{full - short:,} removed" in again.render()
    cov = {c.rater: c for c in again.coverage if c.dataset == STAGE2}
    assert cov[LLM].llm_pairs == short


def test_unchanged_reimport_says_unchanged(stage2_copy: Path, tmp_path: Path) -> None:
    db = tmp_path / "db.duckdb"
    args = ["import", "recenter", str(stage2_copy), "--db", str(db)]
    first = CliRunner().invoke(cli, args)
    assert first.exit_code == 0, first.output
    assert "inserted" in first.stdout
    again = CliRunner().invoke(cli, args)
    assert again.exit_code == 0, again.output
    assert "database: unchanged" in again.stdout
    assert "written:" not in again.stdout and "inserted" not in again.stdout
    con = duckdb.connect(str(db), read_only=True)
    n_labels = con.execute("SELECT count(*) FROM labels").fetchall()[0][0]
    con.close()
    assert f"{n_labels:,} labels" in again.stdout


def test_changed_label_is_updated_not_duplicated(stage2_copy: Path, tmp_path: Path) -> None:
    db = tmp_path / "db.duckdb"
    import_recenter(stage2_copy, db)
    llm_file = stage2_copy / "stage2" / "llm_relevance" / f"{LLM}.jsonl"
    rows = _rows(llm_file)
    item = rows[0]["items"][0]
    item["relevant"] = not item["relevant"] if item["relevant"] is not None else True
    _write_rows(llm_file, rows)
    again = import_recenter(stage2_copy, db)
    assert again.written["labels"].updated == 1
    assert again.written["labels"].inserted == 0 and again.written["labels"].removed == 0
    assert again.written["runs"].updated == 1  # the file's hash changed, its run row records it


def test_lost_task6_row_removes_its_response_item(stage2_copy: Path, tmp_path: Path) -> None:
    db = tmp_path / "db.duckdb"
    import_recenter(stage2_copy, db)
    task6 = stage2_copy / "stage2" / "task6_items.jsonl"
    rows = _rows(task6)
    _write_rows(task6, rows[:-1])
    again = import_recenter(stage2_copy, db)
    # The row's generic-vs-personalised answer pair is gone; the prompt's human labels stay if another
    # model_tag row of the same prompt repeats them.
    last = rows[-1]
    repeated = any(r["prompt_id"] == last["prompt_id"] for r in rows[:-1])
    assert again.written["items"].removed == 1
    assert again.written["labels"].removed == (0 if repeated else len(last["attributes"]))
    con = duckdb.connect(str(db), read_only=True)
    n = con.execute("SELECT count(*) FROM items WHERE stage = 'response' AND dataset = ?", [STAGE2]).fetchall()[0][0]
    con.close()
    assert n == len(rows) - 1


def test_byte_identical_files_under_two_names_are_two_runs(shared_data: Path, tmp_path: Path) -> None:
    source = shared_data / "prism_judge" / "prism_all_features_key_features_gpt-4o.jsonl"
    folder = tmp_path / "prism"
    folder.mkdir()
    shutil.copy(source, folder / source.name)
    shutil.copy(source, folder / "prism_all_features_key_features_gpt-4o-rerun.jsonl")
    db = tmp_path / "db.duckdb"
    import_prism(folder, db)
    result = import_prism(folder, db)  # the crash came on the second import
    con = duckdb.connect(str(db), read_only=True)
    runs = con.execute("SELECT run_id, rater FROM runs ORDER BY rater").fetchall()
    by_rater = dict(con.execute("SELECT rater, count(*) FROM labels WHERE rater_kind = 'llm' GROUP BY ALL").fetchall())
    con.close()
    assert len(runs) == 2 and runs[0][0] != runs[1][0]
    n = len(_rows(source))
    assert by_rater == {"gpt-4o": n, "gpt-4o-rerun": n}
    assert result.batch.written is not None and not result.batch.written.changed


def test_reimporting_one_file_keeps_the_other_files_labels(shared_data: Path, tmp_path: Path) -> None:
    folder = tmp_path / "prism"
    shutil.copytree(shared_data / "prism_judge", folder)
    db = tmp_path / "db.duckdb"
    import_prism(folder, db)
    con = duckdb.connect(str(db), read_only=True)
    before = con.execute("SELECT count(*) FROM labels").fetchall()[0][0]
    con.close()
    one = folder / "prism_no_persona_command-r-plus_new.jsonl"
    rows = _rows(one)
    _write_rows(one, rows[:-10])
    again = import_prism(one, db)
    con = duckdb.connect(str(db), read_only=True)
    after = con.execute("SELECT count(*) FROM labels").fetchall()[0][0]
    con.close()
    assert again.batch.written is not None
    removed = again.batch.written["labels"].removed
    # Ten judge answers go; a participant's label goes too only where no other file held that pair.
    assert removed >= 10 and after == before - removed


def test_shortened_extraction_file_removes_its_items(tmp_path: Path) -> None:
    """Items only the removed row's labels referred to are removed with them; shared ones stay."""
    files = IMPORTERS["extraction"].build()
    root = write_release(tmp_path / "x", files)
    db = tmp_path / "db.duckdb"
    from personagap.stages.extraction import import_extraction

    import_extraction(root, db)
    files["ours.jsonl"] = files["ours.jsonl"][:1]
    write_release(root, files)
    result = import_extraction(root, db)
    written = result.batch.written
    assert written is not None
    assert written["labels"].removed == 2  # the row's verdict and its extractor answer
    # The lost row's attribute, chunk, conversation and gold: no other row or label refers to them.
    assert written["items"].removed == 4
    assert written["users"].removed == 1
    assert "removed" in result.render()
    con = duckdb.connect(str(db), read_only=True)
    users = con.execute("SELECT DISTINCT user_id FROM items ORDER BY ALL").fetchall()
    con.close()
    assert users == [("u0",)]


def test_shortened_laps_file_removes_its_sessions_and_gold(shared_data: Path, tmp_path: Path) -> None:
    source = shared_data / "laps" / "movie_dataset_val.json"
    workers = json.loads(source.read_text(encoding="utf-8"))
    copy = tmp_path / source.name
    copy.write_text(json.dumps(workers), encoding="utf-8")
    db = tmp_path / "db.duckdb"
    from personagap.stages.extraction import import_laps

    first = import_laps(copy, db)
    dropped = workers[-1]
    copy.write_text(json.dumps(workers[:-1]), encoding="utf-8")
    again = import_laps(copy, db)
    assert again.batch.written is not None
    lost_gold = len({(c, v.strip()) for s in dropped["sessions"] for c, vs in s["preferences"].items() for v in vs})
    lost = len(dropped["sessions"]) + lost_gold
    assert again.batch.written["items"].removed == lost
    con = duckdb.connect(str(db), read_only=True)
    n_items = con.execute("SELECT count(*) FROM items WHERE dataset = 'laps'").fetchall()[0][0]
    con.close()
    assert n_items == len(first.batch.items) - lost == len(again.batch.items)


def test_write_batch_contract_for_other_importers(tmp_path: Path) -> None:
    """The contract the generic `import labels` relies on: runs own their labels; absent ones go."""
    from datetime import datetime

    from personagap.records import Item, Label, Run

    def batch(labels: list[str]) -> ImportBatch:
        b = ImportBatch()
        b.runs.append(Run(run_id="import-own", kind="import", source="own.jsonl", started_at=datetime(2026, 1, 1)))
        for name in labels:
            b.items[name] = Item(item_id=name, dataset="d", stage="relevance", user_id="u")
            b.labels.append(Label(item_id=name, rater="r", rater_kind="human", label="yes", run_id="import-own"))
        return b

    db = tmp_path / "db.duckdb"
    assert write_batch(db, batch(["a", "b", "c"]))["labels"].inserted == 3
    summary = write_batch(db, batch(["a", "c"]))
    assert (summary["labels"].removed, summary["labels"].unchanged, summary["items"].removed) == (1, 2, 1)
    assert not write_batch(db, batch(["a", "c"])).changed


def test_file_deleted_from_the_release_folder_goes_with_its_rows(stage2_copy: Path, tmp_path: Path) -> None:
    db = tmp_path / "db.duckdb"
    import_recenter(stage2_copy, db)
    gone = stage2_copy / "stage2" / "llm_relevance" / "google_gemma-4-31b-it.jsonl"
    n = sum(len(r["items"]) for r in _rows(gone))
    assert _labels_of(db, "google_gemma-4-31b-it", STAGE2) == n
    gone.unlink()
    again = import_recenter(stage2_copy, db)
    assert _labels_of(db, "google_gemma-4-31b-it", STAGE2) == 0
    assert again.written["labels"].removed == n and again.written["runs"].removed == 1
    assert again.written.gone == [str(gone)] and "no longer in the folder" in again.render()
    # (Importing one file of a folder on its own removes nothing of the others: see the PRISM test above.)
