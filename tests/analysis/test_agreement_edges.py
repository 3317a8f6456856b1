"""Edges of the agreement core that mutation testing (bash .ci/mutation) showed no test pinned down.

Hand-computed values: undefined figures are NaN (never inf), a one-user or zero-user bootstrap, the default
95% level of every bootstrap estimate against numpy's percentiles, the one CI text every report prints,
and the metric registry's fields.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from personagap.analysis import agreement as ag


def table(tp: int, fp: int, fn: int, tn: int) -> np.ndarray:
    # table[h, j]: human class h, judge class j (1 = yes).
    return np.array([[tn, fp], [fn, tp]], dtype=float)


def test_undefined_figures_are_nan_and_a_denominator_of_one_is_fine() -> None:
    # The human said yes to nothing, the judge to one item: over-selection divides by 0 -> NaN, not inf.
    t = table(tp=0, fp=1, fn=0, tn=3)
    assert math.isnan(float(ag.over_selection_from_tables(t)))
    assert math.isnan(float(ag.recall_from_tables(t)))
    # One selected item, and it is right: precision 1/1 (a denominator of 1 is not undefined).
    one = table(tp=1, fp=0, fn=2, tn=5)
    assert float(ag.precision_from_tables(one)) == 1.0
    assert float(ag.recall_from_tables(one)) == pytest.approx(1 / 3)
    assert float(ag.over_selection_from_tables(one)) == pytest.approx(1 / 3)


def test_fleiss_ci_honours_a_non_default_level() -> None:
    rng = np.random.default_rng(1)
    counts = np.stack([rng.multinomial(3, [0.6, 0.4]) for _ in range(60)])
    clusters = np.repeat(np.arange(12), 5)
    wide = ag.fleiss_kappa_ci(counts, clusters)
    narrow = ag.fleiss_kappa_ci(counts, clusters, level=0.5)
    assert wide.ci[0] < narrow.ci[0] <= narrow.ci[1] < wide.ci[1]


def test_encode_sorts_mixed_labels_by_their_text() -> None:
    codes, categories = ag.encode(["yes", 1, None], ["no", "yes", 1])
    assert categories == sorted({"yes", 1, None, "no"}, key=str)
    lookup = {c: i for i, c in enumerate(categories)}
    assert codes[0].tolist() == [lookup["yes"], lookup[1], lookup[None]]
    assert codes[0].dtype == np.int64


def test_ci_text_is_the_one_shape_reports_print() -> None:
    est = ag.Estimate(0.4, (0.25, 0.5), n_clusters=12, n_undefined=0)
    assert ag.ci_text(est) == "[0.25, 0.50; 12 users]"
    assert ag.ci_text(est, digits=3) == "[0.250, 0.500; 12 users]"
    assert ag.ci_text(ci=[0.1, 0.2]) == "[0.10, 0.20]"
    assert ag.ci_text(ci=[0.1, 0.2], n_users=1) == "(too few users for a CI: 1 user)"
    assert ag.ci_text(ci=[0.1, 0.2], n_users=4) == "(too few users for a CI: 4 users)"
    below = ag.MIN_USERS_FOR_CI - 1
    assert ag.ci_text(ci=[0.1, 0.2], n_users=below) == f"(too few users for a CI: {below} users)"
    assert ag.ci_text(ci=[float("nan"), 0.2], n_users=19) == "[no CI; 19 users]"
    assert ag.ci_text(ci=None) == "[no CI]"
    # The undefined figures are leave-one-user-out ones (the one CI rule).
    assert ag.ci_text(ci=[float("nan")] * 2, n_users=19, undefined=3) == \
        "[no CI; 19 users] (undefined without 3 of the users)"


def test_registered_metrics_keep_their_fields() -> None:
    kappa = ag.get_metric("kappa")
    assert (kappa.name, kappa.higher_is_better, kappa.binary_only) == ("kappa", True, False)
    assert kappa.description and float(kappa.fn(table(2, 0, 0, 2))) == 1.0
    precision = ag.get_metric("precision")
    assert precision.binary_only is True and precision.name == "precision"
    assert ag.get_metric("over_selection").higher_is_better is None

    @ag.register_metric("test_only_metric", higher_is_better=False, description="d")
    def _metric(t: np.ndarray) -> np.ndarray:
        return np.asarray(t).sum(axis=(-2, -1))

    try:
        added = ag.METRICS["test_only_metric"]
        assert added.binary_only is True and added.higher_is_better is False and added.description == "d"
        assert added.fn is _metric
    finally:
        del ag.METRICS["test_only_metric"]
    with pytest.raises(KeyError) as err:
        ag.get_metric("kapa")
    assert "did you mean kappa" in str(err.value)
    with pytest.raises(KeyError) as none:
        ag.get_metric("zzzzzz")
    assert str(none.value) == "\"unknown metric 'zzzzzz'\""


def test_binary_metrics_reject_judge_codes_outside_0_1_and_honour_the_level() -> None:
    users = np.repeat(np.arange(10), 4)
    human = np.tile([0, 1, 1, 0], 10)
    for bad in (2, -1):
        judge = human.copy()
        judge[3] = bad
        with pytest.raises(ValueError, match="0/1"):
            ag.agreement(human, judge, users, metrics=("precision",))
    judge = np.where(np.arange(40) % 5 == 0, 1 - human, human)
    wide = ag.agreement(human, judge, users, metrics=("kappa",))["kappa"]
    narrow = ag.agreement(human, judge, users, metrics=("kappa",), level=0.5)["kappa"]
    assert wide.ci[0] < narrow.ci[0] <= narrow.ci[1] < wide.ci[1]
