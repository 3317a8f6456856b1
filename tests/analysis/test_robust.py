"""Prevalence-robust agreement panel: hand-worked tables, irrcac and scikit-learn, real data."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import scipy.stats
from irrCAC.raw import CAC
from sklearn.metrics import balanced_accuracy_score, matthews_corrcoef

from personagap.analysis.agreement import estimate, kappa_from_tables
from personagap.analysis.robust import (
    BASE_RATE_JUDGE,
    ac1_from_tables,
    balanced_accuracy_from_tables,
    base_rate_panel,
    bias_index_from_tables,
    human_reference,
    mcc_from_tables,
    pabak_from_tables,
    panel_fields,
    prevalence_index_from_tables,
)
from tests.support.oracles import panel_rows

# The kappa paradox, worked by hand. 100 items; table[h, j] (human row, judge column):
#                judge no  judge yes
#   human no        90         5
#   human yes        5         0
# po = 0.90. Marginals: both raters 95 no / 5 yes.
# kappa: pe = 0.95^2 + 0.05^2 = 0.905 -> (0.90 - 0.905) / 0.095 = -0.05263   (near zero, even negative)
# PABAK: 2 * 0.90 - 1 = 0.80
# AC1:   pi_no = 0.95, pi_yes = 0.05; pe = 2 * 0.95 * 0.05 / (2 - 1) = 0.095 -> (0.90 - 0.095) / 0.905 = 0.88950
# MCC:   (90 * 100 - (95 * 95 + 5 * 5)) / sqrt((100^2 - 9050) * (100^2 - 9050)) = -50 / 950 = -0.05263
# balanced accuracy: (90/95 + 0/5) / 2 = 0.47368
# prevalence index: (0 - 90) / 100 = -0.90; bias index: (5 - 5) / 100 = 0
PARADOX = np.array([[90.0, 5.0], [5.0, 0.0]])


def test_paradox_table_by_hand() -> None:
    assert kappa_from_tables(PARADOX) == pytest.approx(-0.05 / 0.95)
    assert pabak_from_tables(PARADOX) == pytest.approx(0.80)
    assert ac1_from_tables(PARADOX) == pytest.approx(0.805 / 0.905)
    assert mcc_from_tables(PARADOX) == pytest.approx(-50 / 950)
    assert balanced_accuracy_from_tables(PARADOX) == pytest.approx((90 / 95) / 2)
    assert prevalence_index_from_tables(PARADOX) == pytest.approx(-0.90)
    assert bias_index_from_tables(PARADOX) == pytest.approx(0.0)


# A biased judge, by hand: 50 items, human yes 10, judge yes 25.
#                judge no  judge yes
#   human no        23        17
#   human yes        2         8
# po = 31/50 = 0.62; PABAK = 2 * 0.62 - 1 = 0.24
# bias index = (17 - 2) / 50 = +0.30 (the judge says yes 30 points more often); prevalence = (8 - 23)/50 = -0.30
# AC1: pi_yes = (10 + 25) / 100 = 0.35; pe = 2 * 0.35 * 0.65 = 0.455 -> (0.62 - 0.455) / 0.545 = 0.30275
BIASED = np.array([[23.0, 17.0], [2.0, 8.0]])


def test_biased_table_by_hand() -> None:
    assert pabak_from_tables(BIASED) == pytest.approx(0.24)
    assert bias_index_from_tables(BIASED) == pytest.approx(0.30)
    assert prevalence_index_from_tables(BIASED) == pytest.approx(-0.30)
    assert ac1_from_tables(BIASED) == pytest.approx(0.165 / 0.545)


def _pairs(table: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    h, j = np.nonzero(table)
    counts = table[h, j].astype(int)
    return np.repeat(h, counts), np.repeat(j, counts)


def _irr(table: np.ndarray) -> CAC:
    human, judge = _pairs(table)
    return CAC(pd.DataFrame({"human": human, "judge": judge}))


@pytest.mark.parametrize("seed", range(6))
def test_against_irrcac_and_sklearn(seed: int) -> None:
    rng = np.random.default_rng(seed)
    k = int(rng.integers(2, 5))
    table = rng.integers(0, 30, size=(k, k)).astype(float)
    table[np.arange(k), np.arange(k)] += 20  # every class used by both raters, as irrcac infers K from the data
    irr = _irr(table)
    assert ac1_from_tables(table) == pytest.approx(irr.gwet()["est"]["coefficient_value"], abs=1e-5)
    assert pabak_from_tables(table) == pytest.approx(irr.bp()["est"]["coefficient_value"], abs=1e-5)
    human, judge = _pairs(table)
    assert mcc_from_tables(table) == pytest.approx(matthews_corrcoef(human, judge))
    assert balanced_accuracy_from_tables(table) == pytest.approx(balanced_accuracy_score(human, judge))


def test_paradox_against_irrcac() -> None:
    irr = _irr(PARADOX)
    assert ac1_from_tables(PARADOX) == pytest.approx(irr.gwet()["est"]["coefficient_value"], abs=1e-5)
    assert pabak_from_tables(PARADOX) == pytest.approx(irr.bp()["est"]["coefficient_value"], abs=1e-5)


@pytest.mark.parametrize("seed", range(20))
def test_kappa_from_pabak_and_indices(seed: int) -> None:
    # Byrt et al. (1993): kappa = (PABAK - PI^2 + BI^2) / (1 - PI^2 + BI^2), for any 2x2 table.
    t = np.random.default_rng(seed).integers(0, 50, size=(2, 2)).astype(float) + 1
    pi, bi = prevalence_index_from_tables(t), bias_index_from_tables(t)
    assert kappa_from_tables(t) == pytest.approx((pabak_from_tables(t) - pi**2 + bi**2) / (1 - pi**2 + bi**2))


def test_batched_and_edge_cases() -> None:
    batch = np.stack([PARADOX, BIASED, np.zeros((2, 2))])
    ac1 = ac1_from_tables(batch)
    assert ac1[:2] == pytest.approx([float(ac1_from_tables(PARADOX)), float(ac1_from_tables(BIASED))])
    assert math.isnan(ac1[2])
    assert all(math.isnan(float(f(np.zeros((2, 2))))) for f in (ac1_from_tables, pabak_from_tables, mcc_from_tables,
                                                                 balanced_accuracy_from_tables))
    constant_judge = np.array([[81.0, 0.0], [19.0, 0.0]])  # says "no" to everything: 81% accurate
    human, judge = _pairs(constant_judge)
    # scikit-learn's convention gives 0; the correlation is undefined (a rater with one class), and a sample
    # without human "yes" would otherwise print 0 for a figure it says nothing about (issue 30).
    assert matthews_corrcoef(human, judge) == 0.0 and math.isnan(float(mcc_from_tables(constant_judge)))
    no_human_yes = np.array([[90.0, 10.0], [0.0, 0.0]])
    assert math.isnan(float(mcc_from_tables(no_human_yes)))
    # Balanced accuracy over the dataset's classes: with no human "yes" it is undefined, not the specificity 0.9.
    assert math.isnan(float(balanced_accuracy_from_tables(no_human_yes)))
    three = np.array([[5.0, 1.0, 0.0], [2.0, 4.0, 0.0], [0.0, 0.0, 0.0]])  # nobody used the third class
    assert math.isnan(float(balanced_accuracy_from_tables(three)))
    assert balanced_accuracy_from_tables(constant_judge) == pytest.approx(0.5)
    assert kappa_from_tables(constant_judge) == pytest.approx(0.0)
    with pytest.raises(ValueError, match="2x2"):
        prevalence_index_from_tables(np.ones((3, 3)))


def test_panel_fields_use_the_one_ci_rule() -> None:
    rng = np.random.default_rng(1)
    tables = rng.integers(0, 6, size=(25, 2, 2)).astype(float)
    panel = panel_fields(tables)
    assert set(panel) == {"ac1", "ac1_ci", "pabak", "pabak_ci", "mcc", "mcc_ci", "balanced_accuracy",
                          "balanced_accuracy_ci", "prevalence_index", "bias_index"}
    for name in ("ac1", "pabak", "mcc", "balanced_accuracy"):
        assert panel[name] == pytest.approx(estimate(tables, name).value)
        lo, hi = panel[f"{name}_ci"]
        assert lo <= panel[name] <= hi and lo < hi
    # The CI is the jackknife-t over users on Fisher's z scale (AC1 lies in (-1, 1)) with Satterthwaite's degrees of
    # freedom: AC1 without each user in turn, worked out here.
    total = tables.sum(axis=0)
    leave = np.arctanh(np.array([ac1_from_tables(total - t) for t in tables]))
    d2 = (leave - leave.mean()) ** 2
    df = min(24.0, d2.sum() ** 2 / (d2 * d2).sum())
    half = scipy.stats.t.ppf(0.975, df) * np.sqrt(24 / 25 * d2.sum())
    z = np.arctanh(panel["ac1"])
    assert panel["ac1_ci"] == pytest.approx([np.tanh(z - half), np.tanh(z + half)])
    three = panel_fields(rng.integers(1, 6, size=(10, 3, 3)).astype(float))
    assert math.isnan(three["prevalence_index"]) and not math.isnan(three["ac1"])


def test_base_rate_judge_is_chance_level() -> None:
    tables = np.array([[[30.0, 3.0], [4.0, 5.0]], [[40.0, 2.0], [6.0, 10.0]]])  # 70 no, 25 yes by humans
    base = base_rate_panel(tables)
    assert base["majority_class"] == 0
    assert base["kappa"] == pytest.approx(0.0) and math.isnan(base["mcc"])  # a constant judge: no correlation
    assert base["accuracy"] == pytest.approx(75 / 100)
    assert base["balanced_accuracy"] == pytest.approx(0.5)
    assert base["pabak"] == pytest.approx(0.5) and base["bias_index"] == pytest.approx(-0.25)


def test_reference_ties_give_no_reference() -> None:
    rows = [("i1", "a", "yes"), ("i1", "b", "yes"), ("i1", "c", "no"),
            ("i2", "a", "yes"), ("i2", "b", "no"),  # a tie: undecided
            ("i3", "a", "no")]
    labels = pd.DataFrame([{"item_id": i, "rater": r, "rater_kind": "human", "condition": "", "label": lab,
                            "user_id": "u", "dataset": "d"} for i, r, lab in rows])
    labels.loc[len(labels)] = {"item_id": "i2", "rater": "x", "rater_kind": "human", "condition": "shown-llm",
                               "label": "yes", "user_id": "u", "dataset": "d"}
    ref = human_reference(labels)
    assert ref["label"].to_dict() == {"i1": "yes", "i3": "no"}
    assert human_reference(labels, "anchored")["label"].to_dict() == {"i2": "yes"}


def test_panel_rows_on_recenter(recenter_labels: pd.DataFrame) -> None:
    rows = panel_rows(recenter_labels, "recenter-stage2")
    judges = {r["judge"]: r for r in rows}
    base = judges.pop(BASE_RATE_JUDGE)
    assert judges, "the imported LLMs have rows"
    assert base["kappa"] == pytest.approx(0.0) and math.isnan(base["mcc"])
    assert base["prevalence_index"] < -0.3  # humans say "no" to most attributes
    for r in judges.values():
        assert r["n"] > 100 and r["humans"] == "blind"
        assert r["bias_index"] > 0  # the study: LLMs select 2-3x more attributes than humans
        lo, hi = r["ac1_ci"]
        assert lo <= r["ac1"] <= hi
        # Byrt's identity on the pooled table ties the panel to the kappa reported beside it.
        pi, bi = r["prevalence_index"], r["bias_index"]
        assert r["kappa"] == pytest.approx((r["pabak"] - pi**2 + bi**2) / (1 - pi**2 + bi**2))


@pytest.fixture(scope="module")
def recenter_labels(recenter_db: Path) -> pd.DataFrame:
    from personagap.store import load_labels, opened

    with opened(recenter_db, read_only=True) as con:
        return load_labels(con, stage="relevance")


def test_panel_from_label_arrays_resamples_the_same_users_as_agreement() -> None:
    from personagap.analysis.agreement import agreement
    from personagap.analysis.robust import base_rate, panel

    rng = np.random.default_rng(4)
    users = rng.integers(0, 30, 600)
    human = (rng.random(600) < 0.2).astype(int)
    judge = np.where(rng.random(600) < 0.8, human, 1 - human)
    est = agreement(human, judge, users, metrics=("ac1", "mcc", "kappa"))
    p = panel(human, judge, users)
    assert p["ac1"] == pytest.approx(est["ac1"].value) and p["ac1_ci"] == pytest.approx(list(est["ac1"].ci))
    assert p["mcc_ci"] == pytest.approx(list(est["mcc"].ci))
    pi, bi = p["prevalence_index"], p["bias_index"]
    assert est["kappa"].value == pytest.approx((p["pabak"] - pi**2 + bi**2) / (1 - pi**2 + bi**2))
    base = base_rate(human, users)
    assert base["majority_class"] == 0 and base["accuracy"] == pytest.approx(1 - human.mean())
    # String labels go through the same encoding as agreement(): "no" < "yes".
    words = np.where(human == 1, "yes", "no")
    assert panel(words, np.where(judge == 1, "yes", "no"), users)["ac1"] == p["ac1"]
