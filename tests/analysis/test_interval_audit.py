"""Issue 30's audit of the corrected estimates and the confidence figures, with generators of its own
(``benchmarks/calibration_estimates.py``'s uneven worlds, ``benchmarks/conf_coverage.py``'s uneven generators).

PPI++'s interval is built on the logit scale of its range (it undercovered on its own scale where "yes" is rare and
heavy users differ); a row says why an interval the rule withheld is missing; the coverage curve's tables are the
same when added up with numpy as with a pandas pass per confidence value; the audit's truths are the figures of a
large population.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from benchmarks.calibration_estimates import (
    run_uneven,
    study_counts,
    uneven_study,
    uneven_worlds,
)
from benchmarks.conf_coverage import PAIR_SCALE, SCALE, Truth, uneven_generators
from personagap.analysis.aggregated import user_tables
from personagap.analysis.calibration import calibration
from personagap.analysis.ci_rule import interval_from_leave_outs, leave_one_out
from personagap.analysis.coverage import _threshold_tables, coverage_curve
from personagap.analysis.estimates import (
    MIN_LABELLED_USERS,
    EstimateRow,
    estimate_row,
    human_rate_from_users,
    ppi_user_sums,
)
from personagap.analysis.ppi import ppi_stat


def _row(counts: np.ndarray, human: np.ndarray) -> EstimateRow:
    return estimate_row(counts, human_rate_from_users(human), judge="j", dataset="d", quantity="yes_rate",
                        rater_kind="llm", humans="blind", n_human=int(human[:, 1].sum()))


def test_ppi_interval_is_built_on_the_logit_scale() -> None:
    world = uneven_worlds()["rare-uneven-unlike"]
    rng = np.random.default_rng(11)
    checked = 0
    for _ in range(20):
        tables, labelled = uneven_study(world, "users", 20, rng)
        counts, human = study_counts(tables, labelled)
        row = _row(counts, human)
        point, theta = leave_one_out(ppi_stat, ppi_user_sums(counts))
        bounded = interval_from_leave_outs(point, theta, bounds=(0.0, 1.0)).ci
        identity = interval_from_leave_outs(point, theta).ci
        if np.isnan(bounded).any():
            assert row.ppi_ci[0] != row.ppi_ci[0] and "PPI++ CI" in (row.ci_note or "")  # NaN, with its reason
            continue
        assert row.ppi_ci == pytest.approx(list(bounded))
        assert 0.0 < row.ppi_ci[0] < row.ppi < row.ppi_ci[1] < 1.0
        # asymmetric: longer above a small rate, which the identity scale is not
        assert row.ppi_ci[1] - row.ppi > row.ppi - row.ppi_ci[0]
        assert row.ppi_ci != pytest.approx(list(identity))
        checked += 1
    assert checked >= 10


def test_ppi_covers_where_rare_yes_and_heavy_users_differ() -> None:
    # The audit's failing cell (before: 0.860 over 300 studies): 20 labelled users of 40, 2-8% "yes".
    cell = run_uneven(uneven_worlds()["rare-uneven-unlike"], "users", 20, reps=150)
    printed, before = cell.cells["ppi_clustered"], cell.cells["ppi_identity"]
    assert printed.with_ci >= 0.9 * printed.reps
    assert printed.coverage() >= 0.93
    assert before.coverage() < 0.9  # the identity scale, as printed before, on the same studies


def test_a_withheld_interval_says_why() -> None:
    # 20 labelled users, no human "yes" anywhere, the judge says "yes" now and then: the human-only rate is 0, at
    # the edge of its range, so the rule gives no interval; the row says so instead of nothing.
    n = MIN_LABELLED_USERS + 5
    tables = np.zeros((n, 2, 2))
    tables[:, 0, 0] = 8.0
    tables[::4, 0, 1] = 1.0
    counts, human = study_counts(tables, tables)
    row = _row(counts, human)
    assert row.human_only == 0.0 and np.isnan(row.human_only_ci).all()
    assert row.ci_note is not None and "no human-only CI: the figure is at the edge of its range" in row.ci_note


def _tables_by_value(rows: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    # The pass per confidence value the coverage curve made before (pandas groupby + user_tables per value).
    thresholds = np.unique(rows["confidence"].to_numpy(dtype=float))[::-1]
    users = np.unique(rows["user_id"].astype(str).to_numpy())
    k = len(PAIR_SCALE.categories)
    at = np.zeros((len(thresholds), len(users), k, k))
    for value, group in rows.groupby("confidence", sort=False):
        tables, _ = user_tables(group, PAIR_SCALE)
        at[list(thresholds).index(float(value)),
           np.searchsorted(users, np.unique(group["user_id"].astype(str)))] = tables
    return thresholds, np.cumsum(at, axis=0)


@pytest.mark.parametrize("world", ["unequal-unlike informative", "few-items miscalibrated"])
def test_threshold_tables_are_a_pass_per_value(world: str) -> None:
    rows = uneven_generators()[world].study(40, np.random.default_rng(3))
    rows.loc[rows.index[::7], "n"] = 2  # counts above one are added, not counted
    thresholds, tables = _threshold_tables(rows, PAIR_SCALE)
    want_thresholds, want = _tables_by_value(rows)
    assert np.array_equal(thresholds, want_thresholds) and np.array_equal(tables, want)


def test_uneven_estimate_truths_are_the_pooled_rates_of_a_large_population() -> None:
    for name, world in uneven_worlds().items():
        total = world.draw(np.random.default_rng(5), 200_000).sum(axis=0)
        truth = world.truth()
        assert total[1].sum() / total.sum() == pytest.approx(truth["human_yes_rate"], abs=0.004), name
        assert total[:, 1].sum() / total.sum() == pytest.approx(truth["judge_yes_rate"], abs=0.004), name


def test_uneven_confidence_truths_are_the_figures_of_a_large_population() -> None:
    gen = uneven_generators()["unequal-unlike informative"]
    truth = Truth.of(gen)
    rows = gen.study(8_000, np.random.default_rng(1))
    cal = calibration(rows, SCALE)
    assert cal.brier.value == pytest.approx(truth.brier, abs=0.006)
    for point in coverage_curve(rows, PAIR_SCALE):
        assert point.accuracy.value == pytest.approx(truth.accuracy[point.min_confidence], abs=0.015)


def test_no_ece_interval_below_its_minimum_items() -> None:
    # 1-3 items a user: 60 users are enough users but about 120 items, where ECE's interval covered 0.88-0.91.
    from personagap.analysis.calibration import ECE_MIN_ITEMS_FOR_CI, ECE_MIN_USERS_FOR_CI

    gen = uneven_generators()["few-items informative"]
    few = calibration(gen.study(3 * ECE_MIN_USERS_FOR_CI, np.random.default_rng(8)), SCALE)
    assert few.n < ECE_MIN_ITEMS_FOR_CI and np.isnan(few.ece.ci).all() and not np.isnan(few.brier.ci).any()
    assert f"below {ECE_MIN_ITEMS_FOR_CI} items" in few.to_json()["ece_note"] and few.ece.reason
    many = calibration(gen.study(ECE_MIN_ITEMS_FOR_CI, np.random.default_rng(8)), SCALE)  # about 800 items
    assert not np.isnan(many.ece.ci).any() and many.to_json()["ece_note"] is None
