"""Each converted interval is the one CI rule (a jackknife-t over users), recomputed here independently: the figure
without each user by a reference library or plain numpy, then the interval of ``tests/support/ci_oracle.py`` on the
scale of the figure's range (the bounds the production call site passes), with Satterthwaite degrees of freedom."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from sklearn.metrics import cohen_kappa_score, roc_auc_score

from personagap.analysis.pairwise import pairwise_agreement
from personagap.analysis.response import accuracy_gap, clustered_rate
from personagap.judges.base import JudgeTask
from personagap.judges.optimize.data import Example
from personagap.judges.optimize.scoring import compare
from personagap.stages.trained_verifier import auc_estimate, leave_one_user_out_auc
from tests.support.ci_oracle import rule_interval


def _old_symmetric(point: float, leave: list[float]) -> tuple[float, float]:
    """The rule before the transform: ``point +- t_{U-1} * SE`` on the figure's own scale (a premise check only)."""
    u = len(leave)
    x = np.asarray(leave)
    half = stats.t.ppf(0.975, u - 1) * np.sqrt((u - 1) / u * np.sum((x - x.mean()) ** 2))
    return point - half, point + half


def _auc_study(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    users = np.array([f"u{i}" for i in rng.integers(0, 12, 250)])
    y = rng.integers(0, 2, 250)
    return y, np.round(rng.normal(0.9 * y, 1.0), 1), users  # rounded scores: many ties


def test_auc_without_each_user_is_sklearns_on_the_other_users() -> None:
    for seed in range(3):
        y, p, users = _auc_study(seed)
        auc, theta = leave_one_user_out_auc(y, p, users)
        ids = np.unique(users)
        assert auc == pytest.approx(roc_auc_score(y, p))
        assert theta == pytest.approx([roc_auc_score(y[users != u], p[users != u]) for u in ids])
        est = auc_estimate(y, p, users)
        # AUC is in (0, 1) (stages/trained_verifier.py passes those bounds): the logit scale.
        assert est.ci == pytest.approx(rule_interval(auc, list(theta), (0.0, 1.0))) and est.n_clusters == len(ids)


def test_auc_leave_out_without_negatives_is_undefined() -> None:
    y = np.array([1, 0] + [1] * 22)
    p = np.arange(24.0)
    users = np.repeat([f"u{i:02d}" for i in range(12)], 2)
    est = auc_estimate(y, p, users)  # user u00 holds the only negative
    assert est.n_undefined == 1 and np.isnan(est.ci[0])


def test_pair_mean_leaves_each_user_out_of_every_pair() -> None:
    rng = np.random.default_rng(4)
    truth = rng.integers(0, 2, 96)
    rows = []
    for i, t in enumerate(truth):
        for rater, flip in (("h1", 0.1), ("h2", 0.2), ("h3", 0.3)):
            rows.append((f"i{i}", rater, int(t if rng.random() > flip else 1 - t), f"u{i % 12}"))
    frame = pd.DataFrame(rows, columns=["item_id", "rater", "label", "cluster"])
    est = pairwise_agreement(frame, dict.fromkeys(("h1", "h2", "h3"), "human"), min_overlap=5) \
        .groups["human–human"].mean_kappa
    wide = frame.pivot(index="item_id", columns="rater", values="label")
    user = frame.groupby("item_id")["cluster"].first().loc[wide.index].to_numpy()
    pairs = [("h1", "h2"), ("h1", "h3"), ("h2", "h3")]

    def mean_kappa(keep: np.ndarray) -> float:
        return float(np.mean([cohen_kappa_score(wide.loc[keep, a], wide.loc[keep, b]) for a, b in pairs]))

    point = mean_kappa(np.ones(len(wide), dtype=bool))
    leave = [mean_kappa(user != u) for u in sorted(set(user))]
    assert est.value == pytest.approx(point)
    # The mean of the pairs' kappas is in (-1, 1) (mean_pair_estimate passes the metric's bounds): Fisher's z.
    assert est.ci == pytest.approx(rule_interval(point, leave, (-1.0, 1.0)))


def test_optimize_difference_is_paired_over_users() -> None:
    rng = np.random.default_rng(6)
    n = 120
    human = rng.choice(["yes", "no"], n)
    before = np.where(rng.random(n) < 0.7, human, rng.choice(["yes", "no"], n))
    after = np.where(rng.random(n) < 0.5, before, np.where(rng.random(n) < 0.9, human, before))
    users = np.array([f"u{i % 12}" for i in range(n)])
    examples = [Example(f"i{i}", users[i], JudgeTask(f"i{i}", (f"i{i}",), {}), human[i]) for i in range(n)]
    out, n_items, n_users = compare(examples, {f"i{i}": before[i] for i in range(n)},
                                    {f"i{i}": after[i] for i in range(n)}, ["no", "yes"], ["kappa"])
    assert (n_items, n_users) == (n, 12)

    def diff(keep: np.ndarray) -> float:
        return float(cohen_kappa_score(human[keep], after[keep]) - cohen_kappa_score(human[keep], before[keep]))

    point = diff(np.ones(n, dtype=bool))
    # compare() passes no bounds (a difference of kappas): the identity scale, Satterthwaite df.
    expected = rule_interval(point, [diff(users != u) for u in sorted(set(users))])
    assert out["kappa"].difference.value == pytest.approx(point)
    assert out["kappa"].difference.ci == pytest.approx(expected)
    # Paired: the difference's interval is narrower than one built as if the two programs' users were unrelated.
    b, a = out["kappa"].before, out["kappa"].after
    unpaired = np.hypot(b.ci[1] - b.value, a.ci[1] - a.value)
    assert out["kappa"].difference.ci[1] - point < unpaired


def test_rates_stay_in_their_range() -> None:
    # Ten users, almost every hit: the old symmetric interval would pass 1 and had to be cut there. The rule now builds
    # a rate's interval on the logit scale, so it stays below 1 without cutting and is asymmetric (shorter towards 1).
    sizes = np.array([10, 10, 5, 10, 10, 10, 10, 10, 10, 10])
    misses = np.array([1, 0, 3, 0, 0, 0, 0, 0, 0, 0])
    hits = np.concatenate([[True] * (s - m) + [False] * m for s, m in zip(sizes, misses, strict=True)])
    users = np.repeat(np.arange(10), sizes)
    est = clustered_rate(hits, users)
    totals = np.array([[hits[users == u].sum(), (users == u).sum()] for u in range(10)], dtype=float)
    leave = [(totals[:, 0].sum() - h) / (totals[:, 1].sum() - m) for h, m in totals]
    assert _old_symmetric(hits.mean(), leave)[1] > 1.0  # the premise: this sample is near the bound
    lo, hi = rule_interval(hits.mean(), leave, (0.0, 1.0))  # clustered_rate passes (0, 1)
    assert est.value == pytest.approx(hits.mean()) and est.ci == pytest.approx((lo, hi))
    assert 0.0 < est.ci[0] < est.value < est.ci[1] < 1.0  # inside the range, not cut to 1
    assert est.ci[1] - est.value < est.value - est.ci[0]  # asymmetric: the logit scale squeezes the side near 1
    with_, without = np.array(["a"] * 40), np.array(["a"] * 20 + ["b"] * 20)
    _, _, gap = accuracy_gap(np.array(["a"] * 40), with_, without, np.repeat(np.arange(10), 4))
    assert gap.value == pytest.approx(0.5) and -1.0 <= gap.ci[0] <= gap.ci[1] <= 1.0
