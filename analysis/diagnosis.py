"""One diagnosis, two faces: which pipeline stage's automated evaluation is furthest from humans.

The dashboard's Overview and ``personagap diagnose`` both call :func:`diagnose`, a
pure function over small DataFrames that SQL aggregates out of the store, through the one entry
:func:`personagap.analysis.diagnosis_store.diagnose_store`. Working from per-user confusion counts instead of raw labels
keeps it fast at a million stored labels: the database does the counting, and every
interval is the one CI rule (:func:`personagap.analysis.agreement.cluster_estimate`) on
per-user tables.

Which labels count is :mod:`personagap.analysis.comparable`'s rule, used through its SQL
predicates: the human reference is blind (anchored labels never are one), in-sample judge
labels are never scored, and rater kinds (llm, trained, baseline) stay apart.

The verdict ranks stages by the **gap to the human ceiling of the same dataset**
(:mod:`personagap.analysis.diagnosis_ceiling`): on a dataset where several blind humans
labelled the same items, the ceiling is their mean pairwise kappa over a fixed set of pairs,
and a judge's figure is its mean kappa with each of those humans on the same items. On an
ordinal dataset (its record's scale, :mod:`personagap.datasets`) every one of these kappas,
and the judge's headline figure, is quadratic-weighted. The best judge is chosen **within one
dataset** (the stage's ranked dataset: the one with a ceiling and the most users, a property
of the design, not of the figures) and its gap is **selection-aware**: chosen on one half of the
users, measured on the other. A stage is named only when the CI of the **difference** between
its gap and every other ranked stage's gap excludes 0 (paired over users the stages share);
otherwise the verdict says it cannot tell. A ceiling is never borrowed from another dataset: a
stage whose judged dataset has no multi-human ceiling is reported as unranked.

Every figure weighs items by default (pooled counts: heavy users count most). With ``weight="users"``
(``diagnose --weight users``, :mod:`personagap.analysis.weighting`) the judges' scores are computed from each
user's table divided by its own total, and the ceilings and gaps from each user's table of each rater pair so
divided (:func:`~personagap.analysis.diagnosis_ceiling.pair_tables`): each user counts once. Every row says which
(``estimand``); the ordinal ceiling's Krippendorff's alpha pools items either way and says so (``item_weighted``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import duckdb
import pandas as pd

from personagap.analysis.aggregated import user_tables
from personagap.analysis.agreement import (
    DEFAULT_SEED,
    ci_list,
)
from personagap.analysis.comparable import (
    JUDGE_KINDS as JUDGE_KINDS,
)
from personagap.analysis.comparable import (
    YES_NO,
    anchored_human_sql,
    blind_human_sql,
    categories_for,
    comparable_judge_sql,
    judge_display,
    reference_sql,
)
from personagap.analysis.diagnosis_ceiling import (
    ClusterStat,
    compare,
    human_ceiling_row,
    judge_gaps,
    ordinal_alpha,
    pair_tables,
    selected_gap,
)
from personagap.analysis.diagnosis_records import (
    MIN_ITEMS_FOR_RANKING,
    MIN_PAIR_OVERLAP,
    STAGE_TITLES,
    STAGES,
    CeilingGap,
    DatasetBest,
    Diagnosis,
    HumanCeiling,
    JudgeScore,
    SelectedGap,
    StageComparison,
    StageDiagnosis,
    finite,
)
from personagap.analysis.diagnosis_text import (
    ceiling_reason,
    human_counts_by_dataset,
    next_steps,
    no_gap_reason,
    render_diagnosis,
    stage_message,
    stage_notes,
    verdict_text,
)
from personagap.analysis.headline import headline_metric
from personagap.analysis.origins import REAL, tag_origins
from personagap.analysis.panel import panel_values, scale_metrics
from personagap.analysis.weighting import Weight, weighted_estimates, weighted_tables
from personagap.datasets import dataset_scales
from personagap.records import DatasetScale
from personagap.scales import as_scale

__all__ = ["JUDGE_KINDS", "MIN_ITEMS_FOR_RANKING", "MIN_PAIR_OVERLAP", "STAGES", "STAGE_TITLES", "CeilingGap",
           "Diagnosis", "HumanCeiling", "JudgeScore", "SelectedGap", "StageComparison", "StageDiagnosis",
           "dataset_scales", "diagnose", "human_ceiling", "judge_score", "render_diagnosis", "stage_scales"]

# Static SQL (built from comparable.py's constants only, never user input): per item, the blind human reference.
REFERENCE_SQL = reference_sql("blind")
JUDGE_SQL = comparable_judge_sql("l")
"""Judge labels that may be compared with humans (what the dashboard's queries should select too)."""
BLIND_SQL = blind_human_sql("l")
ANCHORED_SQL = anchored_human_sql("l")



# --------------------------------------------------------------------------- the datasets' scales

def stage_scales(con: duckdb.DuckDBPyConnection, stage: str) -> dict[str, list[str]]:
    """Dataset -> the categories its comparisons are scored over (in the scale's order), for one stage.

    The record's scale (:func:`personagap.datasets.dataset_records`), exactly as :func:`diagnose` scores it.

    Args:
        con: An open store connection.
        stage: Pipeline stage.
    """
    return {ds: list(scale.categories) for (st, ds), scale in dataset_scales(con).items() if st == stage}


def _pairs_scales(pairs: pd.DataFrame) -> dict[tuple[str, str], DatasetScale]:
    # Without the store's records (a caller passing pairs only), each dataset's nominal scale is what its pairs
    # hold, by the one category rule.
    out = {}
    for (stage, ds), rows in pairs.groupby(["stage", "dataset"], sort=True):
        out[(str(stage), str(ds))] = as_scale(categories_for(_as_scale_rows(rows)))
    return out


def _as_scale_rows(pairs: pd.DataFrame) -> pd.DataFrame:
    # The labels a pairs frame shows (reference and judge), as categories_for reads them.
    human = pd.DataFrame({"rater_kind": "human", "condition": "", "label": pairs["human"].astype(str)})
    judge = pd.DataFrame({"rater_kind": "llm", "condition": "", "label": pairs["label"].astype(str)})
    return pd.concat([human, judge], ignore_index=True)


def judge_score(rows: pd.DataFrame, *, stage: str, dataset: str, rater: str, rater_kind: str, condition: str,
                failures: int, level: float = 0.95,
                scale: DatasetScale | list[str] | None = None, weight: Weight = "items") -> JudgeScore:
    """Score one judge from its per-user (human, label, n) counts.

    Every figure (kappa, accuracy, the panel, the yes/no figures) is a function of the per-user tables under
    ``weight`` (:func:`~personagap.analysis.weighting.weighted_tables`); ``n`` and ``confusion`` are item counts
    either way.

    Args:
        rows: Columns ``user_id``, ``human``, ``label``, ``n`` (counts of items per combination).
        stage: Pipeline stage.
        dataset: Dataset key.
        rater: The judge's rater name.
        rater_kind: llm, trained or baseline.
        condition: Protocol variant ('' is the default).
        failures: Unparseable answers of this judge.
        level: Confidence level of every CI (the one CI rule, over users).
        scale: The dataset's scale (:func:`dataset_scales`; a bare category list is nominal), so every judge of
            a dataset is scored over the same categories, and ordinal datasets by their levels; None: the
            nominal scale of ``rows`` alone.
        weight: ``items`` (pooled counts) or ``users`` (each user's table divided by its own total).
    """
    if scale is None:
        scale = categories_for(_as_scale_rows(rows))
    s = as_scale(scale)
    categories = list(s.categories)
    binary = tuple(categories) == YES_NO
    tables, n_users = user_tables(rows, s)
    est = weighted_estimates(tables, (*scale_metrics(s), *(("over_selection",) if binary else ())), weight=weight,
                             level=level, levels=s.levels() if s.ordinal else None)
    kap, acc = est["kappa"], est["accuracy"]
    total = tables.sum(axis=0)
    extra: dict[str, Any] = {}
    if binary:
        over = est["over_selection"]
        # The yes/no figures from the same weighted table as kappa (item counts, or the sum of users' shares).
        shares = weighted_tables(tables, weight).sum(axis=0)
        fp, fn, tp = shares[0, 1], shares[1, 0], shares[1, 1]
        n = shares.sum()
        extra = {
            "human_yes_rate": float((tp + fn) / n) if n else float("nan"),
            "judge_yes_rate": float((tp + fp) / n) if n else float("nan"),
            "over_selection": over.value, "over_selection_ci": ci_list(over),
            "precision": float(tp / (tp + fp)) if tp + fp else float("nan"),
            "recall": float(tp / (tp + fn)) if tp + fn else float("nan"),
            "f1": float(2 * tp / (2 * tp + fp + fn)) if 2 * tp + fp + fn else float("nan"),
        }
    judge = judge_display(rater, condition)
    return JudgeScore(
        stage=stage, dataset=dataset, judge=judge, rater=rater, rater_kind=rater_kind, condition=condition,
        n=int(total.sum()), n_users=n_users, failures=failures, categories=categories,
        confusion=total.astype(int).tolist(), kappa=kap.value, kappa_ci=ci_list(kap), accuracy=acc.value,
        accuracy_ci=ci_list(acc), binary=binary, undefined_resamples=kap.n_undefined, scale=s.kind,
        **panel_values(est), **extra, estimand=weight,
    )




def human_ceiling(humans: pd.DataFrame, *, min_overlap: int = MIN_PAIR_OVERLAP,
                  level: float = 0.95, scale: DatasetScale | None = None, weight: Weight = "items"
                  ) -> HumanCeiling | None:
    """Mean pairwise kappa among individual blind humans on one dataset (None when no two share items).

    Args:
        humans: Columns ``dataset``, ``item_id``, ``rater``, ``label``, ``user_id`` for one dataset.
        min_overlap: Rater pairs sharing fewer items are left out (must be :data:`MIN_PAIR_OVERLAP`).
        level: Confidence level.
        scale: The dataset's scale (ordinal: quadratic-weighted kappa); None: Cohen's kappa.
        weight: ``items`` or ``users`` (each user's table of each pair divided by its own total).
    """
    if min_overlap != MIN_PAIR_OVERLAP:
        raise ValueError(f"the ceiling uses the diagnosis's pair overlap {MIN_PAIR_OVERLAP}")
    pt = pair_tables(humans, None, scale, weight)
    ceiling = None if pt is None else human_ceiling_row(pt, level)
    return _with_alpha(ceiling, humans, scale, level)


def _with_alpha(ceiling: HumanCeiling | None, humans: pd.DataFrame, scale: DatasetScale | None,
                level: float) -> HumanCeiling | None:
    """An ordinal dataset's ceiling with Krippendorff's alpha among its humans beside it (other ceilings as given).

    Alpha pools items whatever the ceiling weighs (no user-weighted version: docs/methods.md); a user-weighted
    ceiling names it in ``item_weighted``.
    """
    if ceiling is None or scale is None or not scale.ordinal:
        return ceiling
    pooled = ["alpha"] if ceiling.estimand == "users" else []
    return ceiling.model_copy(update={**ordinal_alpha(humans, scale, level=level), "item_weighted": pooled})


def _dataset_gaps(stage: str, humans: pd.DataFrame, judges: pd.DataFrame, *, seed: int,
                  level: float, scale: DatasetScale | None, min_items: int, weight: Weight
                  ) -> tuple[HumanCeiling | None, list[CeilingGap], SelectedGap | None, ClusterStat | None,
                             str | None]:
    """One dataset's ceiling, every judge's own gap, and its selection-aware best-judge gap (with a note if none)."""
    pt = pair_tables(humans, judges, scale, weight)
    ceiling = _with_alpha(None if pt is None else human_ceiling_row(pt, level), humans, scale, level)
    if pt is None or ceiling is None:
        return None, [], None, None, None
    gaps = judge_gaps(stage, pt, ceiling, level)
    selected, stat, note = selected_gap(stage, pt, gaps, seed=seed, level=level, min_items=min_items)
    return ceiling, gaps, selected, stat, note


def _ranked_dataset(ceilings: list[HumanCeiling], gaps: list[CeilingGap], judges: list[JudgeScore],
                    origins: Mapping[str, str]) -> str | None:
    """The one dataset a stage's judges are ranked within: a design property, never the figures being ranked.

    A dataset with a ceiling and a judge gap first; among those, real users before synthetic personas, then the
    most users, the most items, the name. Else the dataset whose judges are scored on the most users (real first).
    """
    def key(n_users: int, n_items: int, dataset: str) -> tuple[bool, int, int, str]:
        return origins.get(dataset, REAL) != REAL, -n_users, -n_items, dataset

    with_gap = {g.dataset for g in gaps}
    candidates = [key(c.n_users, c.n_items, c.dataset) for c in ceilings if c.dataset in with_gap]
    if candidates:
        return min(candidates)[3]
    scored = [key(j.n_users, j.n, j.dataset) for j in judges if finite(j.headline)]
    return min(scored)[3] if scored else None


def _stage(stage: str, pairs: pd.DataFrame, humans: pd.DataFrame, judge_items: pd.DataFrame, row: Any, *,
           fail_count: Mapping[tuple[str, str, str, str], int], counts: pd.DataFrame,
           scales: Mapping[tuple[str, str], DatasetScale], origins: Mapping[str, str], seed: int,
           level: float, min_items: int, weight: Weight) -> tuple[StageDiagnosis, ClusterStat | None]:
    """One stage's diagnosis, and the statistic of its selection-aware gap (for comparing stages)."""
    n_items = int(row["n_items"]) if row is not None else 0
    n_human = int(row["n_human_labels"]) if row is not None else 0
    n_judge = int(row["n_judge_labels"]) if row is not None else 0
    judges = []
    for (dataset, rater, kind, condition), rows in pairs[pairs["stage"] == stage].groupby(
            ["dataset", "rater", "rater_kind", "condition"], sort=True):
        judges.append(judge_score(rows, stage=stage, dataset=str(dataset), rater=str(rater), rater_kind=str(kind),
                                  condition=str(condition),
                                  failures=fail_count.get((stage, str(dataset), str(rater), str(condition)), 0),
                                  level=level, scale=scales.get((stage, str(dataset))), weight=weight))
    judges.sort(key=lambda j: (not finite(j.headline), -(j.headline if finite(j.headline) else 0.0), j.judge,
                               j.dataset))
    ceilings, gaps, notes = [], [], []
    chosen: dict[str, tuple[SelectedGap, ClusterStat]] = {}
    stage_judges = judge_items[judge_items["stage"] == stage]
    for ds, rows in humans[humans["stage"] == stage].groupby("dataset", sort=True):
        c, g, sel, stat, note = _dataset_gaps(stage, rows, stage_judges[stage_judges["dataset"] == ds],
                                              seed=seed, level=level,
                                              scale=scales.get((stage, str(ds))), min_items=min_items,
                                              weight=weight)
        if c is not None:
            ceilings.append(c)
            gaps += g
        if sel is not None and stat is not None:
            chosen[str(ds)] = (sel, stat)
        if note:
            notes.append(note + ".")
    gaps.sort(key=lambda g: (not finite(g.gap), g.gap if finite(g.gap) else 0.0, g.judge, g.dataset))
    ranked_ds = _ranked_dataset(ceilings, [g for g in gaps if finite(g.gap) and g.n_items >= min_items], judges,
                                origins)
    in_ds = [j for j in judges if j.dataset == ranked_ds and finite(j.headline)]
    ranked = [j for j in in_ds if j.n >= min_items] or in_ds
    eligible = [g for g in gaps if g.dataset == ranked_ds and finite(g.gap) and g.n_items >= min_items]
    gap = eligible[0] if eligible else None
    selected, stat = chosen.get(ranked_ds or "", (None, None))
    if n_items == 0:
        status = "no_data"
    elif ranked:
        status = "ok"
    elif n_human == 0:
        status = "no_reference"
    else:
        status = "no_judges" if n_judge == 0 or not judges else "no_reference"
    best, worst = (ranked[0], ranked[-1]) if ranked else (None, None)
    by_ds = {c.dataset: c for c in ceilings}
    ceiling = (by_ds.get(ranked_ds) if ranked_ds is not None  # never another dataset's ceiling beside its judges
               else max(ceilings, key=lambda c: (c.n_items, c.n_pairs)) if ceilings else None)
    datasets = _datasets(stage, judges, ceilings, gaps, counts, scales, min_items, weight)
    tag_origins([judges, ceilings, gaps, selected, datasets], origins)
    return StageDiagnosis(
        stage=stage, title=STAGE_TITLES[stage], status=status, message=stage_message(status, stage, best, ceiling),
        n_items=n_items, n_labels=int(row["n_labels"]) if row is not None else 0, n_human_labels=n_human,
        n_judge_labels=n_judge, judges=judges, best=best, worst=worst, ceiling=ceiling, ceilings=ceilings,
        gaps=gaps, gap=gap, selected_gap=selected, notes=notes + stage_notes(stage, judges, ceilings, counts),
        datasets=datasets,
    ), stat


def _datasets(stage: str, judges: list[JudgeScore], ceilings: list[HumanCeiling], gaps: list[CeilingGap],
              counts: pd.DataFrame, scales: Mapping[tuple[str, str], DatasetScale], min_items: int,
              weight: Weight) -> list[DatasetBest]:
    """Per dataset with judges or a ceiling: its own best (and worst) judge, its own ceiling and that judge's gap.

    The best judge is chosen as the stage's is (:func:`_stage`: the highest headline figure, among judges with
    ``min_items`` items when any has them), but within each dataset, so no dataset is ranked against another.
    """
    by_ceiling = {c.dataset: c for c in ceilings}
    by_counts = human_counts_by_dataset(stage, counts)
    out = []
    for ds in sorted({j.dataset for j in judges} | set(by_ceiling)):
        scored = [j for j in judges if j.dataset == ds and finite(j.headline)]  # judges: best headline first
        ranked = [j for j in scored if j.n >= min_items] or scored
        best = ranked[0] if ranked else None
        scale = scales.get((stage, ds))
        kind = scale.kind if scale is not None else (best.scale if best is not None and best.scale else "nominal")
        ceiling = by_ceiling.get(ds)
        gap = None if best is None else next((g for g in gaps if g.dataset == ds and g.judge == best.judge), None)
        if ceiling is None:
            note: str | None = ceiling_reason(ds, by_counts.get(ds), sorted(by_ceiling))
        elif best is None:
            note = f"{ds}: no judge is scored against its blind human reference yet."
        else:
            note = no_gap_reason(ds, best) if gap is None else None
        out.append(DatasetBest(stage=stage, dataset=ds, scale=kind, metric=headline_metric(kind), estimand=weight,
                               n_judges=len({j.judge for j in judges if j.dataset == ds}), best=best,
                               worst=ranked[-1] if len(ranked) > 1 else None, ceiling=ceiling, gap=gap, note=note))
    return out


def diagnose(pairs: pd.DataFrame, failures: pd.DataFrame, humans: pd.DataFrame, inventory: pd.DataFrame, *,
             judge_items: pd.DataFrame | None = None, human_counts: pd.DataFrame | None = None,
             seed: int = DEFAULT_SEED,
             min_items: int = MIN_ITEMS_FOR_RANKING, level: float = 0.95,
             origins: Mapping[str, str] | None = None,
             scales: Mapping[tuple[str, str], DatasetScale] | None = None, weight: Weight = "items") -> Diagnosis:
    """Diagnose every stage from aggregated store data (pure: no I/O).

    Args:
        pairs: Per (stage, dataset, rater, rater_kind, condition, user_id, human, label) the count ``n`` of
            items where the judge gave ``label`` and the blind human reference ``human``.
        failures: Per (stage, dataset, rater, rater_kind, condition) the count ``failures`` of unparseable answers.
        humans: Individual blind human labels (columns stage, dataset, item_id, rater, label, user_id) on items
            that at least two of them labelled.
        inventory: Per stage ``n_items``, ``n_labels``, ``n_human_labels``, ``n_judge_labels``.
        judge_items: Comparable judge labels on those items (stage, dataset, item_id, rater, rater_kind,
            condition, label, user_id): the judge side of the gap to the ceiling. None: no gaps.
        human_counts: Per (stage, dataset) ``blind_raters``, ``blind_labels``, ``anchored_raters``,
            ``anchored_labels`` (for saying why a dataset has no ceiling). None: no such notes.
        seed: Seed of the two halves of users the best-judge gap is cross-fitted on.
        min_items: Judges sharing fewer items with humans are not ranked as best/worst nor chosen for a gap.
        level: Confidence level of every CI.
        origins: Dataset -> ``real`` or ``synthetic`` (:func:`personagap.labels_api.dataset_origins`); every
            score, ceiling and gap carries its dataset's origin, and the verdict says when a best judge is scored
            on synthetic personas. Datasets missing from it are real.
        scales: (stage, dataset) -> the dataset's scale (:func:`dataset_scales`, from its record): every judge of
            a dataset is scored over it, and an ordinal dataset's headline figure, ceiling and gap are
            quadratic-weighted kappa. None, or a dataset missing from it: nominal over the labels in ``pairs``.
        weight: What every judge score, ceiling, gap and difference of gaps weighs equally: ``items`` (pooled
            counts, the default) or ``users`` (per-user proportions: each user once). Which stage is named, which
            judge is best and the cross-fit choice all follow from those figures, so they may differ.

    Returns:
        The diagnosis of all three stages and the verdict.
    """
    fail_count = {(str(r.stage), str(r.dataset), str(r.rater), str(r.condition)): int(r.failures)
                  for r in failures.itertuples()}
    inv = inventory.set_index("stage") if not inventory.empty else inventory
    judge_items = judge_items if judge_items is not None else pd.DataFrame(
        columns=["stage", "dataset", "item_id", "rater", "rater_kind", "condition", "label", "user_id"])
    counts = human_counts if human_counts is not None else pd.DataFrame(
        columns=["stage", "dataset", "blind_raters", "blind_labels", "anchored_raters", "anchored_labels"])
    all_scales = {**_pairs_scales(pairs), **(scales or {})}
    stages, stats = [], {}
    for stage in STAGES:
        done, stat = _stage(stage, pairs, humans, judge_items, inv.loc[stage] if stage in inv.index else None,
                            fail_count=fail_count, counts=counts, scales=all_scales, origins=origins or {},
                            seed=seed, level=level, min_items=min_items, weight=weight)
        stages.append(done)
        if stat is not None and done.selected_gap is not None and finite(done.selected_gap.gap):
            stats[stage] = stat
    worst_stage, ranking, comparisons = _rank(stages, stats, level)
    verdict = verdict_text(stages, ranking, comparisons, worst_stage, level)
    # Two or more stages with a gap and no winner: more users is what would tell.
    steps = [] if worst_stage is not None else next_steps(stages, overlap=len(ranking) >= 2)
    if steps:
        verdict += " What would tell: " + "; ".join(steps) + "."
    return Diagnosis(stages=stages, worst_stage=worst_stage, verdict=verdict, ranking=ranking,
                     comparisons=comparisons, next_steps=steps, seed=seed, ci_level=level, estimand=weight)


def _rank(stages: list[StageDiagnosis], stats: Mapping[str, ClusterStat], level: float
          ) -> tuple[str | None, list[str], list[StageComparison]]:
    """Stages by selection-aware gap, largest first; the top one named only when every difference CI excludes 0.

    The top stage is compared with every other ranked stage by the CI of the difference of their gaps (paired
    over the users the two share), not by whether their own CIs overlap.
    """
    gap_of = {s.stage: s.selected_gap.gap for s in stages if s.selected_gap is not None and s.stage in stats}
    ranking = sorted(gap_of, key=lambda name: (-gap_of[name], STAGES.index(name)))
    if len(ranking) < 2:
        return None, ranking, []
    top = ranking[0]
    comparisons = [compare((top, stats[top]), (other, stats[other]), level) for other in ranking[1:]]
    clears = all(finite(c.ci[0]) and c.ci[0] > 0 for c in comparisons)
    return (top if clears else None), ranking, comparisons
