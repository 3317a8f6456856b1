"""Stage 3's single-response datasets.

Rater agreement on the dataset's scale, each judge against the human majority and against each rater, the aspects
the raters also rated. Agreement among humans reads their labels per item; every judge figure is computed from the
per-(judge, user, reference or rater label, judge label) counts DuckDB builds
(:mod:`personagap.store.response_counts`), so memory grows with the human labels only, never with the judges'
(issue 20).
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pandas as pd

from personagap.analysis.aggregated import user_tables
from personagap.analysis.agreement import Estimate, Level, ci_list, json_safe
from personagap.analysis.comparable import individual_human_mask, judge_display
from personagap.analysis.headline import headline_metric
from personagap.analysis.panel import panel_values, scale_metrics
from personagap.analysis.response import rater_agreement, rater_pairs
from personagap.analysis.weighting import Weight, judge_row_figures, weighted_estimates
from personagap.datasets import build_records
from personagap.human_data.labels import RatedAspectSpec
from personagap.records import DatasetRecord, DatasetScale
from personagap.scales import alpha_level, level_value, on_scale_mask
from personagap.stages.response_pairwise import reason_kind
from personagap.stages.response_records import (
    USR_DATASET,
    JudgeResult,
    RatedAspect,
    RaterVsJudge,
    SingleResponseReport,
    UsrReport,
)
from personagap.vocabulary import YES_NO


def inferred_record(dataset: str, values: pd.DataFrame) -> DatasetRecord:
    """The record of single-response items no stored single-response record describes (the reader's rule).

    Args:
        dataset: The dataset.
        values: Its distinct labels (:func:`~personagap.store.response_counts.single_label_values`).
    """
    kinds = pd.DataFrame({"stage": ["response"], "dataset": [dataset], "item_kind": ["single"], "n": [1]})
    kept = values[(values["dataset"] == dataset) & values["label"].notna() & values["human_labelled"].astype(bool)]
    rows = kept.assign(stage="response")[["stage", "dataset", "rater_kind", "condition", "label"]].drop_duplicates()
    return build_records(kinds, rows, {})[("response", dataset)]


def _codes(wide: pd.DataFrame, scale: DatasetScale) -> tuple[pd.DataFrame, list[float], Level]:
    """Items x raters labels as numbers for alpha/Fleiss: ordinal levels by value, categories by position."""
    if scale.ordinal:
        return (wide.map(lambda v: level_value(v)), list(scale.levels()), alpha_level(scale))
    index = {c: float(i) for i, c in enumerate(scale.categories)}
    return (wide.map(lambda v: index.get(v, np.nan) if isinstance(v, str) else np.nan),
            [float(i) for i in range(len(scale.categories))], "nominal")


def _rater_agreement(rows: pd.DataFrame, scale: DatasetScale) -> tuple[pd.DataFrame, pd.Series, dict[str, Estimate]]:
    """Human labels as items x raters, each item's cluster, and alpha/Fleiss among the raters on ``scale``."""
    wide = rows.pivot_table(index="item_id", columns="rater", values="label", aggfunc="first")
    cluster = rows.drop_duplicates("item_id").set_index("item_id")["user_id"].reindex(wide.index)
    codes, values, level = _codes(wide, scale)
    return wide, cluster, rater_agreement(codes, values, cluster.to_numpy(), level)


def _aspects(frame: pd.DataFrame, specs: list[RatedAspectSpec]) -> list[RatedAspect]:
    out = []
    for spec in specs:
        rows = frame[(frame["condition"] == spec.condition) & (frame["rater_kind"] == "human") & frame["label"].notna()]
        if rows.empty:
            continue
        wide, _, agree = _rater_agreement(rows, spec.scale)
        out.append(RatedAspect(condition=spec.condition, question=spec.question, scale=spec.scale.kind,
                               categories=list(spec.scale.categories), n_items=len(wide),
                               alpha=agree["alpha"].value, alpha_ci=ci_list(agree["alpha"])))
    return out


def _versus_metrics(scale: DatasetScale) -> tuple[str, ...]:
    # The headline figure of the scale (kappa, or weighted kappa on ordinal scales) beside accuracy and kappa.
    return tuple(dict.fromkeys(("accuracy", "kappa", headline_metric(scale))))


def _versus(judge: str, rater: str, n: int, est: dict[str, Estimate], weight: Weight) -> RaterVsJudge:
    weighted = est.get("weighted_kappa")
    return RaterVsJudge(judge=judge, rater=rater, n=n, estimand=weight, accuracy=est["accuracy"].value,
                        kappa=est["kappa"].value, kappa_ci=ci_list(est["kappa"]),
                        weighted_kappa=weighted.value if weighted is not None else None,
                        weighted_kappa_ci=ci_list(weighted) if weighted is not None else None)


def _kept(values: pd.Series, scale: DatasetScale) -> pd.Series:
    """Which of the count rows' ``values`` are on the scale: :func:`on_scale_mask` read on the distinct values only."""
    distinct = pd.Series(values.dropna().unique(), dtype=object)
    return values.isin(set(distinct[on_scale_mask(distinct, scale).to_numpy(dtype=bool)]))


def _reasons(rows: pd.DataFrame) -> Counter[str]:
    """A judge's failures by kind: unparsed labels by their error's reason, then its labels off the scale.

    Reasons are listed in the order the store holds their first label (the count rows' ``first``), as a
    read of the labels one a row listed them; each distinct error text is read once.
    """
    failed = rows[rows["label"].isna()].sort_values("first", kind="stable")
    kind_of = {error: reason_kind(error) for error in pd.unique(failed["error"])}
    reasons: Counter[str] = Counter()
    for error, n in zip(failed["error"], failed["n"], strict=True):
        reasons[kind_of[error]] += int(n)
    # A judge's label outside the dataset's scale is no verdict on it: counted as a failure, never scored.
    off = int(rows.loc[rows["label"].notna() & ~rows["on"], "n"].sum())
    if off:
        reasons["off-scale"] += off
    return reasons


def judge_rows(judges: pd.DataFrame, raters: pd.DataFrame, record: DatasetRecord,
               weight: Weight = "items") -> tuple[list[JudgeResult], list[RaterVsJudge]]:
    """Every comparable judge of one single-response dataset, from the store's counts (issue 20).

    Args:
        judges: :func:`~personagap.store.response_counts.single_judge_counts` (any datasets).
        raters: :func:`~personagap.store.response_counts.single_rater_counts` (any datasets).
        record: The dataset's record: the scale every judge is scored over.
        weight: What the table figures weigh equally (``items`` or ``users``; every figure of these rows is a
            table figure).

    Returns:
        Per (rater, condition, rater kind) with an on-scale label on an item with an on-scale reference, in that
        order: its row against the reference, and its rows against the reference and each blind human rater
        (raters in sorted order, those sharing an item with it).
    """
    scale, dataset = record.scale, record.dataset
    judges = judges[judges["dataset"] == dataset]
    on = _kept(judges["label"], scale)
    judges = judges.assign(on=on, joined=on & _kept(judges["human"], scale))
    raters = raters[raters["dataset"] == dataset]
    raters = raters[_kept(raters["label"], scale) & _kept(raters["human"], scale)]
    keys = ["rater", "condition", "rater_kind"]
    by_judge = dict(tuple(raters.groupby(keys, sort=True)))
    levels = scale.levels() if scale.ordinal else None
    results, versus = [], []
    for key, rows in judges.groupby(keys, sort=True):
        rater, condition, kind = (str(k) for k in key)
        joined = rows[rows["joined"]]
        if joined.empty:
            continue
        name = judge_display(rater, condition)
        tables, n_users = user_tables(joined, scale)
        est, weighting = judge_row_figures(tables, scale_metrics(scale), weight=weight, levels=levels)
        n = int(joined["n"].sum())
        reasons = _reasons(rows)
        results.append(JudgeResult(
            judge=name, rater=rater, condition=condition, dataset=dataset, rater_kind=kind,
            reference="human majority", scale=scale.kind, n=n, n_users=n_users,
            accuracy=est["accuracy"].value, accuracy_ci=ci_list(est["accuracy"]), kappa=est["kappa"].value,
            kappa_ci=ci_list(est["kappa"]), undefined_resamples=est["kappa"].n_undefined,
            failures=sum(reasons.values()), failure_reasons=dict(reasons), **panel_values(est), **weighting))
        versus.append(_versus(name, "majority", n, est, weight))
        for human_rater, pairs in by_judge.get(key, raters.iloc[:0]).groupby("human_rater", sort=True):
            rater_tables, _ = user_tables(pairs, scale)
            versus.append(_versus(name, str(human_rater), int(pairs["n"].sum()),
                                  weighted_estimates(rater_tables, _versus_metrics(scale), weight=weight,
                                                     levels=levels), weight))
    return results, versus


def single_dataset(humans: pd.DataFrame, judges: pd.DataFrame, raters: pd.DataFrame, record: DatasetRecord,
                   aspects: list[RatedAspectSpec], *, reference: pd.DataFrame,
                   weight: Weight = "items") -> tuple[list[JudgeResult], SingleResponseReport | None]:
    """One single-response dataset on its record's scale (any number of categories, or ordinal levels).

    The raters' agreement (from the human labels, per item), and every judge against the reference and against
    each rater (from the store's counts: :func:`judge_rows`).

    Args:
        humans: The dataset's human labels (:func:`~personagap.store.response_counts.single_human_labels`).
        judges: :func:`~personagap.store.response_counts.single_judge_counts` (any datasets).
        raters: :func:`~personagap.store.response_counts.single_rater_counts` (any datasets).
        record: The dataset's record.
        aspects: The other questions its raters answered.
        reference: The dataset's blind reference labels counted
            (:func:`~personagap.store.response_counts.single_reference_counts`: ``human``, ``n``).
        weight: What the judges' table figures weigh equally (the agreement among raters pools items).
    """
    scale, dataset = record.scale, record.dataset
    main = humans[individual_human_mask(humans) & humans["label"].notna()]
    if main.empty:
        return [], None
    main = main[on_scale_mask(main["label"], scale)]
    wide, cluster, agree = _rater_agreement(main, scale)
    pairs = rater_pairs(main.rename(columns={"user_id": "cluster"})[["item_id", "rater", "label", "cluster"]])
    matrix = {str(r): {str(c): json_safe(float(pairs.matrix.loc[r, c])) for c in pairs.matrix.columns}
              for r in pairs.matrix.index}
    mean_kappa = {}
    for r in pairs.matrix.index:
        others = pairs.matrix.loc[r].drop(r).dropna()
        mean_kappa[str(r)] = float(others.mean()) if not others.empty else None
    # The reference from the store's counts (the reference query every judge is scored against), one entry per item:
    # the rates are shares, so the items' order does not matter.
    ref = pd.Series(np.repeat(reference["human"].to_numpy(dtype=object), reference["n"].to_numpy(dtype=np.int64)),
                    dtype=object)
    ref = ref[on_scale_mask(ref, scale)] if not ref.empty else ref
    judge_results, versus = judge_rows(judges, raters, record, weight)
    section = SingleResponseReport(
        dataset=dataset, question=record.question, scale=scale.kind, categories=list(scale.categories),
        n_items=len(wide), n_users=int(cluster.nunique()),
        raters={str(c): int(wide[c].notna().sum()) for c in wide.columns},
        rater_label_rates={str(c): _rates(wide[c].dropna(), scale) for c in wide.columns},
        alpha=agree["alpha"].value, alpha_ci=ci_list(agree["alpha"]),
        fleiss=agree["fleiss"].value, fleiss_ci=ci_list(agree["fleiss"]), pair_kappa=matrix,
        rater_mean_kappa=mean_kappa, reference_rates=_rates(ref, scale),
        aspects=_aspects(humans, aspects), judges=versus)
    return judge_results, section


def _rates(labels: pd.Series, scale: DatasetScale) -> dict[str, float]:
    """Share of each of the scale's categories among ``labels`` (an ordinal label counted at its level)."""
    if labels.empty:
        return {}
    if scale.ordinal:
        values = labels.map(level_value)
        return {c: float((values == v).mean()) for c, v in zip(scale.categories, scale.levels(), strict=True)}
    text = labels.astype(str)
    return {c: float((text == c).mean()) for c in scale.categories}


def legacy_usr(sections: list[SingleResponseReport]) -> UsrReport | None:
    """The deprecated ``usr`` view: USR's section, else the first yes/no one (see :class:`UsrReport`)."""
    pick = next((s for s in sections if s.dataset == USR_DATASET), None) or next(
        (s for s in sections if tuple(s.categories) == YES_NO), None)
    if pick is None:
        return None
    overall = next((a for a in pick.aspects if a.condition == "overall"), None)
    return UsrReport(
        dataset=pick.dataset, origin=pick.origin, n_items=pick.n_items, n_contexts=pick.n_users, raters=pick.raters,
        rater_yes_rate={r: rates.get("yes", float("nan")) for r, rates in pick.rater_label_rates.items()},
        uses_knowledge_alpha=pick.alpha, uses_knowledge_alpha_ci=pick.alpha_ci, uses_knowledge_fleiss=pick.fleiss,
        uses_knowledge_fleiss_ci=pick.fleiss_ci, overall_alpha=overall.alpha if overall else float("nan"),
        overall_alpha_ci=overall.alpha_ci if overall else [float("nan")] * 2, pair_kappa=pick.pair_kappa,
        rater_mean_kappa=pick.rater_mean_kappa, majority_yes_rate=pick.reference_rates.get("yes", float("nan")),
        judges=pick.judges)
