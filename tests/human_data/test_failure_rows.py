"""Issue 32, item 10: a judge's failure in the bring-your-own label format (a row with a ``failure``, no label).

A failure row is stored as a judge run stores a failure (label NULL, the reason in ``labels.error``), so the reports
count it under ``failures`` / ``fail`` as they count failures of judges run here. A row with neither a label nor a
failure, or with both, is refused in one line naming file, line and field, and nothing is written. The files are
made up here (not human judgments).
"""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pandas as pd
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from personagap.cli import cli
from personagap.human_data import DataError
from personagap.human_data.labels import LabelSpec, Source, load_label_sources
from tests.human_data.test_import_refusals import PAIR_HEADER, refused, seeded, write_csv, write_jsonl

__all__ = ["seeded"]  # the fixture, imported for the refusal tests

FAILURE_HEADER = [*PAIR_HEADER, "failure"]


def _run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout


def _pairs_with_failures(path: Path) -> Path:
    """Three pairs; judge ``gpt`` answers one and fails two (one unparseable, one refused)."""
    return write_csv(path, FAILURE_HEADER, [
        ["p1", "u1", "ann", "human", "A", "", "", "A short answer.", "A long answer.", ""],
        ["p1", "u1", "gpt", "llm", "", "", "", "", "", "unparseable: answer '[' is not A, B or tie"],
        ["p2", "u2", "ann", "human", "B", "", "", "Left.", "Right.", ""],
        ["p2", "u2", "gpt", "llm", "B", "0.8", "0-1", "", "", ""],
        ["p3", "u3", "ann", "human", "A", "", "", "Yes.", "No.", ""],
        ["p3", "u3", "gpt", "llm", "", "", "", "", "", "refused"]])


def test_failure_rows_are_judge_failures_in_report_response(tmp_path: Path) -> None:
    db = tmp_path / "f.duckdb"
    code, out = _run("import", "labels", str(_pairs_with_failures(tmp_path / "judge.csv")), "--stage", "response",
                     "--dataset", "byo", "--db", str(db))
    assert code == 0, out
    code, out = _run("report", "response", "--db", str(db), "--json")
    assert code == 0, out
    rows = [j for j in json.loads(out)["judges"] if j["judge"] == "gpt"]
    assert len(rows) == 1
    assert rows[0]["failures"] == 2
    assert rows[0]["failure_reasons"] == {"refused": 1, "unparseable": 1}
    assert rows[0]["n"] == 1  # the one parsed answer; failures are never labels
    code, text = _run("report", "response", "--db", str(db))
    line = next(t for t in text.splitlines() if t.startswith("gpt "))
    header = next(t for t in text.splitlines() if t.startswith("judge ") and " fail " in t)
    # The 'fail' column of the judge's row holds 2.
    end = header.index(" fail ") + len(" fail")
    assert line[:end].split()[-1] == "2", (header, line)
    # Stored as a judge run stores a failure: label NULL, the reason in labels.error, no raw answer.
    con = duckdb.connect(str(db), read_only=True)
    try:
        stored = con.sql("SELECT label, error, raw FROM labels WHERE rater = 'gpt' AND label IS NULL "
                         "ORDER BY error").fetchall()
    finally:
        con.close()
    assert stored == [(None, "refused", None), (None, "unparseable: answer '[' is not A, B or tie", None)]


def test_failure_rows_count_in_report_relevance(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "rel.jsonl", [
        {"item_id": "i1", "rater": "ann", "label": "yes", "prompt": "Plan a trip.", "attribute": "Has a dog."},
        {"item_id": "i1", "rater": "gpt", "rater_kind": "llm", "failure": "unparseable: maybe"},
        {"item_id": "i2", "rater": "ann", "label": "no", "prompt": "Plan a trip.", "attribute": "Likes tea."},
        {"item_id": "i2", "rater": "gpt", "rater_kind": "llm", "label": "no"}])
    db = tmp_path / "r.duckdb"
    code, out = _run("import", "labels", str(path), "--stage", "relevance", "--dataset", "rel", "--db", str(db))
    assert code == 0, out
    code, out = _run("report", "relevance", "--db", str(db), "--json")
    assert code == 0, out
    (row,) = [j for j in json.loads(out)["judges"] if j["judge"] == "gpt"]
    assert (row["failures"], row["failure_reasons"], row["n"]) == (1, {"unparseable": 1}, 1)


