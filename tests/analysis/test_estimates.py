"""Corrected estimates of the human rate: Rogan–Gladen by hand, PPI++ against ppi_py, coverage, real data."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import ppi_py
import pytest

from personagap.analysis.estimates import rogan_gladen
from tests.support.oracles import estimate_rows

TRUTH = 0.2


def test_rogan_gladen_by_hand() -> None:
    # apparent .40, se .8, sp .9: (.40 + .9 - 1) / (.8 + .9 - 1) = .3 / .7
    assert rogan_gladen(0.40, 0.8, 0.9) == pytest.approx(0.3 / 0.7)
    # a perfect judge: the apparent rate is the truth
    assert rogan_gladen(0.37, 1.0, 1.0) == pytest.approx(0.37)
    # below the false-positive floor (1 - sp = .1) the estimate is clipped at 0; above se at 1
    assert rogan_gladen(0.05, 0.8, 0.9) == 0.0 and rogan_gladen(0.95, 0.8, 0.9) == 1.0
    # se + sp = 1: the judge says nothing about the truth
    assert math.isnan(float(rogan_gladen(0.3, 0.6, 0.4)))


def _frame(rows: list[tuple[str, str, str, str, str]]) -> pd.DataFrame:
    return pd.DataFrame([{"item_id": i, "rater": r, "rater_kind": k, "condition": "", "label": lab, "user_id": u,
                          "dataset": "d"} for i, r, k, lab, u in rows])


def test_hand_worked_frame() -> None:
    # Ten items of two users; humans labelled the first six.
    #   item   1  2  3  4  5  6 | 7  8  9  10
    #   human  y  y  n  n  n  n |
    #   judge  y  n  y  n  n  n | y  y  n  n
    # On the six: tp 1, fn 1, fp 1, tn 3 -> sensitivity 1/2, specificity 3/4.
    # naive = judge yes 4 / 10 = .4; Rogan–Gladen = (.4 + .75 - 1) / (.5 + .75 - 1) = .15 / .25 = .6
    # human only = 2 / 6
    human, judge = "yynnnn", "ynynnnyynn"
    rows = [(f"i{k}", "hm", "human_majority", "yes" if h == "y" else "no", f"u{k % 2}") for k, h in enumerate(human)]
    rows += [(f"i{k}", "llm1", "llm", "yes" if j == "y" else "no", f"u{k % 2}") for k, j in enumerate(judge)]
    [row] = estimate_rows(_frame(rows), "d")
    assert row["naive"] == pytest.approx(0.4)
    assert row["sensitivity"] == pytest.approx(0.5) and row["specificity"] == pytest.approx(0.75)
    assert row["rogan_gladen"] == pytest.approx(0.6)
    assert row["human_only"] == pytest.approx(2 / 6)
    assert (row["n_human"], row["n_judge"], row["n_both"], row["quantity"]) == (6, 10, 6, "yes_rate")
    y, yhat, yhat_u = np.array([1, 1, 0, 0, 0, 0.0]), np.array([1, 0, 1, 0, 0, 0.0]), np.array([1, 1, 0, 0.0])
    # PPI++ at its (user-clustered) tuning lam is ppi_py's estimate at that lam.
    lam = row["ppi_lambda"]
    assert 0.0 <= lam <= 1.0
    assert row["ppi"] == pytest.approx(float(ppi_py.ppi_mean_pointestimate(y, yhat, yhat_u, lam=lam)[0]))
    # Two users: no interval (the one CI rule), and the row says why.
    assert row["ppi_ci"] == [None, None] and "too few users" in row["ci_note"]


def _synthetic(seed: int, *, n_users: int = 40, per_user: int = 30, se: float = 0.8, sp: float = 0.7,
               labelled: float = 0.3) -> tuple[pd.DataFrame, np.ndarray, np.ndarray, np.ndarray]:
    """Items with a known truth rate; a judge of known sensitivity/specificity labels all, humans some."""
    rng = np.random.default_rng(seed)
    n = n_users * per_user
    truth = rng.random(n) < TRUTH
    judge = np.where(truth, rng.random(n) < se, rng.random(n) >= sp)
    has_human = rng.random(n) < labelled
    users = np.repeat(np.arange(n_users), per_user)
    yes = {True: "yes", False: "no"}
    rows = [(f"i{k}", "llm1", "llm", yes[bool(judge[k])], f"u{users[k]}") for k in range(n)]
    rows += [(f"i{k}", "hm", "human_majority", yes[bool(truth[k])], f"u{users[k]}") for k in np.nonzero(has_human)[0]]
    return _frame(rows), truth[has_human].astype(float), judge[has_human].astype(float), \
        judge[~has_human].astype(float)


def test_ppi_matches_ppi_py_on_synthetic_data() -> None:
    frame, y, yhat, yhat_u = _synthetic(11)
    [row] = estimate_rows(frame, "d")
    # Our rows are assembled from the tidy frame; ppi_py gets the generator's arrays directly, at our lam.
    lam = row["ppi_lambda"]
    assert 0.0 < lam < 1.0
    assert row["ppi"] == pytest.approx(float(ppi_py.ppi_mean_pointestimate(y, yhat, yhat_u, lam=lam)[0]))
    # Items here are independent (no user effect): the user-clustered interval is about as wide as ppi_py's
    # item-level one at the same lam, not a different order of magnitude.
    lo, hi = (float(b[0]) for b in ppi_py.ppi_mean_ci(y, yhat, yhat_u, alpha=0.05, lam=lam))
    assert 0.7 < (row["ppi_ci"][1] - row["ppi_ci"][0]) / (hi - lo) < 1.4
    assert row["n_both"] == len(y) and row["n_judge"] == len(y) + len(yhat_u)


@pytest.mark.slow
def test_coverage_with_a_known_truth() -> None:
    # The judge over-calls (apparent rate .2 * .8 + .8 * .3 = .40 against a truth of .20): the naive CI should
    # almost never cover the truth; the corrected ones should, about 95% of the time.
    covered = {"naive": 0, "rogan_gladen": 0, "ppi": 0, "human_only": 0}
    runs = 50
    for seed in range(runs):
        [row] = estimate_rows(_synthetic(seed)[0], "d")
        for key in covered:
            lo, hi = row[f"{key}_ci"]
            covered[key] += lo <= TRUTH <= hi
    assert covered["naive"] <= 0.05 * runs
    for key in ("rogan_gladen", "ppi", "human_only"):
        assert covered[key] >= 0.85 * runs, (key, covered)


def test_rogan_gladen_ci_carries_sensitivity_and_specificity_uncertainty() -> None:
    # Few human labels (5%): sensitivity and specificity are uncertain, so the corrected CI must be wider than
    # the naive CI pushed through the correction with sensitivity and specificity held at their point values.
    [row] = estimate_rows(_synthetic(5, labelled=0.05)[0], "d")
    fixed = rogan_gladen(np.array(row["naive_ci"]), row["sensitivity"], row["specificity"])
    assert row["rogan_gladen_ci"][1] - row["rogan_gladen_ci"][0] > 2 * float(fixed[1] - fixed[0])


def test_recenter(recenter_db: Path) -> None:
    from personagap.store import load_labels, opened

    with opened(recenter_db, read_only=True) as con:
        labels = load_labels(con, stage="relevance")
    rows = estimate_rows(labels, "recenter-stage2")
    assert len(rows) >= 2
    for r in rows:
        lo, hi = r["human_only_ci"]
        assert r["naive"] > hi  # the LLMs select far more attributes than humans do
        # The correction moves the estimate from the judge's rate towards the humans'.
        assert abs(r["rogan_gladen"] - r["human_only"]) < abs(r["naive"] - r["human_only"])
        assert r["rogan_gladen_ci"][0] <= r["rogan_gladen"] <= r["rogan_gladen_ci"][1]
        assert r["n_judge"] > r["n_both"] > 0
    pilot = estimate_rows(labels, "recenter-pilot")
    # Where every judged item is human-labelled, Rogan–Gladen recovers the human rate exactly (algebra, not fit).
    for r in (r for r in pilot if r["n_judge"] == r["n_both"]):
        assert r["rogan_gladen"] == pytest.approx(r["human_only"])


def test_a_label_the_dataset_does_not_use_gives_no_rows() -> None:
    rows = [("i1", "hm", "human_majority", "A", "u1"), ("i1", "llm1", "llm", "B", "u1"),
            ("i2", "hm", "human_majority", "B", "u2"), ("i2", "llm1", "llm", "B", "u2")]
    assert estimate_rows(_frame(rows), "d") == []  # no "yes" anywhere: a yes-rate means nothing here
    [row] = estimate_rows(_frame(rows), "d", positive="A")
    assert row["quantity"] == "A_rate" and row["naive"] == 0.0 and row["human_only"] == 0.5


def test_positive_label_per_item() -> None:
    # Stage 3: the personalised answer is A on i1, i2 and B on i3, i4. Humans prefer A, B, B, A: the personalised
    # answer wins on i1 and i3 (hit rate 2/4). The judge always says A: hits on i1, i2 (naive 2/4); against the
    # humans' hits (y, n, y, n) its hits (y, y, n, n) give sensitivity 1/2, specificity 1/2 -> se + sp = 1: no
    # Rogan–Gladen estimate (the judge says nothing about which answer people prefer).
    personalised = pd.Series({"i1": "A", "i2": "A", "i3": "B", "i4": "B"})
    rows = [(i, "hm", "human_majority", h, "u" + i) for i, h in zip(personalised.index, "ABBA", strict=True)]
    rows += [(i, "llm1", "llm", "A", "u" + i) for i in personalised.index]
    rows += [("i5", "hm", "human_majority", "A", "u5"), ("i5", "llm1", "llm", "A", "u5")]  # no target: left out
    [row] = estimate_rows(_frame(rows), "d", positive_by_item=personalised, quantity="personalised_preferred")
    assert row["quantity"] == "personalised_preferred"
    assert row["human_only"] == 0.5 and row["naive"] == 0.5 and row["n_human"] == 4 and row["n_judge"] == 4
    assert row["sensitivity"] == 0.5 and row["specificity"] == 0.5 and row["rogan_gladen"] is None
