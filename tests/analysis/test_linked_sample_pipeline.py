"""The demo's linked sample pipeline: its files realise what it says it planted, and the pipeline view gets it back.

The realised rates and the over-personalised answers are recomputed here from the written files with code of
this test (not the generator's counters); the generating rates must lie inside the view's CIs.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import duckdb
import pytest

from personagap.analysis.pipeline import pipeline_db
from personagap.sample_pipeline import (
    ANNOTATOR,
    EXTRACTOR,
    GENERATOR,
    LLM_JUDGE,
    SELECTOR,
    PlantedTruth,
    import_sample_pipeline,
    planted_pipeline_truth,
)


def _rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, PlantedTruth]:
    folder = tmp_path_factory.mktemp("sample-pipeline")
    db = folder / "db.duckdb"
    return db, import_sample_pipeline(folder / "files", db)


def _from_files(truth: PlantedTruth) -> tuple[dict[tuple[str, str, str | None], float], set[str]]:
    """(quantity, system, condition) -> share, and the over-personalised answers, from the files alone."""
    s1 = {r["item_id"]: r for r in _rows(truth.files["extraction"]) if r["rater"] == ANNOTATOR}
    verdict = {r["attribute_id"]: r["label"] for r in s1.values()}
    out: dict[tuple[str, str, str | None], float] = {
        ("rejected_attributes", EXTRACTOR, None):
            sum(v == "bad" for v in verdict.values()) / len(verdict)}
    by_item: dict[str, dict[str, str]] = defaultdict(dict)
    context: dict[str, dict[str, Any]] = {}
    for r in _rows(truth.files["relevance"]):
        by_item[r["item_id"]][r["rater"]] = r["label"]
        if "prompt" in r:
            context[r["item_id"]] = r
    irrelevant = {(c["user_id"], c["prompt"], c["attribute_id"]) for i, c in context.items()
                  if by_item[i][ANNOTATOR] == "no"}
    for system in (SELECTOR, LLM_JUDGE):
        chosen = [i for i in by_item if by_item[i][system] == "yes"]
        relevant = [i for i in by_item if by_item[i][ANNOTATOR] == "yes"]
        out[("irrelevant_selected", system, None)] = sum(by_item[i][ANNOTATOR] == "no" for i in chosen) / len(chosen)
        out[("missed_relevant", system, None)] = sum(by_item[i][system] == "no" for i in relevant) / len(relevant)
        out[("over_selection", system, None)] = len(chosen) / len(relevant)
    flagged = set()
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    for r in _rows(truth.files["response"]):
        if r["rater"] != ANNOTATOR:
            continue
        c = counts[r["input_condition"]]
        c[0] += 1
        c[1] += r["label"] != r["personalized"]
        c[2] += r["label"] not in (r["personalized"], "tie")
        if any(verdict[a] == "bad" or (r["user_id"], r["prompt"], a) in irrelevant for a in r["attributes_used"]):
            flagged.add(r["item_id"])
    for condition, (n, no_better, worse) in counts.items():
        out[("no_better_than_generic", GENERATOR, condition)] = no_better / n
        out[("worse_than_generic", GENERATOR, condition)] = worse / n
    return out, flagged


def test_the_files_realise_the_planted_truth(sample: tuple[Path, PlantedTruth]) -> None:
    _, truth = sample
    shares, flagged = _from_files(truth)
    for (quantity, system, condition), share in shares.items():
        assert truth.rate(quantity, system, condition).realised == pytest.approx(share), (quantity, system)
    assert truth.over_personalised == flagged and flagged
    # The truth without files is the same draw.
    bare = planted_pipeline_truth()
    assert bare.rates == truth.rates and bare.over_personalised == truth.over_personalised


def test_the_pipeline_view_gets_the_planted_truth_back(sample: tuple[Path, PlantedTruth]) -> None:
    db, truth = sample
    view = pipeline_db(db)
    shares, _ = _from_files(truth)
    for (quantity, system, condition) in shares:
        (row,) = [r for r in view.rows if (r.quantity, r.system, r.input_condition) == (quantity, system, condition)
                  and r.dataset == truth.dataset]
        planted = truth.rate(quantity, system, condition)
        assert row.human == pytest.approx(planted.realised) and row.n_users == planted.n_users
        lo, hi = row.human_ci
        assert lo is not None and lo <= planted.rate <= hi, (quantity, system, condition, planted.rate, row.human_ci)
    with duckdb.connect(str(db), read_only=True) as con:
        source = {iid: json.loads(p)["source_id"] for iid, p in con.execute("SELECT item_id, payload FROM items")
                  .fetchall()}
    assert {source[f["item_id"]] for f in view.flagged} == truth.over_personalised
