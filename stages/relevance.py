"""Stage 2 (relevance selection): judges vs the human majority, and pilot agreement among raters."""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import numpy as np
import pandas as pd
from pydantic import BaseModel, Field

from personagap.analysis.agreement import (
    DEFAULT_RESAMPLES,
    DEFAULT_SEED,
    Estimate,
    agreement,
    ci_list,
    fleiss_kappa_ci,
    json_safe,
    json_safe_dict,
    krippendorff_alpha_ci,
)
from personagap.analysis.pairwise import pairwise_agreement

REFERENCE = "human_majority"
JUDGE_KINDS = ("llm", "trained", "baseline")
_BINARY = {"no": 0, "yes": 1}
_METRICS = ("kappa", "over_selection", "human_yes_rate", "judge_yes_rate", "precision", "recall", "f1", "accuracy")


class JudgeAgreement(BaseModel):
    """One judge's relevance labels compared with the human majority on the same items."""

    judge: str
    dataset: str
    rater_kind: str
    n: int = Field(description="Items both the judge (parsed) and the human majority labelled.")
    n_users: int
    failures: int = Field(description="Items the judge answered but whose answer could not be parsed.")
    failure_reasons: dict[str, int]
    unmatched: int = Field(description="Items the judge labelled that have no human label.")
    kappa: float
    kappa_ci: list[float]
    over_selection: float
    over_selection_ci: list[float]
    human_yes_rate: float
    judge_yes_rate: float
    precision: float
    precision_ci: list[float]
    recall: float
    recall_ci: list[float]
    f1: float
    f1_ci: list[float]
    accuracy: float


class GroupRow(BaseModel):
    """Mean pairwise Cohen's kappa within or across rater groups."""

    pair_type: str
    mean_kappa: float
    ci: list[float]
    n_pairs: int


class MultiRaterReport(BaseModel):
    """Agreement among individual raters on a dataset where several humans labelled the same items."""

    dataset: str
    raters: dict[str, str] = Field(description="Rater -> group ('human' or 'llm').")
    groups: list[GroupRow]
    human_alpha: float = Field(description="Krippendorff's alpha (nominal) among the human annotators.")
    human_alpha_ci: list[float]
    human_fleiss: float = Field(description="Fleiss' kappa on the items rated by the most common number of humans.")
    human_fleiss_ci: list[float]
    fleiss_items: int
    fleiss_raters_per_item: int
    matrix: dict[str, dict[str, float | None]]
    overlap: dict[str, dict[str, int]]
    judges: list[JudgeAgreement] = Field(description="Each LLM against this dataset's human majority.")


class RelevanceReport(BaseModel):
    """The stage-2 report: every judge against humans, then the pilot's rater agreement."""

    judges: list[JudgeAgreement]
    pilot: MultiRaterReport | None
    n_resamples: int
    seed: int
    ci_level: float = 0.95

    def to_json_dict(self) -> dict[str, Any]:
        """Return the report as JSON-safe data (NaN becomes null)."""
        return json_safe_dict(self.model_dump())




def judge_agreements(labels: pd.DataFrame, dataset: str, *, n_resamples: int, seed: int) -> list[JudgeAgreement]:
    """Compare every judge of ``dataset`` with its human majority (condition '' only).

    Args:
        labels: Output of :func:`personagap.store.load_labels` for stage 'relevance'.
        dataset: Dataset key.
        n_resamples: Bootstrap resamples.
        seed: Bootstrap seed.
    """
    frame = labels[(labels["dataset"] == dataset) & (labels["condition"] == "")]
    reference = frame[(frame["rater"] == REFERENCE) & frame["label"].notna()].set_index("item_id")
    if reference.empty:
        return []
    out = []
    judges = frame[frame["rater_kind"].isin(JUDGE_KINDS)]
    for (rater, kind), rows in judges.groupby(["rater", "rater_kind"], sort=True):
        failed = rows[rows["label"].isna()]
        parsed = rows[rows["label"].notna()]
        joined = parsed.merge(reference[["label"]].rename(columns={"label": "label_human"}), left_on="item_id",
                              right_index=True, how="inner")
        if joined.empty and failed.empty:
            continue
        # A judge whose every answer failed still gets a row: its failures are the finding.
        est = agreement(joined["label_human"].map(_BINARY).to_numpy(), joined["label"].map(_BINARY).to_numpy(),
                        joined["user_id"].to_numpy(), metrics=_METRICS, n_resamples=n_resamples, seed=seed)
        reasons = Counter(_reason_kind(e) for e in failed["error"])
        out.append(JudgeAgreement(
            judge=str(rater), dataset=dataset, rater_kind=str(kind), n=len(joined),
            n_users=int(joined["user_id"].nunique()), failures=len(failed), failure_reasons=dict(reasons),
            unmatched=len(parsed) - len(joined),
            kappa=est["kappa"].value, kappa_ci=ci_list(est["kappa"]),
            over_selection=est["over_selection"].value, over_selection_ci=ci_list(est["over_selection"]),
            human_yes_rate=est["human_yes_rate"].value, judge_yes_rate=est["judge_yes_rate"].value,
            precision=est["precision"].value, precision_ci=ci_list(est["precision"]),
            recall=est["recall"].value, recall_ci=ci_list(est["recall"]),
            f1=est["f1"].value, f1_ci=ci_list(est["f1"]), accuracy=est["accuracy"].value,
        ))
    return out


