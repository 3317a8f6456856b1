"""Stage 2 (relevance selection): judges vs the human majority, and pilot agreement among raters.

Which labels count is :mod:`personagap.analysis.comparable`'s rule: judges are scored against the blind
human reference only; the pilot's agreement among raters is computed from blind labels, and the labels
annotators gave after seeing an LLM's label (anchored) get their own, labelled section; rater kinds
(llm, trained, baseline) are separate groups.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pandas as pd
from pydantic import BaseModel, Field

from personagap.analysis.aggregated import JUDGE_KEYS, store_extras, user_tables
from personagap.analysis.agreement import (
    DEFAULT_RESAMPLES,
    DEFAULT_SEED,
    MIN_USERS_FOR_CI,
    NAN_ESTIMATE,
    Estimate,
    Level,
    ci_list,
    ci_text,
    fleiss_kappa_ci,
    json_safe,
    json_safe_dict,
    krippendorff_alpha_ci,
    shared_resample_weights,
)
from personagap.analysis.agreement import estimates as agreement_estimates
from personagap.analysis.comparable import (
    JUDGE_KINDS,
    MAJORITY_RULE,
    SHOWN_LLM_RATING,
    YES_NO,
    Reference,
    anchored_human_mask,
    blind_human_mask,
    categories_for,
    comparable_judge_mask,
    judge_display,
    one_vote_per_rater,
    rater_group,
    reference_labels,
)
from personagap.analysis.origins import OriginComparison, OriginField, origin_lines, tag_and_compare, where
from personagap.analysis.pairwise import pairwise_agreement
from personagap.analysis.panel import (
    PanelFields,
    extras_lines,
    on_scale,
    panel_lines,
    panel_values,
    report_extras,
    scale_estimates,
    scale_metrics,
)
from personagap.records import DatasetScale
from personagap.store import load_labels
from personagap.store.aggregates import has_labels, judge_failures, label_counts

REFERENCE = "human_majority"
STAGE = "relevance"
__all__ = ["JUDGE_KINDS", "REFERENCE", "RelevanceReport", "judge_agreements", "multi_rater_report",
           "relevance_report", "render_relevance", "report_relevance"]
_YES_NO_METRICS = ("over_selection", "human_yes_rate", "judge_yes_rate", "precision", "recall", "f1")
"""Stage-2 figures of a yes/no scale ("yes" = selected), on top of the scale's own figures."""
ANCHORED_TITLE = "anchored (annotators saw an LLM label)"


class JudgeAgreement(PanelFields, OriginField):
    """One judge's relevance labels compared with the human majority on the same items."""

    judge: str
    dataset: str
    rater_kind: str
    condition: str = ""
    reference: str = Field(default="blind", description="'blind' or 'anchored' human majority.")
    n: int = Field(description="Items both the judge (parsed) and the human majority labelled.")
    n_users: int
    failures: int = Field(description="Items the judge answered but whose answer could not be parsed.")
    failure_reasons: dict[str, int]
    unmatched: int = Field(description="Items the judge labelled that have no human label.")
    kappa: float
    kappa_ci: list[float]
    undefined_resamples: int = Field(default=0, description="Resamples where kappa was undefined (not in its CI).")
    over_selection: float | None = Field(default=None, description="Yes/no scales only (None otherwise).")
    over_selection_ci: list[float] | None = None
    human_yes_rate: float | None = Field(default=None, description="Yes/no scales only.")
    judge_yes_rate: float | None = Field(default=None, description="Yes/no scales only.")
    precision: float | None = Field(default=None, description="Yes/no scales only.")
    precision_ci: list[float] | None = None
    recall: float | None = Field(default=None, description="Yes/no scales only.")
    recall_ci: list[float] | None = None
    f1: float | None = Field(default=None, description="Yes/no scales only.")
    f1_ci: list[float] | None = None
    accuracy: float


