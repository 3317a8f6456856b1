"""Pairwise agreement among many raters: matrices and within/across-group summaries.

A group's figure is the mean kappa over a fixed set of rater pairs (those with enough shared items), and its CI is
the one CI rule (:func:`~personagap.analysis.agreement.cluster_estimate`) over the pairs' per-user tables: leaving
a user out removes that user's items from every pair at once. When some pair's kappa is undefined without one
user (all its shared items come from that user), the mean over the fixed pair set is undefined too, so no
interval is given and the users are counted, rather than averaging a pair set that changes with the users left.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from personagap.analysis.agreement import (
    Estimate,
    FloatArray,
    cluster_estimate,
    encode,
    get_metric,
    indexed_tables,
)


@dataclass(frozen=True)
class PairwiseResult:
    """Kappa for every rater pair that shares items, plus group summaries."""

    matrix: pd.DataFrame
    """Square rater x rater kappa (NaN where a pair shares fewer than ``min_overlap`` items)."""
    overlap: pd.DataFrame
    """Square rater x rater count of items both labelled."""
    groups: dict[str, GroupAgreement]
    """Pair type ('human–human', 'llm–llm', 'human–llm', ...) -> mean pairwise kappa with CI."""
    tables: dict[tuple[Any, Any], FloatArray] = field(default_factory=dict)
    """(rater a, rater b) in sorted order -> the pair's per-user tables ``(U, K, K)`` over every user of the
    frame (zeros where the pair shares none of the user's items): the sums a pair mean's CI is built from."""
    points: dict[tuple[Any, Any], tuple[float, int]] = field(default_factory=dict)
    """(rater a, rater b) -> (kappa on all shared items, shared items)."""
    n_clusters: int = 0
    """Users (clusters) of the items: every pair's tables have one row per user."""


@dataclass(frozen=True)
class GroupAgreement:
    """Mean Cohen's kappa over the rater pairs of one pair type."""

    mean_kappa: Estimate
    n_pairs: int
    n_items: int
    n_users: int = 0
    """Users whose items the pairs of this type share (the CI leaves out each user of the frame in turn)."""


def pairwise_agreement(labels: pd.DataFrame, groups: Mapping[Any, str], *, min_overlap: int = 10,
                       anchor_group: str | None = None,
                       metric: str = "kappa", levels: npt.ArrayLike | None = None) -> PairwiseResult:
    """Cohen's kappa (or the scale's ``metric``) for every pair of raters, and its mean within and across groups.

    A group mean's CI leaves each user out of every pair at once (:func:`mean_pair_estimate`).

    Args:
        labels: Long frame with columns ``item_id``, ``rater``, ``label``, ``cluster``
            (one row per rater and item; failures already removed).
        groups: Rater -> group name (e.g. 'human', 'llm'); raters not listed are ignored.
        min_overlap: Pairs sharing fewer items are left out (NaN in the matrix).
        anchor_group: Score only pairs with at least one rater of this group (e.g. 'human' when only
            human–human and human–judge kappas are needed); other pairs get an overlap but no kappa.
        metric: The registered table metric every pair is scored by (``weighted_kappa`` on ordinal scales;
            the fields keep the name ``kappa``). Its tables' categories are the label codes in order, so an
            ordinal metric needs labels coded in the scale's order (integer codes ``0..K-1``).
        levels: The ordinal levels' values (one per code), for metrics that read them.

    Returns:
        The matrices and group summaries.
    """
    score = get_metric(metric)
    frame = labels[labels["rater"].isin(list(groups))]
    raters = sorted(frame["rater"].unique(), key=lambda r: (groups[r], r))
    # Integer codes and one numpy item x rater array instead of a pandas pivot: same items (sorted), same
    # raters, same first-seen cluster per item, at a fraction of the cost on hundreds of thousands of labels.
    item_index, items = pd.factorize(frame["item_id"], sort=True)
    rater_index, rater_names = pd.factorize(frame["rater"], sort=True)
    cell = item_index.astype(np.int64) * max(len(rater_names), 1) + rater_index
    if cell.size and np.bincount(cell).max() > 1:
        raise ValueError("labels hold more than one label per (item_id, rater)")
    if pd.api.types.is_integer_dtype(frame["label"]):  # already coded (fast path for large frames)
        codes = frame["label"].to_numpy(dtype=np.int64)
        n_classes = max(int(codes.max()) + 1 if codes.size else 1, 1, 0 if levels is None else np.size(levels))
    else:
        (codes,), categories = encode(frame["label"].to_numpy())
        n_classes = max(len(categories), 1)
    grid = np.full((len(items), len(rater_names)), -1, dtype=np.int64)  # -1: the rater did not label the item
    grid[item_index, rater_index] = codes
    column = {r: i for i, r in enumerate(rater_names)}
    _, first_row = np.unique(item_index, return_index=True)
    cluster_ids, cluster_index = np.unique(frame["cluster"].to_numpy()[first_row], return_inverse=True)

    matrix = pd.DataFrame(np.nan, index=raters, columns=raters)
    overlap = pd.DataFrame(0, index=raters, columns=raters)
    per_type: dict[str, list[tuple[Any, Any]]] = {}
    pair_tables: dict[tuple[Any, Any], FloatArray] = {}
    users_of: dict[str, set[int]] = {}
    pair_points: dict[tuple[Any, Any], tuple[float, int]] = {}
    scored: list[tuple[Any, Any, FloatArray, float, int]] = []
    for a in raters:
        matrix.loc[a, a] = 1.0
        overlap.loc[a, a] = int((grid[:, column[a]] >= 0).sum())
    for a, b in combinations(raters, 2):
        col_a, col_b = grid[:, column[a]], grid[:, column[b]]
        mask = (col_a >= 0) & (col_b >= 0)
        n = int(mask.sum())
        overlap.loc[a, b] = overlap.loc[b, a] = n
        if n < min_overlap or (anchor_group is not None and anchor_group not in (groups[a], groups[b])):
            continue
        tables = indexed_tables(col_a[mask], col_b[mask], cluster_index[mask], len(cluster_ids), n_classes)
        point = float(score.on(tables.sum(axis=0), levels))
        matrix.loc[a, b] = matrix.loc[b, a] = point
        scored.append((a, b, tables, point, n))
        kind = "–".join(sorted((groups[a], groups[b])))
        users_of.setdefault(kind, set()).update(
            np.flatnonzero(np.bincount(cluster_index[mask], minlength=len(cluster_ids))).tolist())
    for a, b, tables, point, n in scored:
        key = (a, b) if a <= b else (b, a)
        pair_tables[key], pair_points[key] = tables, (point, n)
        per_type.setdefault("–".join(sorted((groups[a], groups[b]))), []).append(key)
    result = PairwiseResult(matrix=matrix, overlap=overlap, groups={}, tables=pair_tables, points=pair_points,
                            n_clusters=len(cluster_ids))
    for kind, keys in sorted(per_type.items()):
        result.groups[kind] = GroupAgreement(
            mean_kappa=mean_pair_estimate(result, keys, metric=metric, levels=levels), n_pairs=len(keys),
            n_items=int(sum(pair_points[k][1] for k in keys)), n_users=len(users_of[kind]))
    return result


def pairwise_from_counts(pairs: pd.DataFrame, items: Mapping[Any, int], users: Sequence[Any],
                         categories: Sequence[Any], groups: Mapping[Any, str], *, min_overlap: int = 10,
                         metric: str = "kappa", levels: npt.ArrayLike | None = None) -> PairwiseResult:
    """:func:`pairwise_agreement` from counts: the same result without a row per label.

    Args:
        pairs: Per rater pair (``rater_a``, ``rater_b``, either order, each pair once), ``user_id``, ``label_a``
            and ``label_b``: ``n``, the items both labelled with those labels.
        items: Rater -> the items it labelled (the matrices' diagonal overlap).
        users: Every user (cluster) with a labelled item: the tables' rows, sorted as ``np.unique`` sorts.
        categories: Every label given (coded in sorted order as :func:`~personagap.analysis.agreement.encode` does).
        groups: Rater -> group name; raters not listed are ignored.
        min_overlap: Pairs sharing fewer items are left out (NaN in the matrix).
        metric: The registered table metric every pair is scored by.
        levels: The ordinal levels' values (one per code), for metrics that read them.
    """
    score = get_metric(metric)
    raters = sorted((r for r in items if r in groups), key=lambda r: (groups[r], r))
    cluster_ids = np.unique(np.asarray(list(users), dtype=object))
    ordered = sorted(set(categories), key=str)
    code = {c: i for i, c in enumerate(ordered)}
    n_classes = max(len(ordered), 1)
    u = np.searchsorted(cluster_ids, pairs["user_id"].to_numpy(dtype=object)) if len(pairs) else np.zeros(0, int)
    la = np.fromiter((code[v] for v in pairs["label_a"]), dtype=np.int64, count=len(pairs))
    lb = np.fromiter((code[v] for v in pairs["label_b"]), dtype=np.int64, count=len(pairs))
    n = pairs["n"].to_numpy(dtype=np.int64)
    # Each pair's rows, keyed by the pair in the order the rows name it.
    rows_of: dict[tuple[Any, Any], npt.NDArray[np.int64]] = {}
    if len(pairs):
        keys = pd.MultiIndex.from_arrays([pairs["rater_a"], pairs["rater_b"]])
        codes, uniques = pd.factorize(keys)
        order = np.argsort(codes, kind="stable")
        bounds = np.searchsorted(codes[order], np.arange(len(uniques) + 1))
        for i, key in enumerate(uniques):
            rows_of[(key[0], key[1])] = order[bounds[i]:bounds[i + 1]]

    def tables_of(a: Any, b: Any) -> FloatArray:
        flat_tables = np.zeros(len(cluster_ids) * n_classes * n_classes, dtype=np.int64)
        if (a, b) in rows_of:
            rows = rows_of[(a, b)]
            first, second = la[rows], lb[rows]
        elif (b, a) in rows_of:
            rows = rows_of[(b, a)]
            first, second = lb[rows], la[rows]
        else:
            return flat_tables.reshape(len(cluster_ids), n_classes, n_classes).astype(float)
        np.add.at(flat_tables, (u[rows] * n_classes + first) * n_classes + second, n[rows])
        return flat_tables.reshape(len(cluster_ids), n_classes, n_classes).astype(float)

    matrix = pd.DataFrame(np.nan, index=raters, columns=raters)
    overlap = pd.DataFrame(0, index=raters, columns=raters)
    per_type: dict[str, list[tuple[Any, Any]]] = {}
    pair_tables: dict[tuple[Any, Any], FloatArray] = {}
    users_of: dict[str, set[int]] = {}
    pair_points: dict[tuple[Any, Any], tuple[float, int]] = {}
    scored: list[tuple[Any, Any, FloatArray, float, int]] = []
    for a in raters:
        matrix.loc[a, a] = 1.0
        overlap.loc[a, a] = int(items[a])
    for a, b in combinations(raters, 2):
        tables = tables_of(a, b)
        shared = int(tables.sum())
        overlap.loc[a, b] = overlap.loc[b, a] = shared
        if shared < min_overlap:
            continue
        point = float(score.on(tables.sum(axis=0), levels))
        matrix.loc[a, b] = matrix.loc[b, a] = point
        scored.append((a, b, tables, point, shared))
        kind = "–".join(sorted((groups[a], groups[b])))
        users_of.setdefault(kind, set()).update(np.flatnonzero(tables.sum(axis=(1, 2)) > 0).tolist())
    for a, b, tables, point, shared in scored:
        key = (a, b) if a <= b else (b, a)
        pair_tables[key], pair_points[key] = tables, (point, shared)
        per_type.setdefault("–".join(sorted((groups[a], groups[b]))), []).append(key)
    result = PairwiseResult(matrix=matrix, overlap=overlap, groups={}, tables=pair_tables, points=pair_points,
                            n_clusters=len(cluster_ids))
    for kind, keys in sorted(per_type.items()):
        result.groups[kind] = GroupAgreement(
            mean_kappa=mean_pair_estimate(result, keys, metric=metric, levels=levels), n_pairs=len(keys),
            n_items=int(sum(pair_points[k][1] for k in keys)), n_users=len(users_of[kind]))
    return result


def mean_pair_estimate(result: PairwiseResult, pairs: list[tuple[Any, Any]], *, metric: str = "kappa",
                       levels: npt.ArrayLike | None = None, level: float = 0.95) -> Estimate:
    """Mean ``metric`` over a fixed set of rater ``pairs`` (those the result scored), with its user-clustered CI.

    Args:
        result: A :func:`pairwise_agreement` result.
        pairs: Rater pairs, either order; pairs the result did not score, or whose figure is undefined on all
            users, are left out.
        metric: The registered table metric the pairs were scored by.
        levels: The ordinal levels' values, for metrics that read them.
        level: Confidence level.

    Returns:
        The mean over the pairs and its jackknife-t interval over users
        (:func:`~personagap.analysis.agreement.cluster_estimate`); NaN when no listed pair was scored.
    """
    score = get_metric(metric)
    keys = [(a, b) if a <= b else (b, a) for a, b in pairs]
    keys = [k for k in keys if k in result.tables and not np.isnan(result.points[k][0])]
    if not keys:
        return Estimate(float("nan"), (float("nan"), float("nan")), result.n_clusters)
    stacked = np.stack([result.tables[k] for k in keys], axis=1)  # (U, pairs, K, K)

    def mean_of_pairs(t: FloatArray) -> FloatArray:
        return np.asarray(score.on(t, levels).mean(axis=-1), dtype=float)

    return cluster_estimate(mean_of_pairs, stacked, level=level, bounds=score.bounds)
