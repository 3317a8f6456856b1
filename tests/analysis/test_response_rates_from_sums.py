"""Stage-3 rates from per-user sums: what an aggregate path feeds the one CI rule (issue 20, build item 3)."""

from __future__ import annotations

import numpy as np

from personagap.analysis.response import accuracy_gap, clustered_rate, gap_from_sums, rate_from_sums


def test_rate_from_sums_is_the_rate_of_the_labels() -> None:
    rng = np.random.default_rng(3)
    users = rng.integers(0, 15, 400)
    hits = rng.random(400) < 0.3
    per = np.array([[hits[users == u].sum(), (users == u).sum()] for u in np.unique(users)], dtype=float)
    est = rate_from_sums(per)
    assert est.value == hits.mean()
    assert est == clustered_rate(hits, users)
    assert est.ci[0] < est.value < est.ci[1]
    assert est.n_clusters == len(per)


def test_gap_from_sums_is_the_paired_gap() -> None:
    rng = np.random.default_rng(4)
    users = rng.integers(0, 12, 300)
    human = rng.choice(["A", "B"], 300)
    with_profile = np.where(rng.random(300) < 0.8, human, "tie")
    without = np.where(rng.random(300) < 0.6, human, "tie")
    hit_w, hit_wo = with_profile == human, without == human
    per = np.array([[hit_w[users == u].sum(), hit_wo[users == u].sum(), (users == u).sum()]
                    for u in np.unique(users)], dtype=float)
    est = gap_from_sums(per)
    assert np.isclose(est.value, hit_w.mean() - hit_wo.mean())
    assert est == accuracy_gap(human, with_profile, without, users)[2]