class GroupRow(BaseModel):
    """Mean pairwise Cohen's kappa within or across rater groups."""

    pair_type: str
    mean_kappa: float
    ci: list[float]
    n_pairs: int
    n_users: int = 0
    undefined_resamples: int = 0


class MultiRaterReport(OriginField):
    """Agreement among individual raters on a dataset where several humans labelled the same items."""

    dataset: str
    protocol: str = Field(default="blind", description="'blind', or the anchored title: never mixed.")
    raters: dict[str, str] = Field(description="Rater -> group ('human', 'llm', 'trained', 'baseline').")
    n_users: int = 0
    groups: list[GroupRow]
    human_alpha: float = Field(description="Krippendorff's alpha among the human annotators, at the scale's level "
                                           "(ordinal on ordinal scales, else nominal).")
    alpha_level: str = "nominal"
    human_alpha_ci: list[float]
    human_fleiss: float = Field(description="Fleiss' kappa on the items rated by the most common number of humans.")
    human_fleiss_ci: list[float]
    fleiss_items: int
    fleiss_raters_per_item: int
    fleiss_users: int = 0
    matrix: dict[str, dict[str, float | None]]
    overlap: dict[str, dict[str, int]]
    judges: list[JudgeAgreement] = Field(description="Each judge against this dataset's human majority.")


class RelevanceReport(BaseModel):
    """The stage-2 report: every judge against humans, then the pilot's rater agreement."""

    judges: list[JudgeAgreement]
    pilot: MultiRaterReport | None = Field(description="Blind labels only.")
    pilot_anchored: MultiRaterReport | None = Field(
        default=None, description="Labels given after seeing an LLM's label: reported apart, never a ceiling.")
    notes: list[str] = Field(default_factory=list)
    alt_test: list[dict[str, Any]] = Field(default_factory=list, description="Alternative-annotator test per judge "
                                           "and dataset (blind humans; the pilot's anchored humans apart).")
    estimates: list[dict[str, Any]] = Field(default_factory=list, description="Corrected human yes-rate per judge.")
    origin_comparison: list[OriginComparison] = Field(
        default_factory=list, description="Judges on both synthetic-persona and real-user datasets, side by side.")
    majority_rule: str = MAJORITY_RULE
    n_resamples: int
    seed: int
    ci_level: float = 0.95
    min_users_for_ci: int = MIN_USERS_FOR_CI

    def to_json_dict(self) -> dict[str, Any]:
        """Return the report as JSON-safe data (NaN becomes null)."""
        return json_safe_dict(self.model_dump())


def _humans(frame: pd.DataFrame, which: Reference, scale: DatasetScale) -> pd.DataFrame:
    """Individual human labels of one protocol on the dataset's scale, one per (item, annotator).

    The anchored three-way rating answers another question than the scale's and is never one of them.
    """
    mask = blind_human_mask(frame) if which == "blind" else anchored_human_mask(frame)
    rows = frame[mask & (frame["rater_kind"] == "human") & (frame["condition"] != SHOWN_LLM_RATING)]
    rows = rows.assign(label=on_scale(rows["label"], scale, strict=False))
    return one_vote_per_rater(rows[rows["label"].notna()])


def dataset_scale(labels: pd.DataFrame, dataset: str, scales: Mapping[str, DatasetScale] | None) -> DatasetScale:
    """The dataset's stored scale (:func:`personagap.datasets.dataset_records`), else its inferred one.

    Inferred as the reader infers it: nominal over :func:`~personagap.analysis.comparable.categories_for` of its
    labels.
    """
    if scales and dataset in scales:
        return scales[dataset]
    return DatasetScale(kind="nominal", categories=tuple(categories_for(labels[labels["dataset"] == dataset])))


def judge_metrics(scale: DatasetScale) -> tuple[str, ...]:
    """Registered figures of a stage-2 judge row: the scale's, plus selection figures on a yes/no scale."""
    return scale_metrics(scale) + (_YES_NO_METRICS if scale.categories == YES_NO else ())


