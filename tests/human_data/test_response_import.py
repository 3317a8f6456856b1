"""Stage-3 adapters and report on the real PRISM / USR releases, the PersonaFeedback fixture and malformed files."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import duckdb
import krippendorff
import numpy as np
import pytest
from click.testing import CliRunner

from personagap.cli import cli
from personagap.human_data import DataError
from personagap.human_data.personafeedback import load_personafeedback
from personagap.human_data.prism import load_prism
from personagap.human_data.usr import load_usr
from personagap.stages import response as stage
from tests.support.paths import FIXTURES

FIXTURES = FIXTURES
BAD = FIXTURES / "response_bad"


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


@pytest.fixture(scope="session")
def response_db(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("response") / "response.duckdb"
    stage.import_prism(shared_data / "prism_judge", db)
    stage.import_usr(shared_data / "usr_personachat" / "pc_usr_data.json", db)
    return db


@pytest.fixture(scope="session")
def report(response_db: Path) -> dict:
    result = CliRunner().invoke(cli, ["report", "response", "--db", str(response_db), "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def _expected(path: Path) -> dict:
    """Recompute a judge file's figures straight from its rows, independently of the adapter."""
    rows = _rows(path)
    tie = "_with_tie_" in path.name
    valid = ("A", "B", "C") if tie else ("A", "B")
    parsed = [r for r in rows if r["answer"] in valid]
    decisive = [r for r in parsed if r["answer"] in ("A", "B")]
    unequal = [r for r in decisive if len(r["asst_A"]) != len(r["asst_B"])]
    longer = [r for r in unequal if (r["answer"] == "A") == (len(r["asst_A"]) > len(r["asst_B"]))]
    return {
        "n": len(parsed), "failures": len(rows) - len(parsed),
        "accuracy": sum(r["acc"] for r in parsed) / len(parsed),
        "accuracy_failures_as_wrong": sum(r["acc"] for r in rows) / len(rows),
        "first_position_rate": sum(r["answer"] == "A" for r in decisive) / len(decisive),
        "longer_rate": len(longer) / len(unequal),
        "always_a_accuracy": sum(r["ground_truth"] == "A" for r in parsed) / len(parsed),
    }


PRISM_FILES = {
    "prism_all_features_command-r-plus.jsonl": "command-r-plus [all-features]",
    "prism_all_features_key_features_command-r-plus.jsonl": "command-r-plus [key-features]",
    "prism_all_features_key_features_gpt-4o.jsonl": "gpt-4o [key-features]",
    "prism_all_features_with_tie_all_features_command-r-plus.jsonl": "command-r-plus [all-features+with-tie]",
    "prism_all_features_with_tie_all_features_gpt-3.5-turbo.jsonl": "gpt-3.5-turbo [all-features+with-tie]",
    "prism_all_features_with_tie_all_features_gpt-4o.jsonl": "gpt-4o [all-features+with-tie]",
    "prism_no_persona_command-r-plus_new.jsonl": "command-r-plus [no-profile]",
}


@pytest.mark.parametrize(("file_name", "judge"), sorted(PRISM_FILES.items()))
def test_report_recomputes_each_prism_judge(report: dict, shared_data: Path, file_name: str, judge: str) -> None:
    expected = _expected(shared_data / "prism_judge" / file_name)
    (row,) = [j for j in report["judges"] if j["judge"] == judge and j["dataset"] == "prism-judge"]
    for key in ("judge", "dataset", "n", "accuracy", "accuracy_ci", "kappa", "failures", "first_position_rate",
                "longer_rate"):
        assert key in row
    assert row["n"] == expected["n"]
    assert row["failures"] == expected["failures"]
    for key in ("accuracy", "accuracy_failures_as_wrong", "first_position_rate", "longer_rate", "always_a_accuracy"):
        assert row[key] == pytest.approx(expected[key]), key
    lo, hi = row["accuracy_ci"]
    assert lo <= row["accuracy"] <= hi


