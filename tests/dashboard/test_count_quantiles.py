"""The bias section's length quartiles from per-length counts equal numpy's over every label (issue 31)."""

from __future__ import annotations

import numpy as np
import pytest

from personagap.dashboard.data import _count_quantiles

QUARTILES = np.array([0, 0.25, 0.5, 0.75, 1])


@pytest.mark.parametrize("seed", range(8))
def test_count_quantiles_equal_numpy_over_the_repeated_labels(seed: int) -> None:
    rng = np.random.default_rng(seed)
    for _ in range(200):
        k = int(rng.integers(1, 30))
        values = np.sort(rng.choice(np.arange(1, 500), k, replace=False))
        if seed % 2:
            values = values.astype(float)  # lengths read with missing values come as floats
        counts = rng.integers(1, 50, k)
        expected = np.quantile(np.repeat(values, counts), QUARTILES)
        np.testing.assert_array_equal(_count_quantiles(values, counts, QUARTILES), expected)


def test_count_quantiles_single_label_and_interpolation() -> None:
    np.testing.assert_array_equal(_count_quantiles(np.array([7]), np.array([1]), QUARTILES), [7.0] * 5)
    # Two labels, lengths 10 and 20: numpy interpolates the quartiles between them.
    np.testing.assert_array_equal(_count_quantiles(np.array([10, 20]), np.array([1, 1]), QUARTILES),
                                  [10.0, 12.5, 15.0, 17.5, 20.0])
