"""Report figures from the store's aggregates (:mod:`personagap.store.aggregates`), never from every label.

Every two-rater figure is a function of per-user confusion tables (:mod:`personagap.analysis.agreement`), and
the corrected estimates of a human rate are functions of per-user counts and of the joint counts of the
judge's and the reference's positive labels: DuckDB counts them, this module turns the counts into the
tables and rows the per-label code builds, with the same users in the same order,
so the figures are the same. The alternative-annotator test reads per-item labels, but only of items that
several humans labelled (:func:`personagap.store.aggregates.multi_human_labels`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping
from typing import Any, cast

import duckdb
import numpy as np
import pandas as pd

from personagap.analysis.agreement import (
    Estimate,
    FloatArray,
    json_safe_dict,
)
from personagap.analysis.alt_test import MIN_HUMANS_PER_ITEM
from personagap.analysis.codes import sorted_codes
from personagap.analysis.comparable import judge_display
from personagap.analysis.estimates import estimate_row, human_rate_from_users
from personagap.analysis.panel import extras_rows
from personagap.analysis.robust import human_reference, judge_labels
from personagap.records import DatasetScale
from personagap.scales import as_scale, on_scale
from personagap.store.aggregates import item_humans_table, multi_human_labels
from personagap.vocabulary import HumanSet

JUDGE_KEYS: list[str] = ["rater", "rater_kind", "condition"]
"""What one judge row is: a rater of one kind under one condition (judge kinds are never merged)."""


def user_tables(rows: pd.DataFrame, scale: DatasetScale | list[str]) -> tuple[FloatArray, int]:
    """Per-user confusion tables ``(U, K, K)`` over the scale, from count rows; users in sorted id order.

    Sorted user ids (as :func:`~personagap.analysis.agreement.cluster_tables`), not row order: the same seed
    must draw the same users whatever order DuckDB returns the rows in.

    Args:
        rows: Columns ``user_id``, ``human``, ``label`` (both on the scale) and ``n`` (items per combination).
        scale: The dataset's scale (a bare category list is nominal); a label off it raises.

    Returns:
        The tables and the number of users.
    """
    s = as_scale(scale)
    categories = list(s.categories)
    k = len(categories)
    users, user_index = sorted_codes(rows["user_id"].astype(str))
    h = pd.Categorical(on_scale(rows["human"], s), categories=categories).codes.astype(np.int64)
    j = pd.Categorical(on_scale(rows["label"], s), categories=categories).codes.astype(np.int64)
    flat = (user_index.astype(np.int64) * k + h) * k + j
    # With weights bincount returns float64; numpy's stubs type it as an integer array.
    tables = cast(FloatArray, np.bincount(flat, weights=rows["n"].to_numpy(dtype=float), minlength=len(users) * k * k))
    return tables.reshape(len(users), k, k), len(users)


def _is(values: pd.Series, positive: str) -> np.ndarray[Any, np.dtype[np.bool_]]:
    # The per-label code compares labels as text (astype(str)) with the positive label.
    return cast(np.ndarray[Any, np.dtype[np.bool_]], (values.astype(str) == positive).to_numpy(dtype=bool))


def human_rate_from_counts(reference: pd.DataFrame, *, positive: str, level: float = 0.95) -> Estimate:
    """:func:`personagap.analysis.estimates.human_rate` from per-(user, reference label) counts.

    Args:
        reference: Columns ``user_id``, ``human``, ``n`` of one dataset.
        positive: The label whose rate is estimated.
        level: Confidence level.
    """
    n = reference["n"].to_numpy(dtype=float)
    yes = _is(reference["human"], positive)
    ids, index = sorted_codes(reference["user_id"].astype(str))
    # With weights bincount returns float64; numpy's stubs type it as an integer array.
    per_user = cast(FloatArray, np.column_stack([np.bincount(index, weights=n * yes, minlength=len(ids)),
                                                 np.bincount(index, weights=n, minlength=len(ids))]))
    return human_rate_from_users(per_user[per_user[:, 1] > 0], level)


def estimate_rows_from_counts(judges: pd.DataFrame, reference: pd.DataFrame, dataset: str, *, positive: str,
                              humans: HumanSet = "blind", level: float = 0.95) -> list[dict[str, Any]]:
    """The corrected-rate estimate rows of one dataset (every comparable judge), from the store's counts.

    The one production path of these rows (the per-label twin it replaced is a test oracle, ``tests/oracles.py``):
    the per-user counts follow from the counts alone, and every figure is computed from them with one function
    (:func:`personagap.analysis.estimates.estimate_row`); per-user sums are integer counts, so the figures do not
    depend on the order the rows come in.

    Args:
        judges: The judge counts of :func:`personagap.store.aggregates.label_counts`, rows of the dataset
            (``human`` missing on items without a reference).
        reference: The reference counts of the same call, rows of the dataset.
        dataset: Dataset key.
        positive: The label whose human rate is estimated.
        humans: Which humans the reference came from (recorded).
        level: Confidence level.
    """
    used = bool(_is(reference["human"], positive).any()) or bool(_is(judges["label"], positive).any())
    if reference.empty or not used:
        return []
    human = human_rate_from_counts(reference, positive=positive, level=level)
    n_human = int(reference["n"].sum())
    out = []
    for (rater, kind, condition), rows in judges.groupby(JUDGE_KEYS, sort=True):
        has_ref = rows["human"].notna().to_numpy()
        if not has_ref.any():
            continue
        n = rows["n"].to_numpy(dtype=float)
        jpos = _is(rows["label"], positive)
        hpos = _is(rows["human"], positive) & has_ref
        cols = [n * jpos, n, n * (has_ref & jpos & hpos), n * (has_ref & ~jpos & hpos),
                n * (has_ref & jpos & ~hpos), n * (has_ref & ~jpos & ~hpos)]
        # Users of the judge's items and of the reference's, in sorted id order (estimate_row's user order).
        ids, index = sorted_codes(pd.concat([rows["user_id"], reference["user_id"]]).astype(str))
        mine = index[:len(rows)]
        counts = cast(FloatArray, np.column_stack([np.bincount(mine, weights=c, minlength=len(ids)) for c in cols]))
        row = estimate_row(counts, human, judge=judge_display(str(rater), str(condition)), dataset=dataset,
                           quantity=f"{positive}_rate", rater_kind=str(kind), humans=humans, n_human=n_human,
                           level=level)
        out.append(json_safe_dict(row.model_dump()))
    return out


def frame_counts(labels: pd.DataFrame, dataset: str, humans: HumanSet = "blind") -> tuple[pd.DataFrame, pd.DataFrame]:
    """The counts of :func:`personagap.store.aggregates.label_counts`, from a frame of labels already in memory.

    Kept in the package (the one pandas form of those counts) because ``plan`` on a frame
    (:mod:`personagap.analysis.budget`) has labels and no store; reports never call it.

    The reference and the judges' labels are :func:`~personagap.analysis.robust.human_reference` and
    :func:`~personagap.analysis.robust.judge_labels` of the dataset, so figures built from a frame and from the
    store are computed from the same counts.

    Args:
        labels: Tidy labels of one stage (:func:`personagap.store.load_labels`); other datasets ignored.
        dataset: Dataset key.
        humans: Blind or anchored reference.

    Returns:
        Judge counts and reference counts of the dataset, with the columns ``label_counts`` gives.
    """
    frame = labels[labels["dataset"] == dataset]
    ref = human_reference(frame, humans)
    parts = []
    for j in judge_labels(frame):
        parts.append(pd.DataFrame({"rater": j.rater, "rater_kind": j.rater_kind, "condition": j.condition,
                                   "user_id": j.users.astype(str), "human": ref["label"].reindex(j.labels.index),
                                   "label": j.labels}))
    columns = ["dataset", *JUDGE_KEYS, "user_id", "human", "label", "n"]
    judges = (pd.concat(parts, ignore_index=True).groupby([*JUDGE_KEYS, "user_id", "human", "label"], dropna=False)
              .size().rename("n").reset_index().assign(dataset=dataset)[columns]
              if parts else pd.DataFrame(columns=columns))
    reference = (ref.assign(user_id=ref["user_id"].astype(str)).groupby(["user_id", "label"]).size().rename("n")
                 .reset_index().rename(columns={"label": "human"}).assign(dataset=dataset)
                 [["dataset", "user_id", "human", "n"]])
    return judges, reference


def store_extras(con: duckdb.DuckDBPyConnection, stage: str, datasets: Iterable[str], *, positive: str | None,
                 counts: Mapping[HumanSet, tuple[pd.DataFrame, pd.DataFrame]], anchored: Iterable[str] = (),
                 rate_datasets: Iterable[str] | None = None,
                 scales: Mapping[str, DatasetScale], item_humans: str | None = None,
                 judges: Mapping[str, pd.DataFrame] | None = None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A report's ``alt_test`` and ``estimates`` lists from the store, never every label.

    The alternative-annotator test reads the labels of items several humans labelled (and, per judge, the one
    item that says why the test does not apply); the corrected estimates are computed from counts.

    Args:
        con: An open store connection.
        stage: Pipeline stage.
        datasets: Datasets to cover (blind humans).
        positive: The label whose human rate the estimates correct (None: no estimates).
        counts: Per reference (blind, anchored) the stage's :func:`~personagap.store.aggregates.label_counts`.
        anchored: Datasets to cover again with anchored humans, reported apart.
        rate_datasets: Only these get estimates (default: all).
        scales: Dataset -> its scale (every dataset covered must have one).
        item_humans: The caller's :func:`~personagap.store.aggregates.item_humans_table` (None: counted here, once).
        judges: Dataset -> its comparable judges with a parsed label (the judge rows of ``label_counts``); None:
            every comparable judge of the store stands for them
            (:func:`~personagap.store.aggregates.multi_human_labels`).
    """
    read: dict[str, pd.DataFrame] = {}

    def alt_labels(ds: str) -> pd.DataFrame:
        # Read once per dataset: the blind and the anchored test run on the same items.
        if ds not in read:
            read[ds] = multi_human_labels(con, stage, ds, min_humans=MIN_HUMANS_PER_ITEM, item_humans=held,
                                          judges=None if judges is None else judges.get(ds))
        return read[ds]

    def of(ds: str, humans: HumanSet) -> tuple[pd.DataFrame, pd.DataFrame]:
        judges, reference = counts[humans]
        return judges[judges["dataset"] == ds], reference[reference["dataset"] == ds]

    # The humans per item counted once for every dataset (the caller's table when it holds one).
    with item_humans_table(con) if item_humans is None else contextlib.nullcontext(item_humans) as held:
        return extras_rows(datasets, alt_labels=alt_labels, counts=of, positive=positive, anchored=anchored,
                           rate_datasets=rate_datasets, scales=scales)
