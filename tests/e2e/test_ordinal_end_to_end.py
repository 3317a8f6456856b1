"""End to end, one store: a 3-category relevance dataset and an ordinal 1-5 rating dataset, through the CLI.

Defect 2: ``import labels --stage relevance --categories yes,no,maybe`` then ``report relevance`` ended in
``ValueError: binary metrics need labels coded 0/1``. Defect 1: an ordinal dataset was scored by unweighted kappa
in ``diagnose``. Every expected figure below is computed from the same labels by sklearn / krippendorff, with the
human reference by the project's majority rule (the unique most frequent blind label; a tie is no reference).
"""

from __future__ import annotations

import json
from itertools import combinations
from pathlib import Path
from typing import Any

import krippendorff
import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from sklearn.metrics import cohen_kappa_score

from personagap.analysis.agreement import MIN_USERS_FOR_CI
from personagap.api import import_labels
from personagap.cli import cli
from tests.support.ordinal_rows import TRI
from tests.support.ordinal_rows import aligned as _aligned
from tests.support.ordinal_rows import majority_reference as _reference
from tests.support.ordinal_rows import make_rows as _rows

LEVELS = ("1", "2", "3", "4", "5")


def _cli_json(*args: str) -> Any:
    out = CliRunner().invoke(cli, [*args, "--json"])
    assert out.exit_code == 0, out.output
    return json.loads(out.output)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, pd.DataFrame, pd.DataFrame]:
    db = tmp_path_factory.mktemp("scale") / "scale.duckdb"
    tri = _rows(TRI, ["h1", "h2", "h3"], ["judge-tri"], n_users=MIN_USERS_FOR_CI, per_user=6, seed=1,
                item_column="attribute")
    stars = _rows(LEVELS, ["r1", "r2", "r3"], ["judge-a", "judge-b"], n_users=MIN_USERS_FOR_CI, per_user=5, seed=2,
                  item_column="response")
    import_labels(tri.assign(prompt="a prompt"), stage="relevance", dataset="tri", db=db, categories=list(TRI))
    import_labels(stars.assign(prompt="a prompt"), stage="response", dataset="stars", db=db, scale="ordinal",
                  categories=list(LEVELS))
    return db, tri, stars


def test_three_categories_report_relevance_and_diagnose(store: tuple[Path, pd.DataFrame, pd.DataFrame]) -> None:
    db, tri, _ = store
    reference = _reference(tri)
    human, judge = _aligned(tri, "judge-tri", reference)
    expected = cohen_kappa_score(human, judge)
    report = _cli_json("report", "relevance", "--db", str(db))
    (row,) = [j for j in report["judges"] if j["dataset"] == "tri"]
    assert row["judge"] == "judge-tri" and row["scale"] == "nominal" and row["n"] == len(human)
    assert np.isfinite(row["kappa"]) and row["kappa"] == pytest.approx(expected)
    assert row["kappa_ci"][0] <= row["kappa"] <= row["kappa_ci"][1]
    # Balanced accuracy is the macro mean over the three human classes (sklearn's definition).
    from sklearn.metrics import balanced_accuracy_score
    assert row["balanced_accuracy"] == pytest.approx(balanced_accuracy_score(human, judge))
    # Selection figures (yes/no only) are absent, not computed on a 3-way scale; no yes-rate estimate either.
    assert row["over_selection"] is None and row["precision"] is None and row["human_yes_rate"] is None
    assert row["prevalence_index"] is None
    assert not [e for e in report["estimates"] if e["dataset"] == "tri"]
    diagnosis = _cli_json("diagnose", "--db", str(db))
    (score,) = [j for j in diagnosis["stages"][1]["judges"] if j["dataset"] == "tri"]
    assert score["kappa"] == pytest.approx(expected) and score["scale"] == "nominal"
    assert score["categories"] == sorted(TRI)


def test_ordinal_dataset_is_scored_by_weighted_kappa_in_diagnose(
        store: tuple[Path, pd.DataFrame, pd.DataFrame]) -> None:
    db, _, stars = store
    reference = _reference(stars)
    diagnosis = _cli_json("diagnose", "--db", str(db))
    response = diagnosis["stages"][2]
    rows = {j["judge"]: j for j in response["judges"] if j["dataset"] == "stars"}
    assert set(rows) == {"judge-a", "judge-b"}
    for name, row in rows.items():
        human, judge = _aligned(stars, name, reference)
        h, j = [int(v) for v in human], [int(v) for v in judge]
        assert row["scale"] == "ordinal" and row["categories"] == list(LEVELS)
        assert row["weighted_kappa"] == pytest.approx(cohen_kappa_score(h, j, labels=[1, 2, 3, 4, 5],
                                                                        weights="quadratic"))
        assert row["kappa"] == pytest.approx(cohen_kappa_score(h, j))
        assert row["weighted_kappa"] != pytest.approx(row["kappa"])
        assert row["alpha"] == pytest.approx(krippendorff.alpha(reliability_data=np.array([h, j], dtype=float),
                                                                level_of_measurement="ordinal"))
        assert row["weighted_kappa_ci"][0] <= row["weighted_kappa"] <= row["weighted_kappa_ci"][1]
    # The ceiling and the gap use the scale's headline figure: mean pairwise quadratic-weighted kappa.
    (ceiling,) = [c for c in response["ceilings"] if c["dataset"] == "stars"]
    humans = stars[stars["rater_kind"] == "human"].pivot(index="item_id", columns="rater", values="label")
    pairs = [cohen_kappa_score(humans[a].astype(int), humans[b].astype(int), weights="quadratic")
             for a, b in combinations(["r1", "r2", "r3"], 2)]
    assert ceiling["metric"] == "weighted_kappa" and ceiling["mean_kappa"] == pytest.approx(np.mean(pairs))
    assert ceiling["alpha"] == pytest.approx(krippendorff.alpha(
        reliability_data=humans.astype(float).to_numpy().T, level_of_measurement="ordinal"))
    assert {g["metric"] for g in response["gaps"] if g["dataset"] == "stars"} == {"weighted_kappa"}


def test_text_reports_name_the_ordinal_figures(store: tuple[Path, pd.DataFrame, pd.DataFrame]) -> None:
    db, _, _ = store
    out = CliRunner().invoke(cli, ["diagnose", "--db", str(db)])
    assert out.exit_code == 0, out.output
    assert "quadratic-weighted kappa" in out.output and "Krippendorff's alpha (ordinal)" in out.output
    out = CliRunner().invoke(cli, ["report", "relevance", "--db", str(db)])
    assert out.exit_code == 0 and "judge-tri" in out.output, out.output
