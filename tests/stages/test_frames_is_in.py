"""``stages.frames.is_in`` answers as pandas' ``Series.isin`` does, for text, missing values and numbers."""

from __future__ import annotations

import pandas as pd
from hypothesis import given
from hypothesis import strategies as st

from personagap.stages.frames import is_in

_TEXT = st.none() | st.sampled_from(["a", "b", "i1", "i10", "", "yes"])


@given(st.lists(_TEXT, max_size=30), st.lists(_TEXT, max_size=10), st.sampled_from(["str", "object"]))
def test_text_membership_is_pandas_isin(values: list[str | None], pool: list[str | None], dtype: str) -> None:
    series = pd.Series(values, dtype=dtype)
    assert is_in(series, pool).tolist() == series.isin(pool).tolist()
    assert is_in(series, set(pool)).tolist() == series.isin(set(pool)).tolist()
    assert is_in(series, pd.Index(pool, dtype=object)).tolist() == series.isin(pd.Index(pool, dtype=object)).tolist()


@given(st.lists(st.integers(0, 5), max_size=20), st.lists(st.integers(0, 5) | st.sampled_from(["1", "2"]),
                                                          max_size=6))
def test_numbers_keep_pandas_comparison(values: list[int], pool: list[int | str]) -> None:
    series = pd.Series(values, dtype=object)
    assert is_in(series, pool).tolist() == series.isin(pool).tolist()
