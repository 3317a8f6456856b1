"""Stage 2's pilot from its labels (pandas): per-annotator agreement among raters, and its judges.

The pilot's agreement among raters needs every annotator's label per item, so the store path
(:mod:`personagap.stages.relevance`) reads the pilot dataset's labels (a few thousand) and hands them here. The
per-label report of every dataset that once lived here is a test oracle (``tests/oracles.py``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from personagap.analysis.aggregated import JUDGE_KEYS, frame_counts, user_tables
from personagap.analysis.agreement import (
    NAN_ESTIMATE,
    Level,
    ci_list,
    fleiss_kappa_ci,
    json_safe,
    krippendorff_alpha_ci,
)
from personagap.analysis.comparable import (
    SHOWN_LLM_RATING,
    categories_for,
    comparable_judge_mask,
    individual_human_mask,
    judge_display,
    one_vote_per_rater,
    rater_group,
)
from personagap.analysis.headline import headline_metric
from personagap.analysis.origins import tag_and_compare
from personagap.analysis.pairwise import pairwise_agreement
from personagap.analysis.panel import panel_values
from personagap.analysis.weighting import Weight, judge_row_figures
from personagap.records import DatasetScale
from personagap.scales import alpha_level, as_scale, on_scale
from personagap.stages.relevance_records import (
    ANCHORED_TITLE,
    GroupRow,
    JudgeAgreement,
    MultiRaterReport,
    RelevanceReport,
    judge_metrics,
    selection_fields,
)
from personagap.stages.response_pairwise import reason_kind
from personagap.vocabulary import HumanSet


def _humans(frame: pd.DataFrame, which: HumanSet, scale: DatasetScale) -> pd.DataFrame:
    """Individual human labels of one protocol on the dataset's scale, one per (item, annotator).

    The anchored three-way rating answers another question than the scale's and is never one of them.
    """
    rows = frame[individual_human_mask(frame, which) & (frame["condition"] != SHOWN_LLM_RATING)]
    rows = rows.assign(label=on_scale(rows["label"], scale, strict=False))
    return one_vote_per_rater(rows[rows["label"].notna()])


def dataset_scale(labels: pd.DataFrame, dataset: str, scales: Mapping[str, DatasetScale] | None) -> DatasetScale:
    """The dataset's stored scale (:func:`personagap.datasets.dataset_records`), else its inferred one.

    Inferred as the reader infers it: nominal over :func:`~personagap.analysis.comparable.categories_for` of its
    labels.
    """
    if scales and dataset in scales:
        return scales[dataset]
    return as_scale(categories_for(labels[labels["dataset"] == dataset]))


def judge_agreements_from_counts(counts: pd.DataFrame, reference: pd.DataFrame, failures: pd.DataFrame,
                                 dataset: str, *, scale: DatasetScale, which: HumanSet = "blind",
                                 weight: Weight = "items") -> list[JudgeAgreement]:
    """Every comparable judge of ``dataset`` against the ``which`` reference, from counts: the one judge-row path.

    The store's counts (:mod:`personagap.store.aggregates`) in the report; a frame's
    (:func:`judge_agreements`) where a caller holds labels.

    Args:
        counts: The judge counts of :func:`~personagap.store.aggregates.label_counts` (``which`` reference).
        reference: The reference counts of the same call.
        failures: :func:`~personagap.store.aggregates.judge_failures` rows of the stage.
        dataset: Dataset key.
        scale: The dataset's scale.
        which: The reference the counts were built with (recorded on each row).
        weight: What the table figures weigh equally: ``items`` (pooled counts) or ``users``
            (:mod:`personagap.analysis.weighting`); both weightings' kappa and accuracy are on every row.
    """
    counts, failures = counts[counts["dataset"] == dataset], failures[failures["dataset"] == dataset]
    if on_scale(reference.loc[reference["dataset"] == dataset, "human"], scale, strict=False).dropna().empty:
        return []
    # The reference off the scale answers another question: those items count as unmatched, as per label.
    counts = counts.assign(human=on_scale(counts["human"], scale, strict=False).where(counts["human"].notna()))
    parsed = dict(tuple(counts.groupby(JUDGE_KEYS, sort=True)))
    failed = dict(tuple(failures.groupby(JUDGE_KEYS, sort=True)))
    out = []
    for key in sorted(set(parsed) | set(failed)):
        rater, kind, condition = (str(k) for k in key)
        rows = parsed.get(key, counts.iloc[:0])
        joined = rows[rows["human"].notna()]
        fails = failed.get(key, failures.iloc[:0])
        if joined.empty and fails.empty:
            continue
        tables, n_users = user_tables(joined, scale)
        est, weighting = judge_row_figures(tables, judge_metrics(scale), weight=weight,
                                           levels=scale.levels() if scale.ordinal else None)
        reasons: Counter[str] = Counter()
        for error, n in zip(fails["error"], fails["n"], strict=True):
            reasons[reason_kind(error)] += int(n)
        n_joined = int(joined["n"].sum())
        out.append(JudgeAgreement(
            judge=judge_display(rater, condition), dataset=dataset, rater_kind=kind, condition=condition,
            reference=which, n=n_joined, n_users=n_users, failures=int(fails["n"].sum()),
            failure_reasons=dict(reasons), unmatched=int(rows["n"].sum()) - n_joined,
            kappa=est["kappa"].value, kappa_ci=ci_list(est["kappa"]), undefined_resamples=est["kappa"].n_undefined,
            accuracy=est["accuracy"].value, scale=scale.kind, **selection_fields(est), **panel_values(est),
            **weighting,
        ))
    return out


def judge_agreements(labels: pd.DataFrame, dataset: str, *, which: HumanSet = "blind",
                     scale: DatasetScale | None = None, weight: Weight = "items") -> list[JudgeAgreement]:
    """Every comparable judge of ``dataset`` against its human majority, from labels in memory.

    The frame's counts (:func:`~personagap.analysis.aggregated.frame_counts`, the store's count columns) through
    :func:`judge_agreements_from_counts`, the one implementation of a judge row. Kept for callers that hold a
    dataset's labels and no store query of their own (the dashboard's pilot page hands
    :func:`multi_rater_report` a frame).

    Args:
        labels: Output of :func:`personagap.store.load_labels` for stage 'relevance'.
        dataset: Dataset key.
        which: The blind reference (the default, what judges are scored against) or the anchored one.
        scale: The dataset's scale (:func:`personagap.datasets.dataset_records`); None: :func:`dataset_scale`.
        weight: What the table figures weigh equally: ``items`` or ``users`` (:mod:`personagap.analysis.weighting`).
    """
    frame = labels[labels["dataset"] == dataset]
    scale = scale or dataset_scale(labels, dataset, None)
    counts, reference = frame_counts(frame, dataset, which)
    failed = frame[comparable_judge_mask(frame) & frame["label"].isna()]
    failed = failed.assign(condition=failed["condition"].fillna("").astype(str))
    failures = (failed.groupby(["dataset", *JUDGE_KEYS, "error"], dropna=False).size().rename("n").reset_index()
                if not failed.empty else pd.DataFrame(columns=["dataset", *JUDGE_KEYS, "error", "n"]))
    return judge_agreements_from_counts(counts, reference, failures, dataset, scale=scale, which=which,
                                        weight=weight)



def multi_rater_report(labels: pd.DataFrame, dataset: str, *,
                       which: HumanSet = "blind", scale: DatasetScale | None = None,
                       weight: Weight = "items", judges: list[JudgeAgreement] | None = None) -> MultiRaterReport | None:
    """Within-human, within-judge-kind and human-judge agreement on a dataset with per-annotator labels.

    Args:
        labels: Stage-2 labels (:func:`personagap.store.load_labels`).
        dataset: Dataset key.
        which: ``blind`` human labels (the agreement that may serve as a ceiling) or ``anchored`` ones.
        scale: The dataset's scale; None: :func:`dataset_scale`.
        weight: What the judge rows' table figures weigh equally (the agreement among raters pools items).
        judges: The dataset's judge rows against the ``which`` reference when the caller has them (the report
            counts them in the store); None: :func:`judge_agreements` of ``labels``.

    Returns:
        None when fewer than two humans gave labels of that protocol.
    """
    scale = scale or dataset_scale(labels, dataset, None)
    frame = labels[(labels["dataset"] == dataset) & labels["label"].notna()]
    human_rows = _humans(frame, which, scale)
    humans = sorted(human_rows["rater"].unique())
    if len(humans) < 2:
        return None
    # Judges under their default protocol, each kind its own group (a trained model is never an LLM).
    judge_rows = frame[comparable_judge_mask(frame) & (frame["condition"] == "")].drop_duplicates(["item_id", "rater"])
    judge_kind = dict(zip(judge_rows["rater"], judge_rows["rater_kind"], strict=False))
    groups = {r: "human" for r in humans} | {str(r): rater_group(str(k)) for r, k in judge_kind.items()
                                               if r not in humans}
    judge_rows = judge_rows[~judge_rows["rater"].isin(humans)]
    # A judge's label off the scale can only be on an item no human labelled (the scale holds every label given
    # on human-labelled items), where no pair compares it.
    judge_rows = judge_rows.assign(label=on_scale(judge_rows["label"], scale, strict=False)).dropna(subset=["label"])
    long = pd.concat([human_rows, judge_rows], ignore_index=True).rename(columns={"user_id": "cluster"})
    # Labels as codes in the scale's order, so that an ordinal metric reads the levels in order.
    long = long.assign(label=pd.Categorical(long["label"], categories=scale.categories).codes.astype(np.int64))
    ordinal = scale.levels() if scale.ordinal else None
    result = pairwise_agreement(long[["item_id", "rater", "label", "cluster"]], groups,
                                metric=headline_metric(scale), levels=ordinal)

    human_long = long[long["rater"].isin(humans)]
    wide = human_long.pivot(index="item_id", columns="rater", values="label").astype(float)
    cluster = human_long.drop_duplicates("item_id").set_index("item_id")["cluster"].reindex(wide.index)
    level: Level = alpha_level(scale)
    alpha = krippendorff_alpha_ci(wide.to_numpy(dtype=float).T, cluster.to_numpy(), level)
    n_rated = wide.notna().sum(axis=1)
    multi = n_rated[n_rated >= 2]
    modal = int(multi.mode().max()) if not multi.empty else 0
    keep = n_rated == modal
    counts = np.column_stack([(wide[keep] == v).sum(axis=1) for v in range(len(scale.categories))])
    fleiss = (fleiss_kappa_ci(counts, cluster[keep].to_numpy())
              if modal >= 2 else NAN_ESTIMATE)

    def as_dict(df: pd.DataFrame) -> dict[str, dict[str, Any]]:
        return {str(r): {str(c): json_safe(df.loc[r, c].item()) for c in df.columns} for r in df.index}

    return MultiRaterReport(
        dataset=dataset, protocol="blind" if which == "blind" else ANCHORED_TITLE, raters=groups,
        n_users=int(cluster.nunique()),
        groups=[GroupRow(pair_type=k, mean_kappa=g.mean_kappa.value, ci=ci_list(g.mean_kappa), n_pairs=g.n_pairs,
                         n_users=g.n_users, undefined_resamples=g.mean_kappa.n_undefined)
                for k, g in result.groups.items()],
        human_alpha=alpha.value, human_alpha_ci=ci_list(alpha), alpha_level=level, human_fleiss=fleiss.value,
        human_fleiss_ci=ci_list(fleiss), fleiss_items=int(keep.sum()) if modal >= 2 else 0,
        fleiss_raters_per_item=modal, fleiss_users=int(cluster[keep].nunique()) if modal >= 2 else 0,
        matrix=as_dict(result.matrix), overlap=as_dict(result.overlap),
        judges=judges if judges is not None else judge_agreements(labels, dataset, which=which, scale=scale,
                                                                  weight=weight),
    )


def pilot_reports(labels: pd.DataFrame, pilot_dataset: str, *, scale: DatasetScale,
                  weight: Weight = "items", judges: Mapping[HumanSet, list[JudgeAgreement]] | None = None
                  ) -> tuple[MultiRaterReport | None, MultiRaterReport | None, list[str]]:
    """The pilot's blind and anchored agreement among raters, and the notes saying what is missing or apart.

    ``judges``: the pilot's judge rows per reference when the caller counted them (the report, from the store);
    a reference missing from it: :func:`judge_agreements` of ``labels``.
    """
    kw: dict[str, Any] = {"scale": scale, "weight": weight}
    given = judges or {}
    pilot = multi_rater_report(labels, pilot_dataset, judges=given.get("blind"), **kw)
    anchored = multi_rater_report(labels, pilot_dataset, which="anchored", judges=given.get("anchored"), **kw)
    notes = []
    if pilot is None:
        blind = _humans(labels[labels["dataset"] == pilot_dataset], "blind", scale)
        notes.append(f"{pilot_dataset}: too few blind labels for human–human agreement or a human ceiling "
                     f"({blind['rater'].nunique()} blind annotator(s), {len(blind)} blind labels).")
    if anchored is not None:
        n_anchored = sum(g == "human" for g in anchored.raters.values())
        notes.append(f"{pilot_dataset}: {n_anchored} annotators' labels "
                     "given after seeing an LLM's label are reported apart as anchored; they are never blind "
                     "figures or a ceiling.")
    return pilot, anchored, notes


def assemble_report(judges: list[JudgeAgreement], pilot: MultiRaterReport | None,
                    anchored: MultiRaterReport | None, notes: list[str], alt_test: list[dict[str, Any]],
                    estimates: list[dict[str, Any]], *,
                    origins: Mapping[str, str] | None, weight: Weight = "items") -> RelevanceReport:
    """The report from its parts (both paths), each judge row tagged with its dataset's origin."""
    report = RelevanceReport(judges=judges, pilot=pilot, pilot_anchored=anchored, notes=notes, alt_test=alt_test,
                             estimates=estimates, weight=weight)
    report.origin_comparison = tag_and_compare(
        report, origins or {}, lambda: ((j.judge, j) for j in [*report.judges, *(pilot.judges if pilot else [])]))
    return report

