"""Issue 32 (import side): nothing wrong is accepted at ``personagap import labels``.

Each refusal runs through the CLI against a store that already holds a valid import: exit 2, one line on stderr
naming file, line and field, no traceback, and every table exactly as before. The label files are made up here
(not human judgments).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd
import pytest
from click.testing import CliRunner

from personagap.cli import cli
from personagap.human_data import DataError
from personagap.labels_api import import_labels
from tests.support.cli_checks import assert_one_line, snapshot

PAIR_HEADER = ["item_id", "user_id", "rater", "rater_kind", "label", "confidence", "confidence_scale",
               "response_a", "response_b"]


def write_csv(path: Path, header: list[str], rows: list[list[Any]]) -> Path:
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerows(rows)
    return path


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def run(*args: str) -> Any:
    return CliRunner().invoke(cli, list(args))


@pytest.fixture
def seeded(tmp_path: Path) -> Path:
    """A store holding one valid import, so "nothing was written" is checked against real rows."""
    db = tmp_path / "seed.duckdb"
    good = write_csv(tmp_path / "good.csv", PAIR_HEADER, [
        ["g1", "u1", "ann", "human", "A", "", "", "An answer.", "Another answer."],
        ["g1", "u1", "gpt", "llm", "A", "0.7", "0-1", "", ""]])
    result = run("import", "labels", str(good), "--stage", "response", "--dataset", "seed", "--db", str(db))
    assert result.exit_code == 0, result.output
    return db


def refused(db: Path, *args: str, expect: tuple[str, ...]) -> str:
    """Run ``import labels ARGS --db DB``: exit 2, one line holding ``expect``, the store unchanged."""
    before = snapshot(db)
    result = run("import", "labels", *args, "--db", str(db))
    line = assert_one_line(result.exit_code, result.stdout, result.stderr, result.exception, *expect)
    assert snapshot(db) == before
    return line


# --------------------------------------------------------------------------- 1. confidence outside its scale

@pytest.mark.parametrize(("confidence", "scale"), [("70", "0-1"), ("700", "1-100"), ("0", "1-5"), ("-0.1", "0-1"),
                                                   ("1.5", "probability")])
def test_a_confidence_outside_its_declared_scale_is_refused(seeded: Path, tmp_path: Path, confidence: str,
                                                            scale: str) -> None:
    bad = write_csv(tmp_path / "judge.csv", PAIR_HEADER, [
        ["i1", "u1", "ann", "human", "A", "", "", "Yes.", "No."],
        ["i1", "u1", "gpt", "llm", "A", "1", scale, "", ""],  # the top of 0-1, the bottom of the others
        ["i2", "u1", "ann", "human", "B", "", "", "Left.", "Right."],
        ["i2", "u1", "gpt", "llm", "B", confidence, scale, "", ""]])
    line = refused(seeded, str(bad), "--stage", "response", "--dataset", "judge",
                   expect=(f"{bad}:5: field 'confidence': ", f"'{confidence}' is outside its declared "
                                                             f"confidence_scale '{scale}'"))
    assert line == (f"{bad}:5: field 'confidence': '{confidence}' is outside its declared confidence_scale "
                    f"'{scale}' (fix the value or the row's confidence_scale)")


@pytest.mark.parametrize("scale", ["1 to 100", "100-1", "high", "5-5"])
def test_an_unreadable_confidence_scale_is_refused(seeded: Path, tmp_path: Path, scale: str) -> None:
    bad = write_jsonl(tmp_path / "judge.jsonl", [
        {"item_id": "i1", "rater": "ann", "label": "A", "response_a": "x", "response_b": "y"},
        {"item_id": "i1", "rater": "gpt", "rater_kind": "llm", "label": "A", "confidence": 3,
         "confidence_scale": scale}])
    refused(seeded, str(bad), "--stage", "response", "--dataset", "judge",
            expect=(f"{bad}:2: field 'confidence_scale': '{scale}' is not a confidence scale",))


def test_confidences_on_their_scale_are_stored(tmp_path: Path) -> None:
    ok = write_csv(tmp_path / "judge.csv", PAIR_HEADER, [
        ["i1", "u1", "ann", "human", "A", "", "", "Yes.", "No."],
        ["i1", "u1", "gpt", "llm", "A", "100", "1-100", "", ""],
        ["i2", "u1", "ann", "human", "B", "", "", "Left.", "Right."],
        ["i2", "u1", "gpt", "llm", "B", "1", "1-100", "", ""],
        ["i3", "u1", "ann", "human", "B", "", "", "Up.", "Down."],
        ["i3", "u1", "gpt", "llm", "B", "1234", "unstated", "", ""]])
    db = tmp_path / "ok.duckdb"
    import_labels(ok, stage="response", dataset="judge", db=db)


    with duckdb.connect(str(db), read_only=True) as con:
        metas = sorted(json.loads(m)["confidence"] for (m,) in con.execute(
            "SELECT meta FROM labels WHERE rater = 'gpt'").fetchall())
    assert metas == [1.0, 100.0, 1234.0]


# --------------------------------------------------------------------------- 6. a pair of two identical answers

def test_a_pair_with_two_identical_responses_is_refused(seeded: Path, tmp_path: Path) -> None:
    bad = write_jsonl(tmp_path / "pairs.jsonl", [
        {"item_id": "p1", "rater": "ann", "label": "A", "response_a": "Try a lentil stew.",
         "response_b": "Try a beef stew."},
        {"item_id": "p2", "rater": "ann", "label": "B", "prompt": "Dinner?", "response_a": "Try a lentil stew.",
         "response_b": "Try a lentil stew. "},  # the same answer once trimmed
        {"item_id": "p2", "rater": "gpt", "rater_kind": "llm", "label": "B"}])
    line = refused(seeded, str(bad), "--stage", "response", "--dataset", "pairs",
                   expect=(f"{bad}:2: field 'response_b': ",))
    assert line == (f"{bad}:2: field 'response_b': item 'p2' has the same text as its response_a (a pair needs two "
                    "different answers)")


def test_a_pair_whose_answers_differ_only_in_case_is_accepted(tmp_path: Path) -> None:
    ok = write_jsonl(tmp_path / "pairs.jsonl", [
        {"item_id": "p1", "rater": "ann", "label": "A", "response_a": "Yes.", "response_b": "YES."}])
    summary = import_labels(ok, stage="response", dataset="pairs", db=tmp_path / "ok.duckdb")
    assert summary.written["labels"].inserted == 1


# --------------------------------------------------------------------------- 9. errors that were not one line

def test_a_jsonl_key_given_twice_is_one_line_naming_the_key(seeded: Path, tmp_path: Path) -> None:
    bad = tmp_path / "dup.jsonl"
    bad.write_text('{"item_id": "i1", "rater": "ann", "label": "A", "response_a": "x", "response_b": "y"}\n'
                   '{"item_id": "i1", "rater": "gpt", "label": "B", "rater": "gpt-2"}\n', encoding="utf-8")
    line = refused(seeded, str(bad), "--stage", "response", "--dataset", "dup", expect=(f"{bad}:2: field 'rater': ",))
    assert line == (f"{bad}:2: field 'rater': is given twice in one JSON object (which value is meant is unclear: "
                    "keep one)")
    assert "JSON transform error" not in line


def test_a_dataframe_column_mixing_numbers_and_text_names_its_row_and_column(tmp_path: Path) -> None:
    db = tmp_path / "frame.duckdb"
    frame = pd.DataFrame({"item_id": ["a", "b", "c"], "rater": ["ann"] * 3, "label": ["yes", 1, "no"]},
                         index=[10, 11, 12])
    with pytest.raises(DataError) as caught:
        import_labels(frame, stage="relevance", dataset="mixed", db=db, source_name="team-frame")
    assert str(caught.value) == ("team-frame:row 11: field 'label': '1' is a number where row 10 holds text: a column "
                                 "holds one type (e.g. df['label'] = df['label'].astype(str))")
    assert not db.exists()  # nothing was written: the store was never opened
    frame = pd.DataFrame({"item_id": ["a", "b"], "rater": ["ann"] * 2, "label": ["yes", "no"],
                          "confidence": [None, "0.5"], "reason": [0.5, "fine"]})
    with pytest.raises(DataError, match=r"^dataframe:row 1: field 'reason': 'fine' is text where row 0 holds a "
                                        r"number: a column holds one type"):
        import_labels(frame, stage="relevance", dataset="mixed", db=db)


# --------------------------------------------------------------------------- 5. free text becoming a category

SINGLE = ["item_id", "rater", "rater_kind", "label", "response"]


def test_a_free_text_label_is_refused_unless_categories_are_declared(seeded: Path, tmp_path: Path) -> None:
    bad = write_csv(tmp_path / "ratings.csv", SINGLE, [
        ["s1", "ann", "human", "good", "Answer one."], ["s1", "gpt", "llm", "good", ""],
        ["s2", "ann", "human", "bad", "Answer two."], ["s2", "gpt", "llm", "N/A (the model refused to answer)", ""],
        ["s3", "ann", "human", "good", "Answer three."], ["s3", "gpt", "llm", "bad", ""]])
    line = refused(seeded, str(bad), "--stage", "response", "--dataset", "ratings",
                   expect=(f"{bad}:5: field 'label': ",))
    assert line == (f"{bad}:5: field 'label': 'N/A (the model refused to answer)' looks like free text, not a "
                    "category (it holds brackets): without --categories every distinct label becomes a category; "
                    "declare them with --categories (e.g. --categories bad,good)")
    # Declared, the set is the user's: the comment is now refused as off the scale, naming the same row.
    refused(seeded, str(bad), "--stage", "response", "--dataset", "ratings", "--categories", "good,bad",
            expect=(f"{bad}:5: field 'label': 'N/A (the model refused to answer)' is outside the nominal scale",))


def test_more_distinct_labels_than_a_scale_holds_are_refused_naming_the_option(seeded: Path, tmp_path: Path) -> None:
    rows = [[f"s{i}", "ann", "human", f"code-{i}", f"Answer {i}."] for i in range(15)]
    bad = write_csv(tmp_path / "codes.csv", SINGLE, rows)
    line = refused(seeded, str(bad), "--stage", "response", "--dataset", "codes",
                   expect=(f"{bad}:14: field 'label': ",))
    assert line == (f"{bad}:14: field 'label': 'code-12' is distinct label 13: more than 12 categories is no "
                    "plausible nominal scale; if they are categories, declare them with --categories (or use --scale "
                    "ordinal for numbers)")
    db = tmp_path / "codes.duckdb"
    result = run("import", "labels", str(bad), "--stage", "response", "--dataset", "codes", "--db", str(db),
                 "--categories", ",".join(f"code-{i}" for i in range(15)))
    assert result.exit_code == 0, result.output
    assert "inferred from the labels" not in result.output


def test_the_inferred_categories_are_printed_at_import(tmp_path: Path) -> None:
    ok = write_csv(tmp_path / "ratings.csv", SINGLE, [
        ["s1", "ann", "human", "good", "Answer one."], ["s2", "ann", "human", "N/A", "Answer two."],
        ["s3", "ann", "human", "bad", "Answer three."], ["s3", "gpt", "llm", "good", ""]])
    result = run("import", "labels", str(ok), "--stage", "response", "--dataset", "ratings", "--db",
                 str(tmp_path / "ok.duckdb"))
    assert result.exit_code == 0, result.output
    assert "  categories (inferred from the labels; --categories fixes them): N/A, bad, good\n" in result.output
    pairs = write_jsonl(tmp_path / "pairs.jsonl", [
        {"item_id": "p1", "rater": "ann", "label": "A", "response_a": "x", "response_b": "y"}])
    result = run("import", "labels", str(pairs), "--stage", "response", "--dataset", "pairs", "--db",
                 str(tmp_path / "ok.duckdb"))
    assert result.exit_code == 0 and "inferred from the labels" not in result.output  # pairs are always A/B/tie
