"""Trained judges' labels carry their predicted probability as a confidence (issue 23 item 1, in labels.meta)."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import numpy as np
import pytest

from personagap.judges.trained import load_model
from personagap.stages import trained as stage


@pytest.fixture(scope="module")
def sample_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from personagap.api import import_recenter
    from personagap.sample_data import write_sample_release

    work = tmp_path_factory.mktemp("wire-trained")
    db = work / "sample.duckdb"
    import_recenter(write_sample_release(work / "sample"), db)
    return db


@pytest.mark.slow
def test_trained_judge_labels_carry_the_probability_of_the_label_given(sample_db: Path, tmp_path: Path) -> None:
    model_path = tmp_path / "rel.joblib"
    stage.train_relevance(sample_db, model_path, store_cv=False)
    summary = stage.judge_relevance_trained(sample_db, model_path)
    model = load_model(model_path, "relevance")
    items = stage.relevance_items(sample_db, ("recenter-stage2",))
    with duckdb.connect(str(sample_db), read_only=True) as con:
        rows = con.execute("SELECT item_id, label, meta FROM labels WHERE rater = ?", [summary.rater]).fetchall()
    stored = {i: (label, json.loads(meta)) for i, label, meta in rows}
    assert len(stored) == len(items) == summary.labelled
    p_yes = model.predict_proba(items)
    for item, p in zip(items["item_id"], p_yes, strict=True):
        label, meta = stored[item]
        # By hand: P(yes) for a 'yes' label, 1 - P(yes) for a 'no' one, on the probability scale.
        expected = p if label == "yes" else 1 - p
        assert meta["confidence_scale"] == "probability"
        assert meta["confidence"] == pytest.approx(expected, abs=5e-5)
        assert (label == "yes") == (p >= model.threshold)  # the label and its confidence from one probability
    assert np.unique([m["confidence"] for _, m in stored.values()]).size > 1


def test_out_of_fold_labels_carry_the_probability_of_the_label_given(sample_db: Path, tmp_path: Path) -> None:
    # The /cv rater is the honest trained judge (no label on its own training users): its labels carry the
    # out-of-fold probability of the label each got, read from the label (each fold has its own threshold).
    result = stage.train_relevance(sample_db, tmp_path / "rel.joblib")
    assert result.cv is not None and result.stored_cv_labels > 0
    rater = result.metadata["cv"]["rater"]
    with duckdb.connect(str(sample_db), read_only=True) as con:
        rows = con.execute("SELECT item_id, label, meta FROM labels WHERE rater = ?", [rater]).fetchall()
    stored = {i: (label, json.loads(meta)) for i, label, meta in rows}
    items = stage.relevance_items(sample_db, ("recenter-stage2",))
    assert len(stored) == result.stored_cv_labels
    p_of = dict(zip(items["item_id"], result.cv.probabilities.tolist(), strict=True))
    labels = dict(zip(items["item_id"], result.cv.labels, strict=True))
    for item, (label, meta) in stored.items():
        assert label == labels[item]
        expected = p_of[item] if label == "yes" else 1 - p_of[item]
        assert meta["confidence_scale"] == "probability"
        assert meta["confidence"] == pytest.approx(expected, abs=5e-5)
