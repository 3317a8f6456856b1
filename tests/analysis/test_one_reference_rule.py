"""Each rule once: every consumer sees the same human reference, item set and category set.

The human reference (``comparable.reference_labels`` and its SQL twin ``reference_sql``) is read by the robust
panel, alt-test and estimates (``robust.human_reference``), ``plan`` (``analysis.budget``), ``optimize``
(``judges.optimize.human_reference``) and, through SQL, ``diagnose`` and the dashboard. The category set
(``comparable.categories_for``) is read by the dataset record (``personagap.datasets``) and the Annotate page.
Random label sets with ties, duplicate raters, stored majorities (agreeing and conflicting) mixed with
individual votes, anchored and in-sample labels, 2-4 categories and ordinal levels go to each of them.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd
import pytest
from hypothesis import HealthCheck, Phase, assume, given, settings
from hypothesis import strategies as st
from sklearn.metrics import cohen_kappa_score

from personagap.analysis import comparable as c
from personagap.analysis.robust import human_reference
from personagap.dashboard import annotate
from personagap.datasets import SCALE_LABELS_SQL, build_records, record_meta
from personagap.judges import optimize
from personagap.records import DatasetRecord, DatasetScale
from personagap.store import connect, load_labels, upsert
from personagap.vocabulary import HumanSet
from tests.support.frames import plan_rows
from tests.support.oracles import estimate_rows, panel_rows

STAGE, DATASET = "relevance", "d"
_COLUMNS = ["item_id", "rater", "rater_kind", "condition", "label", "user_id"]
_HUMAN_CONDITIONS = (c.BLIND, c.BLIND, c.SHOWN_LLM, c.CONVERTED_SHOWN_LLM, c.SHOWN_LLM_RATING)
_SCALES = (("no", "yes"), ("A", "B", "tie"), ("ok", "bad", "unsure", "skip"), ("1", "2", "3", "4"))


# --------------------------------------------------------------------------- a small store

def _store(path: Path, labels: pd.DataFrame, meta: dict[str, str] | None = None) -> None:
    """Write ``labels`` (tidy rows) with their items into a fresh store at ``path``."""
    items = labels.drop_duplicates("item_id")[["item_id", "user_id"]].assign(
        dataset=DATASET, stage=STAGE, prompt_index=0, attribute=None, position=None, payload="{}")
    rows = labels.assign(raw=None, reason=None, error=None, run_id="r", meta=None)
    rows["error"] = rows["label"].map(lambda v: "unparseable" if v is None else None)
    with connect(path) as con:
        upsert(con, "items", items[["item_id", "dataset", "stage", "user_id", "prompt_index", "attribute",
                                    "position", "payload"]])
        upsert(con, "labels", rows[["item_id", "rater", "rater_kind", "condition", "label", "raw", "reason",
                                    "error", "run_id", "meta"]])
        for key, value in (meta or {}).items():
            con.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", [key, value])


def _sql_reference(labels: pd.DataFrame, which: HumanSet = "blind") -> pd.Series:
    """The SQL twin run in DuckDB over the same rows."""
    with duckdb.connect() as con:
        con.register("labels", labels[["item_id", "rater", "rater_kind", "condition", "label"]])
        got = con.execute(f"WITH {c.reference_sql(which)} SELECT item_id, human FROM reference").df()
    return got.set_index("item_id")["human"].astype(str).sort_index()


def _tidy(rows: list[tuple[Any, ...]]) -> pd.DataFrame:
    frame = pd.DataFrame(rows, columns=_COLUMNS)
    return frame.assign(dataset=DATASET, stage=STAGE)


# --------------------------------------------------------------------------- defect 4, by hand

def _defect_four() -> pd.DataFrame:
    """One item with two conflicting stored majorities and individual votes no/no/yes (plus items so that
    the reports have users to resample); a judge labels every item."""
    rows: list[tuple[Any, ...]] = [
        ("x", "majority-yes", "human_majority", c.BLIND, "yes", "u0"),  # read first: the old copy took it
        ("x", "majority-no", "human_majority", c.BLIND, "no", "u0"),
        ("x", "ann", "human", c.BLIND, "no", "u0"),
        ("x", "bob", "human", c.BLIND, "no", "u0"),
        ("x", "cy", "human", c.BLIND, "yes", "u0"),
    ]
    for k in range(1, 7):  # agreeing stored majorities on six more users' items
        rows.append((f"y{k}", "majority-yes", "human_majority", c.BLIND, "yes" if k % 2 else "no", f"u{k}"))
    judge = {"x": "no", "y1": "yes", "y2": "no", "y3": "no", "y4": "no", "y5": "yes", "y6": "yes"}
    rows += [(item, "gpt", "llm", c.BLIND, label, "u0" if item == "x" else f"u{item[1]}")
             for item, label in judge.items()]
    return _tidy(rows)


def test_conflicting_stored_majorities_fall_to_the_votes_in_every_consumer(tmp_path: Path) -> None:
    labels = _defect_four()
    assert c.reference_labels(labels)["x"] == "no"  # the rule: conflicting majorities say nothing, votes decide
    assert _sql_reference(labels)["x"] == "no"
    # The panel, alt-test, estimates and plan read robust.human_reference: it used to take the first stored row.
    assert human_reference(labels).loc["x", "label"] == "no"


def test_optimize_reads_the_same_reference_on_the_defect_example(tmp_path: Path) -> None:
    db = tmp_path / "d.duckdb"
    _store(db, _defect_four())
    assert optimize.human_reference(db, ["x"]) == {"x": "no"}


def test_estimates_plan_and_panel_score_against_the_same_reference() -> None:
    labels = _defect_four()
    ref = c.reference_labels(labels).sort_index()
    judge = labels[labels["rater"] == "gpt"].set_index("item_id")["label"].loc[ref.index]
    # Human-only yes-rate: share of "yes" in the one reference (x counts as "no").
    [row] = estimate_rows(labels, DATASET)
    assert row["human_only"] == pytest.approx((ref == "yes").mean())
    # plan's kappa and the panel's kappa: sklearn's kappa of the judge against that reference.
    expected = cohen_kappa_score(ref.tolist(), judge.tolist())
    [budget] = plan_rows(labels, [DATASET], simulations=5).kappa
    assert budget.kappa == pytest.approx(expected) and budget.n_items == len(ref)
    panel = [r for r in panel_rows(labels, DATASET) if r["rater"] == "gpt"]
    assert panel[0]["kappa"] == pytest.approx(expected) and panel[0]["n"] == len(ref)


def test_a_stored_majority_stands_and_later_votes_are_extra_raters() -> None:
    """Re-Centering's stored majority "yes" with three later Annotate-page votes "no": the majority stands."""
    labels = _tidy([("x", "human_majority", "human_majority", c.BLIND, "yes", "u0"),
                    *[("x", name, "human", c.BLIND, "no", "u0") for name in ("ann", "bob", "cy")]])
    assert c.reference_labels(labels).to_dict() == {"x": "yes"}
    assert _sql_reference(labels).to_dict() == {"x": "yes"}
    assert human_reference(labels)["label"].to_dict() == {"x": "yes"}


