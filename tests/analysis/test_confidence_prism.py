"""Issue 23 on the shared PRISM release: certainty on import, calibration, coverage curves, held-out threshold.

Every expected figure is recomputed here from the release files themselves (``acc``, ``certainty``, the scale the
``prompt`` states), or from scikit-learn, never from the code under test.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sklearn.calibration import calibration_curve
from sklearn.metrics import brier_score_loss

from personagap.analysis.confidence_report import judge_confidence
from personagap.analysis.coverage import Target, choose_threshold, split_users
from personagap.human_data.prism import parse_file_name
from personagap.store import opened
from personagap.store.confidence import confidence_counts
from tests.support.stores import copy_store


@pytest.fixture(scope="module")
def prism_db(prism_release_db: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_store(prism_release_db, tmp_path_factory.mktemp("conf_prism"))


def _release(shared_data: Path) -> dict[tuple[str, str], pd.DataFrame]:
    """(judge model, condition) -> the rows of each release file whose judge stated a numeric certainty."""
    out = {}
    for path in sorted((shared_data / "prism_judge").glob("prism_*.jsonl")):
        rows = pd.DataFrame([json.loads(line) for line in path.read_text().splitlines() if line.strip()])
        if (rows["certainty"] == "NA").all():
            continue
        protocol = parse_file_name(path)
        out[(protocol.model, protocol.condition)] = rows
    return out


def _scale_ends(prompt: str) -> tuple[float, float]:
    m = re.search(r"from (\d+) to (\d+)", prompt)
    assert m is not None, "the release's prompt states its certainty scale"
    return float(m[1]), float(m[2])


@pytest.fixture(scope="module")
def entries(prism_db: Path) -> dict[tuple[str, str], object]:
    with opened(prism_db, read_only=True) as con:
        return {(e.rater, e.condition): e for e in judge_confidence(con, "response", target_accuracy=0.75)}


def test_the_four_judges_with_a_certainty_get_calibration_and_a_curve(shared_data: Path, entries: dict) -> None:
    release = _release(shared_data)
    assert len(release) == 4  # the "four judges with a certainty"
    assert set(entries) == set(release)
    for e in entries.values():
        assert e.calibration is not None and e.calibration.bins
        assert e.coverage_curve
        assert e.confidence_failures == 0


def test_full_coverage_point_is_the_judges_overall_accuracy(shared_data: Path, entries: dict) -> None:
    for key, rows in _release(shared_data).items():
        parsed = rows[rows["answer"].isin(["A", "B"])]  # these protocols offered no tie: A/B are the labels
        curve = entries[key].coverage_curve
        full = curve[-1]
        assert full.coverage == 1.0
        assert full.n == len(parsed)
        assert full.accuracy.value == pytest.approx(parsed["acc"].astype(bool).mean(), abs=1e-12)
        assert full.min_confidence == parsed["certainty"].astype(float).min()
        # Every threshold the judge used, highest first; coverage only grows as the threshold falls.
        assert [p.min_confidence for p in curve] == sorted(set(parsed["certainty"].astype(float)), reverse=True)
        assert all(a.coverage <= b.coverage for a, b in zip(curve, curve[1:], strict=False))
        for p in curve:
            kept = parsed[parsed["certainty"].astype(float) >= p.min_confidence]
            assert p.n == len(kept)
            assert p.accuracy.value == pytest.approx(kept["acc"].astype(bool).mean(), abs=1e-12)


def test_brier_ece_and_bins_match_sklearn(shared_data: Path, entries: dict) -> None:
    for key, rows in _release(shared_data).items():
        parsed = rows[rows["answer"].isin(["A", "B"])]
        lo, hi = _scale_ends(str(parsed["prompt"].iloc[0]))
        p = (parsed["certainty"].astype(float).to_numpy() - lo) / (hi - lo)
        right = parsed["acc"].astype(bool).to_numpy().astype(int)
        cal = entries[key].calibration
        assert cal.brier.value == pytest.approx(brier_score_loss(right, p), abs=1e-12)
        prob_true, prob_pred = calibration_curve(right, p, n_bins=10)
        assert [b.agreement.value for b in cal.bins] == pytest.approx(list(prob_true), abs=1e-12)
        assert [b.confidence for b in cal.bins] == pytest.approx(list(prob_pred), abs=1e-12)
        counts = np.array([b.n for b in cal.bins])
        assert counts.sum() == len(parsed)
        ece = float((counts / counts.sum() * np.abs(prob_true - prob_pred)).sum())
        assert cal.ece.value == pytest.approx(ece, abs=1e-12)
        assert cal.brier.n_clusters == cal.n_users


def _judge_rows(db: Path, rater: str, condition: str) -> pd.DataFrame:
    with opened(db, read_only=True) as con:
        counts = confidence_counts(con, "response")
    return counts[(counts["rater"] == rater) & (counts["condition"] == condition)]


def test_threshold_is_chosen_on_some_users_and_reported_on_the_others(prism_db: Path, entries: dict) -> None:
    from personagap.records import PAIRWISE_LABELS, DatasetScale

    scale = DatasetScale(kind="pairwise", categories=PAIRWISE_LABELS)
    rows = _judge_rows(prism_db, "command-r-plus", "all-features")
    choice = entries[("command-r-plus", "all-features")].threshold
    assert choice is not None and choice.min_confidence is not None
    assert set(choice.chosen_users).isdisjoint(choice.held_out_users)
    assert choice.chosen_users and choice.held_out_users
    assert set(choice.chosen_users) | set(choice.held_out_users) == set(rows["user_id"])
    # The held-out figures count only held-out users' items at or above the threshold.
    held = rows[rows["user_id"].isin(choice.held_out_users) & (rows["confidence"] >= choice.min_confidence)]
    assert choice.held_out.n == held["n"].sum()
    right = held.loc[held["label"] == held["human"], "n"].sum()
    assert choice.held_out.accuracy.value == pytest.approx(right / held["n"].sum())
    assert choice.chosen_on.accuracy.value >= 0.75
    # Never selected on the users it is reported on: the held-out users' labels cannot move the threshold.
    flipped = rows.copy()
    out = flipped["user_id"].isin(choice.held_out_users)
    flipped.loc[out, "label"] = np.where(flipped.loc[out, "label"] == "A", "B", "A")
    again = choose_threshold(flipped, scale, Target("accuracy", 0.75, "given"))
    assert again.min_confidence == choice.min_confidence
    assert again.held_out.accuracy.value != pytest.approx(choice.held_out.accuracy.value)


def test_user_split_is_deterministic_and_blind_to_order() -> None:
    users = [f"user-{i}" for i in range(200)]
    choose, report = split_users(users)
    assert split_users(list(reversed(users))) == (choose, report)
    assert set(choose).isdisjoint(report) and set(choose) | set(report) == set(users)
    assert 60 < len(choose) < 140  # a hash splits about in half


def test_counts_read_a_judge_at_a_time_are_the_grouped_counts(prism_db: Path) -> None:
    from personagap.store.confidence import confidence_counts_by_judge

    with opened(prism_db, read_only=True) as con:
        whole = confidence_counts(con, "response")
        by_judge = confidence_counts_by_judge(con, "response")
        # The temporary table is gone and the memory limit reset.
        assert con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = '_pg_confidence_counts'"
                           ).fetchall() == [(0,)]
    grouped = list(whole.groupby(["dataset", "rater", "rater_kind", "condition"], sort=True))
    assert len(by_judge) == len(grouped) > 1
    for judge, (gkey, grows) in zip(by_judge, grouped, strict=True):
        assert judge.key == tuple(str(k) for k in gkey)
        assert judge.scales == tuple(sorted(set(grows["confidence_scale"])))
        pd.testing.assert_frame_equal(judge.rows, grows[["user_id", "confidence", "human", "label", "n"]]
                                      .reset_index(drop=True))
        # Count rows need a reference as well as a confidence; labels need neither.
        assert judge.labels >= judge.with_confidence >= grows["n"].sum() > 0
