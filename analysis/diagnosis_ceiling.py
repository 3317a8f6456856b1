"""Human ceilings, judges' gaps to them, and the selection-aware stage gap, from per-user additive tables.

Every figure here is a function of per-user confusion tables of rater pairs (``(U, P, K, K)``), so its interval is
the one CI rule, :func:`personagap.analysis.agreement.cluster_estimate`, on those tables:

* the **ceiling** is the mean pairwise kappa among blind humans over one fixed set of pairs (those sharing at least
  :data:`MIN_PAIR_OVERLAP` items over at least :data:`MIN_PAIR_USERS` users), each pair weighted by its shared
  items. The old ceiling averaged whichever pairs a bootstrap resample happened to keep (15-28 of 28 on stage 1),
  so the resampled figure was not the printed one;
* a **judge's gap** is the ceiling minus the judge's mean kappa with each of those humans (same weighting), paired:
  both sides are recomputed from the same leave-one-user-out totals;
* the **selection-aware gap** (:func:`selected_gap`): picking the judge with the smallest gap and reporting that
  same gap is optimistic (a null simulation with six equal judges found bias -0.039 and 80% coverage). The users are
  split in two fixed halves; the judge chosen on one half is measured on the other, both ways. The choice is part
  of the statistic, so it is remade on every leave-one-user-out total.

Weighting (``diagnose --weight``, :mod:`personagap.analysis.weighting`): by default every item of a pair counts once
(the pooled tables). Weighting users, :func:`pair_tables` divides each user's table *of each pair* by its own total
before anything is computed, so each pair's kappa counts each of its users once and the mean over pairs weighs a pair
by its users instead of its items; every figure, interval, choice and difference above then follows unchanged, since
leaving a user out still subtracts that user's (proportion) tables.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, replace
from itertools import combinations
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from personagap.analysis.agreement import (
    Estimate,
    FloatArray,
    IntArray,
    ci_list,
    cluster_estimate,
    get_metric,
    indexed_tables,
    krippendorff_alpha_ci,
)
from personagap.analysis.arrays import safe_div
from personagap.analysis.ci_rule import Bounds
from personagap.analysis.comparable import judge_display
from personagap.analysis.diagnosis_records import (
    MIN_ITEMS_FOR_RANKING,
    MIN_PAIR_OVERLAP,
    MIN_PAIR_USERS,
    CeilingGap,
    HumanCeiling,
    SelectedGap,
    StageComparison,
)
from personagap.analysis.headline import headline_metric
from personagap.analysis.weighting import WEIGHTS, Weight, weighted_tables
from personagap.records import DatasetScale
from personagap.scales import on_scale

BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class ClusterStat:
    """A figure as the CI rule takes it: per-user additive arrays and the function of their totals."""

    users: npt.NDArray[np.str_]
    """User ids, sorted (row order of ``per_cluster``)."""
    per_cluster: FloatArray
    """``(U, *shape)`` per-user sums."""
    stat: Callable[[FloatArray], FloatArray]
    """Totals ``(..., *shape)`` -> figure ``(...)``."""
    estimand: Weight = "items"
    """What ``per_cluster`` weighs: item counts, or per-user proportions (:func:`pair_tables` ``weight``)."""
    bounds: Bounds | None = None
    """The figure's range (a mean of kappas: the metric's own), so that its interval stays inside it; None for a
    difference of two such means."""

    def estimate(self, level: float) -> Estimate:
        """The figure and its interval by the one CI rule."""
        return cluster_estimate(self.stat, self.per_cluster, level=level, bounds=self.bounds)


@dataclass(frozen=True)
class PairTables:
    """Per-user confusion tables of the scored rater pairs of one dataset (humans first, then judges)."""

    dataset: str
    users: npt.NDArray[np.str_]
    tables: FloatArray
    """``(U, P, K, K)``: per user, each pair's table (rows: first rater's label)."""
    pairs: list[tuple[int, int]]
    human_keys: list[int]
    judges: pd.DataFrame
    """Columns ``key``, ``rater``, ``rater_kind``, ``condition``: one row per judge key."""
    n_items_of: IntArray
    """Distinct items of each rater key."""
    n_items: int
    metric: str
    levels: FloatArray | None
    estimand: Weight = "items"
    """``tables`` hold item counts (items) or each user's proportions within each pair (users)."""

    def membership(self, rows: list[int | None]) -> BoolArray:
        """``(R, P)``: row r holds the human pairs (``None``) or the pairs of judge key ``rows[r]`` with a human."""
        human = set(self.human_keys)
        out = np.zeros((len(rows), len(self.pairs)), dtype=bool)
        for r, key in enumerate(rows):
            for p, (a, b) in enumerate(self.pairs):
                out[r, p] = (a in human and b in human) if key is None else key in (a, b)
        return out

    def means(self, totals: FloatArray, member: BoolArray) -> FloatArray:
        """Mean pairwise figure of each row of ``member``, pairs weighted by shared items: ``(..., R)``.

        NaN when a listed pair's figure is undefined or a row lists no pair with items: the pair set is fixed.
        """
        kappa = get_metric(self.metric).on(totals, self.levels)
        n = totals.sum(axis=(-2, -1))
        weighted = kappa * n
        num = np.where(member, weighted[..., None, :], 0.0).sum(axis=-1)
        den = np.where(member, n[..., None, :], 0.0).sum(axis=-1)
        return safe_div(num, den)


