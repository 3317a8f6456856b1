"""Routing's guarantee and human rate (issue 30): the one-sided bound, fixed-sequence testing and the audited human
rate on hand-worked values, the audit draw, and a small run of the harness that tries to break the guarantee."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from benchmarks.calibration_routing import WORLDS, cascade_study, guarantee_table
from personagap.analysis.routing import (
    ASSUMED,
    MIN_USERS_FOR_TEST,
    accuracy_lower_bound,
    draw_audit,
    guaranteed_threshold,
    kept_digest,
    routing_estimate,
)

T4_90 = 1.5332062740589  # the 0.9 quantile of Student's t on 4 degrees of freedom (tables: 1.533)


def test_one_sided_bound_by_hand() -> None:
    # Five users, 10 kept items each, 9, 8, 10, 7, 9 right: accuracy 43/50 = 0.86. Leaving user u out gives
    # (43 - c_u) / 40 = .85, .875, .825, .9, .85 (mean .86), squared deviations sum .00325, so the jackknife SE is
    # sqrt(4/5 * .00325) = .05099. The binomial SE at the target 0.8 is sqrt(.16 / 50) = .05657, the larger.
    # Kish effective users 50^2 / (5 * 100) = 5, so 4 degrees of freedom.
    right, kept = np.array([9, 8, 10, 7, 9.0]), np.full(5, 10.0)
    b = accuracy_lower_bound(right, kept, 0.8, 0.1)
    assert (b.accuracy, b.n, b.n_users, b.effective_users) == (pytest.approx(0.86), 50, 5, pytest.approx(5.0))
    assert b.lower == pytest.approx(0.86 - T4_90 * math.sqrt(0.16 / 50))
    plain = accuracy_lower_bound(right, kept, 0.8, 0.1, df_rule="users", se_floor=False)
    assert plain.lower == pytest.approx(0.86 - T4_90 * math.sqrt(0.8 * 0.00325))
    # Users without kept items are no cluster.
    assert accuracy_lower_bound(np.r_[right, 0], np.r_[kept, 0], 0.8, 0.1).lower == pytest.approx(b.lower)


def test_all_right_on_a_handful_of_items_does_not_pass_a_high_target() -> None:
    # Five users with 2 kept items each, all right: the jackknife SE is 0, so the plain bound is 1 and would accept
    # any target. The floor sqrt(.9 * .1 / 10) keeps the bound at 1 - 1.533 * .0949 = 0.855 < 0.9.
    right = kept = np.full(5, 2.0)
    assert accuracy_lower_bound(right, kept, 0.9, 0.1, df_rule="users", se_floor=False).lower == 1.0
    b = accuracy_lower_bound(right, kept, 0.9, 0.1)
    assert b.lower == pytest.approx(1 - T4_90 * math.sqrt(0.09 / 10)) and b.lower < 0.9


def test_heavy_users_lower_the_degrees_of_freedom() -> None:
    # One user with 100 items and four with 1: Kish effective users 104^2 / (100^2 + 4) = 1.08 -> 1 df (the floor),
    # and the t quantile on 1 df (3.078) against 1.533 on users - 1 = 4.
    right, kept = np.array([95.0, 1, 1, 1, 1]), np.array([100.0, 1, 1, 1, 1])
    b = accuracy_lower_bound(right, kept, 0.8, 0.1)
    assert b.effective_users == pytest.approx(104**2 / 10004)
    se = max(math.sqrt(0.16 / 104), b.accuracy - b.lower) / 3.0776835371752536
    assert b.lower == pytest.approx(b.accuracy - 3.0776835371752536 * se)
    assert b.lower < accuracy_lower_bound(right, kept, 0.8, 0.1, df_rule="users").lower


def test_too_few_users_give_no_bound() -> None:
    n = MIN_USERS_FOR_TEST - 1
    b = accuracy_lower_bound(np.full(n, 50.0), np.full(n, 50.0), 0.8, 0.1)
    assert math.isnan(b.lower) and b.n_users == n


def _sequence_items(users: int = 20) -> pd.DataFrame:
    """Per user: 10 items at 90 all right, 10 at 80 with 9 right, 10 at 70 with 2 right, 40 at 60 all right."""
    rows = []
    for u in range(users):
        for value, n, n_right in ((90.0, 10, 10), (80.0, 10, 9), (70.0, 10, 2), (60.0, 40, 40)):
            for k in range(n):
                rows.append({"item_id": f"u{u}-{value:g}-{k}", "user_id": f"u{u}", "label": "yes",
                             "confidence": value, "human": "yes" if k < n_right else "no"})
    return pd.DataFrame(rows)


def test_fixed_sequence_stops_at_the_first_threshold_it_cannot_show() -> None:
    items = _sequence_items()
    g = guaranteed_threshold(items, 0.8, delta=0.1)
    # >= 90: 200/200 right, >= 80: 380/400 (0.95), >= 70: 420/600 (0.70): stop. >= 60 would pass again
    # (820/1000 = 0.82, bound above 0.8 with 1000 items), but the sequence has stopped: 80 is used.
    assert [t.min_confidence for t in g.tests] == [90.0, 80.0, 70.0]
    assert [t.rejected for t in g.tests] == [True, True, False]
    assert g.min_confidence == 80.0
    assert g.tests[1].bound.accuracy == pytest.approx(0.95) and g.tests[2].bound.accuracy == pytest.approx(0.7)
    # Every user alike: the jackknife SE is 0 and the floor sqrt(.16 / 400) decides; 20 users -> 19 df.
    assert g.tests[1].bound.lower == pytest.approx(0.95 - 1.3277282090267981 * math.sqrt(0.16 / 400))
    assert "stopped at >= 70" in g.stopped
    assert g.to_json()["tests"][2]["rejected"] is False and g.to_json()["min_confidence"] == 80.0


def test_an_unreachable_first_step_keeps_nothing_and_items_without_a_person_do_not_count() -> None:
    items = _sequence_items()
    # 200 of 200 right at >= 90: the bound 1 - 1.328 * sqrt(.995 * .005 / 200) = 0.9934 misses 0.995.
    assert guaranteed_threshold(items, 0.995, delta=0.1).min_confidence is None
    # Without people's labels on the top items the sequence starts lower: 90 is no test.
    unlabelled = items.assign(human=np.where(items["confidence"] == 90.0, None, items["human"]))
    g = guaranteed_threshold(unlabelled, 0.8, delta=0.1)
    assert g.tests[0].min_confidence == 80.0
    few = items[items["user_id"].isin([f"u{u}" for u in range(MIN_USERS_FOR_TEST - 1)])]
    assert guaranteed_threshold(few, 0.8).tests == () and "nothing can be tested" in guaranteed_threshold(
        few, 0.8).stopped
    with pytest.raises(ValueError, match="delta"):
        guaranteed_threshold(items, 0.8, delta=1.0)


def _audit_items() -> pd.DataFrame:
    nan = float("nan")
    return pd.DataFrame({
        "item_id": ["i1", "i2", "i3", "i4", "i5", "i6"],
        "user_id": ["u1", "u1", "u1", "u2", "u2", "u2"],
        "label": ["yes", "no", "yes", "yes", "no", "no"],
        "confidence": [90.0, 90.0, 20.0, 95.0, 10.0, 85.0],
        "human": [None, "no", "yes", "no", None, None],
    }).assign(confidence=lambda f: f["confidence"].fillna(nan))


def test_human_rate_with_an_audit_by_hand() -> None:
    items = _audit_items()
    # Kept (>= 80): i1, i2, i4, i6; routed: i3 (labelled, human yes, judge yes), i5 (unlabelled).
    # Audit {i2, i4, i6, i3}: i3 is routed (no audit item) and i6 has no person's label, so the audit is i2
    # (human no, judge no) and i4 (human no, judge yes): mean(human - judge) = -1/2, times 4 kept = -2 on the
    # kept judge positives (i1, i4: 2) -> 0. Routed: judge positives 1 (i3) + 2 * (1 - 1) / 1 = 1.
    est = routing_estimate(items, 80.0, "yes", audit=["i2", "i4", "i6", "i3"])
    assert est.human_rate is not None and est.human_rate.value == pytest.approx(1 / 6)
    assert est.combined.value == pytest.approx(3 / 6)  # the routed labelling: the judge's 2 + the routed 1
    assert (est.audit_drawn, est.audited) == (4, 2) and est.human_rate_basis.startswith("audit")
    assert math.isnan(est.human_rate.ci[0])  # two users: no interval
    json = est.to_json()
    assert json["human_rate"]["value"] == pytest.approx(1 / 6) and json["audit"] == {"drawn": 4, "labelled": 2}
    assert "not the human rate" in json["combined_is"]


def test_without_an_audit_the_human_rate_is_assumed_and_has_no_interval() -> None:
    from benchmarks.calibration_routing import RoutingWorld

    items = RoutingWorld(human_share=1.0).study(40, np.random.default_rng(5))
    est = routing_estimate(items, 75.0, "yes")
    assert est.kept > 0 and est.human_rate is None and est.human_rate_basis == ASSUMED
    out = est.to_json()
    assert out["human_rate"]["ci"] == [None, None] and out["human_rate"]["value"] == pytest.approx(
        est.combined.value)
    assert not math.isnan(est.combined.ci[0])  # the routed labelling keeps its own interval
    unlabelled = routing_estimate(items.assign(human=None), 75.0, "yes", audit=["i000001"])
    assert unlabelled.human_rate is None and "has a person's label yet" in unlabelled.human_rate_basis
    # Nothing kept: the human rate is people's own, with its interval.
    nothing = routing_estimate(items, None, "yes")
    assert nothing.human_rate is not None and nothing.human_rate.ci == nothing.combined.ci


def test_audited_human_rate_recovers_the_truth_when_the_judge_errs_one_sided() -> None:
    # The judge misses positives only: the routed labelling is biased low, the audited human rate is not.
    rng = np.random.default_rng(0)
    items = WORLDS[4].items(4000, rng)
    truth = float((items["y"] == "yes").mean())
    kept = items["confidence"] >= 60.0
    drawn = draw_audit(items.loc[kept, "item_id"], 3000, 1)
    people = ~kept | items["item_id"].isin(drawn)
    labelled = items.assign(human=np.where(people, items["y"], None))
    est = routing_estimate(labelled, 60.0, "yes", audit=drawn)
    assert est.human_rate is not None
    # The old figure read as the human rate: 87% of the items kept, a quarter of them positive, the judge missing
    # about a quarter of those -> about 0.05 too low.
    assert est.combined.value < truth - 0.03
    # The audit's own sampling error: SD sqrt(.065 * .935 / 3000) = .0045 of the kept part (87%): within 0.02.
    assert est.human_rate.value == pytest.approx(truth, abs=0.02)
    assert est.human_rate.ci[0] <= truth <= est.human_rate.ci[1]


def test_the_audit_draw_is_seeded_and_independent_of_order() -> None:
    ids = [f"i{k}" for k in range(50)]
    first = draw_audit(ids, 10, 3)
    assert first == draw_audit(list(reversed(ids)), 10, 3) and len(set(first)) == 10 and set(first) <= set(ids)
    assert first != draw_audit(ids, 10, 4)
    assert sorted(draw_audit(ids[:5], 10, 3)) == ids[:5]  # fewer kept than asked: all of them
    assert draw_audit(ids, 12, 3)[:10] != [] and kept_digest(ids) == kept_digest(reversed(ids))
    with pytest.raises(ValueError, match=">= 0"):
        draw_audit(ids, -1, 0)


@pytest.mark.slow
def test_small_harness_run_keeps_the_guarantee_where_the_plain_test_does_not() -> None:
    # The uninformative world: accuracy about 0.78 < 0.8 at every threshold, so any kept set misses the target
    # unless its realised accuracy happens to reach it. Loose bounds: 80 studies (MC SE about 0.03).
    table = guarantee_table(WORLDS[2], 20, 80, seed=7, split_reps=0)
    assert table["ltt@0.1:miss"] <= 0.1 + 2 * math.sqrt(0.09 / 80)
    assert table["ltt@0.05:miss"] <= table["ltt@0.1:miss"]
    assert table["plain@0.1:miss"] >= table["ltt@0.1:miss"]


def test_small_cascade_run_keeps_the_guarantee_and_keeps_something() -> None:
    rng = np.random.default_rng(3)
    runs = pd.DataFrame([cascade_study(WORLDS[6], 20, rng, deltas=(0.1,)) for _ in range(40)])
    assert runs["cascade@0.1:miss"].mean() <= 0.1 + 2 * math.sqrt(0.09 / 40)
    assert runs["cascade@0.1:kept"].mean() > 0.05  # two judges at delta / 2 each still keep items here
