"""Ordinal table metrics (weighted kappa, Spearman, mean absolute difference, ordinal alpha) and scale_estimates.

Each is checked against its reference library on random ratings and against values worked out by hand.
"""

from __future__ import annotations

import krippendorff
import numpy as np
import pandas as pd
import pytest
from scipy.stats import spearmanr
from sklearn.metrics import cohen_kappa_score

from personagap.analysis.agreement import (
    cluster_tables,
    estimates,
    get_metric,
)
from personagap.analysis.panel import scale_estimates, scale_metrics
from personagap.records import DatasetScale
from tests.support.ci_oracle import rule_interval

LEVELS = [1, 2, 3, 4, 5]


def _table(human: list[int], judge: list[int], levels: list[int]) -> np.ndarray:
    t = np.zeros((len(levels), len(levels)))
    for h, j in zip(human, judge, strict=True):
        t[levels.index(h), levels.index(j)] += 1
    return t


def _ratings(seed: int, n: int = 60) -> tuple[list[int], list[int]]:
    rng = np.random.default_rng(seed)
    human = rng.integers(1, 6, n)
    # A judge that is right or one level off most of the time: correlated, not identical.
    judge = np.clip(human + rng.integers(-2, 3, n) * (rng.random(n) < 0.6), 1, 5)
    return human.tolist(), judge.tolist()


@pytest.mark.parametrize("seed", range(8))
def test_ordinal_metrics_match_the_reference_libraries_on_random_ratings(seed: int) -> None:
    human, judge = _ratings(seed)
    t = _table(human, judge, LEVELS)
    levels = np.array(LEVELS, dtype=float)
    wk = get_metric("weighted_kappa").on(t, levels)
    assert wk == pytest.approx(cohen_kappa_score(human, judge, labels=LEVELS, weights="quadratic"))
    assert get_metric("spearman").on(t) == pytest.approx(spearmanr(human, judge).statistic)
    assert get_metric("mean_abs_diff").on(t, levels) == pytest.approx(np.mean(np.abs(np.subtract(human, judge))))
    assert get_metric("alpha").on(t) == pytest.approx(
        krippendorff.alpha(reliability_data=np.array([human, judge], dtype=float), level_of_measurement="ordinal"))


def test_hand_worked_values() -> None:
    # Human 1, 2, 3; judge 1, 3, 3 on levels 1..3.
    # Weighted kappa: observed cost = (2-3)^2 = 1; human margins (1,1,1), judge margins (1,0,2),
    # expected cost = sum_ij h_i j_j (i-j)^2 / 3 = (1*2*4 + 1*1*1 + 1*2*1 + 1*1*4) / 3 = 15/3 = 5 -> 1 - 1/5 = 0.8.
    # Spearman: ranks (1, 2, 3) and (1, 2.5, 2.5): cov 1.5, variances 2 and 1.5 -> 1.5 / sqrt(3) = sqrt(3)/2.
    # Mean absolute difference: (0 + 1 + 0) / 3.
    t = _table([1, 2, 3], [1, 3, 3], [1, 2, 3])
    levels = np.array([1.0, 2.0, 3.0])
    assert get_metric("weighted_kappa").on(t, levels) == pytest.approx(0.8)
    assert get_metric("spearman").on(t) == pytest.approx(np.sqrt(3) / 2)
    assert get_metric("mean_abs_diff").on(t, levels) == pytest.approx(1 / 3)


def test_weighted_kappa_reads_the_levels_values_and_equals_sklearn_when_equally_spaced() -> None:
    human, judge = _ratings(3)
    t = _table(human, judge, LEVELS)
    # Equally spaced levels in other units (0, 0.25, ..., 1): the same kappa as sklearn's index weights.
    spaced = get_metric("weighted_kappa").on(t, np.linspace(0.0, 1.0, 5))
    assert spaced == pytest.approx(cohen_kappa_score(human, judge, weights="quadratic"))
    # Unequal spacing (1, 2, 3, 4, 10): weights follow the values, so it differs from sklearn's index weights;
    # sklearn's own score on the values themselves (as numbers) gives it.
    uneven = [1, 2, 3, 4, 10]
    remap = dict(zip(LEVELS, uneven, strict=True))
    h, j = [remap[v] for v in human], [remap[v] for v in judge]
    ours = get_metric("weighted_kappa").on(t, np.array(uneven, dtype=float))
    by_hand_weights = np.subtract.outer(uneven, uneven) ** 2.0
    expected = np.outer(t.sum(axis=1), t.sum(axis=0)) / t.sum()
    assert ours == pytest.approx(1 - (by_hand_weights * t).sum() / (by_hand_weights * expected).sum())
    assert ours != pytest.approx(cohen_kappa_score(h, j, weights="quadratic"))
    # Mean absolute difference is in the values' units.
    assert get_metric("mean_abs_diff").on(t, np.array(uneven, dtype=float)) == pytest.approx(
        np.mean(np.abs(np.subtract(h, j))))


