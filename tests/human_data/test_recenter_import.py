"""The Re-Centering adapter on the real release, and on a corpus of malformed releases."""

from __future__ import annotations

import gc
import json
import shutil
from pathlib import Path

import duckdb
import pytest

from personagap.analysis.comparable import ANCHORED_MAJORITY, CONVERTED_SHOWN_LLM
from personagap.api import import_recenter
from personagap.human_data import DataError, load_recenter
from personagap.human_data.recenter import PILOT, STAGE2
from personagap.records import item_id
from tests.support.paths import FIXTURES

BAD = FIXTURES / "recenter_bad"
EXPECTED_ERRORS = json.loads((BAD / "expected.json").read_text())


def _counts(db: Path) -> dict[str, int]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return {t: con.execute(f"SELECT count(*) FROM {t}").fetchall()[0][0]
                for t in ("runs", "users", "attributes", "prompts", "items", "labels")}
    finally:
        con.close()


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.slow
def test_stage2_counts_and_join_coverage_match_the_files(shared_data: Path) -> None:
    root = shared_data / "recenter"
    result = load_recenter(root)
    task5 = _jsonl(root / "stage2/task5_items.jsonl")
    task6 = _jsonl(root / "stage2/task6_items.jsonl")
    # Independent count of the human-labelled pairs straight from task6.
    human_pairs = {(r["user_id"], r["prompt_id"], a["attribute"]) for r in task6 for a in r["attributes"]}
    profile_pairs = sum(len(r["profile_attributes"]) for r in task5)
    labels = list(result.batch.label_columns.rows())
    majority = [lab for lab in labels if lab.rater == "human_majority"
                and result.batch.items[lab.item_id].dataset == STAGE2]
    assert len(majority) == len(human_pairs)
    assert sum(1 for i in result.batch.items.values() if i.dataset == STAGE2 and i.stage == "relevance") \
        == profile_pairs
    cov = {(c.dataset, c.rater): c for c in result.coverage}
    for name in ("gpt-5.4", "google_gemma-4-31b-it"):
        llm_rows = _jsonl(root / f"stage2/llm_relevance/{name}.jsonl")
        llm_pairs = {(r["user_id"], f"{r['user_id']}_{r['prompt_index']}", i["attribute"])
                     for r in llm_rows for i in r["items"]}
        c = cov[(STAGE2, name)]
        assert c.llm_pairs == len(llm_pairs)
        assert c.matched == len(llm_pairs & human_pairs)
        assert c.human_only == len(human_pairs - llm_pairs)


def test_pilot_is_imported_per_annotator(shared_data: Path) -> None:
    result = load_recenter(shared_data / "recenter")
    items = result.batch.items
    pilot_labels = [lab for lab in result.batch.label_columns.rows() if items[lab.item_id].dataset == PILOT]
    task3_raters = {lab.rater for lab in pilot_labels if lab.rater_kind == "human" and lab.condition == ""
                    and result.batch.items[lab.item_id].stage == "relevance"}
    # annotator_12 left every judgment null: it must not appear as a rater, and the skip is reported.
    assert "annotator_12" not in task3_raters
    assert any("annotator_12_task3" in p for p in result.unanswered)
    # Only annotator_08's task-3 rows are blind; 06, 07, 09 and 10 copied their task-2 (LLM-anchored) labels.
    assert task3_raters == {"annotator_08"}
    converted = {lab.rater for lab in pilot_labels if lab.condition == CONVERTED_SHOWN_LLM}
    assert converted == {"annotator_06", "annotator_07", "annotator_09", "annotator_10"}
    stage1 = [lab for lab in pilot_labels if result.batch.items[lab.item_id].stage == "extraction"]
    expected = sum(len(r["attr_judgments"]) for f in (shared_data / "recenter/pilot/annotations").glob("*_task1.jsonl")
                   for r in _jsonl(f))
    assert len(stage1) == expected
    assert {lab.label for lab in stage1} <= {"ok", "bad", "unsure"}
    shown = [lab for lab in pilot_labels if lab.condition == "shown-llm"]
    assert shown and all(lab.label in ("yes", "no") for lab in shown)


