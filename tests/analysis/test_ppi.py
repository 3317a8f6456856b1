"""User-clustered PPI++ (issue 21): hand-worked figures, coverage when whole users are labelled, one implementation.

Every expected figure is recomputed here with plain numpy loops over users, not with the code under test.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import ppi_py
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from personagap.analysis.aggregated import estimate_rows_from_counts, frame_counts
from personagap.analysis.estimates import MIN_LABELLED_USERS
from personagap.analysis.ppi import ppi_lambda, ppi_per_user, ppi_stat, ppi_variance
from tests.support.ci_oracle import rule_interval
from tests.support.oracles import estimate_rows

# Seven users; per user the human labels of the items humans labelled (y), the judge's labels of those (f) and of
# the items only the judge labelled (g). Made-up labels.
USERS = [
    ([1, 1], [1, 1], [1]),
    ([], [], [1, 1, 1]),
    ([1, 1, 0], [1, 1, 1], []),
    ([1, 0, 0, 0], [0, 0, 0, 1], [1]),
    ([0, 1], [0, 1], [1, 0]),
    ([1, 0], [1, 1], [1, 1, 1, 0]),
    ([0, 0, 0, 0], [0, 1, 0, 0], [1, 1, 1, 0]),
]


def _by_hand(users: list[tuple[list[int], list[int], list[int]]]) -> tuple[float, float, float]:
    """PPI++'s lam, point and cluster-robust variance, worked per user from the definitions."""
    y = np.concatenate([np.array(u[0], dtype=float) for u in users])
    f = np.concatenate([np.array(u[1], dtype=float) for u in users])
    g = np.concatenate([np.array(u[2], dtype=float) for u in users])
    n, big_n = len(y), len(g)

    def psi(lam: float) -> np.ndarray:
        # Each user's term of the linearised estimator ybar + lam (gbar - fbar).
        return np.array([(sum(yu) - len(yu) * y.mean()) / n
                         + lam * ((sum(gu) - len(gu) * g.mean()) / big_n - (sum(fu) - len(fu) * f.mean()) / n)
                         for yu, fu, gu in users])

    # sum psi(lam)^2 is a quadratic in lam: with r = psi(0) and d = psi(1) - psi(0) its minimum is at -r.d / d.d,
    # clipped to [0, 1] as ppi_py clips its lam.
    r, d = psi(0.0), psi(1.0) - psi(0.0)
    lam = float(np.clip(-(r @ d) / (d @ d), 0.0, 1.0))
    point = y.mean() + lam * (g.mean() - f.mean())
    u = len(users)
    return lam, point, u / (u - 1) * float((psi(lam) ** 2).sum())


def _per_user(users: list[tuple[list[int], list[int], list[int]]]) -> np.ndarray:
    return ppi_per_user([len(u[0]) for u in users], [sum(u[0]) for u in users], [sum(u[1]) for u in users],
                        [len(u[2]) for u in users], [sum(u[2]) for u in users])


def test_point_lambda_and_variance_by_hand() -> None:
    lam, point, variance = _by_hand(USERS)
    totals = _per_user(USERS).sum(axis=0)
    assert 0.0 < lam < 1.0  # the example tunes lam inside (0, 1), not at a clip
    assert float(ppi_lambda(totals)) == pytest.approx(lam, rel=1e-9)
    assert float(ppi_stat(totals)) == pytest.approx(point, rel=1e-9)
    assert float(ppi_variance(totals)) == pytest.approx(variance, rel=1e-9)
    # At its lam the estimate is ppi_py's (an independent implementation of the point for a given lam).
    y, f, g = (np.concatenate([np.array(u[k], dtype=float) for u in USERS]) for k in range(3))
    assert float(ppi_stat(totals)) == pytest.approx(float(ppi_py.ppi_mean_pointestimate(y, f, g, lam=lam)[0]),
                                                    abs=1e-6)


def _frame(users: list[tuple[list[int], list[int], list[int]]],
           human_only: list[list[int]] | None = None) -> pd.DataFrame:
    """Labels of one dataset: per user (y, f, g) as :data:`USERS`, plus items only humans labelled."""
    rows = []
    yes = {1: "yes", 0: "no"}
    for u, (ys, fs, gs) in enumerate(users):
        for k, (h, j) in enumerate(zip(ys, fs, strict=True)):
            rows += [(f"u{u}-l{k}", "hm", "human_majority", yes[h], f"u{u}"),
                     (f"u{u}-l{k}", "gpt", "llm", yes[j], f"u{u}")]
        rows += [(f"u{u}-x{k}", "gpt", "llm", yes[j], f"u{u}") for k, j in enumerate(gs)]
        rows += [(f"u{u}-h{k}", "hm", "human_majority", yes[h], f"u{u}")
                 for k, h in enumerate((human_only or [])[u] if human_only else [])]
    return pd.DataFrame([{"item_id": i, "rater": r, "rater_kind": kind, "condition": "", "label": lab, "user_id": u,
                          "dataset": "d"} for i, r, kind, lab, u in rows])


