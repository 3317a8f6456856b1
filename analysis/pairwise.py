"""Pairwise agreement among many raters: matrices and within/across-group summaries."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from itertools import combinations
from types import TracebackType
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from personagap.analysis.agreement import (
    DEFAULT_RESAMPLES,
    DEFAULT_SEED,
    Estimate,
    FloatArray,
    bootstrap_estimate,
    bootstrap_tables,
    encode,
    get_metric,
    indexed_tables,
    resample_weights,
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
    samples: dict[tuple[Any, Any], FloatArray] = field(default_factory=dict)
    """(rater a, rater b) in sorted order -> the pair's kappa on each resample. Every pair shares one set
    of user resamples, so differences of pair means are paired bootstraps."""
    points: dict[tuple[Any, Any], tuple[float, int]] = field(default_factory=dict)
    """(rater a, rater b) -> (kappa on all shared items, shared items)."""
    n_clusters: int = 0
    """Users (clusters) of the items, i.e. what every resample draws from."""


@dataclass(frozen=True)
class GroupAgreement:
    """Mean Cohen's kappa over the rater pairs of one pair type."""

    mean_kappa: Estimate
    n_pairs: int
    n_items: int
    n_users: int = 0
    """Users whose items the pairs of this type share (the bootstrap resamples every user of the frame)."""


def pairwise_agreement(labels: pd.DataFrame, groups: Mapping[Any, str], *, min_overlap: int = 10,
                       n_resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED,
                       anchor_group: str | None = None, weights: FloatArray | None = None,
                       metric: str = "kappa", levels: npt.ArrayLike | None = None) -> PairwiseResult:
    """Cohen's kappa (or the scale's ``metric``) for every pair of raters, and its mean within and across groups.

    All pairs share one set of user resamples, so the CI of a group mean reflects
    the same resampled users for every pair in it.

    Args:
        labels: Long frame with columns ``item_id``, ``rater``, ``label``, ``cluster``
            (one row per rater and item; failures already removed).
        groups: Rater -> group name (e.g. 'human', 'llm'); raters not listed are ignored.
        min_overlap: Pairs sharing fewer items are left out (NaN in the matrix).
        n_resamples: Bootstrap resamples over clusters.
        seed: Resampling seed.
        anchor_group: Score only pairs with at least one rater of this group (e.g. 'human' when only
            human–human and human–judge kappas are needed); other pairs get an overlap but no kappa.
        weights: The resample weights ``resample_weights(n_clusters, n_resamples, seed)`` if the caller already
            drew them (clusters in sorted order); drawing them again gives the same numbers, only slower.
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
    if weights is None or weights.shape[1] != len(cluster_ids):
        weights = resample_weights(len(cluster_ids), n_resamples, seed)

    matrix = pd.DataFrame(np.nan, index=raters, columns=raters)
    overlap = pd.DataFrame(0, index=raters, columns=raters)
    per_type: dict[str, list[tuple[float, FloatArray, int]]] = {}
    pair_samples: dict[tuple[Any, Any], FloatArray] = {}
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
    # Every pair's resampled tables in one product with the weights (one BLAS call instead of one per pair).
    # Weights and tables are whole counts, so the sums are exact and the figures do not depend on batching.
    if scored:
        boot_tables = bootstrap_tables(np.stack([t for _, _, t, _, _ in scored], axis=1), weights)
    for i, (a, b, _, point, n) in enumerate(scored):
        kind = "–".join(sorted((groups[a], groups[b])))
        boot = score.on(boot_tables[:, i], levels)
        key = (a, b) if a <= b else (b, a)
        pair_samples[key], pair_points[key] = boot, (point, n)
        per_type.setdefault(kind, []).append((point, boot, n))

    summaries = {}
    for kind, pairs in sorted(per_type.items()):
        points = np.array([p for p, _, _ in pairs])
        samples = np.stack([s for _, s, _ in pairs], axis=1)  # resamples x pairs
        with np.errstate(invalid="ignore"), _quiet_nanmean():
            boot_means = np.nanmean(samples, axis=1)
        summaries[kind] = GroupAgreement(
            mean_kappa=bootstrap_estimate(float(np.nanmean(points)), boot_means, len(cluster_ids)),
            n_pairs=len(pairs), n_items=int(sum(n for _, _, n in pairs)), n_users=len(users_of[kind]),
        )
    return PairwiseResult(matrix=matrix, overlap=overlap, groups=summaries, samples=pair_samples, points=pair_points,
                          n_clusters=len(cluster_ids))


def mean_pair_samples(result: PairwiseResult, pairs: list[tuple[Any, Any]]) -> tuple[float, FloatArray, int]:
    """Mean kappa over ``pairs`` (those the result scored) on the data and on every resample.

    Returns:
        ``(point, samples, n_pairs)``; NaN point and samples when no listed pair was scored.
    """
    keys = [(a, b) if a <= b else (b, a) for a, b in pairs]
    keys = [k for k in keys if k in result.samples]
    if not keys:
        return float("nan"), np.full(1, np.nan), 0
    stacked = np.stack([result.samples[k] for k in keys], axis=1)
    with _quiet_nanmean():
        boot = np.nanmean(stacked, axis=1)
        point = float(np.nanmean([result.points[k][0] for k in keys]))
    return point, boot, len(keys)


class _quiet_nanmean:
    """Silence numpy's 'mean of empty slice' warning (a resample may miss every pair's users)."""

    def __enter__(self) -> None:
        import warnings

        self._ctx = warnings.catch_warnings()
        self._ctx.__enter__()
        warnings.simplefilter("ignore", category=RuntimeWarning)

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._ctx.__exit__(exc_type, exc, tb)
