"""The generic label importer (issue 20): --categories holds for every item kind, 0/1 labels on a yes/no scale are
refused with one line, and user-given values (categories, dataset names) are bound as data, never SQL text."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb
import pandas as pd
import pytest
from click.testing import CliRunner

from personagap.cli import cli
from personagap.datasets import dataset_records
from personagap.human_data import DataError
from personagap.human_data.label_sources import label_sql as _label_sql
from personagap.human_data.labels import LabelSpec
from personagap.labels_api import import_labels, load_labels

NASTY = ("it's", "back\\slash", "100%", "a--b", "'); DROP TABLE labels; --")


def single_rows(labels: list[str]) -> list[dict[str, Any]]:
    return [{"item_id": f"item-{i}", "rater": "ann", "label": label, "response": f"Answer {i}."}
            for i, label in enumerate(labels)]


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text(pd.DataFrame(rows).to_json(orient="records", lines=True))
    return path


def test_categories_hold_for_single_responses(tmp_path: Path) -> None:
    """--categories yes,no refuses 'maybe' on a single response, as it does at stage 2 and for pairs."""
    path = write_jsonl(tmp_path / "single.jsonl", single_rows(["yes", "no", "maybe"]))
    result = CliRunner().invoke(cli, ["import", "labels", str(path), "--stage", "response", "--dataset", "team",
                                      "--categories", "yes,no", "--db", str(tmp_path / "t.duckdb")])
    assert result.exit_code == 2
    assert result.output.strip() == (f"{path}:3: field 'label': 'maybe' is outside the nominal scale "
                                     "(expected one of yes, no)")


def test_declared_yes_no_labels_are_stored_lower_case(tmp_path: Path) -> None:
    db = tmp_path / "t.duckdb"
    import_labels(pd.DataFrame(single_rows(["YES", "No"])), stage="response", dataset="team", db=db,
                  categories=["Yes", "No"])
    assert sorted(load_labels(db)["label"]) == ["no", "yes"]


@pytest.mark.parametrize("stage", ["relevance", "response"])
def test_zero_one_labels_on_a_yes_no_scale_are_refused_with_a_hint(tmp_path: Path, stage: str) -> None:
    rows = [{"item_id": "i1", "rater": "ann", "label": "yes"}, {"item_id": "i2", "rater": "ann", "label": 1}]
    path = write_jsonl(tmp_path / "labels.jsonl", rows)
    args = ["import", "labels", str(path), "--stage", stage, "--dataset", "team", "--db", str(tmp_path / "t.duckdb")]
    result = CliRunner().invoke(cli, args + (["--categories", "yes,no"] if stage == "response" else []))
    assert result.exit_code == 2
    (line,) = result.output.strip().splitlines()
    assert line.startswith(f"{path}:2: field 'label': '1' is outside the nominal scale (expected one of yes, no")
    assert line.endswith("0/1 labels are not read as no/yes: write yes/no, or import with --categories 0,1)")


def test_categories_and_dataset_names_are_bound_as_data(tmp_path: Path) -> None:
    """Quotes, backslashes, %, -- and an SQL statement in a category or a dataset name import as plain text."""
    db = tmp_path / "t.duckdb"
    dataset = "team's \"set\"; --"
    rows = [{"item_id": f"i{i}", "user_id": f"u{i}", "rater": "ann", "label": c.upper() if i % 2 else c,
             "prompt": "p", "attribute": f"attribute {i}"} for i, c in enumerate(NASTY)]
    import_labels(pd.DataFrame(rows), stage="relevance", dataset=dataset, db=db, categories=list(NASTY))
    frame = load_labels(db)
    assert sorted(frame["label"]) == sorted(NASTY) and set(frame["dataset"]) == {dataset}
    with duckdb.connect(str(db), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM labels").fetchone() == (len(NASTY),)
        record = dataset_records(con)[("relevance", dataset)]
    assert record.scale.categories == tuple(sorted(NASTY))
    # The label's SQL names no category: the values are bound, whatever they hold.
    sql = _label_sql(LabelSpec(stage="relevance", dataset=dataset, categories=NASTY))
    assert not any(c in sql for c in ("DROP TABLE", "100%", "back\\slash", "it''s"))
    with pytest.raises(DataError, match="'nope' is outside the nominal scale"):
        import_labels(pd.DataFrame([{"item_id": "x", "rater": "ann", "label": "nope"}]), stage="relevance",
                      dataset=dataset, db=db, categories=list(NASTY))


def test_the_record_is_stored_with_the_import(tmp_path: Path) -> None:
    db = tmp_path / "t.duckdb"
    import_labels(pd.DataFrame(single_rows(["yes", "no"])), stage="response", dataset="team", db=db,
                  question="Is it kind?", origin="synthetic")
    with duckdb.connect(str(db), read_only=True) as con:
        record = dataset_records(con)[("response", "team")]
    assert (record.declared, record.item_kind, record.question, record.origin) == (True, "single", "Is it kind?",
                                                                                   "synthetic")
    with pytest.raises(DataError, match="the question is empty"):
        import_labels(pd.DataFrame(single_rows(["yes"])), stage="response", dataset="team", db=db, question=" ")


def test_a_stage3_dataset_holds_one_item_kind(tmp_path: Path) -> None:
    """Its record holds one scale: pairs and single responses in one import are refused with one line."""
    rows = [{"item_id": f"p{i}", "rater": "ann", "label": "A", "response_a": "a", "response_b": "b"} for i in range(3)]
    rows.append({"item_id": "s1", "rater": "ann", "label": "yes", "response": "r"})
    path = write_jsonl(tmp_path / "mixed.jsonl", rows)
    result = CliRunner().invoke(cli, ["import", "labels", str(path), "--stage", "response", "--dataset", "mix",
                                      "--db", str(tmp_path / "t.duckdb")])
    assert result.exit_code == 2
    assert result.output.strip() == (f"{path}:4: field 'response': item 's1' is a single response but most items "
                                     "of dataset 'mix' are pairs: a dataset holds one item kind (import the others "
                                     "under another --dataset)")
