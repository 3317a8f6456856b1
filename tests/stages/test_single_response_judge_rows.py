"""Issue 20: a single-response dataset's judge rows come from DuckDB's counts and equal a label-by-label recomputation.

A small synthetic store: an ordinal 1-5 dataset and a 3-category one, three blind humans per item (so some items
tie and have no reference), anchored human labels (never a rater or a vote), judges that fail with an error text,
an ordinal judge label written as a float (``3.0`` is the level 3) and labels off the ordinal scale (failures,
never scored), human labels off the ordinal scale (no rating; a majority of them is no reference), in-sample
labels (never a judge). Every expected figure is recomputed here from the written labels
(scikit-learn for kappa and quadratic-weighted kappa, the per-label CI function for the intervals); only human
labels are read one a row.
"""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import cohen_kappa_score

from personagap.analysis.agreement import MIN_USERS_FOR_CI
from personagap.analysis.comparable import HUMAN_KINDS, IN_SAMPLE, SHOWN_LLM
from personagap.analysis.panel import scale_estimates
from personagap.analysis.pipeline_sql import reference_table
from personagap.datasets import record_meta
from personagap.records import DatasetRecord, DatasetScale, Item, Label, Run
from personagap.stages.response import ResponseReport, report_response
from personagap.stages.response_records import SINGLE_KINDS
from personagap.store import opened, write_batch
from personagap.store.batch import ImportBatch
from personagap.store.response_counts import single_human_labels, single_judge_counts, staged
from tests.support.response_rows import HUMANS, strict_majority

SCALES = {"rated": DatasetScale(kind="ordinal", categories=("1", "2", "3", "4", "5")),
          "tri": DatasetScale(kind="nominal", categories=("bad", "good", "ok"))}
JUDGES = (("j1", "llm", ""), ("j2", "llm", "no-profile"), ("tr", "trained", ""), ("tr", "trained", IN_SAMPLE))
PER_USER = 6


def _judge_label(rng: np.random.Generator, truth: str, categories: tuple[str, ...], ordinal: bool) -> str:
    x = rng.random()
    if ordinal and x < 0.1:
        return f"{truth}.0"  # the same level, written as a number
    if ordinal and x < 0.2:
        return ["0", "7", "2.5"][int(rng.integers(0, 3))]  # off the scale
    return truth if x < 0.7 else categories[int(rng.integers(0, len(categories)))]


def _build(db: Path) -> list[dict[str, Any]]:
    """Write the store; return every written label with its dataset and user."""
    rng = np.random.default_rng(20)
    batch = ImportBatch()
    batch.runs.append(Run(run_id="r", kind="import", source="synthetic", started_at=datetime(2026, 1, 1, tzinfo=UTC)))
    written: list[dict[str, Any]] = []

    def add(dataset: str, user: str, **label: Any) -> None:
        batch.labels.append(Label(run_id="r", **label))
        written.append({"dataset": dataset, "user": user, "condition": "", "error": None, **label})

    for dataset, scale in SCALES.items():
        cats = scale.categories
        batch.meta |= record_meta(DatasetRecord(stage="response", dataset=dataset, item_kind="single", scale=scale,
                                                question=f"{dataset}?", declared=True))
        for u in range(MIN_USERS_FOR_CI + 2):
            user = f"u{u:02d}"
            for k in range(PER_USER):
                iid = f"{dataset}/{u}/{k}"
                batch.items[iid] = Item(item_id=iid, dataset=dataset, stage="response", user_id=user,
                                        payload={"kind": "single", "response": "an answer"})
                truth = cats[int(rng.integers(0, len(cats)))]
                for h in HUMANS:
                    if rng.random() < 0.15:
                        continue
                    label = truth if rng.random() < 0.6 else cats[int(rng.integers(0, len(cats)))]
                    if scale.ordinal and (k == 0 and u < 2 or rng.random() < 0.05):
                        label = "9"  # off the scale: no rating, and where the humans' majority, no reference
                    add(dataset, user, item_id=iid, rater=h, rater_kind="human", label=label)
                    if rng.random() < 0.2:
                        add(dataset, user, item_id=iid, rater=h, rater_kind="human", condition=SHOWN_LLM,
                            label=cats[int(rng.integers(0, len(cats)))])
                for rater, kind, condition in JUDGES:
                    if kind == "llm" and rng.random() < 0.12:
                        add(dataset, user, item_id=iid, rater=rater, rater_kind=kind, condition=condition, label=None,
                            error=["timeout: slow", "parse: junk"][int(rng.integers(0, 2))])
                    else:
                        add(dataset, user, item_id=iid, rater=rater, rater_kind=kind, condition=condition,
                            label=_judge_label(rng, truth, cats, scale.ordinal))
    write_batch(db, batch)
    return written


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]]]:
    db = tmp_path_factory.mktemp("agg-single") / "store.duckdb"
    return db, _build(db)


@pytest.fixture(scope="module")
def report(built: tuple[Path, list[dict[str, Any]]]) -> ResponseReport:
    return report_response(built[0])


def _blind(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in rows if r["rater"] in HUMANS and r["condition"] == ""]


