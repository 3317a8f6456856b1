"""The calibration harness (benchmarks/calibration.py), small and seeded: its truth is right where it is known by
hand, and the tool's intervals are measured on its simulated studies (loose bounds: the full table is in the README).
"""

from __future__ import annotations

import numpy as np

from benchmarks.calibration import Generator, _binary_tables, generators, run, truth


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


def test_intervals_are_measured_and_none_below_five_users() -> None:
    gen = generators()["balanced-binary"]
    true = truth(gen, n_users=40_000)
    at_20 = run(gen, 20, reps=60, n_resamples=300, true=true)
    kappa = at_20["kappa"]
    assert kappa.reps == kappa.with_ci == 60
    assert 0.8 <= kappa.coverage() <= 1.0  # loose: 60 studies; the README's table has 400 per cell
    assert all(0 < w < 1 for w in kappa.widths)
    at_4 = run(gen, 4, reps=5, n_resamples=100, true=true)
    assert all(c.with_ci == 0 and c.reps == 5 for c in at_4.values())  # the CI rule: no interval below 5 users
