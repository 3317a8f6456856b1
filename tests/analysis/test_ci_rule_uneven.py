"""The CI rule's two steps for uneven data (issue 30): very unequal items per user need more users for an
item-weighted interval, and a rate inside an average at 0 or 1 (balanced accuracy's recall of a class) gives none.

Each case is worked by hand: sizes whose coefficient of variation is known, a balanced accuracy whose one class's
recall is 1. The harness that chose both (``benchmarks/calibration_uneven.py``) is in
``benchmarks/calibration_uneven_table.md``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from personagap.analysis import agreement as ag
from personagap.analysis.budget import kappa_budget
from personagap.analysis.ci_rule import (
    RULE,
    UNEQUAL_ITEMS_CV,
    UNEQUAL_ITEMS_MIN_USERS,
    IntervalRule,
    ci_text,
    cluster_estimate,
    interval_from_leave_outs,
    items_cv,
    leave_one_out,
)
from personagap.analysis.robust import class_recalls
from personagap.analysis.weighting import user_proportions


def _tables(sizes: list[int], seed: int = 0) -> np.ndarray:
    """Per-user 2x2 tables (rows human, columns judge) of the given sizes, about 70% agreement, both classes."""
    rng = np.random.default_rng(seed)
    out = np.zeros((len(sizes), 2, 2))
    for u, n in enumerate(sizes):
        human = rng.random(n) < 0.4
        judge = np.where(rng.random(n) < 0.7, human, ~human)
        np.add.at(out[u], (human.astype(int), judge.astype(int)), 1.0)
    return out


def _unequal(n_users: int) -> list[int]:
    # Most users 1-3 items, every fifth 40: a coefficient of variation near 1.5, far above the rule's 0.6.
    return [40 if u % 5 == 0 else 1 + u % 3 for u in range(n_users)]


def test_items_cv_is_the_sizes_standard_deviation_over_their_mean() -> None:
    tables = np.zeros((4, 2, 2))
    tables[:, 0, 0] = [1.0, 3.0, 5.0, 7.0]  # mean 4, population sd sqrt(5)
    assert items_cv(tables) == pytest.approx(math.sqrt(5.0) / 4.0)
    assert items_cv(np.ones((6, 2, 2))) == 0.0
    # A user-weighted figure's per-user sums are shares: every user weighs 1, so the rule never applies to it.
    assert items_cv(user_proportions(_tables(_unequal(20)))) == pytest.approx(0.0, abs=1e-12)


def test_very_unequal_items_below_the_minimum_get_no_item_weighted_interval_and_say_why() -> None:
    tables = _tables(_unequal(UNEQUAL_ITEMS_MIN_USERS - 1))
    assert items_cv(tables) > UNEQUAL_ITEMS_CV
    e = ag.estimates(tables, ("kappa",))["kappa"]
    assert math.isnan(e.ci[0]) and math.isnan(e.ci[1]) and not math.isnan(e.value)
    assert f"needs {UNEQUAL_ITEMS_MIN_USERS} users" in e.reason and "very unequal" in e.reason
    assert "no CI: items per user very unequal" in ci_text(e)
    # The same users weighted each once keep their interval.
    users = ag.estimates(user_proportions(tables), ("kappa",))["kappa"]
    assert users.ci[0] < users.value < users.ci[1]


def test_from_the_minimum_the_same_kind_of_users_get_an_interval() -> None:
    tables = _tables(_unequal(UNEQUAL_ITEMS_MIN_USERS))
    assert items_cv(tables) > UNEQUAL_ITEMS_CV
    e = ag.estimates(tables, ("kappa",))["kappa"]
    assert e.ci[0] < e.value < e.ci[1] and not e.reason


def test_moderately_unequal_items_keep_their_interval_at_ten_users() -> None:
    tables = _tables([5, 8, 10, 12, 6, 9, 14, 7, 11, 10])
    assert items_cv(tables) < UNEQUAL_ITEMS_CV
    e = ag.estimates(tables, ("kappa",))["kappa"]
    assert e.ci[0] < e.value < e.ci[1]


def test_the_threshold_is_strict_and_the_rule_without_it_prints() -> None:
    tables = _tables(_unequal(12))
    point, theta = leave_one_out(lambda t: ag.get_metric("kappa").on(t), tables)
    cv = items_cv(tables)
    at = IntervalRule(unequal_cv=cv, unequal_min_users=30)
    below = IntervalRule(unequal_cv=cv - 1e-9, unequal_min_users=30)
    assert not math.isnan(interval_from_leave_outs(point, theta, rule=at, per_cluster=tables).ci[0])
    assert math.isnan(interval_from_leave_outs(point, theta, rule=below, per_cluster=tables).ci[0])
    # 12 users but a minimum of 12: enough users, the sizes no longer matter.
    enough = IntervalRule(unequal_cv=0.0, unequal_min_users=12)
    assert not math.isnan(interval_from_leave_outs(point, theta, rule=enough, per_cluster=tables).ci[0])


def test_a_class_recall_of_one_leaves_balanced_accuracy_without_an_interval() -> None:
    # 12 users of 10 items; three hold one human "yes" each, all caught by the judge: recall 1, specificity < 1.
    tables = np.zeros((12, 2, 2))
    tables[:, 0, 0] = 9.0
    tables[:, 0, 1] = 1.0
    tables[:3, 0, 0] = 8.0
    tables[:3, 1, 1] = 1.0
    assert class_recalls(tables.sum(axis=0)).tolist() == pytest.approx([105 / 117, 1.0])
    e = ag.estimates(tables, ("balanced_accuracy",))["balanced_accuracy"]
    assert e.value == pytest.approx((105 / 117 + 1.0) / 2.0)
    assert math.isnan(e.ci[0]) and "recall" in e.reason
    # One miss among the "yes": recall 2/3, and the interval is back.
    tables[2, 1, 1], tables[2, 1, 0] = 0.0, 1.0
    again = ag.estimates(tables, ("balanced_accuracy",))["balanced_accuracy"]
    assert again.ci[0] < again.value < again.ci[1]


def test_the_parts_step_is_part_of_the_chosen_rule() -> None:
    assert RULE.parts_at_edge and RULE.unequal_cv == UNEQUAL_ITEMS_CV
    assert RULE.unequal_min_users == UNEQUAL_ITEMS_MIN_USERS


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=300), min_size=10, max_size=40), st.integers(0, 10_000))
def test_no_printed_interval_is_of_zero_width_or_outside_the_range(sizes: list[int], seed: int) -> None:
    tables = _tables(sizes, seed)
    for name, e in ag.estimates(tables, ("kappa", "accuracy", "balanced_accuracy", "recall")).items():
        low, high = ag.get_metric(name).bounds or (-math.inf, math.inf)
        if math.isnan(e.ci[0]):
            assert e.too_few_users or e.n_undefined or e.reason or math.isnan(e.value)
            continue
        assert low <= e.ci[0] < e.ci[1] <= high
        assert e.ci[0] <= e.value <= e.ci[1]
        withheld_by_sizes = len(sizes) < UNEQUAL_ITEMS_MIN_USERS and items_cv(tables) > UNEQUAL_ITEMS_CV
        assert not withheld_by_sizes


def test_plan_says_why_a_pilot_of_very_unequal_users_gets_no_budget() -> None:
    plan = kappa_budget(_tables(_unequal(20)), target=0.1, simulations=20)
    assert plan.users_needed is None and "very unequal" in plan.reason


def test_cluster_estimate_checks_the_parts_on_all_users() -> None:
    tables = np.zeros((10, 2, 2))
    tables[:, 0, 0] = 5.0
    tables[:, 1, 1] = 2.0
    tables[:, 0, 1] = np.arange(10) % 2
    stat = ag.get_metric("balanced_accuracy").on
    without = cluster_estimate(stat, tables, bounds=(0.0, 1.0))
    with_parts = cluster_estimate(stat, tables, bounds=(0.0, 1.0), parts=class_recalls)
    assert without.ci[0] < without.value < without.ci[1]  # only specificity varies over users
    assert math.isnan(with_parts.ci[0]) and with_parts.reason


def test_figures_sharing_a_reason_share_one_line() -> None:
    from personagap.analysis.ci_rule import ci_note_lines

    notes = {"kappa": "A", "accuracy": "A", "recall": "B", "ac1": "A", "mcc": "A", "f1": "A"}
    assert ci_note_lines(notes, "  ") == ["  kappa, accuracy, ac1 and 2 more: no CI: A", "  recall: no CI: B"]
    assert ci_note_lines({"kappa": "A", "f1": "A"}) == ["    kappa, f1: no CI: A"]
    assert ci_note_lines({}) == []


def test_a_subset_of_users_is_judged_on_every_users_items() -> None:
    # 12 users of the bin all hold 5 items (even), but the data they come from holds heavy users: no interval.
    bin_tables = _tables([5] * 12, seed=4)
    every = np.array([5] * 12 + [200, 150] + [1, 2, 3] * 5, dtype=float)
    assert items_cv(bin_tables) == 0.0 and items_cv(every) > UNEQUAL_ITEMS_CV
    stat = ag.get_metric("accuracy").on
    alone = cluster_estimate(stat, bin_tables, bounds=(0.0, 1.0))
    within = cluster_estimate(stat, bin_tables, bounds=(0.0, 1.0), sizes=every)
    assert alone.ci[0] < alone.value < alone.ci[1]
    assert math.isnan(within.ci[0]) and "very unequal" in within.reason