def test_undefined_cases_are_nan() -> None:
    one_level = _table([2, 2, 2], [2, 2, 2], [1, 2, 3])
    empty = np.zeros((3, 3))
    for name in ("weighted_kappa", "spearman", "alpha"):
        assert np.isnan(get_metric(name).on(one_level, np.array([1.0, 2.0, 3.0])))
    for name in ("weighted_kappa", "spearman", "mean_abs_diff", "alpha"):
        assert np.isnan(get_metric(name).on(empty, np.array([1.0, 2.0, 3.0])))


def test_ci_of_ordinal_metrics_is_the_jackknife_t_of_the_metric_without_each_user() -> None:
    human, judge = _ratings(5, n=80)
    users = [f"u{i % 12}" for i in range(80)]
    codes = [[LEVELS.index(v) for v in col] for col in (human, judge)]
    tables, _ = cluster_tables(codes[0], codes[1], users, 5)
    levels = np.array(LEVELS, dtype=float)
    est = estimates(tables, ("weighted_kappa", "spearman"), levels=levels)
    total = tables.sum(axis=0)
    loop = np.array([cohen_kappa_score(*_expand(total - t), labels=list(range(5)), weights="quadratic")
                     for t in tables])
    point = cohen_kappa_score(*_expand(total), labels=list(range(5)), weights="quadratic")
    # weighted_kappa is registered with the range (-inf, 1): the rule builds its interval on the -log(1 - x) scale
    # with Satterthwaite degrees of freedom (tests/support/ci_oracle.py), then maps it back.
    assert est["weighted_kappa"].value == pytest.approx(point)
    assert est["weighted_kappa"].ci == pytest.approx(rule_interval(point, [float(x) for x in loop], (-np.inf, 1.0)))
    assert est["spearman"].value == pytest.approx(spearmanr(human, judge).statistic)
    # Spearman's rho is registered with (-1, 1): Fisher's z scale; without each user by scipy on the other items.
    h, j, u = np.array(human), np.array(judge), np.array(users)
    rho = [float(spearmanr(h[u != k], j[u != k]).statistic) for k in sorted(set(users))]
    assert est["spearman"].ci == pytest.approx(rule_interval(spearmanr(h, j).statistic, rho, (-1.0, 1.0)))


def _expand(table: np.ndarray) -> tuple[list[int], list[int]]:
    h, j = [], []
    for (a, b), n in np.ndenumerate(table.astype(int)):
        h += [a] * n
        j += [b] * n
    return h, j


def test_scale_estimates_follow_the_scale() -> None:
    human, judge = _ratings(7)
    users = pd.Series([f"u{i % 6}" for i in range(len(human))])
    scale = DatasetScale(kind="ordinal", categories=("1", "2", "3", "4", "5"))
    # Labels written as 3.0 are the level 3.
    est = scale_estimates(pd.Series([f"{v}.0" for v in human]), pd.Series([str(v) for v in judge]), users, scale)
    assert set(est) == set(scale_metrics(scale))
    assert {"weighted_kappa", "alpha", "spearman", "mean_abs_diff"} <= set(est)
    assert "prevalence_index" not in est
    assert est["weighted_kappa"].value == pytest.approx(cohen_kappa_score(human, judge, weights="quadratic"))
    assert est["kappa"].value == pytest.approx(cohen_kappa_score(human, judge))
    three = DatasetScale(kind="nominal", categories=("maybe", "no", "yes"))
    assert "weighted_kappa" not in scale_metrics(three) and "bias_index" not in scale_metrics(three)
    assert "bias_index" in scale_metrics(DatasetScale(kind="nominal", categories=("no", "yes")))
    with pytest.raises(ValueError, match="not on the ordinal scale"):
        scale_estimates(pd.Series(["1", "7"]), pd.Series(["1", "2"]), pd.Series(["a", "b"]), scale)