def test_reimport_is_idempotent(shared_data: Path, tmp_path: Path) -> None:
    db = tmp_path / "x.duckdb"
    import_recenter(shared_data / "recenter", db)
    first = _counts(db)
    import_recenter(shared_data / "recenter", db)
    assert _counts(db) == first
    con = duckdb.connect(str(db), read_only=True)
    dupes = con.execute("SELECT count(*) FROM (SELECT item_id, rater, condition FROM labels "
                        "GROUP BY ALL HAVING count(*) > 1)").fetchall()[0][0]
    con.close()
    assert dupes == 0


@pytest.mark.parametrize("case", sorted(EXPECTED_ERRORS))
def test_malformed_release_names_file_line_and_field(case: str) -> None:
    with pytest.raises(DataError) as info:
        load_recenter(BAD / case)
    assert EXPECTED_ERRORS[case] in str(info.value)


@pytest.mark.parametrize("case", ["duplicate_label", "attribute_not_in_profile", "unknown_rating"])
def test_failed_import_writes_nothing(case: str, tmp_path: Path) -> None:
    db = tmp_path / "x.duckdb"
    good = tmp_path / "good"
    shutil.copytree(BAD / "missing_field", good)
    # Repair the one broken line so that "good" imports, then try a bad release on top.
    rows = _jsonl(good / "stage2/task6_items.jsonl")
    rows[1]["user_id"] = "u1"
    (good / "stage2/task6_items.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    import_recenter(good, db)
    before = _counts(db)
    assert gc.isenabled()
    with pytest.raises(DataError):
        import_recenter(BAD / case, db)
    assert _counts(db) == before
    assert gc.isenabled()  # imports pause the cyclic GC and restore it, also when they fail


def test_not_a_release(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="not a Re-Centering release"):
        load_recenter(tmp_path)


def test_pilot_majorities_ties_undecided_and_anchored_votes(shared_data: Path) -> None:
    """Defect 5 on the real pilot: ties give no majority; majorities resting on anchored votes are not blind."""
    pilot = shared_data / "recenter" / "pilot"
    clf = _jsonl(pilot / "task3_relevance_clf.jsonl")
    user_of = {r["sample_index"]: r["user_id"] for f in (pilot / "llm_relevance").glob("*.jsonl") for r in _jsonl(f)}
    # Blind votes straight from the files: task-3 rows without the converted note, answered judgments only.
    blind: dict[tuple[str, int, str], int] = {}
    converted = 0
    for f in (pilot / "annotations").glob("*_task3.jsonl"):
        for r in _jsonl(f):
            is_converted = "[converted from task2]" in (r.get("note") or "")
            for j in r["relevance_judgments"]:
                if j.get("relevant") is None:
                    continue
                if is_converted:
                    converted += 1
                else:
                    key = (r["user_id"], r["prompt_index"], j["attribute"])
                    blind[key] = blind.get(key, 0) + 1
    ties = [r for r in clf if r["n_annotators"] * r["human_yes_rate"] * 2 == r["n_annotators"]]
    anchored = [r for r in clf if r not in ties
                and blind.get((user_of[r["sample_index"]], r["prompt_index"], r["attribute"]), 0) < r["n_annotators"]]

    result = load_recenter(shared_data / "recenter")
    clf_file = str(pilot / "task3_relevance_clf.jsonl")
    assert result.undecided == {clf_file: len(ties)} and len(ties) == 42
    assert sum(result.converted.values()) == converted == 620
    assert result.anchored_majorities == {clf_file: len(anchored)}
    majority = [lab for lab in result.batch.label_columns.rows()
                if lab.rater == "human_majority" and result.batch.items[lab.item_id].dataset == PILOT]
    assert len(majority) == len(clf) - len(ties)
    assert sum(lab.condition == ANCHORED_MAJORITY for lab in majority) == len(anchored)
    assert all(lab.condition in ("", ANCHORED_MAJORITY) for lab in majority)
    tie_items = {item_id(PILOT, "relevance", user_of[r["sample_index"]], r["prompt_index"], r["attribute"])
                 for r in ties}
    assert tie_items <= set(result.batch.items)
    assert not tie_items & {lab.item_id for lab in majority}
