"""A release's identity is the release, not the folder it lies in (issue 20, defect 6).

The real Re-Centering release is imported, then a copy of it in a tmp folder (never in the repository)
whose ``gpt-5.4.jsonl`` was cut to 10 rows: the store and the report follow the copy. Expected counts
are recounted from the files themselves.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import duckdb
import pytest

from personagap.api import import_recenter, report_relevance
from personagap.human_data import recenter, recenter_build
from personagap.human_data._jsonl import Release, import_run, run_id_for
from personagap.human_data.recenter import STAGE2
from tests.support.release_builders import IMPORTERS, write_release

LLM = "gpt-5.4"
KEPT = 10


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _cut(path: Path, n: int) -> int:
    """Keep the first ``n`` rows of a JSONL file; returns how many (prompt, attribute) pairs they label."""
    rows = _rows(path)[:n]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return sum(len(r["items"]) for r in rows)


def _count(db: Path, sql: str, params: list[object]) -> int:
    with duckdb.connect(str(db), read_only=True) as con:
        return int(con.execute(sql, params).fetchall()[0][0])


def _labels(db: Path, rater: str) -> int:
    return _count(db, "SELECT count(*) FROM labels l JOIN items i USING (item_id) WHERE l.rater = ? AND i.dataset = ?",
                  [rater, STAGE2])


def _report_pairs(db: Path) -> int:
    """Pairs the stage-2 report counts for the LLM: compared + failures + unmatched."""
    report = report_relevance(db).to_json_dict()
    rows = [j for j in report["judges"] if j["judge"] == LLM and j["dataset"] == STAGE2]
    assert len(rows) == 1, rows
    return int(rows[0]["n"] + rows[0]["failures"] + rows[0]["unmatched"])


@pytest.fixture
def moved_copy(shared_data: Path, tmp_path: Path) -> tuple[Path, int]:
    """A copy of the release elsewhere whose LLM file holds only its first rows, and those rows' pair count."""
    root = tmp_path / "elsewhere" / "recenter"
    for part in ("stage2", "stage3_responses", "pilot"):
        shutil.copytree(shared_data / "recenter" / part, root / part)
    return root, _cut(root / "stage2" / "llm_relevance" / f"{LLM}.jsonl", KEPT)


@pytest.mark.slow
def test_reimport_from_another_folder_replaces_the_release(shared_data: Path, moved_copy: tuple[Path, int],
                                                          tmp_path: Path) -> None:
    copy, short = moved_copy
    full = sum(len(r["items"]) for r in _rows(shared_data / "recenter" / "stage2" / "llm_relevance" / f"{LLM}.jsonl"))
    db = tmp_path / "db.duckdb"
    import_recenter(shared_data / "recenter", db)
    assert _labels(db, LLM) == full
    runs = _count(db, "SELECT count(*) FROM runs", [])

    again = import_recenter(copy, db)

    assert _labels(db, LLM) == short < full
    assert _report_pairs(db) == short
    assert again.written["labels"].removed == full - short
    # The copy's files are the same runs as the original's: replaced, not added beside them.
    assert _count(db, "SELECT count(*) FROM runs", []) == runs
    assert again.written["runs"].inserted == 0


@pytest.mark.slow
def test_store_written_with_path_identities_follows_a_moved_release(
        shared_data: Path, moved_copy: tuple[Path, int], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A store written before releases had identities (runs named by absolute path) is migrated by the import."""
    copy, short = moved_copy
    db = tmp_path / "db.duckdb"
    with monkeypatch.context() as m:
        # What earlier PersonaGap wrote: run ids from the absolute path, no release identity, no release scope.
        m.setattr(recenter_build, "import_run", lambda path, data, rater, parameters=None, *, release=None:
                  import_run(path, data, rater, parameters))
        m.setattr(recenter.Release, "scope", property(lambda self: "\x00none"))
        import_recenter(shared_data / "recenter", db)
    legacy = _count(db, "SELECT count(*) FROM runs WHERE json_extract_string(parameters, '$.release') IS NULL", [])
    assert legacy == _count(db, "SELECT count(*) FROM runs", []) > 0

    import_recenter(copy, db)

    assert _labels(db, LLM) == short
    assert _report_pairs(db) == short
    assert _count(db, "SELECT count(*) FROM runs WHERE json_extract_string(parameters, '$.release') IS NULL", []) == 0


@pytest.mark.slow
def test_file_missing_from_the_moved_copy_goes(shared_data: Path, moved_copy: tuple[Path, int],
                                              tmp_path: Path) -> None:
    copy, _ = moved_copy
    other = copy / "stage2" / "llm_relevance" / "google_gemma-4-31b-it.jsonl"
    other.unlink()
    db = tmp_path / "db.duckdb"
    import_recenter(shared_data / "recenter", db)
    assert _labels(db, "google_gemma-4-31b-it") > 0
    again = import_recenter(copy, db)
    assert _labels(db, "google_gemma-4-31b-it") == 0
    assert again.written.gone == [str(shared_data / "recenter" / "stage2" / "llm_relevance" / other.name)]


def test_identity_is_the_place_in_the_release(tmp_path: Path) -> None:
    a = tmp_path / "a" / "recenter" / "stage2" / "llm_relevance" / "x.jsonl"
    b = tmp_path / "b" / "stage2" / "llm_relevance" / "x.jsonl"
    for path in (a, b):
        path.parent.mkdir(parents=True)
        path.write_text("{}\n", encoding="utf-8")
    ra, rb = Release.of("recenter", tmp_path / "a" / "recenter"), Release.of("recenter", tmp_path / "b")
    assert ra.identity(a) == rb.identity(b) == "recenter:stage2/llm_relevance/x.jsonl"
    assert run_id_for(a, ra) == run_id_for(b, rb) != run_id_for(a) != run_id_for(b)
    # Another adapter's file at the same place is another run.
    assert run_id_for(a, Release.of("laps", tmp_path / "a" / "recenter")) != run_id_for(a, ra)
    run = import_run(a, b"{}\n", None, release=ra)
    assert run.parameters["release"] == ra.identity(a) and run.parameters["path"] == str(a.resolve())


def test_team_files_are_told_apart_by_their_folder(tmp_path: Path) -> None:
    """Two teams' folders holding the same file name are two releases; a moved folder is the same one."""
    from personagap.stages.extraction import import_extraction

    files = IMPORTERS["extraction"].build()
    db = tmp_path / "db.duckdb"
    first = write_release(tmp_path / "one" / "team", files)
    import_extraction(first, db)
    labels = _count(db, "SELECT count(*) FROM labels", [])
    moved = write_release(tmp_path / "two" / "team", files | {"ours.jsonl": files["ours.jsonl"][:1]})
    result = import_extraction(moved, db)
    assert result.batch.written is not None and result.batch.written["labels"].removed == 2
    assert _count(db, "SELECT count(*) FROM labels", []) == labels - 2
    other = write_release(tmp_path / "two" / "rival", files)
    result = import_extraction(other, db)
    assert result.batch.written is not None and result.batch.written["labels"].removed == 0
