"""`report STAGE --json` carries each confident judge's calibration and coverage curve (issue 23's output contract).

On the shared PRISM release: the four judges that state a certainty gain ``calibration`` and ``coverage_curve``; the
curve's full-coverage point is the judge's overall accuracy in the same JSON; a target gives a threshold chosen on
some users and reported on the others; the text report prints one line per such judge.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from personagap.cli import cli
from tests.support.stores import copy_store

CERTAIN = {"command-r-plus [all-features]", "command-r-plus [key-features]", "command-r-plus [no-profile]",
           "gpt-4o [key-features]"}
"""The PRISM files whose judge states a certainty (the with-tie files carry none)."""


@pytest.fixture(scope="module")
def prism_db(prism_release_db: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_store(prism_release_db, tmp_path_factory.mktemp("wire-report"))


def _report(db: Path, *extra: str) -> dict:
    out = CliRunner().invoke(cli, ["report", "response", "--json", "--db", str(db), *extra])
    assert out.exit_code == 0, out.output
    return json.loads(out.output)


def test_confident_judges_gain_calibration_and_a_curve_whose_full_coverage_point_is_their_accuracy(
        prism_db: Path) -> None:
    rows = {r["judge"]: r for r in _report(prism_db)["judges"] if r["dataset"] == "prism-judge"}
    assert {j for j, r in rows.items() if r.get("coverage_curve")} == CERTAIN
    assert all("calibration" not in r for j, r in rows.items() if j not in CERTAIN)
    for judge in CERTAIN:
        row = rows[judge]
        cal = row["calibration"]
        assert {"brier", "ece", "bins"} <= set(cal) and cal["bins"]
        assert sum(b["n"] for b in cal["bins"]) == row["with_confidence"]
        curve = row["coverage_curve"]
        full = min(curve, key=lambda p: p["min_confidence"])  # the lowest threshold keeps every confident label
        assert row["with_confidence"] == row["labels"] == row["n"]  # every label of these files states one
        assert full["coverage"] == pytest.approx(1.0) and full["n"] == row["n"]
        assert full["accuracy"] == pytest.approx(row["accuracy"])
        assert {"min_confidence", "coverage", "n", "accuracy", "kappa", "accuracy_ci"} <= set(full)
        assert row["threshold"] is None  # no target given and PRISM has no human ceiling


@pytest.mark.slow
def test_a_target_gives_a_threshold_chosen_and_reported_on_different_users(prism_db: Path) -> None:
    rows = {r["judge"]: r for r in _report(prism_db, "--target-accuracy", "0.85")["judges"]
            if r["dataset"] == "prism-judge"}
    threshold = rows["command-r-plus [all-features]"]["threshold"]
    assert threshold["target"]["value"] == 0.85 and threshold["min_confidence"] is not None
    assert threshold["chosen_on"]["accuracy"] >= 0.85  # reached where it was chosen ...
    assert threshold["n_users_chosen_on"] > 0 and threshold["n_users_held_out"] > 0  # ... and reported elsewhere
    out = CliRunner().invoke(cli, ["report", "response", "--db", str(prism_db), "--target-accuracy", "0.85"])
    assert out.exit_code == 0, out.output
    lines = [line for line in out.output.splitlines() if "Brier" in line]
    assert len(lines) == len(CERTAIN) and all(any(j in line for line in lines) for j in CERTAIN)
    assert any("on held-out users, keeping" in line for line in lines)
    both = CliRunner().invoke(cli, ["report", "response", "--db", str(prism_db), "--target-accuracy", "0.8",
                                    "--target-kappa", "0.5"])
    assert both.exit_code == 2 and "not both" in both.output


def test_without_a_target_the_threshold_aims_at_the_datasets_human_ceiling(tmp_path: Path) -> None:
    import numpy as np
    import pandas as pd
    from sklearn.metrics import cohen_kappa_score

    from benchmarks.calibration_routing import RoutingWorld
    from personagap.labels_api import import_labels
    from tests.support.route_store import DATASET, JUDGE, label_rows

    items = RoutingWorld(human_share=0.8).study(30, np.random.default_rng(7))
    rows = label_rows(items)
    labelled = items[items["human"].notna()].reset_index(drop=True)
    # A second blind person who disagrees with the first on every fifth item: a ceiling below 1.
    other = ["no" if (k % 5 == 0) == (h == "yes") else "yes" for k, h in enumerate(labelled["human"])]
    rows += [{"item_id": i, "user_id": u, "rater": "bob", "rater_kind": "human", "label": lab}
             for i, u, lab in zip(labelled["item_id"], labelled["user_id"], other, strict=True)]
    db = tmp_path / "ceiling.duckdb"
    import_labels(pd.DataFrame(rows), stage="relevance", dataset=DATASET, db=db, categories=["no", "yes"])
    out = CliRunner().invoke(cli, ["report", "relevance", "--json", "--db", str(db)])
    assert out.exit_code == 0, out.output
    (row,) = [r for r in json.loads(out.output)["judges"] if r["judge"] == JUDGE]
    # One pair of blind humans: the ceiling is their Cohen's kappa, recomputed here with sklearn.
    expected = cohen_kappa_score(labelled["human"], other)
    assert 0 < expected < 1
    assert row["threshold"]["target"] == {"metric": "kappa", "value": pytest.approx(expected),
                                          "source": "human ceiling"}


def test_merge_joins_by_dataset_and_judge_display_name_on_every_stage() -> None:
    from personagap.analysis.confidence_report import JudgeConfidence
    from personagap.stages.confidence_rows import merge_confidence

    def entry(dataset: str, rater: str, condition: str) -> JudgeConfidence:
        return JudgeConfidence(dataset=dataset, rater=rater, rater_kind="llm", condition=condition,
                               confidence_scale="1-100", calibration=None, coverage_curve=(), threshold=None,
                               labels=3, with_confidence=2, confidence_failures=1)

    entries = [entry("d1", "j", "c"), entry("d2", "v", "")]
    response = merge_confidence({"judges": [{"dataset": "d1", "judge": "j [c]"}, {"dataset": "d2", "judge": "j [c]"},
                                            {"dataset": "d1", "judge": "j"}]}, "response", entries)
    assert [r.get("with_confidence") for r in response["judges"]] == [2, None, None]  # dataset and condition count
    extraction = merge_confidence({"verifiers": [{"dataset": "d2", "verifier": "v"}]}, "extraction", entries)
    assert extraction["verifiers"][0]["confidence_failures"] == 1