def _canonical(label: str, scale: DatasetScale) -> str | None:
    """The label as the scale writes it (``3.0`` is ``3``), None when it is off the scale."""
    if not scale.ordinal:
        return label if label in scale.categories else None
    try:
        value = float(label)
    except ValueError:
        return None
    return next((c for c in scale.categories if float(c) == value), None)


@pytest.mark.parametrize("dataset", list(SCALES))
@pytest.mark.parametrize(("rater", "condition"), [("j1", ""), ("j2", "no-profile"), ("tr", "")])
def test_single_judge_rows_match_the_labels(built: tuple[Path, list[dict[str, Any]]], report: ResponseReport,
                                            dataset: str, rater: str, condition: str) -> None:
    _, written = built
    scale, cats = SCALES[dataset], list(SCALES[dataset].categories)
    rows = [r for r in written if r["dataset"] == dataset]
    ref = strict_majority(_blind(rows))
    mine = [r for r in rows if r["rater"] == rater and r["condition"] == condition]
    scored = [(r, _canonical(r["label"], scale)) for r in mine if r["label"] is not None]
    on = [(r, c) for r, c in scored if c is not None]
    joined = [(r, c) for r, c in on if _canonical(ref.get(r["item_id"], ""), scale) is not None]
    if scale.ordinal:
        assert len(joined) < sum(r["item_id"] in ref for r, _ in on)  # some reference is off the scale
    human = [ref[r["item_id"]] for r, _ in joined]
    judge = [c for _, c in joined]
    users = [r["user"] for r, _ in joined]
    row = next(j for j in report.judges if (j.dataset, j.rater, j.condition) == (dataset, rater, condition))
    assert (row.n, row.n_users, row.scale) == (len(joined), len(set(users)), scale.kind)
    assert row.accuracy == pytest.approx(float(np.mean(np.array(human) == np.array(judge))), abs=1e-12)
    assert row.kappa == pytest.approx(cohen_kappa_score(human, judge, labels=cats), abs=1e-12)
    per_label = scale_estimates(pd.Series(human), pd.Series(judge), pd.Series(users), scale)
    for name in ("kappa", "accuracy", "ac1", "mcc", "balanced_accuracy"):
        assert getattr(row, f"{name}_ci") == pytest.approx(list(per_label[name].ci), abs=1e-12), name
    reasons = Counter(r["error"].split(":")[0] for r in mine if r["label"] is None)
    off = len(scored) - len(on)
    if scale.ordinal:
        assert off > 0 and any(r["label"].endswith(".0") for r, _ in joined)  # the store holds both cases
        reasons["off-scale"] += off
        assert row.weighted_kappa == pytest.approx(
            cohen_kappa_score(human, judge, labels=cats, weights="quadratic"), abs=1e-12)
        assert row.weighted_kappa_ci == pytest.approx(list(per_label["weighted_kappa"].ci), abs=1e-12)
    assert (row.failures, row.failure_reasons) == (sum(reasons.values()), dict(reasons))

    section = next(s for s in report.single_responses if s.dataset == dataset)
    versus = {v.rater: v for v in section.judges if v.judge == row.judge}
    assert (versus["majority"].n, versus["majority"].kappa) == (row.n, row.kappa)
    expected_raters = []
    for h in HUMANS:
        said = {r["item_id"]: r["label"] for r in _blind(rows) if r["rater"] == h and _canonical(r["label"], scale)}
        both = [(said[r["item_id"]], c) for r, c in on if r["item_id"] in said]
        if both:
            expected_raters.append(h)
            hv, jv = zip(*both, strict=True)
            assert versus[h].n == len(both)
            assert versus[h].kappa == pytest.approx(cohen_kappa_score(hv, jv, labels=cats), abs=1e-12)
            if scale.ordinal:
                assert versus[h].weighted_kappa == pytest.approx(
                    cohen_kappa_score(hv, jv, labels=cats, weights="quadratic"), abs=1e-12)
    assert sorted(versus) == sorted(["majority", *expected_raters])


def test_in_sample_labels_are_no_judge(report: ResponseReport) -> None:
    keys = {(j.dataset, j.rater, j.condition) for j in report.judges}
    assert keys == {(d, r, c) for d in SCALES for r, _, c in JUDGES if c != IN_SAMPLE}


def test_judge_labels_are_counted_never_read_one_a_row(built: tuple[Path, list[dict[str, Any]]]) -> None:
    """Only human labels are read per item; every comparable judge label is counted once, in fewer rows."""
    db, written = built
    humans = [r for r in written if r["rater_kind"] in HUMAN_KINDS and r["label"] is not None]
    judged = [r for r in written if r["rater_kind"] not in HUMAN_KINDS and r["condition"] != IN_SAMPLE]
    with opened(db, read_only=True) as con:
        frame = single_human_labels(con, SINGLE_KINDS, list(SCALES))
        with reference_table(con) as reference, staged(con, reference):
            counts = single_judge_counts(con, SINGLE_KINDS)
    assert set(frame["rater_kind"]) <= set(HUMAN_KINDS)
    assert len(frame) == len(humans)
    assert int(counts["n"].sum()) == len(judged) and len(counts) < len(judged)
