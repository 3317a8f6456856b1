"""The confidence figures' coverage harness (issue 23), small and seeded: its truths, and loose coverage bounds."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.conf_coverage import PAIR_SCALE, SCALE, Generator, Truth, simulate
from personagap.analysis.calibration import calibration
from personagap.analysis.coverage import coverage_curve


def test_truths_are_the_figures_of_a_very_large_population() -> None:
    gen = Generator()
    truth = Truth.of(gen)
    rows = gen.study(40_000, np.random.default_rng(1))
    cal = calibration(rows, SCALE)
    assert cal.brier.value == pytest.approx(truth.brier, abs=0.003)
    assert cal.ece.value == pytest.approx(truth.ece, abs=0.005)
    curve = coverage_curve(rows, PAIR_SCALE)
    for point in curve:
        assert point.accuracy.value == pytest.approx(truth.accuracy[point.min_confidence], abs=0.01)
        assert point.kappa.value == pytest.approx(2 * truth.accuracy[point.min_confidence] - 1, abs=0.02)


@pytest.mark.slow
def test_intervals_cover_loosely_in_a_small_seeded_run() -> None:
    table = simulate(30, 40, seed=3)
    assert table["brier"][0] >= 0.8 and table["brier"][2] == 40
    assert "ece" not in table  # about 105 items: below ECE_MIN_ITEMS_FOR_CI, never an ECE interval (issue 30)
    bigger = simulate(30, 40, seed=3, gen=Generator(max_items=40))  # about 600 items
    assert bigger["ece"][0] >= 0.75 and bigger["ece"][2] == 40
    wide = [v for k, v in table.items() if k.startswith("accuracy at threshold (20")]
    assert wide and wide[0][0] >= 0.8


def test_no_ece_interval_below_its_minimum_users() -> None:
    from personagap.analysis.calibration import ECE_MIN_USERS_FOR_CI

    gen = Generator()
    small = calibration(gen.study(ECE_MIN_USERS_FOR_CI - 1, np.random.default_rng(5)), SCALE)
    assert np.isnan(small.ece.ci).all() and not np.isnan(small.brier.ci).any()
    assert "no ECE interval" in small.to_json()["ece_note"]
    # enough users and (issue 30) enough items: ECE_MIN_ITEMS_FOR_CI
    large = calibration(Generator(max_items=60).study(ECE_MIN_USERS_FOR_CI, np.random.default_rng(5)), SCALE)
    assert not np.isnan(large.ece.ci).any() and large.to_json()["ece_note"] is None


@pytest.mark.slow
def test_self_agreement_interval_covers_loosely() -> None:
    from benchmarks.conf_coverage import simulate_self_agreement

    coverage, _, studies = simulate_self_agreement(30, 40, seed=4)["self-agreement"]
    assert studies == 40 and coverage >= 0.8


def test_no_curve_interval_where_the_kept_items_span_too_few_users() -> None:
    from personagap.analysis.coverage import CURVE_MIN_USERS_FOR_CI

    curve = coverage_curve(Generator().study(60, np.random.default_rng(7)), PAIR_SCALE)
    few = [p for p in curve if (p.accuracy.n_clusters or 0) < CURVE_MIN_USERS_FOR_CI]
    many = [p for p in curve if (p.accuracy.n_clusters or 0) >= CURVE_MIN_USERS_FOR_CI]
    assert few and many  # high thresholds keep few users, the lowest keeps all 60
    for p in few:
        assert np.isnan(p.accuracy.ci).all() and np.isnan(p.kappa.ci).all()
        assert "no CI below" in p.to_json()["ci_note"]
    for p in many:
        assert not np.isnan(p.accuracy.ci).any() and p.to_json()["ci_note"] is None