def user_halves(users: npt.NDArray[np.str_], seed: int) -> IntArray:
    """Two halves of the users (0/1), fixed by a seeded hash of each id: sizes differ by at most one."""
    keys = [hashlib.sha256(f"{seed}:{u}".encode()).hexdigest() for u in users]
    order = np.argsort(np.array(keys), kind="stable")
    half = np.empty(len(users), dtype=np.int64)
    half[order] = np.arange(len(users)) % 2
    return half


def pair_tables(humans: pd.DataFrame, judges: pd.DataFrame | None, scale: DatasetScale | None,
                weight: Weight = "items") -> PairTables | None:
    """Per-user tables of every human–human and judge–human pair of one dataset that enters a mean.

    A pair enters when it shares at least :data:`MIN_PAIR_OVERLAP` items over at least :data:`MIN_PAIR_USERS`
    users (items, whatever the weighting: which pairs enter is the design, not a figure). One label per (item,
    rater): the first, as ``drop_duplicates`` keeps. Users are coded in sorted id order, so SQL row order never
    moves a figure. On an ordinal ``scale`` labels are coded in its order and pairs scored by quadratic-weighted
    kappa over its levels; otherwise by Cohen's kappa.

    Args:
        humans: Blind individual human labels (``dataset``, ``item_id``, ``rater``, ``label``, ``user_id``).
        judges: Comparable judge labels on those items (also ``rater_kind``, ``condition``), or None.
        scale: The dataset's scale, or None (nominal over the labels seen).
        weight: ``items`` (the counts) or ``users`` (each user's table of each pair as proportions:
            :func:`weighted_pair_tables`).

    Returns:
        The tables, or None with fewer than two humans.
    """
    if humans.empty or humans["rater"].nunique() < 2:
        return None
    human_codes, human_names = pd.factorize(humans["rater"].astype(str), sort=True)
    n_humans = len(human_names)
    parts, rater_codes = [humans], [human_codes.astype(np.int64)]
    keys = pd.DataFrame(columns=["key", "rater", "rater_kind", "condition"])
    if judges is not None and not judges.empty:
        judge_codes = judges.groupby(["rater", "condition"], sort=True).ngroup().to_numpy() + n_humans
        parts.append(judges)
        rater_codes.append(judge_codes.astype(np.int64))
        keys = judges.assign(key=judge_codes)[["key", "rater", "rater_kind", "condition"]].drop_duplicates("key")
    n_keys = n_humans + len(keys)

    def column(name: str) -> pd.Series:
        return pd.concat([p[name] for p in parts], ignore_index=True)

    rater = np.concatenate(rater_codes)
    items = pd.factorize(column("item_id"))[0].astype(np.int64)
    _, first = np.unique(items * n_keys + rater, return_index=True)
    keep = np.sort(first)
    kept = column("label").take(keep)
    ordinal = scale is not None and scale.ordinal
    if scale is not None and ordinal:
        codes = np.asarray(pd.Categorical(on_scale(kept, scale), categories=scale.categories).codes, dtype=np.int64)
        n_classes = len(scale.categories)
    else:
        codes = np.asarray(pd.factorize(kept, sort=True)[0], dtype=np.int64)
        n_classes = max(int(codes.max()) + 1 if codes.size else 1, 1)
    item_index = pd.factorize(items[keep])[0]
    user_index, users = pd.factorize(column("user_id").take(keep).astype(str), sort=True)
    grid = np.full((int(item_index.max()) + 1, n_keys), -1, dtype=np.int64)
    grid[item_index, rater[keep]] = codes
    item_user = np.zeros(grid.shape[0], dtype=np.int64)
    item_user[item_index] = user_index
    n_users = len(users)
    candidates = list(combinations(range(n_humans), 2)) + [(h, j) for j in range(n_humans, n_keys)
                                                           for h in range(n_humans)]
    pairs, tables = [], []
    for a, b in candidates:
        mask = (grid[:, a] >= 0) & (grid[:, b] >= 0)
        if int(mask.sum()) < MIN_PAIR_OVERLAP or np.unique(item_user[mask]).size < MIN_PAIR_USERS:
            continue
        pairs.append((a, b))
        tables.append(indexed_tables(grid[mask, a], grid[mask, b], item_user[mask], n_users, n_classes))
    stacked = (np.stack(tables, axis=1) if tables else np.zeros((n_users, 0, n_classes, n_classes)))
    return weighted_pair_tables(PairTables(
        dataset=str(humans["dataset"].iloc[0]), users=np.asarray(users, dtype=str), tables=stacked, pairs=pairs,
        human_keys=list(range(n_humans)), judges=keys.reset_index(drop=True),
        n_items_of=np.bincount(rater[keep], minlength=n_keys).astype(np.int64),
        n_items=int(humans["item_id"].nunique()), metric=pair_metric(scale),
        levels=np.asarray(scale.levels(), dtype=float) if scale is not None and ordinal else None), weight)


