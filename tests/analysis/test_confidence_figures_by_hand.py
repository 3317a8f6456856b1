"""Calibration sums and the coverage curve on count rows small enough to work out by hand.

The rows are what :func:`personagap.store.confidence.confidence_counts_by_judge` hands over: Arrow-backed text, one
row per (user, confidence, reference, label) with its count ``n``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from personagap.analysis.calibration import per_user_sums
from personagap.analysis.coverage import coverage_curve
from personagap.records import DatasetScale

YES_NO = DatasetScale(kind="nominal", categories=("yes", "no"))
ORDINAL = DatasetScale(kind="ordinal", categories=("1", "2", "3"))


def _rows(*rows: tuple[str, float, str, str, int]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["user_id", "confidence", "human", "label", "n"])


# u9: 2 items at 0.9 (1 right), 1 at 0.6 (right); U1: 3 items at 0.9 (all right); u10: 1 item at 0.3 (wrong).
ROWS = _rows(("u9", 0.9, "yes", "no", 1), ("u9", 0.9, "yes", "yes", 1), ("u9", 0.6, "no", "no", 1),
             ("U1", 0.9, "no", "no", 3), ("u10", 0.3, "yes", "no", 1))


def test_per_user_sums_order_users_by_code_point_and_sum_by_hand() -> None:
    users, sums = per_user_sums(ROWS, "0-1", n_bins=2)
    assert users == ["U1", "u10", "u9"]  # code-point order: upper case first, "u10" before "u9"
    # (user, bin, [items, right, summed probability, summed squared error]); bins [0, 0.5) and [0.5, 1].
    expected = np.zeros((3, 2, 4))
    expected[0, 1] = [3, 3, 2.7, 3 * 0.1 ** 2]
    expected[1, 0] = [1, 0, 0.3, 0.3 ** 2]
    expected[2, 1] = [3, 2, 2.4, 0.9 ** 2 + 0.1 ** 2 + 0.4 ** 2]
    np.testing.assert_allclose(sums, expected, rtol=0, atol=1e-12)


def test_coverage_curve_counts_by_hand() -> None:
    curve = coverage_curve(ROWS, YES_NO)
    assert [p.min_confidence for p in curve] == [0.9, 0.6, 0.3]
    assert [p.n for p in curve] == [5, 6, 7]
    assert [p.coverage for p in curve] == pytest.approx([5 / 7, 6 / 7, 1.0])
    assert [p.accuracy.value for p in curve] == pytest.approx([4 / 5, 5 / 6, 5 / 7])
    assert [p.accuracy.n_clusters for p in curve] == [2, 2, 3]
    # Kappa at the lowest threshold: 2x2 table (human rows yes/no, judge columns yes/no) = [[1, 2], [0, 4]].
    po, pe = 5 / 7, (3 / 7) * (1 / 7) + (4 / 7) * (6 / 7)
    assert curve[-1].kappa.value == pytest.approx((po - pe) / (1 - pe))


def test_ordinal_labels_are_read_as_their_levels_and_off_scale_ones_raise() -> None:
    # "3.0" is the level stored as "3": the same cell as "3".
    rows = _rows(("u1", 0.8, "3", "3.0", 2), ("u1", 0.8, "2", "3", 1), ("u2", 0.5, "1", "1", 1))
    curve = coverage_curve(rows, ORDINAL)
    assert [p.n for p in curve] == [3, 4]
    assert curve[0].accuracy.value == pytest.approx(2 / 3)
    assert curve[-1].accuracy.value == pytest.approx(3 / 4)
    with pytest.raises(ValueError, match=r"labels \['maybe'\] are not on the nominal scale"):
        coverage_curve(_rows(("u1", 0.8, "yes", "maybe", 1)), YES_NO)
