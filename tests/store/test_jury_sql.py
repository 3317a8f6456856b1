"""The jury's vote in SQL (personagap/store/jury_counts.py) gives what the pure rule gives (judges/jury.py).

Random jurors' labels with ties, missing confidences and two confidence scales, under both rules: every stored jury
label (its label, its error and its meta) equals :func:`personagap.judges.jury.jury_labels`' on the same votes.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from personagap.judges.jury import _probability, build_jury, jury_labels
from personagap.records import Label
from personagap.store import opened, write_labels

JURORS = [("j1", ""), ("j2", "no-profile"), ("j3", ""), ("j4", "")]


def _votes(db: Path, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    labels, rows = [], []
    for k in range(300):
        for rater, condition in JURORS:
            if rng.random() < 0.15:
                continue  # this juror did not label the item
            label = str(rng.choice(["A", "B", "tie"]))
            scale = "0-100" if rater == "j1" else "0-1"
            stated = rng.random() < 0.9 or k < 3
            confidence = float(rng.choice([10, 50, 60, 90])) if scale == "0-100" else float(rng.choice([0.1, 0.5, 0.6]))
            meta = {"confidence": confidence, "confidence_scale": scale} if stated else None
            labels.append(Label(item_id=f"i{k:03d}", rater=rater, rater_kind="llm", condition=condition, label=label,
                                run_id="r", meta=meta))
            rows.append({"item_id": f"i{k:03d}", "juror": f"{rater}|{condition}", "label": label,
                         "probability": _probability(confidence if stated else np.nan, scale if stated else None)})
        # A failed juror label is never a vote.
        labels.append(Label(item_id=f"i{k:03d}", rater="j3", rater_kind="llm", condition="failed", label=None,
                            error="unparseable", run_id="r"))
    with opened(db) as con:
        write_labels(con, labels)
    frame = pd.DataFrame(rows)
    frame["probability"] = frame["probability"].astype(float)
    return frame


@pytest.mark.parametrize("rule", ["majority", "confidence"])
def test_the_sql_vote_is_the_pure_rule(tmp_path: Path, rule: str) -> None:
    db = tmp_path / "jury.duckdb"
    votes = _votes(db, seed=7)
    result = build_jury(db, JURORS, rule, rater="jury", condition="c")  # type: ignore[arg-type]
    expected = {x.item_id: x for x in jury_labels(votes, rule, rater="jury", rater_kind="llm",  # type: ignore[arg-type]
                                                  condition="c", run_id="r")}
    with opened(db, read_only=True) as con:
        got = con.execute("SELECT item_id, rater_kind, label, error, CAST(meta AS TEXT) FROM labels "
                          "WHERE rater = 'jury' AND condition = 'c' ORDER BY item_id").fetchall()
    assert [g[0] for g in got] == sorted(expected)
    for item, kind, label, error, meta in got:
        want = expected[item]
        assert (kind, label, error) == (want.rater_kind, want.label, want.error), item
        assert json.loads(meta) == want.meta, item
    assert result.labelled == sum(x.label is not None for x in expected.values())
    assert result.undecided == sum(x.label is None for x in expected.values())
    assert result.undecided > 0 and result.labelled > 0  # both branches are exercised
    # Rerunning replaces the jury whole.
    build_jury(db, JURORS, rule, rater="jury", condition="c")  # type: ignore[arg-type]
    with opened(db, read_only=True) as con:
        assert con.execute("SELECT count(*) FROM labels WHERE rater = 'jury'").fetchall()[0][0] == len(expected)