def judge_agreements(labels: pd.DataFrame, dataset: str, *, n_resamples: int, seed: int,
                     which: Reference = "blind", scale: DatasetScale | None = None) -> list[JudgeAgreement]:
    """Compare every comparable judge of ``dataset`` with its human majority, over the dataset's scale.

    Args:
        labels: Output of :func:`personagap.store.load_labels` for stage 'relevance'.
        dataset: Dataset key.
        n_resamples: Bootstrap resamples.
        seed: Bootstrap seed.
        which: The blind reference (the default, what judges are scored against) or the anchored one.
        scale: The dataset's scale (:func:`personagap.datasets.dataset_records`); None: :func:`dataset_scale`.
    """
    frame = labels[labels["dataset"] == dataset]
    scale = scale or dataset_scale(labels, dataset, None)
    reference = reference_labels(frame, which)
    reference = on_scale(reference, scale, strict=False).dropna()
    if reference.empty:
        return []
    out = []
    judges = frame[comparable_judge_mask(frame)]
    for (rater, kind, condition), rows in judges.groupby(["rater", "rater_kind", "condition"], sort=True):
        failed = rows[rows["label"].isna()]
        parsed = rows[rows["label"].notna()].drop_duplicates("item_id")
        joined = parsed.merge(reference.rename("label_human"), left_on="item_id", right_index=True, how="inner")
        if joined.empty and failed.empty:
            continue
        # A judge whose every answer failed still gets a row: its failures are the finding.
        est = scale_estimates(joined["label_human"], joined["label"], joined["user_id"], scale,
                              judge_metrics(scale), n_resamples=n_resamples, seed=seed)
        reasons = Counter(_reason_kind(e) for e in failed["error"])
        out.append(JudgeAgreement(
            judge=judge_display(str(rater), str(condition)), dataset=dataset, rater_kind=str(kind),
            condition=str(condition), reference=which, n=len(joined),
            n_users=int(joined["user_id"].nunique()), failures=len(failed), failure_reasons=dict(reasons),
            unmatched=len(parsed) - len(joined),
            kappa=est["kappa"].value, kappa_ci=ci_list(est["kappa"]), undefined_resamples=est["kappa"].n_undefined,
            accuracy=est["accuracy"].value, scale=scale.kind, **_selection(est), **panel_values(est),
        ))
    return out


def _selection(est: Mapping[str, Estimate]) -> dict[str, Any]:
    # The yes/no figures where the row has them (judge_metrics adds them on a yes/no scale only).
    out: dict[str, Any] = {}
    for name in _YES_NO_METRICS:
        if name in est:
            out[name] = est[name].value
            if name not in ("human_yes_rate", "judge_yes_rate"):
                out[f"{name}_ci"] = ci_list(est[name])
    return out


def _reason_kind(error: str) -> str:
    # Errors read "kind: details"; the report groups by kind.
    return str(error).split(":", 1)[0].strip() or "unknown"