def weighted_pair_tables(pt: PairTables, weight: Weight) -> PairTables:
    """``pt`` with the per-user tables a figure of ``weight`` reads: the counts, or each user's proportions per pair.

    Weighting users, each user's table of each pair is divided by its own total
    (:func:`~personagap.analysis.weighting.weighted_tables`, the reports' one proportion rule), so within a pair
    each of its users sums to 1; a user without items in a pair keeps a zero table there (it is not one of the
    pair's users). The mean over pairs (:meth:`PairTables.means`) weighs a pair by its total, which becomes its
    number of users.

    Args:
        pt: Count tables (``estimand`` items).
        weight: ``items`` or ``users``.

    Raises:
        ValueError: ``weight`` is neither, or ``pt`` holds proportions already.
    """
    if weight not in WEIGHTS:
        raise ValueError(f"weight must be one of {', '.join(WEIGHTS)}, got {weight!r}")
    if pt.estimand != "items":
        raise ValueError(f"{pt.dataset}: the pair tables are weighted already ({pt.estimand})")
    if weight == "items":
        return pt
    flat = pt.tables.reshape(-1, *pt.tables.shape[-2:])
    held = flat.sum(axis=(-2, -1)) > 0
    # Only (user, pair) tables with items: weighted_tables drops empty ones, which must stay in place as zeros.
    weighted = np.zeros_like(flat)
    weighted[held] = weighted_tables(flat[held], weight)
    return replace(pt, tables=weighted.reshape(pt.tables.shape), estimand=weight)


def pair_metric(scale: DatasetScale | None) -> str:
    """The scale's headline figure (:func:`~personagap.analysis.headline.headline_metric`), of ceilings and gaps."""
    return headline_metric(scale)


def _subset(pt: PairTables, member: BoolArray) -> tuple[FloatArray, BoolArray]:
    # Only the pairs a figure reads: its interval then costs O(users x those pairs).
    used = member.any(axis=0)
    return pt.tables[:, used], member[:, used]


def ceiling_stat(pt: PairTables) -> ClusterStat | None:
    """The human ceiling as the CI rule takes it (None when no human pair entered)."""
    member = pt.membership([None])
    if not member.any():
        return None
    tables, m = _subset(pt, member)
    # A mean of kappas has the metric's range: without it an interval could pass 1 ([0.675, 1.10] was printed).
    return ClusterStat(pt.users, tables, lambda t: pt.means(t, m)[..., 0], pt.estimand, get_metric(pt.metric).bounds)


def human_ceiling_row(pt: PairTables, level: float) -> HumanCeiling | None:
    """The dataset's ceiling row, or None when no two humans share enough items (or it is undefined)."""
    stat = ceiling_stat(pt)
    if stat is None:
        return None
    est = stat.estimate(level)
    if np.isnan(est.value):
        return None
    return HumanCeiling(dataset=pt.dataset, metric=pt.metric, mean_kappa=est.value, ci=ci_list(est),
                        estimand=pt.estimand, n_raters=len(pt.human_keys), n_pairs=int(pt.membership([None]).sum()),
                        n_items=pt.n_items, n_users=len(pt.users), undefined_resamples=est.n_undefined)


