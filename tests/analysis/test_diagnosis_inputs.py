"""``diagnose``'s inputs counted by DuckDB in fewer passes equal their per-label definitions (issue 20, defect 10).

:func:`personagap.store.aggregates.diagnosis_inputs` sums the failure counts, the human counts and the inventory
from one grouped pass over the labels, and reads the items several blind humans labelled once. Each frame is
checked here against its definition computed in pandas from every stored label with the rule's masks.
"""

from __future__ import annotations

import pandas as pd
import pytest
from hypothesis import given

from personagap.store import load_labels
from personagap.store.aggregates import diagnosis_inputs
from tests.support.diagnosis_inputs import STORE_EXAMPLES, expected_inputs, same_frame, stored, stores

"""Hypothesis settings for examples drawn from :func:`stores`: no shrinking, since each example writes a store."""


@pytest.mark.slow
@STORE_EXAMPLES
@given(stores())
def test_diagnosis_inputs_equal_their_per_label_definitions(store: tuple[pd.DataFrame, pd.DataFrame]) -> None:
    items, labels = store
    with stored(items, labels) as con:
        got = diagnosis_inputs(con)
        rows = load_labels(con)
    for name, expected in expected_inputs(rows, items).items():
        same_frame(got[name], expected)