def test_known_failures_in_the_release(report: dict) -> None:
    by_judge = {j["judge"]: j for j in report["judges"]}
    # The release's gpt-4o tie file answers '[' 16x, 'T' 5x, 'N' 5x, 'I' 1x; none of them becomes a label.
    assert by_judge["gpt-4o [all-features+with-tie]"]["failures"] == 27
    assert by_judge["command-r-plus [no-profile]"]["failures"] == 3
    assert by_judge["gpt-3.5-turbo [all-features+with-tie]"]["failures"] == 0


def test_failures_are_stored_with_raw_text_never_as_labels(response_db: Path) -> None:
    con = duckdb.connect(str(response_db), read_only=True)
    try:
        rows = con.execute("SELECT raw, label, error FROM labels WHERE rater = 'gpt-4o' "
                           "AND condition = 'all-features+with-tie' AND label IS NULL").fetchall()
    finally:
        con.close()
    assert Counter(r[0] for r in rows) == {"[": 16, "T": 5, "N": 5, "I": 1}
    assert all(r[2].startswith("unparseable:") for r in rows)


def test_profile_gap_and_human_bias(report: dict, shared_data: Path) -> None:
    (gap,) = [g for g in report["profile_gaps"] if g["with_condition"] == "all-features"]
    assert gap["rater"] == "command-r-plus" and gap["without_condition"] == "no-profile"
    # Recompute on the (question, A, B) pairs judged both ways.
    def keyed(name: str) -> dict:
        return {(r["question"], r["asst_A"], r["asst_B"]): r for r in _rows(shared_data / "prism_judge" / name)}
    with_p = keyed("prism_all_features_command-r-plus.jsonl")
    without = {k: r for k, r in keyed("prism_no_persona_command-r-plus_new.jsonl").items() if r["answer"] in "AB"}
    both = set(with_p) & set(without)
    assert gap["n"] == len(both)
    assert gap["accuracy_with"] == pytest.approx(np.mean([with_p[k]["acc"] for k in both]))
    assert gap["accuracy_without"] == pytest.approx(np.mean([without[k]["acc"] for k in both]))

    (humans,) = report["humans"]
    truth = {}
    for name in PRISM_FILES:
        for r in _rows(shared_data / "prism_judge" / name):
            truth[(r["question"], r["asst_A"], r["asst_B"])] = r["ground_truth"]
    assert humans["n"] == len(truth)
    decisive = [(k, v) for k, v in truth.items() if v in "AB"]
    assert humans["first_position_rate"] == pytest.approx(np.mean([v == "A" for _, v in decisive]))
    assert humans["tie_rate"] == pytest.approx(np.mean([v == "C" for v in truth.values()]))


def test_usr_counts_and_rater_agreement(report: dict, shared_data: Path) -> None:
    usr = report["usr"]
    assert usr["n_items"] == 300 and usr["n_contexts"] == 60
    assert sum(usr["raters"].values()) == 900
    data = json.loads((shared_data / "usr_personachat" / "pc_usr_data.json").read_text())
    raters = sorted({a for c in data for a in c["annotators"]})
    matrix = np.full((len(raters), 300), np.nan)
    unit = 0
    for c in data:
        for r in c["responses"]:
            for a, v in zip(c["annotators"], r["Uses Knowledge"], strict=True):
                matrix[raters.index(a), unit] = v
            unit += 1
    assert usr["uses_knowledge_alpha"] == pytest.approx(krippendorff.alpha(reliability_data=matrix,
                                                                           level_of_measurement="nominal"))
    assert 0.5 < usr["uses_knowledge_fleiss"] <= 1.0
    assert set(usr["pair_kappa"]) == set(raters)


def test_reimport_is_idempotent(response_db: Path, shared_data: Path, tmp_path: Path) -> None:
    db = tmp_path / "copy.duckdb"
    shutil.copy(response_db, db)
    stage.import_prism(shared_data / "prism_judge" / "prism_all_features_command-r-plus.jsonl", db)
    con = duckdb.connect(str(db), read_only=True)
    try:
        n_labels = con.execute("SELECT count(*) FROM labels").fetchone()[0]
        n_items = con.execute("SELECT count(*) FROM items").fetchone()[0]
    finally:
        con.close()
    assert n_items == 3143 + 300
    assert n_labels == 8144 + 5400


