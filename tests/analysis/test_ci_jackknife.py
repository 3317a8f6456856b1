"""The one CI rule (analysis/agreement.cluster_estimate): a user-clustered jackknife-t, checked against a small
example whose leave-one-user-out values are worked out here with plain numpy, independently of the code path."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from personagap.analysis import agreement as ag
from personagap.analysis.ci_rule import IntervalRule


def _kappa_2x2(t: np.ndarray) -> float:
    # Cohen's kappa of one 2x2 table written out cell by cell (not the library's vectorised form).
    n = t.sum()
    po = (t[0, 0] + t[1, 1]) / n
    pe = (t[0].sum() * t[:, 0].sum() + t[1].sum() * t[:, 1].sum()) / (n * n)
    return float((po - pe) / (1 - pe))


USERS = np.array([[[5, 1], [2, 4]], [[3, 2], [0, 6]], [[7, 0], [1, 1]], [[2, 3], [2, 5]], [[4, 1], [1, 3]],
                  [[6, 2], [3, 2]]], dtype=float)


def _hand_jackknife_t(users: np.ndarray, fisher_z: bool = False, level: float = 0.95) -> tuple[float, float, float]:
    # The rule written out: leave-one-user-out values (on Fisher's z scale when the figure's range is (-1, 1)), the
    # jackknife SE, a t quantile on Satterthwaite's degrees of freedom (sum d^2)^2 / sum d^4 capped at users - 1.
    u = len(users)
    g = math.atanh if fisher_z else (lambda x: x)
    leave = [g(_kappa_2x2(sum(users[v] for v in range(u) if v != k))) for k in range(u)]
    mean = sum(leave) / u
    dev2 = [(x - mean) ** 2 for x in leave]
    se = math.sqrt((u - 1) / u * sum(dev2))
    df = min(u - 1, sum(dev2) ** 2 / sum(d * d for d in dev2))
    point = _kappa_2x2(users.sum(axis=0))
    half = stats.t.ppf(0.5 + level / 2, df) * se
    back = math.tanh if fisher_z else (lambda x: x)
    return point, back(g(point) - half), back(g(point) + half)


def test_jackknife_t_of_kappa_matches_a_hand_computation() -> None:
    # Six users: the rule itself (below the printed minimum, as the calibration harness measures it).
    point, lo, hi = _hand_jackknife_t(USERS)
    value, theta = ag.leave_one_out(ag.kappa_from_tables, USERS)
    est = ag.interval_from_leave_outs(value, theta, min_users=2)
    assert est.value == pytest.approx(point) and est.ci == pytest.approx((lo, hi))
    # Twelve users (the six twice, shifted): what cluster_estimate and estimates() print.
    twelve = np.concatenate([USERS, USERS[:, ::-1, ::-1] + 1])
    point, lo, hi = _hand_jackknife_t(twelve, fisher_z=True)
    est = ag.cluster_estimate(ag.kappa_from_tables, twelve, bounds=(-1.0, 1.0))
    assert est.value == pytest.approx(point)
    assert est.ci == pytest.approx((lo, hi))
    assert est.n_clusters == 12 and est.n_undefined == 0
    assert ag.estimates(twelve, ("kappa",))["kappa"] == est
    # On Fisher's z scale the interval is not symmetric about the point.
    assert abs((est.ci[1] - est.value) - (est.value - est.ci[0])) > 1e-3


def test_level_widens_the_interval_by_the_t_quantile_ratio() -> None:
    twelve = np.concatenate([USERS, USERS + 1])
    e95 = ag.cluster_estimate(ag.kappa_from_tables, twelve)
    e80 = ag.cluster_estimate(ag.kappa_from_tables, twelve, level=0.80)
    ratio = (e95.ci[1] - e95.ci[0]) / (e80.ci[1] - e80.ci[0])
    _, theta = ag.leave_one_out(ag.kappa_from_tables, twelve)
    d2 = (theta - theta.mean()) ** 2
    df = min(11.0, d2.sum() ** 2 / (d2 * d2).sum())
    assert df < 11.0  # the test would not tell the degrees of freedom apart otherwise
    assert ratio == pytest.approx(stats.t.ppf(0.975, df) / stats.t.ppf(0.90, df))


def test_no_interval_below_the_minimum_users_and_the_reason_is_printed() -> None:
    few = USERS[: ag.MIN_USERS_FOR_CI - 1]
    est = ag.cluster_estimate(ag.kappa_from_tables, few)
    assert est.value == pytest.approx(_kappa_2x2(few.sum(axis=0)))
    assert math.isnan(est.ci[0]) and math.isnan(est.ci[1]) and est.too_few_users
    assert "too few users for a CI" in ag.ci_text(est)
    many = np.concatenate([USERS] * (ag.MIN_USERS_FOR_CI // len(USERS) + 1))
    enough = ag.cluster_estimate(ag.kappa_from_tables, many[: ag.MIN_USERS_FOR_CI])
    assert not math.isnan(enough.ci[0]) and not enough.too_few_users


def test_an_undefined_leave_out_gives_no_interval_and_is_counted() -> None:
    # Only user 0 has any human "yes": without it recall is undefined, so its spread cannot be estimated.
    tables = np.zeros((12, 2, 2))
    tables[:, 0, 0] = 5.0
    tables[0, 1, 1] = 3.0
    tables[0, 1, 0] = 1.0
    est = ag.estimates(tables, ("recall",))["recall"]
    assert est.value == pytest.approx(0.75)
    assert math.isnan(est.ci[0]) and est.n_undefined == 1


def test_vectorised_over_extra_cells_with_ratio_statistics() -> None:
    # A ratio of sums (numerator, denominator per user): the jackknife of the pooled ratio.
    # Users' sizes (8-26) unequal, but not so unequal that 12 users are too few (ci_rule.UNEQUAL_ITEMS_CV).
    per = np.array([[3.0, 10.0], [2.0, 6.0], [6.0, 20.0], [2.0, 9.0], [5.0, 12.0], [2.0, 6.0], [4.0, 7.0],
                    [3.0, 5.0], [0.0, 5.0], [7.0, 15.0], [1.0, 6.0], [3.0, 3.0]])

    def ratio(t: np.ndarray) -> np.ndarray:
        return np.asarray(t[..., 0] / t[..., 1])

    u = len(per)
    leave = [(per[:, 0].sum() - per[k, 0]) / (per[:, 1].sum() - per[k, 1]) for k in range(u)]
    se = np.std(leave) * math.sqrt(u - 1)  # sqrt((u-1)/u * sum (x - mean)^2) = std * sqrt(u - 1)
    d2 = (np.array(leave) - np.mean(leave)) ** 2
    df = min(u - 1, d2.sum() ** 2 / (d2 * d2).sum())
    est = ag.cluster_estimate(ratio, per)
    assert est.ci[1] - est.value == pytest.approx(stats.t.ppf(0.975, df) * se)


def test_bad_input_is_one_clear_error() -> None:
    with pytest.raises(ValueError, match="user axis"):
        ag.cluster_estimate(ag.kappa_from_tables, np.float64(3.0))
    with pytest.raises(ValueError, match="level"):
        ag.cluster_estimate(ag.kappa_from_tables, USERS, level=95)


def test_one_heavy_user_leaves_few_degrees_of_freedom() -> None:
    # Eleven light users alike and one user with most of the items who differs: the leave-one-out spread comes from
    # that one user, so the interval must be far wider than users - 1 degrees of freedom would make it.
    light = np.tile(np.array([[[3.0, 1.0], [1.0, 3.0]]]), (11, 1, 1)) + np.arange(11)[:, None, None] % 2
    heavy = np.array([[[200.0, 10.0], [150.0, 40.0]]])
    tables = np.concatenate([light, heavy])
    point, theta = ag.leave_one_out(ag.accuracy_from_tables, tables)
    new = ag.interval_from_leave_outs(point, theta)
    old = ag.interval_from_leave_outs(point, theta, rule=IntervalRule(df="users", transform=False))
    assert new.effective_users is not None and new.effective_users < 3.0
    assert (new.ci[1] - new.ci[0]) > 3 * (old.ci[1] - old.ci[0])


@pytest.mark.parametrize("column", [0, 1])
def test_a_sample_with_no_spread_over_users_gets_no_zero_width_interval(column: int) -> None:
    # No human "yes" anywhere (column 1) or every judge answer "no" (column 0): every leave-one-out figure equals the
    # point, and the jackknife would print [x, x]; the rule prints no interval and says why.
    tables = np.zeros((20, 2, 2))
    tables[:, 0, 0] = 4.0
    tables[:5, 0, 1] = 1.0 if column else 0.0
    for metric in ("human_yes_rate", "kappa", "accuracy", "judge_yes_rate"):
        est = ag.estimates(tables, (metric,))[metric]
        if math.isnan(est.value):
            continue
        assert math.isnan(est.ci[0]) or est.ci[1] - est.ci[0] > 1e-9, metric
        if math.isnan(est.ci[0]):
            assert "no CI" in ag.ci_text(est)
