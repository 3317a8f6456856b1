"""Stage 3's single-response datasets.

Rater agreement on the dataset's scale, each judge against the human majority and against each rater, the aspects
the raters also rated.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from personagap.analysis.agreement import Estimate, Level, ci_list, json_safe
from personagap.analysis.comparable import blind_human_mask, comparable_judge_mask, judge_display, roles
from personagap.analysis.panel import panel_values, scale_estimates
from personagap.analysis.response import rater_agreement, rater_pairs
from personagap.datasets import build_records
from personagap.human_data.labels import RatedAspectSpec
from personagap.records import DatasetRecord, DatasetScale
from personagap.stages.frames import is_in
from personagap.stages.response_pairwise import blind_reference, reason_kind
from personagap.stages.response_records import (
    USR_DATASET,
    YES_NO,
    JudgeResult,
    RatedAspect,
    RaterVsJudge,
    SingleResponseReport,
    UsrReport,
)

if TYPE_CHECKING:
    pass


def inferred_record(dataset: str, frame: pd.DataFrame) -> DatasetRecord:
    """The record of single-response items no stored single-response record describes (the reader's rule)."""
    kinds = pd.DataFrame({"stage": ["response"], "dataset": [dataset], "item_kind": ["single"], "n": [1]})
    kept = frame[frame["label"].notna() & is_in(frame["item_id"], _human_labelled(frame))]
    rows = kept.assign(stage="response")[["stage", "dataset", "rater_kind", "condition", "label"]].drop_duplicates()
    return build_records(kinds, rows, {})[("response", dataset)]


def _human_labelled(frame: pd.DataFrame) -> set[str]:
    return set(frame.loc[roles(frame).isin(["blind_human", "anchored_human"]) & frame["label"].notna(), "item_id"])


def _codes(wide: pd.DataFrame, scale: DatasetScale) -> tuple[pd.DataFrame, list[float], Level]:
    """Items x raters labels as numbers for alpha/Fleiss: ordinal levels by value, categories by position."""
    if scale.ordinal:
        return (wide.map(lambda v: _level(v)), list(scale.levels()), "ordinal")
    index = {c: float(i) for i, c in enumerate(scale.categories)}
    return (wide.map(lambda v: index.get(v, np.nan) if isinstance(v, str) else np.nan),
            [float(i) for i in range(len(scale.categories))], "nominal")


def _level(value: object) -> float:
    try:
        return float(str(value)) if isinstance(value, str) else float("nan")
    except ValueError:
        return float("nan")


def _on_scale(labels: pd.Series, scale: DatasetScale) -> pd.Series:
    """Which labels are on the scale (an ordinal label by its value: 3.0 is the level 3)."""
    if scale.ordinal:
        levels = set(scale.levels())
        return labels.map(lambda v: _level(v) in levels)
    return labels.astype(str).isin(scale.categories)


def _rater_agreement(rows: pd.DataFrame, scale: DatasetScale, *, n_resamples: int,
                     seed: int) -> tuple[pd.DataFrame, pd.Series, dict[str, Estimate]]:
    """Human labels as items x raters, each item's cluster, and alpha/Fleiss among the raters on ``scale``."""
    wide = rows.pivot_table(index="item_id", columns="rater", values="label", aggfunc="first")
    cluster = rows.drop_duplicates("item_id").set_index("item_id")["user_id"].reindex(wide.index)
    codes, values, level = _codes(wide, scale)
    return wide, cluster, rater_agreement(codes, values, cluster.to_numpy(), level, n_resamples=n_resamples,
                                          seed=seed)


def _aspects(frame: pd.DataFrame, specs: list[RatedAspectSpec], *, n_resamples: int, seed: int) -> list[RatedAspect]:
    out = []
    for spec in specs:
        rows = frame[(frame["condition"] == spec.condition) & (frame["rater_kind"] == "human") & frame["label"].notna()]
        if rows.empty:
            continue
        wide, _, agree = _rater_agreement(rows, spec.scale, n_resamples=n_resamples, seed=seed)
        out.append(RatedAspect(condition=spec.condition, question=spec.question, scale=spec.scale.kind,
                               categories=list(spec.scale.categories), n_items=len(wide),
                               alpha=agree["alpha"].value, alpha_ci=ci_list(agree["alpha"])))
    return out


def _versus(judge: str, rater: str, human: pd.Series, labels: pd.Series, clusters: pd.Series, scale: DatasetScale, *,
            n_resamples: int, seed: int) -> RaterVsJudge:
    metrics = ("accuracy", "kappa", *(("weighted_kappa",) if scale.ordinal else ()))
    est = scale_estimates(human, labels, clusters, scale, metrics)
    weighted = est.get("weighted_kappa")
    return RaterVsJudge(judge=judge, rater=rater, n=len(human), accuracy=est["accuracy"].value,
                        kappa=est["kappa"].value, kappa_ci=ci_list(est["kappa"]),
                        weighted_kappa=weighted.value if weighted is not None else None,
                        weighted_kappa_ci=ci_list(weighted) if weighted is not None else None)


def single_dataset(frame: pd.DataFrame, record: DatasetRecord, aspects: list[RatedAspectSpec], *, n_resamples: int,
                   seed: int) -> tuple[list[JudgeResult], SingleResponseReport | None]:
    """One single-response dataset on its record's scale (any number of categories, or ordinal levels).

    The raters' agreement, and every judge against the reference and against each rater.
    """
    scale, dataset = record.scale, record.dataset
    main = frame[blind_human_mask(frame) & (frame["rater_kind"] == "human") & frame["label"].notna()]
    if main.empty:
        return [], None
    main = main[_on_scale(main["label"], scale)]
    wide, cluster, agree = _rater_agreement(main, scale, n_resamples=n_resamples, seed=seed)
    pairs = rater_pairs(main.rename(columns={"user_id": "cluster"})[["item_id", "rater", "label", "cluster"]],
                        n_resamples=n_resamples, seed=seed)
    matrix = {str(r): {str(c): json_safe(float(pairs.matrix.loc[r, c])) for c in pairs.matrix.columns}
              for r in pairs.matrix.index}
    mean_kappa = {}
    for r in pairs.matrix.index:
        others = pairs.matrix.loc[r].drop(r).dropna()
        mean_kappa[str(r)] = float(others.mean()) if not others.empty else None
    ref = blind_reference(frame)
    ref = ref[_on_scale(ref, scale)] if not ref.empty else ref

    judge_results, versus = [], []
    for (rater, condition, kind), rows in frame[comparable_judge_mask(frame)].groupby(
            ["rater", "condition", "rater_kind"], sort=True):
        name = judge_display(str(rater), str(condition))
        parsed = rows[rows["label"].notna()].drop_duplicates("item_id").set_index("item_id")
        on = _on_scale(parsed["label"], scale)
        # A judge's label outside the dataset's scale is no verdict on it: counted as a failure, never scored.
        reasons = Counter(reason_kind(e) for e in rows.loc[rows["label"].isna(), "error"])
        if (~on).any():
            reasons["off-scale"] += int((~on).sum())
        parsed = parsed[on]
        joined = parsed.join(ref.rename("human"), how="inner")
        if joined.empty:
            continue
        clusters = pd.Series(joined["user_id"].to_numpy())
        est = scale_estimates(joined["human"], joined["label"], clusters, scale)
        judge_results.append(JudgeResult(
            judge=name, rater=str(rater), condition=str(condition), dataset=dataset, rater_kind=str(kind),
            reference="human majority", scale=scale.kind, n=len(joined), n_users=int(joined["user_id"].nunique()),
            accuracy=est["accuracy"].value, accuracy_ci=ci_list(est["accuracy"]), kappa=est["kappa"].value,
            kappa_ci=ci_list(est["kappa"]), undefined_resamples=est["kappa"].n_undefined,
            failures=sum(reasons.values()), failure_reasons=dict(reasons), **panel_values(est)))
        versus.append(_versus(name, "majority", joined["human"], joined["label"], clusters, scale,
                              n_resamples=n_resamples, seed=seed))
        for human_rater in wide.columns:
            col = wide[human_rater].dropna()
            both = parsed.index.intersection(col.index)
            if len(both):
                versus.append(_versus(name, str(human_rater), col.loc[both], parsed.loc[both, "label"],
                                      pd.Series(parsed.loc[both, "user_id"].to_numpy()), scale,
                                      n_resamples=n_resamples, seed=seed))
    section = SingleResponseReport(
        dataset=dataset, question=record.question, scale=scale.kind, categories=list(scale.categories),
        n_items=len(wide), n_users=int(cluster.nunique()),
        raters={str(c): int(wide[c].notna().sum()) for c in wide.columns},
        rater_label_rates={str(c): _rates(wide[c].dropna(), scale) for c in wide.columns},
        alpha=agree["alpha"].value, alpha_ci=ci_list(agree["alpha"]),
        fleiss=agree["fleiss"].value, fleiss_ci=ci_list(agree["fleiss"]), pair_kappa=matrix,
        rater_mean_kappa=mean_kappa, reference_rates=_rates(ref, scale),
        aspects=_aspects(frame, aspects, n_resamples=n_resamples, seed=seed), judges=versus)
    return judge_results, section


def _rates(labels: pd.Series, scale: DatasetScale) -> dict[str, float]:
    """Share of each of the scale's categories among ``labels`` (an ordinal label counted at its level)."""
    if labels.empty:
        return {}
    if scale.ordinal:
        values = labels.map(_level)
        return {c: float((values == v).mean()) for c, v in zip(scale.categories, scale.levels(), strict=True)}
    text = labels.astype(str)
    return {c: float((text == c).mean()) for c in scale.categories}


def legacy_usr(sections: list[SingleResponseReport]) -> UsrReport | None:
    """The deprecated ``usr`` view: USR's section, else the first yes/no one (see :class:`UsrReport`)."""
    pick = next((s for s in sections if s.dataset == USR_DATASET), None) or next(
        (s for s in sections if s.categories == YES_NO), None)
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