def test_personafeedback_fixture(tmp_path: Path) -> None:
    result = load_personafeedback(FIXTURES / "personafeedback")
    assert len(result.batch.items) == 6
    labels = result.batch.labels
    assert {lab.rater for lab in labels} == {"personafeedback-annotators"}
    chosen = {r["question"]: r["chosen"] for f in (FIXTURES / "personafeedback" / "data").glob("*/*.jsonl")
              for r in _rows(f)}
    for lab in labels:
        payload = result.batch.items[lab.item_id].payload
        assert (payload["answer_a"] if lab.label == "A" else payload["answer_b"]) == chosen[payload["question"]]
    # The hashed A/B order puts the chosen answer in both positions across these 6 pairs.
    assert {lab.label for lab in labels} == {"A", "B"}
    tiers = Counter((it.payload["split"], it.payload["tier"]) for it in result.batch.items.values())
    assert tiers == {("general", "easy"): 3, ("general", "medium"): 1, ("specific", "hard"): 2}
    # The int user_id 3 in persona/ joins the string "3" in data/, with the persona's fields as text.
    sam = [it for it in result.batch.items.values() if it.user_id == "3"]
    assert len(sam) == 2 and "occupation: pastry chef" in sam[0].payload["profile"]

    db = tmp_path / "pf.duckdb"
    stage.import_personafeedback(FIXTURES / "personafeedback", db)
    rep = stage.report_response(db)
    (humans,) = rep.humans
    assert humans.n == 6 and humans.first_position_rate is None  # A/B order was never shown to the annotators
    # 4 of the 6 chosen answers are the longer one (hand-counted: all but tomatoes and the First World War).
    assert humans.longer_rate == pytest.approx(4 / 6)


@pytest.mark.parametrize(("loader", "path", "where", "field"), [
    (load_prism, "prism_bad_truth", "prism_all_features_m.jsonl:2", "ground_truth"),
    (load_prism, "prism_missing_answer", "prism_all_features_m.jsonl:2", "asst_B"),
    (load_prism, "prism_bad_json", "prism_no_persona_m.jsonl:2", None),
    (load_prism, "prism_bad_name", "prism_some_variant_m.jsonl", None),
    (load_prism, "prism_bad_acc", "prism_all_features_m.jsonl:1", "acc"),
    (load_prism, "prism_conflict", "prism_all_features_with_tie_all_features_m.jsonl:1", "ground_truth"),
    (load_usr, "usr_bad_value", "pc_usr_data.json:[1]", "responses[0].Overall[1]"),
    (load_usr, "usr_bad_count", "pc_usr_data.json:[1]", "responses[0].Uses Knowledge"),
    (load_usr, "usr_not_list", "pc_usr_data.json", None),
    (load_personafeedback, "pf_unknown_user", "easy.jsonl:1", "user_id"),
    (load_personafeedback, "pf_missing_reject", "medium.jsonl:2", "reject"),
])
def test_malformed_files_name_file_line_field(loader, path: str, where: str, field: str | None) -> None:  # noqa: ANN001
    with pytest.raises(DataError) as info:
        loader(BAD / path)
    message = str(info.value)
    assert where in message
    if field is not None:
        assert f"field {field!r}" in message


def test_bad_import_writes_nothing_and_exits_2(tmp_path: Path) -> None:
    db = tmp_path / "x.duckdb"
    result = CliRunner().invoke(cli, ["import", "prism-judge", str(BAD / "prism_bad_truth"), "--db", str(db)])
    assert result.exit_code == 2
    assert "ground_truth" in result.output and "'D'" in result.output
    # The first row was valid, but the batch is all-or-nothing: no database holds it.
    if db.exists():
        con = duckdb.connect(str(db), read_only=True)
        try:
            assert con.execute("SELECT count(*) FROM labels").fetchone()[0] == 0
        finally:
            con.close()
