"""The dataset record reader's fast path reads the same records as the full scan (issue 20, defect 10).

:func:`personagap.datasets.dataset_records` looks only for labels that can change a scale (outside a declared
category set, off A/B/tie for pairs, none for a declared ordinal scale). Whatever the store holds, its records
must equal :func:`~personagap.datasets.build_records` over every distinct label :data:`SCALE_LABELS_SQL` finds.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import duckdb
import pandas as pd
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from personagap.datasets import _ITEM_KINDS_SQL, SCALE_LABELS_SQL, build_records, dataset_records, record_meta
from personagap.records import DatasetRecord, DatasetScale
from personagap.store import connect, upsert

# (stage, payload kind, item kind of the record) of the datasets a store may hold.
_SHAPES = (("relevance", None, "relevance"), ("response", "pairwise", "pairwise"), ("response", "single", "single"),
           ("extraction", None, "verification"))
_LABELS = ("yes", "no", "maybe", "A", "B", "tie", "1", "2", "3", "10", "ok", "bad")
_RATERS = (("ann", "human"), ("bob", "human"), ("gpt", "llm"), ("maj", "human_majority"))


def _write(path: Path, rows: list[tuple[str, str, str, str, str, str, str | None]], meta: dict[str, str]) -> None:
    """Rows: (dataset, stage, payload kind, item, rater, rater kind, label)."""
    frame = pd.DataFrame(rows, columns=["dataset", "stage", "kind", "item_id", "rater", "rater_kind", "label"])
    items = frame.drop_duplicates("item_id").assign(
        user_id="u", prompt_index=0, attribute=None, position=None,
        payload=lambda f: [json.dumps({"kind": k}) if k else "{}" for k in f["kind"]])
    labels = frame.drop_duplicates(["item_id", "rater"]).assign(
        condition="", raw=None, reason=None, run_id="r", meta=None,
        error=lambda f: ["unparseable" if v is None else None for v in f["label"]])
    with connect(path) as con:
        upsert(con, "items", items[["item_id", "dataset", "stage", "user_id", "prompt_index", "attribute",
                                    "position", "payload"]])
        upsert(con, "labels", labels[["item_id", "rater", "rater_kind", "condition", "label", "raw", "reason",
                                      "error", "run_id", "meta"]])
        for key, value in meta.items():
            con.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", [key, value])


def _full_scan(con: duckdb.DuckDBPyConnection) -> dict[tuple[str, str], DatasetRecord]:
    meta = dict(con.execute("SELECT key, value FROM meta").fetchall())
    return build_records(con.execute(_ITEM_KINDS_SQL).df(), con.execute(SCALE_LABELS_SQL).df(), meta)


def _record(stage: str, dataset: str, item_kind: str, kind: str, categories: tuple[str, ...]) -> dict[str, str]:
    scale = DatasetScale(kind=kind, categories=categories)  # type: ignore[arg-type]
    return record_meta(DatasetRecord(stage=stage, dataset=dataset, item_kind=item_kind,  # type: ignore[arg-type]
                                     scale=scale, question="", origin="real", declared=True))


@st.composite
def _stores(draw: st.DrawFn) -> tuple[list[tuple[str, str, str, str, str, str, str | None]], dict[str, str]]:
    rows: list[tuple[str, str, str, str, str, str, str | None]] = []
    meta: dict[str, str] = {}
    for d in range(draw(st.integers(1, 4))):
        stage, payload, item_kind = draw(st.sampled_from(_SHAPES))
        dataset = f"d{d}"
        for i in range(draw(st.integers(0, 4))):
            for rater, kind in draw(st.lists(st.sampled_from(_RATERS), min_size=1, max_size=4, unique=True)):
                label = draw(st.none() | st.sampled_from(_LABELS))
                rows.append((dataset, stage, payload or "", f"{dataset}-{i}", rater, kind, label))
        declare = draw(st.sampled_from(("none", "nominal", "ordinal", "legacy")))
        categories = tuple(draw(st.lists(st.sampled_from(_LABELS), max_size=3, unique=True)))
        if declare == "nominal":
            meta |= _record(stage, dataset, item_kind, "nominal", categories)
        elif declare == "ordinal":
            levels = tuple(c for c in categories if c.isdigit())
            meta |= _record(stage, dataset, item_kind, "ordinal", levels)
        elif declare == "legacy":
            meta[f"labels:{dataset}:{stage}"] = json.dumps({"stage": stage, "categories": list(categories) or None})
    return rows, meta


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow],
          phases=[Phase.explicit, Phase.reuse, Phase.generate])  # no shrinking: each example writes a store
@given(_stores())
def test_records_equal_the_full_scan(store: tuple[list[tuple[str, str, str, str, str, str, str | None]],
                                                 dict[str, str]]) -> None:
    rows, meta = store
    with tempfile.TemporaryDirectory() as folder:
        db = Path(folder) / "d.duckdb"
        _write(db, rows, meta)
        with connect(db, read_only=True) as con:
            assert dataset_records(con) == _full_scan(con)


def test_a_label_outside_the_declared_categories_still_widens_the_scale(tmp_path: Path) -> None:
    # Declared yes/no, then a judge answers "maybe" on a human-labelled item: the rule puts it on the scale.
    rows: list[tuple[str, str, str, str, str, str, str | None]] = [
        ("d", "relevance", "", "x", "ann", "human", "yes"), ("d", "relevance", "", "x", "gpt", "llm", "maybe")]
    _write(tmp_path / "d.duckdb", rows, _record("relevance", "d", "relevance", "nominal", ("no", "yes")))
    with connect(tmp_path / "d.duckdb", read_only=True) as con:
        assert dataset_records(con)[("relevance", "d")].scale.categories == ("maybe", "no", "yes")


def test_pairs_with_a_stray_label_fall_back_to_one_nominal_scale(tmp_path: Path) -> None:
    rows: list[tuple[str, str, str, str, str, str, str | None]] = [
        ("p", "response", "pairwise", "x", "ann", "human", "A"), ("p", "response", "pairwise", "y", "ann", "human",
                                                                   "yes")]
    _write(tmp_path / "d.duckdb", rows, {})
    with connect(tmp_path / "d.duckdb", read_only=True) as con:
        scale = dataset_records(con)[("response", "p")].scale
    assert (scale.kind, scale.categories) == ("nominal", ("A", "B", "tie", "yes"))


def test_an_ordinal_scale_declared_without_levels_takes_the_levels_used(tmp_path: Path) -> None:
    rows: list[tuple[str, str, str, str, str, str, str | None]] = [
        ("o", "response", "single", "x", "ann", "human", "3"), ("o", "response", "single", "x", "gpt", "llm", "10")]
    _write(tmp_path / "d.duckdb", rows, _record("response", "o", "single", "ordinal", ()))
    with connect(tmp_path / "d.duckdb", read_only=True) as con:
        assert dataset_records(con)[("response", "o")].scale.categories == ("3", "10")