def test_interval_is_leave_one_user_out_with_lambda_retuned() -> None:
    # The seven users four times over (as other users, 24 of them with human labels, enough for a CI): every
    # leave-one-user-out figure re-tunes lam, by hand.
    users = USERS * 4
    assert sum(1 for y, _, _ in users if y) >= MIN_LABELLED_USERS
    [row] = estimate_rows(_frame(users), "d")
    point = _by_hand(users)[1]
    theta = [_by_hand(users[:k] + users[k + 1:])[1] for k in range(len(users))]
    assert row["ppi"] == pytest.approx(point, abs=1e-6)
    # PPI++ estimates a rate: estimate_rows passes it the bounds (0, 1) (analysis/estimates.py RATE), so the interval
    # is built on the logit scale, with a t quantile on Satterthwaite degrees of freedom of the leave-one-out
    # deviations (tests/support/ci_oracle.py).
    assert 0.0 < point < 1.0 and all(0.0 < x < 1.0 for x in theta)
    assert row["ppi_ci"] == pytest.approx(list(rule_interval(point, theta, (0.0, 1.0))), abs=1e-5)


def _clustered_study(rng: np.random.Generator, n_users: int = 40, labelled_users: int = MIN_LABELLED_USERS
                     ) -> tuple[pd.DataFrame, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Strong user effects; humans label whole users. Returns the labels and PPI's item arrays (y, f, g)."""
    prevalence = 1.0 / (1.0 + np.exp(-rng.normal(-1.2, 1.2, n_users)))
    labelled = set(rng.choice(n_users, labelled_users, replace=False).tolist())
    users, ys, fs, gs = [], [], [], []
    for u in range(n_users):
        truth = rng.random(rng.integers(10, 40)) < prevalence[u]
        judge = np.where(rng.random(truth.size) < 0.8, truth, ~truth).astype(int)
        if u in labelled:
            users.append((truth.astype(int).tolist(), judge.tolist(), []))
            ys.append(truth.astype(float))
            fs.append(judge.astype(float))
        else:
            users.append(([], [], judge.tolist()))
            gs.append(judge.astype(float))
    return _frame(users), (np.concatenate(ys), np.concatenate(fs), np.concatenate(gs))


def _population_rate() -> float:
    # The item-weighted human yes-rate of the generator: E[items x prevalence] / E[items], by simulation once.
    rng = np.random.default_rng(99)
    p = 1.0 / (1.0 + np.exp(-rng.normal(-1.2, 1.2, 2_000_000)))
    return float(p.mean())  # sizes are independent of prevalence: the item weighting cancels


@pytest.mark.slow
def test_coverage_when_whole_users_are_labelled() -> None:
    """The clustered interval covers near 95% where the item-level one (the old ppi_py CI) falls far short."""
    truth, rng = _population_rate(), np.random.default_rng(2024)
    studies, clustered, item_level = 120, 0, 0
    for _ in range(studies):
        frame, (y, f, g) = _clustered_study(rng)
        [row] = estimate_rows(frame, "d")
        lo, hi = row["ppi_ci"]
        clustered += lo <= truth <= hi
        ilo, ihi = ppi_py.ppi_mean_ci(y, f, g, alpha=0.05)
        item_level += float(ilo[0]) <= truth <= float(ihi[0])
    assert clustered >= 0.88 * studies, clustered
    assert item_level < 0.80 * studies, item_level  # the setting does expose the item-level interval


_user = st.tuples(st.lists(st.tuples(st.booleans(), st.booleans()), max_size=6),
                  st.lists(st.booleans(), max_size=6), st.lists(st.booleans(), max_size=3))


@pytest.mark.slow
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_user, min_size=1, max_size=18), st.booleans())
def test_counts_path_is_the_frame_path(users: list[tuple[list[tuple[bool, bool]], list[bool], list[bool]]],
                                       shuffle: bool) -> None:
    """The report path from counts (the store's) and the per-label path give identical rows, bit for bit.

    Users may have items both labelled, items only the judge labelled and items only humans labelled; up to 18
    users, so some rows have intervals (at least MIN_LABELLED_USERS users with human labels) and some do not.
    """
    data = [([int(h) for h, _ in lab], [int(j) for _, j in lab], [int(j) for j in unl]) for lab, unl, _ in users]
    frame = _frame(data, [[int(h) for h in hum] for _, _, hum in users])
    if frame.empty or not (frame["rater_kind"] == "human_majority").any():
        return
    if shuffle:
        frame = frame.sample(frac=1.0, random_state=1).reset_index(drop=True)
    judges, reference = frame_counts(frame, "d")
    assert estimate_rows(frame, "d") == estimate_rows_from_counts(judges, reference, "d", positive="yes")


def test_with_every_item_labelled_ppi_is_the_human_only_mean() -> None:
    # No unlabelled item: the judge has nothing to add, so PPI++ is the humans' own mean (lambda 0), whatever the
    # judge said on the labelled items (a judge correlated with the humans once pulled it to ybar - lambda * fbar).
    from personagap.analysis.ppi import ppi_lambda, ppi_per_user, ppi_stat

    rng = np.random.default_rng(11)
    n = rng.integers(5, 15, 12).astype(float)
    y = rng.binomial(n.astype(int), 0.3).astype(float)
    f = np.minimum(n, y + rng.integers(0, 3, 12))  # a judge that says yes where humans do, and more
    totals = ppi_per_user(n, y, f, np.zeros(12), np.zeros(12)).sum(axis=0)
    assert float(ppi_stat(totals)) == pytest.approx(y.sum() / n.sum())
    assert float(ppi_lambda(totals)) == 0.0
