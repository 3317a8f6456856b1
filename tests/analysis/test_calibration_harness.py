"""The calibration harness (benchmarks/calibration.py), small and seeded: its truth is right where it is known by
hand, the tool's printed intervals reach their coverage on its simulated studies (loose bounds: the full table is
in the README), and the minimum number of users for a CI is the one the harness found."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from benchmarks.calibration import (
    MINIMUM_LINE,
    TABLE,
    Cell,
    Generator,
    _binary_tables,
    generators,
    minimum_users,
    reaches,
    run,
    truth,
)
from personagap.analysis import agreement as ag


def _fixed(rng: np.random.Generator, n: int) -> np.ndarray:
    # No user effect: yes-rate 0.5, sensitivity 0.8, false-positive rate 0.2 -> pooled table [[.4, .1], [.1, .4]].
    sizes = rng.integers(10, 31, n)
    half = np.full(n, 0.5)
    return _binary_tables(rng, sizes, half, np.full(n, 0.8), np.full(n, 0.2))


def test_truth_is_the_pooled_figure_worked_out_by_hand() -> None:
    gen = Generator("fixed", 2, ("kappa", "accuracy", "over_selection"), _fixed)
    true = truth(gen, n_users=40_000)
    # po = 0.8, pe = 0.5 -> kappa 0.6; the judge says yes as often as humans -> over-selection 1.
    assert abs(true["kappa"] - 0.6) < 0.01 and abs(true["accuracy"] - 0.8) < 0.005
    assert abs(true["over_selection"] - 1.0) < 0.01


def test_the_printed_rule_covers_at_10_users_on_stage2_like_data() -> None:
    # 300 studies of 10 users with stage-2-like skew: the tool's intervals (agreement.estimates) of eight figures.
    # The percentile bootstrap it replaced covers about 0.88 here (issue 21), below the bound.
    gen = generators()["skewed-binary"]
    true = truth(gen, n_users=40_000)
    rng = np.random.default_rng([3, 10])
    covered = printed = 0
    for _ in range(300):
        for name, e in ag.estimates(gen.draw(rng, 10), gen.metrics).items():
            if not math.isnan(e.ci[0]):
                printed += 1
                covered += int(e.ci[0] <= true[name] <= e.ci[1])
            elif not e.too_few_users and not e.n_undefined:
                assert e.reason, name  # every withheld interval says why
    # The generator's users differ in size: samples whose items per user are very unequal get no item-weighted
    # interval at 10 users (ci_rule.UNEQUAL_ITEMS_MIN_USERS); most still do (79% when this was written).
    assert printed >= 0.7 * 300 * len(gen.metrics)
    assert covered / printed >= 0.915, covered / printed


def test_run_measures_each_rule_and_figure() -> None:
    gen = generators()["humans-3"]
    true = truth(gen, n_users=40_000)
    cells = run(gen, 12, reps=40, n_resamples=100, true=true, rules=("percentile", "jackknife-t"))
    assert set(cells) == {"percentile", "jackknife-t"}
    for by_figure in cells.values():
        assert set(by_figure) == {"fleiss_kappa", "krippendorff_alpha", "mean_pair_kappa"}
        assert all(c.reps == 40 and c.with_ci > 30 and 0.7 <= c.coverage() <= 1.0 for c in by_figure.values())
    # Three humans, binary, every item rated by all: Fleiss' kappa and alpha differ only by the small-sample term.
    assert abs(true["fleiss_kappa"] - true["krippendorff_alpha"]) < 0.01


def _cell(coverage: float, reps: int = 2000) -> Cell:
    return Cell(covered=round(coverage * reps), with_ci=reps, reps=reps, widths=[0.1] * reps)


def test_minimum_users_is_the_first_count_from_which_every_figure_holds() -> None:
    # 2000 studies a cell: MC SE about 0.006, so 0.90 is significantly under 0.93 and 0.93 is not.
    results = {"g": {5: {"a": _cell(0.90), "b": _cell(0.95)}, 10: {"a": _cell(0.94), "b": _cell(0.93)},
                     20: {"a": _cell(0.95), "b": _cell(0.96)}}}
    assert minimum_users(results) == 10
    results["g"][20]["b"] = _cell(0.91)  # a later failure moves the minimum past it: none here
    assert minimum_users(results) is None
    # 0.92 over 100 studies (MC SE 0.027) is not evidence of undercoverage; over 2000 it is.
    assert reaches(_cell(0.92, reps=100)) and not reaches(_cell(0.92))


def test_min_users_for_ci_is_the_one_the_harness_table_states() -> None:
    if not TABLE.exists():
        pytest.skip(f"{TABLE.name} is written by a full harness run")
    found = re.search(re.escape(MINIMUM_LINE) + r"(\d+)", TABLE.read_text(encoding="utf-8"))
    assert found is not None, f"{TABLE.name} states no minimum"
    # The first harness's worlds reach the target from the minimum its table states; the uneven worlds of
    # benchmarks/calibration_uneven.py were measured from 10 users only, so the printed minimum is never below 10.
    assert ag.MIN_USERS_FOR_CI == max(int(found.group(1)), 10)
    below = ag.estimates(generators()["balanced-binary"].draw(np.random.default_rng(0), ag.MIN_USERS_FOR_CI - 1),
                         ("kappa",))["kappa"]
    assert below.too_few_users and math.isnan(below.ci[0])
    assert "too few users for a CI" in ag.ci_text(below)
