"""Routing's combined estimate (issue 23): hand-worked values, its CI rule, its truth, and a small coverage run."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from benchmarks.calibration_routing import RoutingWorld, simulate
from personagap.analysis.agreement import cluster_estimate
from personagap.analysis.estimates import MIN_LABELLED_USERS
from personagap.analysis.routing import combined_rate, kept_mask, route_sums, routing_estimate


def _items() -> pd.DataFrame:
    nan = float("nan")
    return pd.DataFrame({
        "item_id": ["i1", "i2", "i3", "i4", "i5", "i6"],
        "user_id": ["u1", "u1", "u1", "u2", "u2", "u2"],
        "label": ["yes", "no", "yes", "no", "yes", None],
        "confidence": [90.0, 30.0, 20.0, 95.0, 10.0, nan],
        "human": ["yes", "yes", None, None, "no", "yes"],
    })


def test_combined_rate_by_hand() -> None:
    items = _items()
    est = routing_estimate(items, 80.0, "yes")
    # Kept (confidence >= 80 with a label): i1 (yes), i4 (no). Routed: i2, i3, i5, i6 (i6: no judge label).
    # Routed judge 'yes': i3, i5 = 2. Labelled routed: i2 (h yes, j no), i5 (h no, j yes), i6 (h yes, no judge):
    # mean(human - judge) = (1 - 1 + 1) / 3, times 4 routed. Combined = (1 + 2 + 4/3) / 6.
    assert est.combined.value == pytest.approx((1 + 2 + 4 / 3) / 6)
    assert (est.kept, est.routed, est.routed_labelled, est.still_needed) == (2, 4, 3, 1)
    assert est.all_human.value == pytest.approx(3 / 4)  # i1, i2, i6 yes of i1, i2, i5, i6
    assert est.all_judge.value == pytest.approx(3 / 5)  # i1, i3, i5 yes of five labels
    assert not est.exact and math.isnan(est.combined.ci[0])  # two users: no interval
    assert kept_mask(items, None).sum() == 0 and routing_estimate(items, None, "yes").kept == 0


def test_once_every_routed_item_is_labelled_it_is_the_plain_combined_rate() -> None:
    items = RoutingWorld(human_share=1.0).study(30, np.random.default_rng(2))
    est = routing_estimate(items, 65.0, "yes")
    kept = items["confidence"] >= 65.0
    plain = np.where(kept, items["label"] == "yes", items["human"] == "yes").mean()
    assert est.exact and est.still_needed == 0
    assert est.combined.value == pytest.approx(plain)


def test_interval_is_the_one_rule_and_needs_enough_labelled_users() -> None:
    items = RoutingWorld(human_share=0.5).study(MIN_LABELLED_USERS + 5, np.random.default_rng(3))
    est = routing_estimate(items, 75.0, "yes")
    _, per = route_sums(items, 75.0, "yes")
    ref = cluster_estimate(combined_rate, per, bounds=(0.0, 1.0))
    assert est.combined.ci == pytest.approx(ref.ci) and est.combined.value == pytest.approx(ref.value)
    few = items[items["user_id"].isin(sorted(set(items["user_id"]))[:MIN_LABELLED_USERS - 1])]
    assert math.isnan(routing_estimate(few, 75.0, "yes").combined.ci[0])
    assert not math.isnan(routing_estimate(few, 75.0, "yes", min_labelled_users=0).combined.ci[0])


def test_the_estimate_recovers_the_harness_truth_on_a_large_population() -> None:
    world = RoutingWorld(human_share=0.4)
    items = world.study(8000, np.random.default_rng(1))
    for threshold in (None, 60.0, 81.0):
        assert routing_estimate(items, threshold, "yes").combined.value == pytest.approx(world.truth(threshold),
                                                                                        abs=0.015)


@pytest.mark.slow
def test_small_seeded_coverage_run_covers_loosely() -> None:
    table = simulate(20, 60, seed=11, world=RoutingWorld(human_share=0.5))
    assert table["rule"]["with_ci"] >= 50 and table["rule"]["coverage"] >= 0.85
    assert abs(table["rule"]["bias"]) < 0.03
