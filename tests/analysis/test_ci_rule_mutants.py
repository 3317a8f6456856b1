"""Mutation-killing tests of the one CI rule (analysis/ci_rule.py, the `ci` set of .ci/mutation).

Each expected value is computed here independently of the rule: the jackknife-t by plain numpy and scipy's t
quantile, the printed text from the format the reports document (``[lo, hi; N users]``), sums by a Python loop.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest
from scipy import stats

from personagap.analysis import ci_rule as cr

MIN = cr.MIN_USERS_FOR_CI


def _theta(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(0.5, 0.1, n)


def _hand_interval(point: float, theta: np.ndarray, level: float) -> tuple[float, float]:
    # SE = sqrt((n - 1) / n * sum (theta - mean)^2), written as a loop over the leave-outs; the t quantile on
    # Satterthwaite's degrees of freedom (sum d^2)^2 / sum d^4, never more than n - 1.
    n = len(theta)
    mean = sum(theta) / n
    squares = [(x - mean) ** 2 for x in theta]
    se = math.sqrt((n - 1) / n * sum(squares))
    df = min(n - 1, sum(squares) ** 2 / sum(q * q for q in squares))
    half = stats.t.ppf(1 - (1 - level) / 2, df) * se
    return point - half, point + half


def _hand_logit_interval(point: float, theta: np.ndarray, level: float) -> tuple[float, float]:
    # A rate's interval: the same rule on the logit scale, mapped back with the logistic function.
    def logit(p: float) -> float:
        return math.log(p / (1 - p))

    lo, hi = _hand_interval(logit(point), np.array([logit(x) for x in theta]), level)
    return 1 / (1 + math.exp(-lo)), 1 / (1 + math.exp(-hi))


def test_a_rate_is_built_on_the_logit_scale_and_a_correlation_on_fishers_z() -> None:
    theta = np.clip(_theta(MIN + 2, seed=5) - 0.4, 0.01, 0.99)  # rates near 0: a rare event
    est = cr.interval_from_leave_outs(0.1, theta, bounds=(0.0, 1.0))
    assert est.ci == pytest.approx(_hand_logit_interval(0.1, theta, 0.95), rel=1e-9)
    assert est.ci[0] > 0.0 and est.ci[1] - 0.1 > 0.1 - est.ci[0]  # inside the range, longer towards the middle
    z = cr.interval_from_leave_outs(0.5, theta, bounds=(-1.0, 1.0))
    lo, hi = _hand_interval(math.atanh(0.5), np.arctanh(theta), 0.95)
    assert z.ci == pytest.approx((math.tanh(lo), math.tanh(hi)), rel=1e-9)
    # The rule before issue 30 (users - 1, no transform) stays reachable for the harness, and differs.
    old = cr.interval_from_leave_outs(0.1, theta, bounds=(0.0, 1.0), rule=cr.IntervalRule("users", False))
    assert old.ci != pytest.approx(est.ci)


def test_a_figure_at_its_bound_gets_no_interval_and_a_reason() -> None:
    theta = np.zeros(MIN + 1)
    est = cr.interval_from_leave_outs(0.0, theta, bounds=(0.0, 1.0))
    assert math.isnan(est.ci[0]) and "edge of its range (0)" in est.reason
    assert cr.ci_text(est).startswith("[no CI: the figure is at the edge")
    flat = cr.interval_from_leave_outs(0.3, np.full(MIN + 1, 0.3))
    assert math.isnan(flat.ci[0]) and "does not change" in flat.reason
    # A corrected rate can fall below 0 (PPI++): outside the range, the logit is undefined and so is the interval.
    beyond = cr.interval_from_leave_outs(-0.02, np.linspace(-0.05, 0.05, MIN + 1), bounds=(0.0, 1.0))
    assert math.isnan(beyond.ci[0])
    assert beyond.reason == "the figure or a leave-one-out value lies outside its range (0, 1)"


# interval_from_leave_outs ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("level", [0.5, 0.8, 0.95, 0.99])
def test_interval_is_the_jackknife_t_at_each_level(level: float) -> None:
    theta = _theta(MIN + 3)
    est = cr.interval_from_leave_outs(0.5, theta, level)
    assert est.ci == pytest.approx(_hand_interval(0.5, theta, level), rel=1e-12)
    assert est.value == 0.5 and est.n_clusters == MIN + 3 and est.n_undefined == 0


@pytest.mark.parametrize("level", [0.0, 1.0, -0.5, 1.5, 95.0])
def test_a_level_outside_zero_one_is_one_clear_error(level: float) -> None:
    with pytest.raises(ValueError, match=f"^level must be in \\(0, 1\\), got {level}$"):
        cr.interval_from_leave_outs(0.5, _theta(MIN), level)


def test_the_default_minimum_is_min_users_for_ci() -> None:
    below = cr.interval_from_leave_outs(0.5, _theta(MIN - 1))
    at = cr.interval_from_leave_outs(0.5, _theta(MIN))
    assert math.isnan(below.ci[0]) and math.isnan(below.ci[1])
    assert below.n_clusters == MIN - 1 and below.n_undefined == 0 and below.value == 0.5
    assert at.ci == pytest.approx(_hand_interval(0.5, _theta(MIN), 0.95))


def test_an_explicit_minimum_replaces_the_default_and_is_never_below_two() -> None:
    # A minimum of 3: two users get no interval, three do (below MIN_USERS_FOR_CI, as the harness measures).
    assert math.isnan(cr.interval_from_leave_outs(0.5, _theta(2), min_users=3).ci[0])
    three = _theta(3)
    assert cr.interval_from_leave_outs(0.5, three, min_users=3).ci == pytest.approx(_hand_interval(0.5, three, 0.95))
    # A minimum of 0 or 1 means 2: one user has no spread (t with 0 degrees of freedom), two users do.
    for low in (0, 1):
        one = cr.interval_from_leave_outs(0.5, _theta(1), min_users=low)
        assert math.isnan(one.ci[0]) and math.isnan(one.ci[1]) and one.n_clusters == 1
        two = _theta(2)
        assert cr.interval_from_leave_outs(0.5, two, min_users=low).ci == pytest.approx(_hand_interval(0.5, two, 0.95))


def test_an_undefined_point_gives_no_interval_and_no_undefined_count() -> None:
    est = cr.interval_from_leave_outs(float("nan"), _theta(MIN + 1))
    assert math.isnan(est.value) and math.isnan(est.ci[0]) and math.isnan(est.ci[1])
    assert est.n_clusters == MIN + 1 and est.n_undefined == 0


def test_undefined_leave_outs_give_no_interval_and_are_counted() -> None:
    theta = _theta(MIN + 2)
    theta[[1, 4]] = np.nan
    est = cr.interval_from_leave_outs(0.5, theta)
    assert math.isnan(est.ci[0]) and math.isnan(est.ci[1])
    assert est.n_undefined == int(np.isnan(theta).sum()) and est.n_clusters == len(theta) and est.value == 0.5


def test_bounds_cut_each_end_only_where_it_passes_the_range() -> None:
    theta = _theta(MIN, seed=3) * 20  # a wide spread: the interval passes both ends of (0.3, 0.7)
    lo, hi = _hand_interval(0.5, theta, 0.95)
    assert lo < 0.3 and hi > 0.7
    assert cr.interval_from_leave_outs(0.5, theta, bounds=(0.3, 0.7)).ci == (0.3, 0.7)
    # A range that cuts one end only leaves the other end the jackknife's.
    assert cr.interval_from_leave_outs(0.5, theta, bounds=(lo + 0.01, hi + 1)).ci == pytest.approx((lo + 0.01, hi))
    assert cr.interval_from_leave_outs(0.5, theta, bounds=(lo - 1, hi - 0.01)).ci == pytest.approx((lo, hi - 0.01))


# leave_one_out, cluster_estimate, per_cluster_sums --------------------------------------------------------------


def _ratio(t: np.ndarray) -> np.ndarray:
    return np.asarray(t[..., 0] / t[..., 1])


PER = np.random.default_rng(7).integers(1, 20, size=(MIN + 4, 2)).astype(float)


def test_leave_one_out_is_the_figure_without_each_user() -> None:
    point, theta = cr.leave_one_out(_ratio, PER)
    assert point == pytest.approx(PER[:, 0].sum() / PER[:, 1].sum())
    by_loop = [sum(PER[v, 0] for v in range(len(PER)) if v != u) / sum(PER[v, 1] for v in range(len(PER)) if v != u)
               for u in range(len(PER))]
    assert theta == pytest.approx(by_loop)
    assert isinstance(point, float)


def test_per_user_scalars_are_a_user_axis_of_their_own() -> None:
    # One additive number per user (U,): the figure is a function of the scalar total (here the total itself).
    per = np.arange(1.0, MIN + 3)
    point, theta = cr.leave_one_out(lambda t: np.asarray(t, dtype=float), per)
    assert point == sum(per) and theta.tolist() == [sum(per) - x for x in per]
    est = cr.cluster_estimate(lambda t: np.asarray(t, dtype=float), per)
    assert est.ci == pytest.approx(_hand_interval(point, theta, 0.95))


def test_leave_one_out_needs_a_user_axis() -> None:
    with pytest.raises(ValueError, match=r"^per_cluster needs a leading user axis, got shape \(\)$"):
        cr.leave_one_out(_ratio, 3.0)


@pytest.mark.parametrize("level", [0.9, 0.95])
def test_cluster_estimate_passes_its_level_and_bounds_to_the_interval(level: float) -> None:
    point, theta = cr.leave_one_out(_ratio, PER)
    lo, hi = _hand_interval(point, theta, level)
    assert cr.cluster_estimate(_ratio, PER, level=level).ci == pytest.approx((lo, hi))
    cut = cr.cluster_estimate(_ratio, PER, level=level, bounds=(lo + 0.001, hi - 0.001))
    assert cut.ci == pytest.approx((lo + 0.001, hi - 0.001))


def test_per_cluster_sums_adds_each_users_rows_in_sorted_id_order() -> None:
    values = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [7.0, 8.0], [9.0, 10.0]])
    clusters = np.array(["u2", "u1", "u2", "u3", "u1"])
    per, ids = cr.per_cluster_sums(values, clusters)
    expected_ids = sorted(set(clusters.tolist()))
    assert ids.tolist() == expected_ids
    by_loop = [[sum(values[i, c] for i in range(len(values)) if clusters[i] == u) for c in range(2)]
               for u in expected_ids]
    assert per.tolist() == by_loop
    one_d, _ = cr.per_cluster_sums(values[:, 0], clusters)
    assert one_d.tolist() == [row[0] for row in by_loop]


def test_per_cluster_sums_of_mismatched_lengths_is_one_clear_error() -> None:
    with pytest.raises(ValueError, match="^3 values for 2 cluster ids$"):
        cr.per_cluster_sums([1.0, 2.0, 3.0], ["a", "b"])
    with pytest.raises(ValueError, match="^0 values for 2 cluster ids$"):
        cr.per_cluster_sums(1.0, ["a", "b"])
    with pytest.raises(ValueError, match="^2 values for 0 cluster ids$"):
        cr.per_cluster_sums([1.0, 2.0], "a")


# Estimate, ci_text, ci_list --------------------------------------------------------------------------------------


def test_too_few_users_is_below_the_minimum_only() -> None:
    ci = (0.1, 0.2)
    assert cr.Estimate(0.5, ci, MIN - 1).too_few_users
    assert not cr.Estimate(0.5, ci, MIN).too_few_users
    assert not cr.Estimate(0.5, ci, None).too_few_users
    assert cr.Estimate(0.5, ci).n_clusters is None and cr.Estimate(0.5, ci).n_undefined == 0


def test_ci_list_is_low_then_high() -> None:
    assert cr.ci_list(cr.Estimate(0.5, (0.25, 0.75), MIN)) == [0.25, 0.75]


def test_ci_text_of_an_estimate_with_enough_users() -> None:
    lo, hi = 0.123456, 0.987654
    est = cr.Estimate(0.5, (lo, hi), MIN)
    assert cr.ci_text(est) == f"[{round(lo, 2)}, {round(hi, 2)}; {MIN} users]"
    assert cr.ci_text(est, digits=3) == f"[{round(lo, 3)}, {round(hi, 3)}; {MIN} users]"
    # The estimate's own ci and users win over the keyword ones.
    assert cr.ci_text(est, ci=[0.0, 1.0], n_users=1) == cr.ci_text(est)


def test_ci_text_below_the_minimum_says_why_with_the_users() -> None:
    few = f"(too few users for a CI: {MIN - 1} users)"
    assert cr.ci_text(ci=[0.1, 0.2], n_users=MIN - 1) == few
    assert cr.ci_text(ci=[0.1, 0.2], n_users=1) == "(too few users for a CI: 1 user)"
    assert cr.ci_text(cr.Estimate(0.5, (0.1, 0.2), MIN - 1)) == few


def test_ci_text_without_an_interval() -> None:
    nan = float("nan")
    none = f"[no CI; {MIN} users]"
    assert cr.ci_text() == "[no CI]"
    assert cr.ci_text(ci=[nan, nan]) == "[no CI]"
    assert cr.ci_text(ci=[0.1, nan], n_users=MIN) == none
    assert cr.ci_text(ci=[nan, 0.2], n_users=MIN) == none
    assert cr.ci_text(ci=[None, 0.2], n_users=MIN) == none
    assert cr.ci_text(ci=[0.1, None], n_users=MIN) == none
    assert cr.ci_text(ci=None, n_users=MIN) == none


def test_ci_text_without_users_prints_the_bare_interval() -> None:
    assert cr.ci_text(ci=[0.1, 0.25]) == "[0.10, 0.25]"


def test_ci_text_says_how_many_are_undefined() -> None:
    users = MIN + 2
    est = cr.Estimate(0.5, (float("nan"), float("nan")), users, 3)
    assert cr.ci_text(est) == f"[no CI; {users} users] (undefined without 3 of the users)"


# The rule's parameters, transforms and reasons (issue 30) --------------------------------------------------------


def _hand_on_scale(point: float, theta: np.ndarray, forward: Callable[[float], float], back: Callable[[float], float],
                   level: float = 0.95) -> tuple[float, float]:
    lo, hi = _hand_interval(forward(point), np.array([forward(x) for x in theta]), level)
    return back(lo), back(hi)


def test_a_ratio_is_built_on_the_log_scale_and_weighted_kappa_on_minus_log_one_minus() -> None:
    theta = _theta(MIN + 2, seed=8) + 1.0  # over-selection-like ratios around 1.5
    ratio = cr.interval_from_leave_outs(1.5, theta, bounds=(0.0, math.inf))
    assert ratio.ci == pytest.approx(_hand_on_scale(1.5, theta, math.log, math.exp), rel=1e-9)
    weighted = _theta(MIN + 2, seed=9)
    wk = cr.interval_from_leave_outs(0.5, weighted, bounds=(-math.inf, 1.0))
    assert wk.ci == pytest.approx(_hand_on_scale(0.5, weighted, lambda x: -math.log(1 - x),
                                                 lambda y: 1 - math.exp(-y)), rel=1e-9)


def test_without_the_transform_the_interval_is_symmetric_and_cut_to_the_range() -> None:
    theta = np.clip(_theta(MIN + 2, seed=5) - 0.4, 0.01, 0.99)
    flat = cr.interval_from_leave_outs(0.1, theta, bounds=(0.0, 1.0), rule=cr.IntervalRule("satterthwaite", False))
    lo, hi = _hand_interval(0.1, theta, 0.95)
    assert flat.ci == pytest.approx((max(lo, 0.0), min(hi, 1.0)), rel=1e-12)


def test_the_users_minus_one_rule_is_the_plain_jackknife_t_and_effective_users_is_df_plus_one() -> None:
    theta = _theta(MIN + 3, seed=2)
    old = cr.interval_from_leave_outs(0.5, theta, rule=cr.IntervalRule("users", False))
    n = len(theta)
    se = math.sqrt((n - 1) / n * float(((theta - theta.mean()) ** 2).sum()))
    half = stats.t.ppf(0.975, n - 1) * se
    assert old.ci == pytest.approx((0.5 - half, 0.5 + half), rel=1e-12) and old.effective_users == n
    new = cr.interval_from_leave_outs(0.5, theta)
    d2 = (theta - theta.mean()) ** 2
    assert new.effective_users == pytest.approx(min(n - 1, d2.sum() ** 2 / (d2 * d2).sum()) + 1)
    assert new.n_clusters == n and new.n_undefined == 0


def test_a_leave_out_at_the_edge_or_beyond_withholds_the_interval_with_its_own_reason() -> None:
    theta = np.linspace(0.2, 0.4, MIN + 1)
    theta[3] = 1.0  # the point is inside (0, 1) but without user 3 the rate is 1
    # The chosen rule then builds the interval on the figure's own scale, cut to the range ...
    raw = cr.interval_from_leave_outs(0.3, theta, bounds=(0.0, 1.0))
    lo, hi = _hand_interval(0.3, theta, 0.95)
    assert raw.ci == pytest.approx((max(lo, 0.0), min(hi, 1.0)), rel=1e-12) and not raw.reason
    # ... where the rule without that step gives none, and says why.
    edge = cr.interval_from_leave_outs(0.3, theta, bounds=(0.0, 1.0), rule=cr.IntervalRule(raw_at_edge=False))
    assert math.isnan(edge.ci[0]) and edge.n_clusters == MIN + 1 and edge.n_undefined == 0
    assert edge.reason == "the figure is at the edge of its range (1) with or without a user"
    at_bound = cr.interval_from_leave_outs(1.0, np.ones(MIN + 1) - np.linspace(0, 0.1, MIN + 1), bounds=(0.0, 1.0))
    assert math.isnan(at_bound.ci[0])
    assert at_bound.reason == "the figure is at the edge of its range (1) with or without a user"
    theta[3] = 1.2  # beyond the range: the logit is NaN, not infinite
    beyond = cr.interval_from_leave_outs(0.3, theta, bounds=(0.0, 1.0))
    assert beyond.reason == "the figure or a leave-one-out value lies outside its range (0, 1)"
    assert beyond.n_clusters == MIN + 1 and beyond.n_undefined == 0
    flat = cr.interval_from_leave_outs(0.3, np.full(MIN + 1, 0.3))
    assert flat.n_clusters == MIN + 1 and flat.n_undefined == 0


def test_cluster_estimate_passes_its_minimum_of_users() -> None:
    per = PER[:12]
    assert not math.isnan(cr.cluster_estimate(_ratio, per).ci[0])
    held = cr.cluster_estimate(_ratio, per, min_users=cr.MIN_LABELLED_USERS)
    assert math.isnan(held.ci[0]) and held.n_clusters == 12 and cr.MIN_LABELLED_USERS > 12