def _reason_kind(error: str) -> str:
    # Errors read "kind: details"; the report groups by kind.
    return str(error).split(":", 1)[0].strip() or "unknown"


def multi_rater_report(labels: pd.DataFrame, dataset: str, *, n_resamples: int, seed: int) -> MultiRaterReport | None:
    """Within-human, within-LLM and human-LLM agreement on a dataset with per-annotator labels."""
    frame = labels[(labels["dataset"] == dataset) & (labels["condition"] == "") & labels["label"].notna()]
    humans = sorted(frame.loc[frame["rater_kind"] == "human", "rater"].unique())
    if len(humans) < 2:
        return None
    llms = sorted(frame.loc[frame["rater_kind"].isin(JUDGE_KINDS), "rater"].unique())
    groups = {r: "human" for r in humans} | {r: "llm" for r in llms}
    long = frame[frame["rater"].isin(list(groups))].rename(columns={"user_id": "cluster"})
    result = pairwise_agreement(long[["item_id", "rater", "label", "cluster"]], groups,
                                n_resamples=n_resamples, seed=seed)

    human_rows = long[long["rater"].isin(humans)]
    wide = human_rows.pivot(index="item_id", columns="rater", values="label").map(
        lambda v: _BINARY.get(v, np.nan) if isinstance(v, str) else np.nan)
    cluster = human_rows.drop_duplicates("item_id").set_index("item_id")["cluster"].reindex(wide.index)
    alpha = krippendorff_alpha_ci(wide.to_numpy(dtype=float).T, cluster.to_numpy(), "nominal",
                                  n_resamples=n_resamples, seed=seed)
    n_rated = wide.notna().sum(axis=1)
    multi = n_rated[n_rated >= 2]
    modal = int(multi.mode().max()) if not multi.empty else 0
    keep = n_rated == modal
    counts = np.column_stack([(wide[keep] == v).sum(axis=1) for v in (0, 1)])
    fleiss = (fleiss_kappa_ci(counts, cluster[keep].to_numpy(), n_resamples=n_resamples, seed=seed)
              if modal >= 2 else Estimate(float("nan"), (float("nan"), float("nan"))))

    def as_dict(df: pd.DataFrame) -> dict[str, dict[str, Any]]:
        return {str(r): {str(c): json_safe(df.loc[r, c].item()) for c in df.columns} for r in df.index}

    return MultiRaterReport(
        dataset=dataset, raters=groups,
        groups=[GroupRow(pair_type=k, mean_kappa=g.mean_kappa.value, ci=ci_list(g.mean_kappa), n_pairs=g.n_pairs)
                for k, g in result.groups.items()],
        human_alpha=alpha.value, human_alpha_ci=ci_list(alpha), human_fleiss=fleiss.value,
        human_fleiss_ci=ci_list(fleiss), fleiss_items=int(keep.sum()) if modal >= 2 else 0,
        fleiss_raters_per_item=modal,
        matrix=as_dict(result.matrix), overlap=as_dict(result.overlap),
        judges=judge_agreements(labels, dataset, n_resamples=n_resamples, seed=seed),
    )


