"""Pairwise agreement among many raters: matrices and within/across-group summaries.

A group's figure is the mean kappa over a fixed set of rater pairs (those with enough shared items), and its CI is
the one CI rule (:func:`~personagap.analysis.agreement.cluster_estimate`) over the pairs' per-user tables: leaving
a user out removes that user's items from every pair at once. When some pair's kappa is undefined without one
user (all its shared items come from that user), the mean over the fixed pair set is undefined too, so no
interval is given and the users are counted, rather than averaging a pair set that changes with the users left.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import combinations
from numbers import Number
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
    excluded: list[tuple[Any, Any]] = field(default_factory=list)
    """Scored pairs (sorted) left out of every group mean (``exclude``); they keep their matrix cell."""


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
                       metric: str = "kappa", levels: npt.ArrayLike | None = None,
                       exclude: Collection[tuple[Any, Any]] = ()) -> PairwiseResult:
    """Cohen's kappa (or the scale's ``metric``) for every pair of raters, and its mean within and across groups.

    A thin adapter: the frame is counted per (rater pair, user, label pair) and scored by
    :func:`pairwise_from_counts`, the one implementation. A group mean's CI leaves each user out of every pair at
    once (:func:`mean_pair_estimate`).

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
        exclude: Rater pairs left out of the group means (see :func:`pairwise_from_counts`).

    Returns:
        The matrices and group summaries.

    Raises:
        ValueError: More than one label per (item_id, rater).
    """
    frame = labels[labels["rater"].isin(list(groups))]
    # Integer codes and one numpy item x rater array: same items (sorted), same raters, the first-seen cluster
    # per item, at a fraction of a pandas pivot's cost on hundreds of thousands of labels.
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
    _, first_row = np.unique(item_index, return_index=True)
    cluster_ids, cluster_index = np.unique(frame["cluster"].to_numpy()[first_row], return_inverse=True)
    # Per rater pair (in name order), the items both labelled, counted per (user, label pair).
    blocks: list[pd.DataFrame] = []
    size = len(cluster_ids) * n_classes * n_classes
    for i, j in combinations(range(len(rater_names)), 2):
        mask = (grid[:, i] >= 0) & (grid[:, j] >= 0)
        if not mask.any():
            continue
        flat = np.bincount((cluster_index[mask] * n_classes + grid[mask, i]) * n_classes + grid[mask, j],
                           minlength=size)
        cells = np.flatnonzero(flat)
        user, rest = np.divmod(cells, n_classes * n_classes)
        label_a, label_b = np.divmod(rest, n_classes)
        blocks.append(pd.DataFrame({"rater_a": [rater_names[i]] * len(cells), "rater_b": [rater_names[j]] * len(cells),
                                    "user_id": cluster_ids[user], "label_a": label_a, "label_b": label_b,
                                    "n": flat[cells]}))
    columns = ["rater_a", "rater_b", "user_id", "label_a", "label_b", "n"]
    pairs = pd.concat(blocks, ignore_index=True) if blocks else pd.DataFrame(columns=columns)
    labelled = dict(zip(rater_names, (grid >= 0).sum(axis=0).tolist(), strict=True))
    return pairwise_from_counts(pairs, labelled, list(cluster_ids), range(n_classes), groups,
                                min_overlap=min_overlap, anchor_group=anchor_group, metric=metric, levels=levels,
                                exclude=exclude)


def _category_order(categories: Sequence[Any]) -> list[Any]:
    """Categories in code order.

    By value when every one is a number (so that 10 follows 9), else by text as
    :func:`~personagap.analysis.agreement.encode` sorts them.
    """
    distinct = set(categories)
    if all(isinstance(c, Number) and not isinstance(c, bool) for c in distinct):
        return sorted(distinct)
    return sorted(distinct, key=str)


def shared_juror_pairs(jurors: Mapping[Any, Collection[Any]]) -> set[tuple[Any, Any]]:
    """Rater pairs (sorted) that are not two independent raters.

    A jury with one of its own jurors, and two juries sharing a juror.

    Args:
        jurors: Jury -> its jurors (the same rater names the matrix uses).
    """
    out: set[tuple[Any, Any]] = set()
    for jury, members in jurors.items():
        out.update(_sorted_pair(jury, m) for m in members if m != jury)
        out.update(_sorted_pair(jury, other) for other, theirs in jurors.items()
                   if other != jury and set(members) & set(theirs))
    return out


def _sorted_pair(a: Any, b: Any) -> tuple[Any, Any]:
    return (a, b) if a <= b else (b, a)


def pairwise_from_counts(pairs: pd.DataFrame, items: Mapping[Any, int], users: Sequence[Any],
                         categories: Sequence[Any], groups: Mapping[Any, str], *, min_overlap: int = 10,
                         anchor_group: str | None = None,
                         metric: str = "kappa", levels: npt.ArrayLike | None = None,
                         exclude: Collection[tuple[Any, Any]] = ()) -> PairwiseResult:
    """The pairwise matrix and group means from per-(rater pair, user, label pair) counts, never a row per label.

    The one implementation of the figure: :func:`pairwise_agreement` counts a long frame and calls it.

    Args:
        pairs: Per rater pair (``rater_a``, ``rater_b``, either order, each pair once), ``user_id``, ``label_a``
            and ``label_b``: ``n``, the items both labelled with those labels.
        items: Rater -> the items it labelled (the matrices' diagonal overlap).
        users: Every user (cluster) with a labelled item: the tables' rows, sorted as ``np.unique`` sorts.
        categories: Every label given, or every code of the scale. Coded in order: by value when all are numbers
            (integer codes ``0..K-1`` stay themselves; pass all K so that an ordinal metric reads the levels in
            order), else by text as :func:`~personagap.analysis.agreement.encode` does.
        groups: Rater -> group name; raters not listed are ignored.
        min_overlap: Pairs sharing fewer items are left out (NaN in the matrix).
        anchor_group: Score only pairs with at least one rater of this group; other pairs get an overlap but no
            kappa.
        metric: The registered table metric every pair is scored by.
        levels: The ordinal levels' values (one per code), for metrics that read them.
        exclude: Rater pairs (either order) kept in the matrix but left out of every group mean, e.g. a jury and
            its own jurors (:func:`shared_juror_pairs`); the scored ones are listed in ``excluded``.
    """
    score = get_metric(metric)
    left_out = {_sorted_pair(a, b) for a, b in exclude}
    excluded: list[tuple[Any, Any]] = []
    raters = sorted((r for r in items if r in groups), key=lambda r: (groups[r], r))
    cluster_ids = np.unique(np.asarray(list(users), dtype=object))
    ordered = _category_order(categories)
    code = {c: i for i, c in enumerate(ordered)}
    n_classes = max(len(ordered), 1, 0 if levels is None else np.size(levels))
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
        if shared < min_overlap or (anchor_group is not None and anchor_group not in (groups[a], groups[b])):
            continue
        point = float(score.on(tables.sum(axis=0), levels))
        matrix.loc[a, b] = matrix.loc[b, a] = point
        scored.append((a, b, tables, point, shared))
        if _sorted_pair(a, b) in left_out:
            excluded.append(_sorted_pair(a, b))
            continue
        kind = "–".join(sorted((groups[a], groups[b])))
        users_of.setdefault(kind, set()).update(np.flatnonzero(tables.sum(axis=(1, 2)) > 0).tolist())
    for a, b, tables, point, shared in scored:
        key = (a, b) if a <= b else (b, a)
        pair_tables[key], pair_points[key] = tables, (point, shared)
        if key in left_out:
            continue
        per_type.setdefault("–".join(sorted((groups[a], groups[b]))), []).append(key)
    result = PairwiseResult(matrix=matrix, overlap=overlap, groups={}, tables=pair_tables, points=pair_points,
                            n_clusters=len(cluster_ids), excluded=sorted(excluded))
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