# --------------------------------------------------------------------------- random label sets

@st.composite
def label_sets(draw: st.DrawFn) -> tuple[pd.DataFrame, tuple[str, ...]]:
    scale = draw(st.sampled_from(_SCALES))
    categories = scale[: draw(st.integers(2, len(scale)))]
    label = st.sampled_from(categories)
    rows: list[tuple[Any, ...]] = []
    for i in range(draw(st.integers(1, 8))):
        item, user = f"i{i}", f"u{draw(st.integers(0, 3))}"
        for m in range(draw(st.integers(0, 2))):  # stored majorities: none, one, or two that may disagree
            cond = draw(st.sampled_from((c.BLIND, c.BLIND, c.ANCHORED_MAJORITY)))
            rows.append((item, f"majority-{m}", "human_majority", cond, draw(label), user))
        for r in range(draw(st.integers(0, 4))):  # individual humans, some anchored, some twice
            conds = draw(st.lists(st.sampled_from(_HUMAN_CONDITIONS), min_size=1, max_size=2, unique=True))
            for cond in conds:
                value = "necessary" if cond == c.SHOWN_LLM_RATING else draw(st.one_of(label, st.none()))
                rows.append((item, f"a{r}", "human", cond, value, user))
        for rater, kind in (("gpt", "llm"), ("lexical", "trained")):
            if draw(st.booleans()):
                cond = draw(st.sampled_from((c.BLIND, c.IN_SAMPLE)))
                rows.append((item, rater, kind, cond, draw(st.one_of(label, st.none())), user))
    return _tidy(rows), categories


_SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.slow
@_SETTINGS
@given(label_sets(), st.sampled_from(["blind", "anchored"]))
def test_every_reference_consumer_sees_the_same_reference(data: tuple[pd.DataFrame, tuple[str, ...]],
                                                          which: HumanSet) -> None:
    labels, _ = data
    expected = c.reference_labels(labels, which).astype(str).sort_index()
    pd.testing.assert_series_equal(_sql_reference(labels, which), expected, check_names=False,
                                   check_index_type=False)
    robust = human_reference(labels, which)
    assert robust["label"].to_dict() == expected.to_dict()
    users = labels.drop_duplicates("item_id").set_index("item_id")["user_id"]
    assert robust["user_id"].to_dict() == users.reindex(expected.index).to_dict()