def judge_gaps(stage: str, pt: PairTables, ceiling: HumanCeiling, level: float) -> list[CeilingGap]:
    """Every judge's own gap to the ceiling (paired), smallest first."""
    out = []
    for key, rater, kind, condition in pt.judges.itertuples(index=False):
        member = pt.membership([None, int(key)])
        if not member[1].any():
            continue
        tables, m = _subset(pt, member)
        judge = ClusterStat(pt.users, tables, _row(pt, m, 1), pt.estimand, get_metric(pt.metric).bounds).estimate(level)
        gap = ClusterStat(pt.users, tables, _gap_of(pt, m), pt.estimand).estimate(level)
        out.append(CeilingGap(
            stage=stage, dataset=pt.dataset, judge=judge_display(str(rater), str(condition)), rater=str(rater),
            rater_kind=str(kind), condition=str(condition), metric=pt.metric, judge_kappa=judge.value,
            judge_kappa_ci=ci_list(judge), ceiling=ceiling.mean_kappa, ceiling_ci=ceiling.ci, gap=gap.value,
            gap_ci=ci_list(gap), estimand=pt.estimand, n_items=int(pt.n_items_of[int(key)]), n_users=len(pt.users),
            n_judge_pairs=int(member[1].sum()), n_human_pairs=ceiling.n_pairs, undefined_resamples=gap.n_undefined))
    out.sort(key=lambda g: (bool(np.isnan(g.gap)), 0.0 if np.isnan(g.gap) else g.gap, g.judge))
    return out


def _row(pt: PairTables, member: BoolArray, row: int) -> Callable[[FloatArray], FloatArray]:
    def stat(totals: FloatArray) -> FloatArray:
        return pt.means(totals, member)[..., row]
    return stat


def _gap_of(pt: PairTables, member: BoolArray) -> Callable[[FloatArray], FloatArray]:
    # Row 0 of ``member`` is the ceiling, row 1 the judge.
    def stat(totals: FloatArray) -> FloatArray:
        means = pt.means(totals, member)
        return means[..., 0] - means[..., 1]
    return stat


def selected_gap(stage: str, pt: PairTables, gaps: list[CeilingGap], *, seed: int, level: float,
                 min_items: int = MIN_ITEMS_FOR_RANKING) -> tuple[SelectedGap | None, ClusterStat | None, str | None]:
    """The stage's best-judge gap on this dataset, with the choice of the judge accounted for.

    Eligible judges have at least ``min_items`` items and a defined gap. One eligible judge: its gap (nothing was
    chosen). Several: cross-fitting over two fixed halves of the users (:func:`user_halves`, seeded), the judge
    with the smallest gap on one half measured on the other, both ways, averaged; a judge or the ceiling must have
    pairs spanning :data:`MIN_PAIR_USERS` users within each half. The choice is inside the statistic, so the CI
    rule remakes it on every leave-one-user-out total.

    Args:
        stage: Pipeline stage (recorded).
        pt: The dataset's pair tables.
        gaps: The judges' own gaps (:func:`judge_gaps`): which are eligible.
        seed: Seed of the split.
        level: Confidence level.
        min_items: Fewer items: not eligible.

    Returns:
        The row, the statistic (for comparing stages), and why there is none when there is none.
    """
    by_name = {judge_display(str(r.rater), str(r.condition)): int(r.key) for r in pt.judges.itertuples(index=False)}
    eligible = [g for g in gaps if g.n_items >= min_items and not np.isnan(g.gap)]
    if not eligible:
        return None, None, None
    keys = [by_name[g.judge] for g in eligible]
    if len(eligible) == 1:
        member = pt.membership([None, keys[0]])
        tables, m = _subset(pt, member)
        single = ClusterStat(pt.users, tables, _gap_of(pt, m), pt.estimand)
        est = single.estimate(level)
        return (SelectedGap(stage=stage, dataset=pt.dataset, metric=pt.metric, method="single judge", gap=est.value,
                            gap_ci=ci_list(est), estimand=pt.estimand, chosen=[eligible[0].judge], n_judges=1,
                            n_users=len(pt.users), undefined_resamples=est.n_undefined), single, None)
    half = user_halves(pt.users, seed)
    member = pt.membership([None, *keys])
    spans = np.stack([(pt.tables[half == h].sum(axis=(-2, -1)) > 0).sum(axis=0) >= MIN_PAIR_USERS
                      for h in (0, 1)])  # (2, P): the pair spans enough users within that half
    split_member = member[None, :, :] & spans[:, None, :]  # (2, R, P)
    usable = split_member.any(axis=-1).all(axis=0)  # rows with pairs in both halves
    if not usable[0] or not usable[1:].any():
        return None, None, (f"{pt.dataset}: no selection-aware gap: with {len(pt.users)} users split in two halves, "
                            f"the humans and a judge need pairs spanning {MIN_PAIR_USERS} users in each half")
    rows = [0, *[r for r in range(1, len(keys) + 1) if usable[r]]]
    names = [eligible[r - 1].judge for r in rows[1:]]
    used = split_member[:, rows].any(axis=(0, 1))
    per = np.zeros((len(pt.users), 2, int(used.sum()), *pt.tables.shape[-2:]))
    per[np.arange(len(pt.users)), half] = pt.tables[:, used]
    m = split_member[:, rows][:, :, used]

    def choose(totals: FloatArray) -> tuple[FloatArray, IntArray, IntArray]:
        gap = pt.means(totals, m)  # (..., 2, R)
        g = gap[..., 0:1] - gap[..., 1:]  # (..., 2, J): each judge's gap on each half
        masked = np.where(np.isnan(g), np.inf, g)
        return g, np.argmin(masked[..., 0, :], axis=-1), np.argmin(masked[..., 1, :], axis=-1)

    def cross_fit(totals: FloatArray) -> FloatArray:
        g, on_first, on_second = choose(totals)
        measured_on_second = np.take_along_axis(g[..., 1, :], on_first[..., None], axis=-1)[..., 0]
        measured_on_first = np.take_along_axis(g[..., 0, :], on_second[..., None], axis=-1)[..., 0]
        return np.asarray((measured_on_second + measured_on_first) / 2.0, dtype=float)

    _, first_choice, second_choice = choose(per.sum(axis=0))
    cluster = ClusterStat(pt.users, per, cross_fit, pt.estimand)
    est = cluster.estimate(level)
    return (SelectedGap(stage=stage, dataset=pt.dataset, metric=pt.metric, method="cross-fit", gap=est.value,
                        gap_ci=ci_list(est), estimand=pt.estimand,
                        chosen=[names[int(first_choice)], names[int(second_choice)]],
                        n_judges=len(names), n_users=len(pt.users), undefined_resamples=est.n_undefined),
            cluster, None)