def relevance_report(labels: pd.DataFrame, *, pilot_dataset: str = "recenter-pilot",
                     n_resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED) -> RelevanceReport:
    """Build the stage-2 report from stored relevance labels.

    Args:
        labels: Output of :func:`personagap.store.load_labels` with ``stage='relevance'``.
        pilot_dataset: The dataset with per-annotator labels for the agreement table.
        n_resamples: Bootstrap resamples for every CI.
        seed: Bootstrap seed (the same seed gives the same CIs).

    Returns:
        The report; ``judges`` covers every dataset but the pilot.
    """
    datasets = sorted(set(labels["dataset"])) if not labels.empty else []
    judges = [j for ds in datasets if ds != pilot_dataset
              for j in judge_agreements(labels, ds, n_resamples=n_resamples, seed=seed)]
    pilot = (multi_rater_report(labels, pilot_dataset, n_resamples=n_resamples, seed=seed)
             if pilot_dataset in datasets else None)
    return RelevanceReport(judges=judges, pilot=pilot, n_resamples=n_resamples, seed=seed)


def _fmt(v: float, digits: int = 3) -> str:
    return "  n/a" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.{digits}f}"


def _fmt_ci(ci: list[float]) -> str:
    return f"[{_fmt(ci[0], 2)}, {_fmt(ci[1], 2)}]"


def render_relevance(report: RelevanceReport) -> str:
    """Render the report as plain-text tables for the terminal."""
    lines = [f"Stage 2 — relevance selection: judges vs the human majority "
             f"(95% CIs: user-clustered bootstrap, {report.n_resamples} resamples, seed {report.seed})", ""]
    lines += _judge_table(report.judges)
    if report.pilot is not None:
        p = report.pilot
        lines += ["", f"Pilot agreement ({p.dataset}; {sum(g == 'human' for g in p.raters.values())} humans, "
                      f"{sum(g == 'llm' for g in p.raters.values())} LLMs): mean pairwise Cohen's kappa", ""]
        lines.append(f"{'pairs':<14}{'mean kappa':>11}  {'95% CI':<16}{'rater pairs':>11}")
        for g in p.groups:
            lines.append(f"{g.pair_type:<14}{_fmt(g.mean_kappa):>11}  {_fmt_ci(g.ci):<16}{g.n_pairs:>11}")
        lines += ["", f"Humans, Krippendorff's alpha (nominal): {_fmt(p.human_alpha)} {_fmt_ci(p.human_alpha_ci)}",
                  f"Humans, Fleiss' kappa on {p.fleiss_items} items rated by {p.fleiss_raters_per_item} humans: "
                  f"{_fmt(p.human_fleiss)} {_fmt_ci(p.human_fleiss_ci)}"]
        if p.judges:
            lines += ["", "Pilot LLMs vs the pilot human majority:", ""]
            lines += _judge_table(p.judges)
    return "\n".join(lines)


def _judge_table(judges: list[JudgeAgreement]) -> list[str]:
    if not judges:
        return ["(no judge shares items with a human majority; import a release or run `personagap judge`)"]
    head = (f"{'judge':<46}{'n':>6}{'fail':>6}{'human yes':>10}{'judge yes':>10}{'over-sel':>9}{'kappa':>7}  "
            f"{'95% CI':<14}{'prec':>6}{'recall':>7}{'F1':>6}")
    rows = [head, "-" * len(head)]
    for j in judges:
        rows.append(
            f"{j.judge[:45]:<46}{j.n:>6}{j.failures:>6}{_fmt(j.human_yes_rate):>10}{_fmt(j.judge_yes_rate):>10}"
            f"{_fmt(j.over_selection, 2) + ('' if math.isnan(j.over_selection) else 'x'):>9}"
            f"{_fmt(j.kappa):>7}  {_fmt_ci(j.kappa_ci):<14}"
            f"{_fmt(j.precision, 2):>6}{_fmt(j.recall, 2):>7}{_fmt(j.f1, 2):>6}"
        )
        if j.failure_reasons:
            rows.append(f"{'':<4}failures by reason: " + ", ".join(f"{k} {v}" for k, v in j.failure_reasons.items()))
    return rows