@pytest.mark.parametrize(("label", "failure", "field", "text"), [
    ("", "", "label", "missing or empty (required: a label, or a 'failure' reason when a judge gave no usable answer)"),
    ("A", "refused", "failure", "'refused' is given with label 'A': a row is a label or a judge's failure, not both"),
])
def test_a_row_with_neither_or_both_is_refused_naming_file_line_and_field(
        seeded: Path, tmp_path: Path, label: str, failure: str, field: str, text: str) -> None:
    bad = write_csv(tmp_path / "judge.csv", FAILURE_HEADER, [
        ["i1", "u1", "ann", "human", "A", "", "", "Yes.", "No.", ""],
        ["i1", "u1", "gpt", "llm", label, "", "", "", "", failure]])
    refused(seeded, str(bad), "--stage", "response", "--dataset", "judge",
            expect=(f"{bad}:3: field '{field}': {text}",))


def test_a_failure_of_a_person_is_refused(seeded: Path, tmp_path: Path) -> None:
    bad = write_csv(tmp_path / "team.csv", FAILURE_HEADER, [
        ["i1", "u1", "ann", "human", "", "", "", "Yes.", "No.", "no time"]])
    refused(seeded, str(bad), "--stage", "response", "--dataset", "team",
            expect=(f"{bad}:2: field 'failure': rater 'ann' is human: only a judge's row (rater_kind llm or trained) "
                    "can be a failure",))


# --------------------------------------------------------------------------- the row rule, as a property

label_cell = st.sampled_from(["", " ", "A", "B", "tie"])
failure_cell = st.sampled_from(["", " ", "refused", " unparseable: x "])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(label=label_cell, failure=st.one_of(st.none(), failure_cell),
       kind=st.sampled_from(["llm", "trained", "human", "system"]))
def test_a_row_is_accepted_exactly_when_it_gives_a_label_or_a_judges_failure(label: str, failure: str | None,
                                                                             kind: str) -> None:
    frame = pd.DataFrame([
        {"item_id": "i1", "rater": "ann", "rater_kind": "human", "label": "A", "response_a": "x", "response_b": "y",
         "failure": None},
        {"item_id": "i1", "rater": "r", "rater_kind": kind, "label": label, "response_a": None, "response_b": None,
         "failure": failure}])
    has_label, has_failure = label.strip() != "", failure is not None and failure.strip() != ""
    source = Source(name="frame", kind="frame", frame=frame)
    spec = LabelSpec(stage="response", dataset="p")
    if has_label == has_failure:
        field = "failure" if has_label else "label"
        with pytest.raises(DataError, match=rf"^frame:row 1: field '{field}': "):
            load_label_sources([source], spec).close()
    elif has_failure and kind not in ("llm", "trained"):
        with pytest.raises(DataError, match=r"^frame:row 1: field 'failure': rater 'r' is "):
            load_label_sources([source], spec).close()
    else:
        with load_label_sources([source], spec) as result:
            rows = result.con.sql(f"SELECT rater, label, error FROM {result.tables['labels']!s} ORDER BY rater"
                                  ).fetchall()
        mine = ("r", label.strip(), None) if has_label else ("r", None, (failure or "").strip())
        assert rows == [("ann", "A", None), mine]


def test_an_item_of_only_failures_is_a_pair_when_it_gives_its_answers(seeded: Path, tmp_path: Path) -> None:
    """Its shape cannot come from labels it does not have: with its response text it imports, without it is named."""
    rows = [["p1", "u1", "ann", "human", "A", "", "", "Yes.", "No.", ""],
            ["p1", "u1", "gpt", "llm", "A", "", "", "", "", ""]]
    bad = write_csv(tmp_path / "bare.csv", FAILURE_HEADER, [*rows, ["p2", "u2", "gpt", "llm", "", "", "", "", "",
                                                                     "refused"]])
    refused(seeded, str(bad), "--stage", "response", "--dataset", "judge",
            expect=(f"{bad}:4: field 'response_a': item 'p2' holds only failures and no response text",))
    good = write_csv(tmp_path / "good.csv", FAILURE_HEADER, [*rows, ["p2", "u2", "gpt", "llm", "", "", "", "Left.",
                                                                      "Right.", "refused"]])
    db = tmp_path / "g.duckdb"
    assert _run("import", "labels", str(good), "--stage", "response", "--dataset", "g", "--db", str(db))[0] == 0
    code, out = _run("report", "response", "--db", str(db), "--json")
    (row,) = [j for j in json.loads(out)["judges"] if j["judge"] == "gpt"]
    assert (row["n"], row["failures"]) == (1, 1)