def multi_rater_report(labels: pd.DataFrame, dataset: str, *, n_resamples: int, seed: int,
                       which: Reference = "blind", scale: DatasetScale | None = None) -> MultiRaterReport | None:
    """Within-human, within-judge-kind and human-judge agreement on a dataset with per-annotator labels.

    Args:
        labels: Stage-2 labels (:func:`personagap.store.load_labels`).
        dataset: Dataset key.
        n_resamples: Bootstrap resamples.
        seed: Bootstrap seed.
        which: ``blind`` human labels (the agreement that may serve as a ceiling) or ``anchored`` ones.
        scale: The dataset's scale; None: :func:`dataset_scale`.

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
                                n_resamples=n_resamples, seed=seed,
                                metric="weighted_kappa" if scale.ordinal else "kappa", levels=ordinal)

    human_long = long[long["rater"].isin(humans)]
    wide = human_long.pivot(index="item_id", columns="rater", values="label").astype(float)
    cluster = human_long.drop_duplicates("item_id").set_index("item_id")["cluster"].reindex(wide.index)
    level: Level = "ordinal" if scale.ordinal else "nominal"
    alpha = krippendorff_alpha_ci(wide.to_numpy(dtype=float).T, cluster.to_numpy(), level,
                                  n_resamples=n_resamples, seed=seed)
    n_rated = wide.notna().sum(axis=1)
    multi = n_rated[n_rated >= 2]
    modal = int(multi.mode().max()) if not multi.empty else 0
    keep = n_rated == modal
    counts = np.column_stack([(wide[keep] == v).sum(axis=1) for v in range(len(scale.categories))])
    fleiss = (fleiss_kappa_ci(counts, cluster[keep].to_numpy(), n_resamples=n_resamples, seed=seed)
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
        judges=judge_agreements(labels, dataset, n_resamples=n_resamples, seed=seed, which=which, scale=scale),
    )


def relevance_report(labels: pd.DataFrame, *, pilot_dataset: str = "recenter-pilot",
                     n_resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED,
                     origins: Mapping[str, str] | None = None,
                     scales: Mapping[str, DatasetScale] | None = None) -> RelevanceReport:
    """Build the stage-2 report from stored relevance labels.

    Args:
        labels: Output of :func:`personagap.store.load_labels` with ``stage='relevance'``.
        pilot_dataset: The dataset with per-annotator labels for the agreement table.
        n_resamples: Bootstrap resamples for every CI.
        seed: Bootstrap seed (the same seed gives the same CIs).
        origins: Dataset -> ``real`` or ``synthetic`` (:func:`personagap.labels_api.dataset_origins`); datasets
            missing from it are real.
        scales: Dataset -> its scale (:func:`personagap.datasets.dataset_records`); every judge of a dataset is
            scored over it. Datasets missing from it: :func:`dataset_scale`.

    Returns:
        The report; ``judges`` covers every dataset but the pilot.
    """
    datasets = sorted(set(labels["dataset"])) if not labels.empty else []
    scale_of = {ds: dataset_scale(labels, ds, scales) for ds in datasets}
    judges = [j for ds in datasets if ds != pilot_dataset
              for j in judge_agreements(labels, ds, n_resamples=n_resamples, seed=seed, scale=scale_of[ds])]
    pilot, anchored, notes = (_pilot_reports(labels, pilot_dataset, scale=scale_of[pilot_dataset],
                                             n_resamples=n_resamples, seed=seed)
                              if pilot_dataset in datasets else (None, None, []))
    # Yes-rates are estimated on yes/no scales only; the alt-test scores ordinal datasets by negative RMSE.
    alt_test, estimates = report_extras(labels, datasets, positive="yes",
                                        anchored=[pilot_dataset] if pilot_dataset in datasets else [],
                                        rate_datasets=[ds for ds in datasets if scale_of[ds].categories == YES_NO],
                                        n_resamples=n_resamples, seed=seed, scales=scale_of)
    return _report(judges, pilot, anchored, notes, alt_test, estimates, n_resamples=n_resamples, seed=seed,
                   origins=origins)


def _pilot_reports(labels: pd.DataFrame, pilot_dataset: str, *, scale: DatasetScale, n_resamples: int,
                   seed: int) -> tuple[MultiRaterReport | None, MultiRaterReport | None, list[str]]:
    """The pilot's blind and anchored agreement among raters, and the notes saying what is missing or apart."""
    kw: dict[str, Any] = {"n_resamples": n_resamples, "seed": seed, "scale": scale}
    pilot = multi_rater_report(labels, pilot_dataset, **kw)
    anchored = multi_rater_report(labels, pilot_dataset, which="anchored", **kw)
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


