"""A trained judge's confidence (issue 23): the predicted probability of the label it gives."""

from __future__ import annotations

import pandas as pd
import pytest

from personagap.judges.trained.models import TrainedModel


@pytest.mark.parametrize(("kind", "threshold"), [("preference", 0.5), ("relevance", 0.3)])
def test_confidence_is_the_probability_of_the_given_label(kind: str, threshold: float) -> None:
    model = TrainedModel(kind=kind, judge=f"trained-{kind}", version=1, classifier=None,  # type: ignore[arg-type]
                         scaler=None, vocab=None, threshold=threshold)  # type: ignore[arg-type]
    p = [0.9, 0.2, threshold, 0.123456789]
    items = pd.DataFrame(index=range(len(p)))
    labels = model.predict(items, p)
    metas = model.label_confidences(items, p)
    positive = labels[0]
    for prob, label, meta in zip(p, labels, metas, strict=True):
        # Hand rule: P(label) is p for the positive label, 1 - p for the other; stored to 4 decimals.
        expected = prob if label == positive else 1 - prob
        assert meta == {"confidence": round(expected, 4), "confidence_scale": "probability"}
    assert labels[2] == positive  # at the threshold the positive label holds, with confidence = threshold