def compare(top: tuple[str, ClusterStat], other: tuple[str, ClusterStat], level: float) -> StageComparison:
    """The difference of two stages' gaps, paired over users with the same id (one user's items move together).

    Raises:
        ValueError: The two gaps weigh differently (items and users): their difference would estimate nothing.
    """
    (name_a, a), (name_b, b) = top, other
    if a.estimand != b.estimand:
        raise ValueError(f"{name_a} weighs {a.estimand}, {name_b} {b.estimand}: no difference of the two")
    union = np.union1d(a.users, b.users)
    fa = a.per_cluster.reshape(len(a.users), -1)
    fb = b.per_cluster.reshape(len(b.users), -1)
    per = np.zeros((len(union), fa.shape[1] + fb.shape[1]))
    per[np.searchsorted(union, a.users), :fa.shape[1]] = fa
    per[np.searchsorted(union, b.users), fa.shape[1]:] = fb
    shape_a, shape_b, cut = a.per_cluster.shape[1:], b.per_cluster.shape[1:], fa.shape[1]

    def stat(t: FloatArray) -> FloatArray:
        lead = t.shape[:-1]
        return a.stat(t[..., :cut].reshape(*lead, *shape_a)) - b.stat(t[..., cut:].reshape(*lead, *shape_b))

    est = cluster_estimate(stat, per, level=level)
    return StageComparison(stage=name_a, other=name_b, difference=est.value, ci=ci_list(est), estimand=a.estimand,
                           n_users=len(union),
                           n_shared_users=len(np.intersect1d(a.users, b.users)), undefined_resamples=est.n_undefined)


def ordinal_alpha(humans: pd.DataFrame, scale: DatasetScale, *, level: float) -> dict[str, Any]:
    """Krippendorff's alpha (ordinal) among the humans of an ordinal dataset, with its user-clustered CI."""
    values = humans.assign(value=on_scale(humans["label"], scale).map(dict(zip(scale.categories, scale.levels(),
                                                                               strict=True))))
    wide = values.drop_duplicates(["item_id", "rater"]).pivot(index="item_id", columns="rater", values="value")
    users = values.drop_duplicates("item_id").set_index("item_id")["user_id"].reindex(wide.index)
    est = krippendorff_alpha_ci(wide.to_numpy(dtype=float).T, users.astype(str).to_numpy(), "ordinal",
                                ci_level=level)
    return {"alpha": est.value, "alpha_ci": ci_list(est)}