@pytest.mark.slow
@_SETTINGS
@given(label_sets())
def test_estimates_and_plan_use_the_reference_items(data: tuple[pd.DataFrame, tuple[str, ...]]) -> None:
    labels, categories = data
    ref = c.reference_labels(labels).astype(str)
    positive = categories[-1]
    for row in estimate_rows(labels, DATASET, positive=positive):
        assert row["n_human"] == len(ref)
        assert row["human_only"] == pytest.approx((ref == positive).mean())
    judges = labels[c.comparable_judge_mask(labels) & labels["label"].notna()]
    for k in plan_rows(labels, [DATASET], simulations=3, halfwidth=0.9).kappa:
        rater = k.judge
        own = judges[judges["rater"] == rater].drop_duplicates("item_id").set_index("item_id")["label"]
        assert k.n_items == len(own.index.intersection(ref.index))


@pytest.mark.slow
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow],
          phases=[Phase.explicit, Phase.reuse, Phase.generate])  # no shrinking: each example writes a store
@given(label_sets())
def test_optimize_sees_the_blind_reference(data: tuple[pd.DataFrame, tuple[str, ...]]) -> None:
    labels, _ = data
    expected = c.reference_labels(labels).astype(str).to_dict()
    with tempfile.TemporaryDirectory() as folder:
        db = Path(folder) / "d.duckdb"
        _store(db, labels)
        got = optimize.human_reference(db, sorted(set(labels["item_id"])))
    assert got == expected


@pytest.mark.slow
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(label_sets(), st.booleans(), st.booleans())
def test_every_category_consumer_sees_the_same_scale(data: tuple[pd.DataFrame, tuple[str, ...]], ordinal: bool,
                                                    declare: bool) -> None:
    labels, categories = data
    assume(not labels.empty)  # a store holds a dataset once it has items (here: labelled ones)
    ordinal = ordinal and categories[0] == "1"
    declared = categories if declare else ()
    meta: dict[str, str] = {}
    if ordinal or declare:
        scale = DatasetScale(kind="ordinal" if ordinal else "nominal", categories=tuple(declared))
        meta = record_meta(DatasetRecord(stage=STAGE, dataset=DATASET, item_kind="relevance", scale=scale,
                                         question="", origin="real", declared=True))
    with tempfile.TemporaryDirectory() as folder:
        db = Path(folder) / "d.duckdb"
        _store(db, labels, meta)
        with connect(db, read_only=True) as con:
            scale_labels = con.execute(SCALE_LABELS_SQL).df()
            stored = load_labels(con, stage=STAGE, dataset=DATASET)
        items = pd.DataFrame({"stage": [STAGE], "dataset": [DATASET], "item_kind": ["relevance"], "n": [1]})
        record = build_records(items, scale_labels, meta)[(STAGE, DATASET)]
        offered = annotate.categories(db, STAGE, DATASET)
    if not ordinal:
        assert list(record.scale.categories) == c.categories_for(stored, declared or None)
    real = [x for x in record.scale.categories if x != c.OTHER_CATEGORY]
    if len(real) >= 2:  # Annotate offers exactly the categories the reports score over, in the scale's order
        assert offered == real
    else:
        assert set(real) <= set(offered)
    if ordinal and len(real) >= 2:
        assert [float(x) for x in offered] == sorted(float(x) for x in offered)


def test_annotate_offers_pairwise_and_declared_ordinal_scales(tmp_path: Path) -> None:
    labels = _tidy([("x", "ann", "human", c.BLIND, "3", "u0"), ("x", "gpt", "llm", c.BLIND, "10", "u0")])
    scale = DatasetScale(kind="ordinal", categories=("1", "2", "3", "10"))
    meta = record_meta(DatasetRecord(stage=STAGE, dataset=DATASET, item_kind="relevance", scale=scale,
                                     question="", origin="real", declared=True))
    db = tmp_path / "d.duckdb"
    _store(db, labels, meta)
    # Numeric order (10 after 3), every declared level even those nobody used; the old query sorted what was used.
    assert annotate.categories(db, STAGE, DATASET) == ["1", "2", "3", "10"]
    assert json.loads(meta[f"dataset:{STAGE}:{DATASET}"])["scale"] == "ordinal"
