"""Routing end to end over HTTP (issue 23): an LLM judge served on 127.0.0.1 states a verbal confidence with each
answer; the runner stores it; `personagap route` chooses the threshold, stores the routed items and prints the
combined estimate -- equal to the estimator's on the data the server answered from.

The server (tests/support/openai_server.py) answers each attribute with the generator's judge label and certainty, so
the expected figures are computed from the generated items, never from the store.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from benchmarks.calibration_routing import RoutingWorld
from personagap.analysis.routing import guaranteed_threshold, routing_estimate
from personagap.api import judge_relevance
from personagap.cli import cli
from personagap.dashboard import annotate
from personagap.judges.base import get_judge, rater_name
from personagap.judges.lm import LMConfig
from personagap.labels_api import import_labels
from tests.support.openai_server import ConfidenceServer, last_user_message
from tests.support.route_store import DATASET, HUMAN

MODEL = "openai/scripted"
PIPELINE = "pipeline"
"""The pipeline's own output on every item (kind ``system``: never a judge or a reference): the generic format stores
an item only with a label, and some items have no person's label (the routed items people still have to label)."""


def _rows(items: pd.DataFrame) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for it in items.itertuples(index=False):
        rows.append({"item_id": it.item_id, "user_id": it.user_id, "rater": PIPELINE, "rater_kind": "system",
                     "label": "no", "prompt": f"Prompt of {it.item_id}", "attribute": f"Attribute of {it.item_id}"})
        if pd.notna(it.human):
            rows.append({"item_id": it.item_id, "user_id": it.user_id, "rater": HUMAN, "rater_kind": "human",
                         "label": it.human})
    return rows


def test_route_end_to_end_over_http_with_verbal_confidence(tmp_path: Path) -> None:
    # Seed 13: a study of 20 users where the guaranteed threshold at accuracy 0.7 keeps some items (most 20-user
    # studies of this generator keep none: too few labelled items to show the target).
    items = RoutingWorld(human_share=0.6).study(20, np.random.default_rng(13))
    db = tmp_path / "http.duckdb"
    import_labels(pd.DataFrame(_rows(items)), stage="relevance", dataset=DATASET, db=db, categories=["no", "yes"])
    by_id = items.set_index("item_id")

    def answer(body: dict[str, Any]) -> str:
        found = re.search(r"Attribute of (i\d+)", last_user_message(body))
        assert found, last_user_message(body)
        row = by_id.loc[found.group(1)]
        return json.dumps({"reason": "Scripted.", "answer": str(row["label"]).upper(),
                           "confidence": str(int(row["confidence"]))})

    with ConfidenceServer(answer, lambda token: 0.0) as server:
        lm = LMConfig(model=MODEL, api_base=server.base_url, confidence="verbal")
        summary = judge_relevance(db, "relevance-per-attribute", lm, datasets=(DATASET,), concurrency=4,
                                  progress=False, max_retries=0)
        assert len(server.requests) == len(items)
    assert summary.judged == len(items) and summary.failed == 0
    judge = rater_name(get_judge("relevance-per-attribute"), MODEL, "verbal")
    result = CliRunner().invoke(cli, ["route", "--stage", "relevance", "--dataset", DATASET, "--judge", judge,
                                      "--target-accuracy", "0.7", "--db", str(db), "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["confidence_scale"] == "0-100"
    threshold = out["threshold"]["min_confidence"]
    assert threshold == guaranteed_threshold(items, 0.7).min_confidence
    expected = routing_estimate(items, threshold, "yes")
    assert 0 < expected.kept < len(items) and expected.still_needed > 0  # kept, routed, and people still to label
    got = out["estimate"]
    assert got["combined"]["value"] == pytest.approx(expected.combined.value)
    # JSON writes a withheld bound as null, the estimator as NaN: compare them as the same "no interval".
    shown = [float("nan") if b is None else b for b in got["combined"]["ci"]]
    assert shown == pytest.approx(list(expected.combined.ci), nan_ok=True)
    assert (got["kept_by_judge"], got["routed_to_people"], got["human_labels_still_needed"]) == (
        expected.kept, expected.routed, expected.still_needed)
    assert got["all_judge"]["value"] == pytest.approx(expected.all_judge.value)
    routed = annotate.routed_items(db, "relevance", DATASET)
    assert routed is not None and len(routed) == expected.routed