def _report(judges: list[JudgeAgreement], pilot: MultiRaterReport | None, anchored: MultiRaterReport | None,
            notes: list[str], alt_test: list[dict[str, Any]], estimates: list[dict[str, Any]], *, n_resamples: int,
            seed: int, origins: Mapping[str, str] | None) -> RelevanceReport:
    report = RelevanceReport(judges=judges, pilot=pilot, pilot_anchored=anchored, notes=notes, alt_test=alt_test,
                             estimates=estimates, n_resamples=n_resamples, seed=seed)
    report.origin_comparison = tag_and_compare(
        report, origins or {}, lambda: ((j.judge, j) for j in [*report.judges, *(pilot.judges if pilot else [])]))
    return report


def judge_agreements_from_counts(counts: pd.DataFrame, reference: pd.DataFrame, failures: pd.DataFrame,
                                 dataset: str, *, n_resamples: int, seed: int, scale: DatasetScale,
                                 which: Reference = "blind") -> list[JudgeAgreement]:
    """:func:`judge_agreements` from the store's counts (:mod:`personagap.store.aggregates`): the same rows.

    Args:
        counts: The judge counts of :func:`~personagap.store.aggregates.label_counts` (``which`` reference).
        reference: The reference counts of the same call.
        failures: :func:`~personagap.store.aggregates.judge_failures` rows of the stage.
        dataset: Dataset key.
        n_resamples: Bootstrap resamples.
        seed: Bootstrap seed.
        scale: The dataset's scale.
        which: The reference the counts were built with (recorded on each row).
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
        est = agreement_estimates(tables, judge_metrics(scale), shared_resample_weights(n_users, n_resamples, seed),
                                  levels=scale.levels() if scale.ordinal else None)
        reasons: Counter[str] = Counter()
        for error, n in zip(fails["error"], fails["n"], strict=True):
            reasons[_reason_kind(error)] += int(n)
        n_joined = int(joined["n"].sum())
        out.append(JudgeAgreement(
            judge=judge_display(rater, condition), dataset=dataset, rater_kind=kind, condition=condition,
            reference=which, n=n_joined, n_users=n_users, failures=int(fails["n"].sum()),
            failure_reasons=dict(reasons), unmatched=int(rows["n"].sum()) - n_joined,
            kappa=est["kappa"].value, kappa_ci=ci_list(est["kappa"]), undefined_resamples=est["kappa"].n_undefined,
            accuracy=est["accuracy"].value, scale=scale.kind, **_selection(est), **panel_values(est),
        ))
    return out


def relevance_report_from_store(con: duckdb.DuckDBPyConnection, *, pilot_dataset: str = "recenter-pilot",
                                n_resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED,
                                origins: Mapping[str, str] | None = None,
                                scales: Mapping[str, DatasetScale]) -> RelevanceReport:
    """:func:`relevance_report` from an open store, computed from DuckDB's aggregates (issue 20).

    Judge rows and corrected estimates come from per-(dataset, judge, condition, user) counts; the
    alternative-annotator test reads only items several humans labelled; the pilot's agreement among raters
    (per item, per annotator) reads the pilot dataset's labels alone. Memory does not grow with the labels of
    the other datasets.

    Args:
        con: An open (read-only is enough) store connection.
        pilot_dataset: The dataset with per-annotator labels for the agreement table.
        n_resamples: Bootstrap resamples for every CI.
        seed: Bootstrap seed.
        origins: Dataset -> ``real`` or ``synthetic``; datasets missing from it are real.
        scales: Dataset -> its scale (:func:`personagap.datasets.dataset_records`); every dataset with labels.
    """
    counts: dict[Reference, tuple[pd.DataFrame, pd.DataFrame]] = {
        "blind": label_counts(con, STAGE, "blind")}
    failures = judge_failures(con, STAGE)
    # A dataset without judge labels or a reference gives no row; the pilot's agreement among humans needs neither.
    datasets = sorted({*counts["blind"][0]["dataset"], *counts["blind"][1]["dataset"], *failures["dataset"],
                       *([pilot_dataset] if has_labels(con, STAGE, pilot_dataset) else [])})
    judges = [j for ds in datasets if ds != pilot_dataset
              for j in judge_agreements_from_counts(*counts["blind"], failures, ds, n_resamples=n_resamples,
                                                    seed=seed, scale=scales[ds])]
    pilot = anchored = None
    notes: list[str] = []
    if pilot_dataset in datasets:
        counts["anchored"] = label_counts(con, STAGE, "anchored")
        pilot, anchored, notes = _pilot_reports(load_labels(con, stage=STAGE, dataset=pilot_dataset), pilot_dataset,
                                                scale=scales[pilot_dataset], n_resamples=n_resamples, seed=seed)
    alt_test, estimates = store_extras(con, STAGE, datasets, positive="yes", counts=counts,
                                       anchored=[pilot_dataset] if pilot_dataset in datasets else [],
                                       rate_datasets=[ds for ds in datasets if scales[ds].categories == YES_NO],
                                       n_resamples=n_resamples, seed=seed, scales=scales)
    return _report(judges, pilot, anchored, notes, alt_test, estimates, n_resamples=n_resamples, seed=seed,
                   origins=origins)


def report_relevance(db: str | Path, *, n_resamples: int = DEFAULT_RESAMPLES,
                     seed: int = DEFAULT_SEED) -> RelevanceReport:
    """Build the stage-2 report from a database (read-only), each dataset tagged real or synthetic.

    From DuckDB's aggregates (:func:`relevance_report_from_store`): the same figures as :func:`relevance_report`
    of every stored label, without loading them.
    """
    from personagap.datasets import dataset_records
    from personagap.labels_api import dataset_origins
    from personagap.store import opened

    with opened(db, read_only=True) as con:
        origins = dataset_origins(con)
        scales = {ds: r.scale for (stage, ds), r in dataset_records(con).items() if stage == STAGE}
        return relevance_report_from_store(con, n_resamples=n_resamples, seed=seed, origins=origins, scales=scales)


def _missing(v: float | None) -> bool:
    return v is None or math.isnan(v)


def _fmt(v: float | None, digits: int = 3) -> str:
    return "  n/a" if v is None or math.isnan(v) else f"{v:.{digits}f}"


def _fmt_ci(ci: list[float]) -> str:
    return f"[{_fmt(ci[0], 2)}, {_fmt(ci[1], 2)}]"


def _kinds_text(raters: dict[str, str]) -> str:
    counts = Counter(raters.values())
    names = {"human": "humans", "llm": "LLMs", "trained": "trained models", "baseline": "baselines"}
    order = ["human", "llm", "trained", "baseline", *sorted(set(counts) - set(names))]
    return ", ".join(f"{counts[k]} {names.get(k, k)}" for k in order if counts.get(k))


def _multi_rater_lines(p: MultiRaterReport, n_resamples: int) -> list[str]:
    title = "blind labels only" if p.protocol == "blind" else p.protocol
    lines = [f"Pilot agreement ({where(p.dataset, p.origin)}; {title}; {_kinds_text(p.raters)}; "
             f"{p.n_users} users): "
             "mean pairwise Cohen's kappa", ""]
    lines.append(f"{'pairs':<18}{'mean kappa':>11}  {'95% CI':<30}{'rater pairs':>11}")
    for g in p.groups:
        ci = ci_text(ci=g.ci, n_users=g.n_users, undefined=g.undefined_resamples, n_resamples=n_resamples)
        lines.append(f"{g.pair_type:<18}{_fmt(g.mean_kappa):>11}  {ci:<30}{g.n_pairs:>11}")
    lines += ["", f"Humans, Krippendorff's alpha ({p.alpha_level}): {_fmt(p.human_alpha)} "
                  f"{ci_text(ci=p.human_alpha_ci, n_users=p.n_users)}",
              f"Humans, Fleiss' kappa on {p.fleiss_items} items rated by {p.fleiss_raters_per_item} humans: "
              f"{_fmt(p.human_fleiss)} {ci_text(ci=p.human_fleiss_ci, n_users=p.fleiss_users)}"]
    if p.judges:
        which = "blind" if p.protocol == "blind" else "anchored"
        lines += ["", f"Pilot judges vs the pilot {which} human majority:", ""]
        lines += _judge_table(p.judges, n_resamples)
    return lines


def render_relevance(report: RelevanceReport) -> str:
    """Render the report as plain-text tables for the terminal."""
    lines = [f"Stage 2 — relevance selection: judges vs the blind human majority "
             f"(95% CIs: user-clustered bootstrap, {report.n_resamples} resamples, seed {report.seed}; "
             f"no CI below {report.min_users_for_ci} users)", f"Majority rule: {report.majority_rule}.", ""]
    lines += _judge_table(report.judges, report.n_resamples)
    if report.pilot is not None:
        lines += [""] + _multi_rater_lines(report.pilot, report.n_resamples)
    if report.pilot_anchored is not None:
        lines += ["", "Not blind — not a ceiling:"] + _multi_rater_lines(report.pilot_anchored, report.n_resamples)
    rows = [*report.judges, *(report.pilot.judges if report.pilot else [])]
    if rows:
        lines += ["", "Prevalence-robust panel (same items and resampled users as kappa):"]
        lines += panel_lines((f"{j.judge} ({where(j.dataset, j.origin)})", j) for j in rows)
    lines += origin_lines(report.origin_comparison)
    lines += extras_lines(report.alt_test, report.estimates)
    for note in report.notes:
        lines += ["", f"Note: {note}"]
    return "\n".join(lines)


def _judge_table(judges: list[JudgeAgreement], n_resamples: int) -> list[str]:
    if not judges:
        return ["(no judge shares items with a human majority; import a release or run `personagap judge`)"]
    head = (f"{'judge':<46}{'kind':<9}{'n':>6}{'users':>6}{'fail':>6}{'human yes':>10}{'judge yes':>10}"
            f"{'over-sel':>9}{'kappa':>7}  {'95% CI':<16}{'prec':>6}{'recall':>7}{'F1':>6}")
    rows = [head, "-" * len(head)]
    for j in judges:
        ci = ci_text(ci=j.kappa_ci, n_users=j.n_users) if j.n_users < MIN_USERS_FOR_CI else _fmt_ci(j.kappa_ci)
        name = j.judge if j.origin == "real" else f"{j.judge} ({j.origin})"
        rows.append(
            f"{name[:45]:<46}{j.rater_kind[:8]:<9}{j.n:>6}{j.n_users:>6}{j.failures:>6}"
            f"{_fmt(j.human_yes_rate):>10}{_fmt(j.judge_yes_rate):>10}"
            f"{_fmt(j.over_selection, 2) + ('' if _missing(j.over_selection) else 'x'):>9}"
            f"{_fmt(j.kappa):>7}  {ci:<16}"
            f"{_fmt(j.precision, 2):>6}{_fmt(j.recall, 2):>7}{_fmt(j.f1, 2):>6}"
        )
        if j.weighted_kappa is not None:
            rows.append(f"{'':<4}{j.scale} scale: quadratic-weighted kappa {_fmt(j.weighted_kappa)} "
                        f"{_fmt_ci(j.weighted_kappa_ci or [math.nan, math.nan])}, Spearman {_fmt(j.spearman)}, "
                        f"Krippendorff's alpha (ordinal) {_fmt(j.alpha)}, mean absolute difference "
                        f"{_fmt(j.mean_abs_diff, 2)}")
        if j.undefined_resamples:
            rows.append(f"{'':<4}kappa undefined in {j.undefined_resamples}/{n_resamples} resamples "
                        "(left out of its CI)")
        if j.failure_reasons:
            rows.append(f"{'':<4}failures by reason: " + ", ".join(f"{k} {v}" for k, v in j.failure_reasons.items()))
    return rows
