"""Generic stage-3 reports (issue 20, defect 3 and defect 1's stage-3 part): every single-response dataset gets a
section titled with the question stored at import, whatever its scale, and judge rows in ``report response --json``.

The label rows are made up here (three humans and two judges per item, a seeded generator); expected figures are
recomputed from the written rows with scikit-learn, never copied from the code under test.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import duckdb
import krippendorff
import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from sklearn.metrics import cohen_kappa_score

from personagap.cli import cli
from personagap.datasets import dataset_records
from personagap.labels_api import import_labels
from personagap.stages import response as stage
from tests.support.response_rows import FACTS, HUMANS, JUDGES, QUALITY, TONE, judge_pairs, single_rows
from tests.support.stores import copy_store


@pytest.fixture(scope="module")
def three_datasets(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, list[dict[str, Any]]]]:
    """One store: two yes/no single-response datasets with different questions and an ordinal 1-5 one."""
    db = tmp_path_factory.mktemp("three") / "three.duckdb"
    rows = {"team-tone": single_rows("tone", ("yes", "no")), "team-facts": single_rows("facts", ("yes", "no")),
            "team-quality": single_rows("quality", ("1", "2", "3", "4", "5"))}
    import_labels(pd.DataFrame(rows["team-tone"]), stage="response", dataset="team-tone", db=db, question=TONE,
                  categories=["yes", "no"], source_name="tone")
    import_labels(pd.DataFrame(rows["team-facts"]), stage="response", dataset="team-facts", db=db, question=FACTS,
                  source_name="facts")
    path = tmp_path_factory.mktemp("files") / "quality.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows["team-quality"]))
    result = CliRunner().invoke(cli, ["import", "labels", str(path), "--stage", "response", "--dataset",
                                      "team-quality", "--scale", "ordinal", "--categories", "1,2,3,4,5",
                                      "--question", QUALITY, "--db", str(db)])
    assert result.exit_code == 0, result.output
    assert f"question: {QUALITY}" in result.output
    return db, rows


@pytest.mark.slow
def test_each_single_response_dataset_has_a_section_titled_with_its_question(three_datasets: Any) -> None:
    db, _ = three_datasets
    text = CliRunner().invoke(cli, ["report", "response", "--db", str(db)])
    assert text.exit_code == 0, text.output
    lines = text.output.splitlines()
    for question in (TONE, FACTS, QUALITY):
        assert lines.count(question) == 1, question  # a section title: the question on its own line
    assert "Uses Knowledge" not in text.output and "'Overall'" not in text.output


def test_json_judge_rows_for_every_dataset_and_scale(three_datasets: Any) -> None:
    db, rows = three_datasets
    out = CliRunner().invoke(cli, ["report", "response", "--db", str(db), "--json"])
    assert out.exit_code == 0, out.output
    report = json.loads(out.output)
    by_key = {(j["dataset"], j["judge"]): j for j in report["judges"]}
    assert set(by_key) == {(ds, judge) for ds in rows for judge in JUDGES}
    for (dataset, judge), row in by_key.items():
        human, said = judge_pairs(rows[dataset], judge)
        assert row["n"] == len(human)
        assert row["kappa"] == pytest.approx(cohen_kappa_score(human, said))
        lo, hi = row["kappa_ci"]
        assert lo <= row["kappa"] <= hi
        if dataset == "team-quality":
            assert row["scale"] == "ordinal"
            expected = cohen_kappa_score([int(h) for h in human], [int(s) for s in said], weights="quadratic",
                                         labels=[1, 2, 3, 4, 5])
            assert row["weighted_kappa"] == pytest.approx(expected)
            assert row["weighted_kappa_ci"][0] <= row["weighted_kappa"] <= row["weighted_kappa_ci"][1]
        else:
            assert row["scale"] == "nominal" and row["weighted_kappa"] is None
    sections = {s["dataset"]: s for s in report["single_responses"]}
    assert {d: s["question"] for d, s in sections.items()} == {"team-tone": TONE, "team-facts": FACTS,
                                                               "team-quality": QUALITY}
    quality = sections["team-quality"]
    assert quality["scale"] == "ordinal" and quality["categories"] == ["1", "2", "3", "4", "5"]
    matrix = np.array([[float(next((r["label"] for r in rows["team-quality"] if r["item_id"] == item
                                    and r["rater"] == h), np.nan)) for item in sorted({r["item_id"] for r in
                                                                                      rows["team-quality"]})]
                       for h in HUMANS])
    assert quality["alpha"] == pytest.approx(krippendorff.alpha(reliability_data=matrix,
                                                                level_of_measurement="ordinal"))


def test_records_store_the_question_and_scale(three_datasets: Any) -> None:
    db, _ = three_datasets
    with duckdb.connect(str(db), read_only=True) as con:
        records = dataset_records(con)
    quality = records[("response", "team-quality")]
    assert quality.declared and quality.item_kind == "single" and quality.question == QUALITY
    assert quality.scale.kind == "ordinal" and quality.scale.categories == ("1", "2", "3", "4", "5")
    tone = records[("response", "team-tone")]
    assert tone.question == TONE and tone.scale.categories == ("no", "yes")


def test_zero_one_labels_without_categories_get_their_own_section(tmp_path: Path) -> None:
    """0/1 labels at stage 3 (no --categories) are a 0/1 nominal dataset: shown in the report, not only diagnose."""
    rows = single_rows("binary", ("0", "1"))
    db = tmp_path / "zero-one.duckdb"
    import_labels(pd.DataFrame(rows), stage="response", dataset="team-01", db=db)
    report = stage.report_response(db)
    (section,) = report.single_responses
    assert section.dataset == "team-01" and section.categories == ["0", "1"]
    assert section.question == "Is this answer right for this user?"  # the stage's default, from the record
    human, said = judge_pairs(rows, JUDGES[0])
    (row,) = [j for j in report.judges if j.judge == JUDGES[0]]
    assert row.kappa == pytest.approx(cohen_kappa_score(human, said))
    assert "Is this answer right for this user?" in stage.render_response(report).splitlines()


def test_usr_questions_and_overall_are_data(shared_data: Path, usr_release_db: Path, tmp_path: Path) -> None:
    """USR's questions come from its stored record and aspects; Overall (1-5) is scored as ordinal."""
    db = copy_store(usr_release_db, tmp_path / "usr.duckdb")
    with duckdb.connect(str(db), read_only=True) as con:
        record = dataset_records(con)[("response", "usr-personachat")]
    assert record.declared and record.item_kind == "single" and "Uses Knowledge" in record.question
    report = stage.report_response(db)
    (section,) = report.single_responses
    assert section.question == record.question
    overall = next(a for a in section.aspects if a.condition == "overall")
    assert overall.scale == "ordinal" and overall.categories == ["1", "2", "3", "4", "5"]
    data = json.loads((shared_data / "usr_personachat" / "pc_usr_data.json").read_text())
    raters = sorted({a for c in data for a in c["annotators"]})
    matrix = np.full((len(raters), sum(len(c["responses"]) for c in data)), np.nan)
    unit = 0
    for c in data:
        for r in c["responses"]:
            for a, v in zip(c["annotators"], r["Overall"], strict=True):
                matrix[raters.index(a), unit] = v
            unit += 1
    assert overall.alpha == pytest.approx(krippendorff.alpha(reliability_data=matrix, level_of_measurement="ordinal"))
    assert f"Also rated: {overall.question}" in stage.render_response(report)
