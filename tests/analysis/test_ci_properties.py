"""Properties of the one CI rule over degenerate samples (issue 30): never a zero-width interval, never an interval
that leaves the figure's range or misses its own point, and a reason whenever an interval is withheld for enough
users. Hypothesis draws per-user confusion tables where most cells are empty, one class is missing, every user is
alike, or one user holds almost every item."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import personagap.analysis.robust  # noqa: F401  (registers AC1, PABAK, MCC, balanced accuracy)
from personagap.analysis import agreement as ag
from personagap.analysis.ci_rule import MIN_USERS_FOR_CI

SAMPLES = settings(max_examples=150, deadline=None)
BINARY = ("kappa", "accuracy", "ac1", "pabak", "mcc", "balanced_accuracy", "precision", "recall", "f1",
          "over_selection", "human_yes_rate", "judge_yes_rate")


@st.composite
def degenerate_tables(draw: st.DrawFn) -> np.ndarray:
    """Per-user 2x2 tables of 10-25 users built to be awkward: sparse cells, copies of one user, a giant user."""
    n = draw(st.integers(MIN_USERS_FOR_CI, 25))
    kind = draw(st.sampled_from(["sparse", "identical", "giant", "one-class", "free"]))
    cell = st.integers(0, 3) if kind != "free" else st.integers(0, 40)
    tables = np.array(draw(st.lists(st.lists(cell, min_size=4, max_size=4), min_size=n, max_size=n)),
                      dtype=float).reshape(n, 2, 2)
    if kind == "sparse":
        tables *= np.array(draw(st.lists(st.booleans(), min_size=4, max_size=4)), dtype=float).reshape(2, 2)
    elif kind == "identical":
        tables[:] = tables[0]
    elif kind == "giant":
        tables[0] += draw(st.integers(100, 2000)) * np.array([[0.5, 0.1], [0.1, 0.3]])
    elif kind == "one-class":
        tables[:, 1, :] = 0.0  # no human "yes" anywhere
    return tables


@SAMPLES
@given(degenerate_tables())
def test_no_printed_interval_has_zero_width_leaves_its_range_or_misses_its_point(tables: np.ndarray) -> None:
    for name, est in ag.estimates(tables, BINARY).items():
        lo, hi = est.ci
        if math.isnan(lo) or math.isnan(hi):
            if not math.isnan(est.value) and not est.too_few_users and not est.n_undefined:
                assert est.reason, (name, "an interval withheld for enough users says why")
            continue
        low, high = ag.get_metric(name).bounds
        assert hi - lo > 1e-9, (name, est)
        assert low <= lo <= est.value <= hi <= high, (name, est)


@SAMPLES
@given(st.integers(MIN_USERS_FOR_CI, 30), st.floats(0.0, 1.0), st.integers(1, 50))
def test_a_rate_every_user_shares_gets_no_interval(n: int, rate: float, size: int) -> None:
    # Every user has the same share of "yes": leaving anyone out changes nothing, so any interval would be [r, r].
    yes = round(rate * size)
    per = np.tile(np.array([[float(yes), float(size)]]), (n, 1))
    est = ag.cluster_estimate(lambda t: t[..., 0] / t[..., 1], per, bounds=(0.0, 1.0))
    assert math.isnan(est.ci[0]) and math.isnan(est.ci[1]) and est.reason
