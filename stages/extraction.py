"""Stage 1 (attribute extraction): what extractors find, what humans and verifiers accept, how it meets gold.

The report (:func:`extraction_report`, pure) reads stored stage-1 items and labels (kinds in
:mod:`personagap.judges.extraction`) and answers:

* **Human-human agreement** on verdicts (ok / bad / unsure, nominal): Krippendorff's alpha,
  Fleiss' kappa and mean pairwise Cohen's kappa, with per-annotator verdict rates
  (the Re-Centering pilot; any dataset with two or more human raters).
* **Acceptance**: per extractor, the share of its attributes humans accept (``ok``: the
  acceptance precision) and mark ``bad`` (unsupported or broader than the evidence: the
  over-generalisation rate); the same for each LLM verifier; verifier-human kappa against the
  per-item human majority.
* **Gold matching** (LAPS, or imported gold): precision, recall and F1 overall and per
  category, per split, with the offline matcher (threshold stated) and any LLM matcher.

Every CI is a user-clustered bootstrap. The I/O entry points (:func:`import_laps`,
:func:`import_extraction`, :func:`report_extraction`, :func:`judge_extraction`) are what the
CLI calls; they are plain functions usable from Python.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
from pydantic import BaseModel, Field

from personagap.analysis.agreement import (
    DEFAULT_RESAMPLES,
    DEFAULT_SEED,
    MIN_USERS_FOR_CI,
    ci_list,
    ci_text,
    json_safe_dict,
)
from personagap.analysis.comparable import JUDGE_KINDS, MAJORITY_RULE, categories_for, roles
from personagap.analysis.diagnosis import declared_categories, stage_declared
from personagap.analysis.extraction import (
    OFFLINE_THRESHOLD,
    extracted_items,
    majority,
    match_unit,
    normalise_attribute,
    prf,
    rater_agreement,
    verdict_rates,
)
from personagap.analysis.origins import OriginComparison, OriginField, origin_lines, tag_and_compare, where
from personagap.analysis.panel import (
    PanelFields,
    extras_lines,
    panel_lines,
    panel_metrics,
    panel_values,
    report_extras,
    scale_estimates,
)
from personagap.records import DatasetScale
from personagap.store import ImportBatch, StoreError, gc_paused, load_labels, opened, write_batch

if TYPE_CHECKING:
    from personagap.human_data.extraction import ExtractionImport
    from personagap.human_data.laps import LapsImport
    from personagap.judges.runner import LMConfig, RunSummary

VERIFIER_KINDS = JUDGE_KINDS
ATTRIBUTE_KINDS = (None, "extracted")
PILOT_EXTRACTOR = "(not released)"
CALIBRATION_NOTE = ("offline matcher: containment of the gold value's content words in the attribute >= "
                    f"{OFFLINE_THRESHOLD:.3f}, chosen on the LAPS train split (Youden J; train TPR 0.851, FPR 0.053)")


# --------------------------------------------------------------------------- report records

class VerdictRow(OriginField):
    """Verdict rates of one rater group on one extractor's attributes."""

    dataset: str
    extractor: str
    rater: str = Field(description="'humans' (all human verdicts pooled), an annotator, or a verifier judge.")
    rater_kind: str
    n: int = Field(description="Parsed verdicts.")
    n_users: int
    failures: int = Field(default=0, description="Verifier answers that could not be parsed.")
    ok: float
    ok_ci: list[float]
    bad: float = Field(description="Over-generalisation rate: share marked unsupported or broader than the evidence.")
    bad_ci: list[float]
    unsure: float
    unsure_ci: list[float]


class HumanAgreement(OriginField):
    """Agreement among human verdicts on one dataset's attributes (three nominal categories)."""

    dataset: str
    annotators: int
    items: int = Field(description="Attributes with two or more human verdicts.")
    users: int
    alpha: float
    alpha_ci: list[float]
    fleiss: float
    fleiss_ci: list[float]
    fleiss_items: int
    fleiss_raters_per_item: int
    fleiss_users: int = Field(description="Users those items come from (one user: the CI cannot vary).")
    mean_pairwise_kappa: float
    mean_pairwise_kappa_ci: list[float]
    rater_pairs: int
    per_annotator: list[VerdictRow]


class VerifierAgreement(PanelFields, OriginField):
    """A verifier's verdicts against the per-item human majority (ties dropped)."""

    dataset: str
    verifier: str
    n: int
    n_users: int = 0
    kappa: float
    kappa_ci: list[float]
    undefined_resamples: int = Field(default=0, description="Resamples where kappa was undefined (not in its CI).")
    accuracy: float
    accuracy_ci: list[float]


class ExtractorRun(OriginField):
    """What an extractor produced on a dataset."""

    dataset: str
    extractor: str
    units_attempted: int
    units_complete: int = Field(description="Histories whose every chunk parsed (only these are scored).")
    chunk_failures: int
    failure_reasons: dict[str, int]
    attributes: int


class MatchRow(OriginField):
    """Extraction precision/recall/F1 against gold on one split and category."""

    dataset: str
    extractor: str
    matcher: str
    split: str
    category: str
    units: int
    users: int
    attributes: int
    gold: int
    precision: float
    precision_ci: list[float]
    recall: float
    recall_ci: list[float]
    f1: float
    f1_ci: list[float]


class GoldSummary(OriginField):
    """Gold preferences available on one dataset split."""

    dataset: str
    split: str
    users: int
    units: int
    sessions: int
    sessions_without_gold: int
    gold: int
    categories: int


class ExtractionReport(BaseModel):
    """The stage-1 report."""

    human_agreement: list[HumanAgreement]
    acceptance: list[VerdictRow]
    verifiers: list[VerifierAgreement]
    extractors: list[ExtractorRun]
    gold: list[GoldSummary]
    matching: list[MatchRow]
    threshold: float = OFFLINE_THRESHOLD
    matcher_note: str = CALIBRATION_NOTE
    n_resamples: int
    seed: int
    ci_level: float = 0.95
    majority_rule: str = MAJORITY_RULE
    min_users_for_ci: int = MIN_USERS_FOR_CI
    alt_test: list[dict[str, Any]] = Field(default_factory=list, description="Alternative-annotator test per "
                                           "verifier and dataset (blind human verdicts).")
    estimates: list[dict[str, Any]] = Field(default_factory=list, description="Corrected human 'ok' (acceptance) "
                                            "rate per verifier.")
    origin_comparison: list[OriginComparison] = Field(
        default_factory=list, description="Verifiers on both synthetic-persona and real-user datasets, side by side.")

    def to_json_dict(self) -> dict[str, Any]:
        """Return the report as JSON-safe data (NaN becomes null)."""
        return json_safe_dict(self.model_dump())




# --------------------------------------------------------------------------- building the report

def items_frame(rows: Sequence[dict[str, Any]] | pd.DataFrame) -> pd.DataFrame:
    """Normalise stage-1 items: parse ``payload`` and add ``kind`` and ``unit`` columns."""
    frame = pd.DataFrame(rows).copy() if not isinstance(rows, pd.DataFrame) else rows.copy()
    if frame.empty:
        return pd.DataFrame(columns=["item_id", "dataset", "user_id", "attribute", "position", "payload", "kind",
                                     "unit"])
    frame["payload"] = [p if isinstance(p, dict) else (json.loads(p) if isinstance(p, str) else {})
                        for p in frame["payload"]]
    frame["kind"] = [p.get("kind") for p in frame["payload"]]
    frame["unit"] = [p.get("unit", u) for p, u in zip(frame["payload"], frame["user_id"], strict=True)]
    return frame


def extraction_report(items: pd.DataFrame, labels: pd.DataFrame, *, n_resamples: int = DEFAULT_RESAMPLES,
                      seed: int = DEFAULT_SEED, origins: Mapping[str, str] | None = None,
                      declared: Mapping[str, list[str]] | None = None) -> ExtractionReport:
    """Build the stage-1 report from stored items and labels (pure).

    Args:
        items: Stage-1 items (columns item_id, dataset, user_id, attribute, position, payload),
            e.g. from :func:`load_items`; passed through :func:`items_frame`.
        labels: :func:`personagap.store.load_labels` with ``stage='extraction'``.
        n_resamples: Bootstrap resamples for every CI.
        seed: Bootstrap seed.
        origins: Dataset -> ``real`` or ``synthetic``; datasets missing from it are real.
        declared: Dataset -> its declared categories (part of the scale a verifier is scored over).
    """
    items = items_frame(items)
    kind_of = dict(zip(items["item_id"], items["kind"], strict=True))
    extractor_of = {i: p.get("extractor", PILOT_EXTRACTOR)
                    for i, p in zip(items["item_id"], items["payload"], strict=True)}
    if labels.empty:
        labels = pd.DataFrame(columns=["item_id", "rater", "rater_kind", "condition", "label", "error", "user_id",
                                       "dataset"])
    # Each dataset's scale from all its labels (comparable.categories_for), as diagnose and the panel take it.
    scales = {str(ds): categories_for(g, (declared or {}).get(str(ds))) for ds, g in labels.groupby("dataset")}
    # comparable.py's rule: blind humans and comparable judges (in-sample labels never), under the standard
    # protocol (anchored or other-question labels are not stage-1 verdicts).
    labels = labels[roles(labels).isin(["blind_human", "judge"]) & (labels["condition"].fillna("") == "")]
    labels = labels.assign(kind=labels["item_id"].map(kind_of))
    verdicts = labels[labels["kind"].isna() | (labels["kind"] == "extracted")]
    verdicts = verdicts.assign(extractor=verdicts["item_id"].map(extractor_of).fillna(PILOT_EXTRACTOR))
    kw = {"n_resamples": n_resamples, "seed": seed}
    verdict_sets = sorted(map(str, verdicts["dataset"].dropna().unique()))
    alt_test, estimates = report_extras(verdicts, verdict_sets, positive="ok", n_resamples=n_resamples, seed=seed,
                                        scales={ds: DatasetScale(kind="nominal", categories=tuple(scales[ds]))
                                                for ds in verdict_sets})
    report = ExtractionReport(alt_test=alt_test, estimates=estimates,
        human_agreement=_human_agreement(verdicts, **kw), acceptance=_acceptance(verdicts, **kw),
        verifiers=_verifiers(verdicts, scales, **kw), extractors=_extractor_runs(items, labels),
        gold=_gold_summary(items), matching=_matching(items, labels, **kw), n_resamples=n_resamples, seed=seed)
    report.origin_comparison = tag_and_compare(report, origins or {},
                                               lambda: ((v.verifier, v) for v in report.verifiers))
    return report


def _rates_row(dataset: str, extractor: str, rater: str, kind: str, rows: pd.DataFrame, failures: int,
               **kw: Any) -> VerdictRow:
    r = verdict_rates(rows["label"].tolist(), rows["user_id"].tolist(), **kw)
    return VerdictRow(dataset=dataset, extractor=extractor, rater=rater, rater_kind=kind, n=len(rows),
                      n_users=int(rows["user_id"].nunique()), failures=failures,
                      ok=r["ok"].value, ok_ci=ci_list(r["ok"]), bad=r["bad"].value, bad_ci=ci_list(r["bad"]),
                      unsure=r["unsure"].value, unsure_ci=ci_list(r["unsure"]))


def _human_agreement(verdicts: pd.DataFrame, **kw: Any) -> list[HumanAgreement]:
    out = []
    humans = verdicts[(verdicts["rater_kind"] == "human") & verdicts["label"].notna()]
    for dataset, rows in humans.groupby("dataset", sort=True):
        if rows["rater"].nunique() < 2:
            continue
        long = rows.rename(columns={"user_id": "cluster"})[["item_id", "rater", "label", "cluster"]]
        agr = rater_agreement(long, **kw)
        group = agr.pairwise.groups.get("human–human") if agr.pairwise is not None else None
        nan = float("nan")
        out.append(HumanAgreement(
            dataset=str(dataset), annotators=int(rows["rater"].nunique()), items=agr.n_items, users=agr.n_users,
            alpha=agr.alpha.value, alpha_ci=ci_list(agr.alpha), fleiss=agr.fleiss.value, fleiss_ci=ci_list(agr.fleiss),
            fleiss_items=agr.fleiss_items, fleiss_raters_per_item=agr.fleiss_raters_per_item,
            fleiss_users=agr.fleiss_users,
            mean_pairwise_kappa=group.mean_kappa.value if group else nan,
            mean_pairwise_kappa_ci=ci_list(group.mean_kappa) if group else [nan, nan],
            rater_pairs=group.n_pairs if group else 0,
            per_annotator=[_rates_row(str(dataset), "", str(r), "human", g, 0, **kw)
                           for r, g in rows.groupby("rater", sort=True)]))
    return out


def _acceptance(verdicts: pd.DataFrame, **kw: Any) -> list[VerdictRow]:
    out = []
    for (dataset, extractor), rows in verdicts.groupby(["dataset", "extractor"], sort=True):
        humans = rows[(rows["rater_kind"] == "human") & rows["label"].notna()]
        if not humans.empty:
            label = f"humans ({humans['rater'].nunique()})"
            out.append(_rates_row(str(dataset), str(extractor), label, "human", humans, 0, **kw))
        judges = rows[rows["rater_kind"].isin(VERIFIER_KINDS)]
        for (rater, kind), g in judges.groupby(["rater", "rater_kind"], sort=True):
            parsed = g[g["label"].notna()]
            out.append(_rates_row(str(dataset), str(extractor), str(rater), str(kind), parsed,
                                  int(g["label"].isna().sum()), **kw))
    return out


def _verifiers(verdicts: pd.DataFrame, scales: Mapping[str, list[str]], **kw: Any) -> list[VerifierAgreement]:
    from personagap.analysis.extraction import judge_vs_reference

    out = []
    for dataset, rows in verdicts.groupby("dataset", sort=True):
        humans = rows[(rows["rater_kind"] == "human") & rows["label"].notna()]
        reference = {i: m for i, g in humans.groupby("item_id") if (m := majority(g["label"])) is not None}
        if not reference:
            continue
        cluster_of = dict(zip(rows["item_id"], rows["user_id"], strict=False))
        judges = rows[rows["rater_kind"].isin(VERIFIER_KINDS) & rows["label"].notna()]
        for rater, g in judges.groupby("rater", sort=True):
            mine = dict(zip(g["item_id"], g["label"], strict=True))
            shared = set(mine) & set(reference)
            if shared:  # over the dataset's scale: a verifier that never says "unsure" still has K = 3
                ids = sorted(shared)
                est = scale_estimates(pd.Series([reference[i] for i in ids]), pd.Series([mine[i] for i in ids]),
                                      pd.Series([cluster_of[i] for i in ids]), scales[str(dataset)],
                                      ("kappa", "accuracy", *panel_metrics(False)), **kw)
            else:
                est = judge_vs_reference(mine, reference, cluster_of, extra=panel_metrics(False), **kw)
            out.append(VerifierAgreement(dataset=str(dataset), verifier=str(rater), n=len(shared),
                                         n_users=len({cluster_of[i] for i in shared}),
                                         kappa=est["kappa"].value, kappa_ci=ci_list(est["kappa"]),
                                         undefined_resamples=est["kappa"].n_undefined,
                                         accuracy=est["accuracy"].value, accuracy_ci=ci_list(est["accuracy"]),
                                         **panel_values(est)))
    return out


def complete_units(items: pd.DataFrame, labels: pd.DataFrame) -> dict[tuple[str, str], set[str]]:
    """(dataset, extractor) -> units whose every chunk (of one chunking) the extractor answered parseably."""
    chunks = items[items["kind"] == "chunk"]
    if chunks.empty:
        return {}
    size = {i: (d, u, int(p["max_chars"]))
            for i, d, u, p in zip(chunks["item_id"], chunks["dataset"], chunks["unit"], chunks["payload"], strict=True)}
    n_chunks = Counter(size.values())
    got: dict[tuple[str, str, str, int], list[bool]] = {}
    for iid, rater, label in zip(labels["item_id"], labels["rater"], labels["label"], strict=True):
        if iid in size:
            d, u, m = size[iid]
            got.setdefault((d, str(rater), u, m), []).append(label is not None and label == label)
    out: dict[tuple[str, str], set[str]] = {}
    for (d, rater, u, m), oks in got.items():
        if len(oks) == n_chunks[(d, u, m)] and all(oks):
            out.setdefault((d, rater), set()).add(u)
    return out


def _extractor_runs(items: pd.DataFrame, labels: pd.DataFrame) -> list[ExtractorRun]:
    chunks = items[items["kind"] == "chunk"]
    on_chunks = labels[labels["item_id"].isin(set(chunks["item_id"]))]
    if on_chunks.empty:
        return []
    unit_of = dict(zip(chunks["item_id"], chunks["unit"], strict=True))
    complete = complete_units(items, labels)
    extracted = items[items["kind"] == "extracted"]
    out = []
    for (dataset, rater), g in on_chunks.groupby(["dataset", "rater"], sort=True):
        failed = g[g["label"].isna()]
        done = complete.get((str(dataset), str(rater)), set())
        n_attr = int(((extracted["dataset"] == dataset)
                      & extracted["payload"].map(lambda p, r=rater: p.get("extractor") == r)
                      & extracted["unit"].isin(done)).sum())
        out.append(ExtractorRun(dataset=str(dataset), extractor=str(rater),
                                units_attempted=len({unit_of[i] for i in g["item_id"]}), units_complete=len(done),
                                chunk_failures=len(failed),
                                failure_reasons=dict(Counter(str(e).split(":", 1)[0] for e in failed["error"])),
                                attributes=n_attr))
    return out


def _gold_summary(items: pd.DataFrame) -> list[GoldSummary]:
    gold = items[items["kind"] == "gold"]
    convs = items[items["kind"] == "conversation"]
    if gold.empty:
        return []

    def split(f: pd.DataFrame) -> pd.Series:
        return f["payload"].map(lambda p: p.get("split") or "-")

    gold = gold.assign(split=split(gold), category=gold["payload"].map(lambda p: p["category"]))
    convs = convs.assign(split=split(convs))
    out = []
    for (dataset, sp), g in gold.groupby(["dataset", "split"], sort=True):
        c = convs[(convs["dataset"] == dataset) & (convs["split"] == sp)]
        with_gold = {(u, p.get("session")) for u, p in zip(g["unit"], g["payload"], strict=True)}
        sessions = {(u, p.get("session")) for u, p in zip(c["unit"], c["payload"], strict=True)} | with_gold
        out.append(GoldSummary(dataset=str(dataset), split=str(sp), users=int(g["user_id"].nunique()),
                               units=int(g["unit"].nunique()), sessions=len(sessions),
                               sessions_without_gold=len(sessions - with_gold), gold=len(g),
                               categories=int(g["category"].nunique())))
    return out


def unit_gold(gold: pd.DataFrame) -> pd.DataFrame:
    """One unit's gold preferences, deduplicated by (category, normalised value); the first item id is kept."""
    key = [(c, normalise_attribute(v)) for c, v in zip(gold["category"], gold["value"], strict=True)]
    return gold.assign(_key=key).drop_duplicates("_key").drop(columns="_key")


def _matching(items: pd.DataFrame, labels: pd.DataFrame, **kw: Any) -> list[MatchRow]:
    gold = items[items["kind"] == "gold"]
    extracted = items[items["kind"] == "extracted"]
    if gold.empty or extracted.empty:
        return []
    gold = gold.assign(category=gold["payload"].map(lambda p: p["category"]),
                       value=gold["payload"].map(lambda p: p["value"]),
                       split=gold["payload"].map(lambda p: p.get("split") or "-"))
    gold_by_unit = {k: unit_gold(g) for k, g in gold.groupby(["dataset", "unit"], sort=True)}
    extracted = extracted.assign(extractor=extracted["payload"].map(lambda p: p.get("extractor")))
    complete = complete_units(items, labels)
    matches = items[items["kind"] == "match"]
    pair_of = {i: (p["extracted"], p["gold"]) for i, p in zip(matches["item_id"], matches["payload"], strict=True)}
    llm = labels[labels["item_id"].isin(set(pair_of)) & labels["label"].notna()]
    llm_verdicts: dict[str, dict[tuple[str, str], bool]] = {}
    for rater, g in llm.groupby("rater", sort=True):
        llm_verdicts[str(rater)] = {pair_of[i]: v == "same" for i, v in zip(g["item_id"], g["label"], strict=True)}

    out: list[MatchRow] = []
    for (dataset, extractor), attrs in extracted.groupby(["dataset", "extractor"], sort=True):
        units = sorted(u for u in complete.get((str(dataset), str(extractor)), set())
                       if (dataset, u) in gold_by_unit)
        by_unit = {u: a for u, a in attrs.groupby("unit")}
        matchers: list[tuple[str, dict[tuple[str, str], bool] | None]] = [(f"offline@{OFFLINE_THRESHOLD:.3f}", None)]
        matchers += sorted(llm_verdicts.items())
        for matcher, verdicts in matchers:
            rows = []  # per unit and category: (split, user, category, tp_attr, n_attr, tp_gold, n_gold)
            for u in units:
                a = by_unit.get(u, extracted.iloc[0:0])
                g = gold_by_unit[(dataset, u)]
                matrix = None
                if verdicts is not None:
                    pairs = [(ai, gi) for ai in a["item_id"] for gi in g["item_id"]]
                    if not all(p in verdicts for p in pairs):
                        continue  # this matcher has not judged every pair of the unit
                    matrix = np.array([verdicts[p] for p in pairs], dtype=bool)
                a_match, nearest, g_match = match_unit(a["attribute"].tolist(), g["value"].tolist(), llm=matrix)
                cats = g["category"].to_numpy()
                split, user = str(g["split"].iloc[0]), str(g["user_id"].iloc[0])
                a_cat = cats[nearest] if len(cats) else np.array([], dtype=object)
                rows.append((split, user, "all", int(a_match.sum()), len(a), int(g_match.sum()), len(g), u))
                for c in sorted(set(cats)):
                    in_a, in_g = a_cat == c, cats == c
                    rows.append((split, user, str(c), int(a_match[in_a].sum()), int(in_a.sum()),
                                 int(g_match[in_g].sum()), int(in_g.sum()), u))
            frame = pd.DataFrame(rows, columns=["split", "user", "category", "tpa", "na", "tpg", "ng", "unit"])
            for (sp, cat), f in frame.groupby(["split", "category"], sort=True):
                est = prf(f["tpa"], f["na"], f["tpg"], f["ng"], f["user"], **kw)
                out.append(MatchRow(dataset=str(dataset), extractor=str(extractor), matcher=matcher, split=str(sp),
                                    category=str(cat), units=int(f["unit"].nunique()), users=est.n_users,
                                    attributes=est.n_attributes, gold=est.n_gold,
                                    precision=est.precision.value, precision_ci=ci_list(est.precision),
                                    recall=est.recall.value, recall_ci=ci_list(est.recall),
                                    f1=est.f1.value, f1_ci=ci_list(est.f1)))
    out.sort(key=lambda r: (r.dataset, r.extractor, r.matcher, r.split, r.category != "all", r.category))
    return out


# --------------------------------------------------------------------------- rendering

def _fmt(v: float | None, digits: int = 3) -> str:
    return "  n/a" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.{digits}f}"


def _fmt_ci(ci: list[float], n_users: int | None = None) -> str:
    # Table cells: the users column sits beside; below the minimum no interval is shown.
    if n_users is not None and n_users < MIN_USERS_FOR_CI:
        return "(too few users)"
    return f"[{_fmt(ci[0], 2)}, {_fmt(ci[1], 2)}]"


def render_extraction(report: ExtractionReport, *, categories: bool = True) -> str:
    """Render the report as plain-text tables for the terminal.

    Args:
        report: The report.
        categories: Include per-category precision/recall rows.
    """
    lines = [f"Stage 1 — attribute extraction (95% CIs: user-clustered bootstrap, {report.n_resamples} resamples, "
             f"seed {report.seed}; no CI below {report.min_users_for_ci} users)",
             f"Majority rule (verifiers vs humans): {report.majority_rule}."]
    lines += ["", "Human–human agreement on verdicts (ok / bad / unsure, nominal):"]
    if not report.human_agreement:
        lines.append("  (no dataset with two or more human raters on the same attributes)")
    for h in report.human_agreement:
        lines += [f"  {where(h.dataset, h.origin)}: {h.annotators} annotators, {h.items} attributes rated by >= 2, "
                  f"{h.users} users",
                  f"    Krippendorff's alpha (nominal): {_fmt(h.alpha)} {ci_text(ci=h.alpha_ci, n_users=h.users)}",
                  f"    Fleiss' kappa on {h.fleiss_items} attributes rated by {h.fleiss_raters_per_item}: "
                  f"{_fmt(h.fleiss)} {ci_text(ci=h.fleiss_ci, n_users=h.fleiss_users)}",
                  f"    mean pairwise Cohen's kappa over {h.rater_pairs} pairs: {_fmt(h.mean_pairwise_kappa)} "
                  f"{ci_text(ci=h.mean_pairwise_kappa_ci, n_users=h.users)}",
                  f"    {'annotator':<22}{'n':>5}{'ok':>7}{'bad':>7}{'unsure':>8}"]
        for r in h.per_annotator:
            lines.append(f"    {r.rater[:21]:<22}{r.n:>5}{_fmt(r.ok, 2):>7}{_fmt(r.bad, 2):>7}{_fmt(r.unsure, 2):>8}")
    lines += ["", "Acceptance of extracted attributes (ok = accepted precision; bad = over-generalised/unsupported):"]
    if not report.acceptance:
        lines.append("  (no verdicts on extracted attributes)")
    else:
        head = (f"  {'dataset':<18}{'extractor':<30}{'rater':<34}{'n':>5}{'users':>6}{'fail':>5}  {'ok':<20}"
                f"{'bad':<20}{'unsure':<6}")
        lines += [head, "  " + "-" * (len(head) - 2)]
        for r in report.acceptance:
            lines.append(f"  {r.dataset[:17]:<18}{r.extractor[:29]:<30}{r.rater[:33]:<34}{r.n:>5}{r.n_users:>6}"
                         f"{r.failures:>5}  {_fmt(r.ok, 2)} {_fmt_ci(r.ok_ci, r.n_users):<15}{_fmt(r.bad, 2)} "
                         f"{_fmt_ci(r.bad_ci, r.n_users):<15}"
                         f"{_fmt(r.unsure, 2)}")
    if report.verifiers:
        lines += ["", "Verifiers vs the human majority (3-class Cohen's kappa; ties dropped):"]
        for v in report.verifiers:
            kappa_ci = ci_text(ci=v.kappa_ci, n_users=v.n_users, undefined=v.undefined_resamples,
                               n_resamples=report.n_resamples)
            lines.append(f"  {where(v.dataset, v.origin)}: {v.verifier}: n {v.n}, kappa {_fmt(v.kappa)} "
                         f"{kappa_ci}, accuracy {_fmt(v.accuracy)} "
                         f"{ci_text(ci=v.accuracy_ci, n_users=v.n_users)}")
        lines += ["", "Prevalence-robust panel (same items and resampled users as kappa):"]
        lines += panel_lines((f"{v.verifier} ({where(v.dataset, v.origin)})", v) for v in report.verifiers)
        lines += origin_lines(report.origin_comparison)
    lines += extras_lines(report.alt_test, report.estimates)
    lines += ["", "Gold preferences:"]
    if not report.gold:
        lines.append("  (none imported: personagap import laps PATH, or gold in an extraction JSONL)")
    for g in report.gold:
        lines.append(f"  {g.dataset} [{g.split}]: {g.users} users, {g.units} histories, {g.sessions} sessions "
                     f"({g.sessions_without_gold} with no stated preference), {g.gold} preferences in "
                     f"{g.categories} categories")
    if report.extractors:
        lines += ["", "Extractor runs (only histories whose every chunk parsed are scored):"]
        for e in report.extractors:
            reasons = ", ".join(f"{k} {v}" for k, v in e.failure_reasons.items())
            lines.append(f"  {e.dataset}: {e.extractor}: {e.units_complete}/{e.units_attempted} histories complete, "
                         f"{e.attributes} attributes, {e.chunk_failures} failed chunks" + (f" ({reasons})" if reasons
                                                                                          else ""))
    lines += ["", f"Extraction vs gold ({report.matcher_note}):"]
    if not report.matching:
        lines.append("  (no extractor output on users with gold; run `personagap judge extraction --judge extract` "
                     "or import an extraction JSONL)")
    else:
        head = (f"  {'dataset':<14}{'extractor':<30}{'matcher':<22}{'split':<7}{'category':<26}{'users':>6}"
                f"{'attrs':>6}{'gold':>6}  {'precision':<20}{'recall':<20}{'F1':<20}")
        lines += [head, "  " + "-" * (len(head) - 2)]
        for m in report.matching:
            if m.category != "all" and not categories:
                continue
            cat = m.category if m.category == "all" else "  " + m.category
            lines.append(f"  {m.dataset[:13]:<14}{m.extractor[:29]:<30}{m.matcher[:21]:<22}{m.split[:6]:<7}"
                         f"{cat[:25]:<26}{m.users:>6}{m.attributes:>6}{m.gold:>6}  "
                         f"{_fmt(m.precision, 2)} {_fmt_ci(m.precision_ci, m.users):<15}{_fmt(m.recall, 2)} "
                         f"{_fmt_ci(m.recall_ci, m.users):<15}{_fmt(m.f1, 2)} {_fmt_ci(m.f1_ci, m.users):<15}")
    return "\n".join(lines)


# --------------------------------------------------------------------------- I/O entry points

def load_items(con: Any, *, kinds: Sequence[str] | None = None, datasets: Sequence[str] | None = None) -> pd.DataFrame:
    """Stage-1 items from an open connection, with parsed payloads (see :func:`items_frame`)."""
    frame = con.execute("SELECT item_id, dataset, user_id, attribute, position, payload FROM items "
                        "WHERE stage = 'extraction' ORDER BY dataset, user_id, item_id").df()
    frame = items_frame(frame)
    if kinds is not None:
        frame = frame[frame["kind"].isin(list(kinds))]
    if datasets is not None:
        frame = frame[frame["dataset"].isin(list(datasets))]
    return frame


def report_extraction(db: str | Path, *, n_resamples: int = DEFAULT_RESAMPLES,
                      seed: int = DEFAULT_SEED) -> ExtractionReport:
    """Build the stage-1 report from a database (read-only)."""
    from personagap.labels_api import dataset_origins

    with opened(db, read_only=True) as con:
        items = load_items(con)
        labels = load_labels(con, stage="extraction")
        origins = dataset_origins(con)
        declared = stage_declared(declared_categories(con), "extraction")
    return extraction_report(items, labels, n_resamples=n_resamples, seed=seed, origins=origins, declared=declared)


@gc_paused()
def import_laps(path: str | Path, db: str | Path) -> LapsImport:
    """Validate LAPS release files and write them to ``db`` in one transaction (nothing on any error)."""
    from personagap.human_data.laps import load_laps

    result = load_laps(path)
    write_batch(db, result.batch)
    return result


@gc_paused()
def import_extraction(path: str | Path, db: str | Path) -> ExtractionImport:
    """Validate extraction JSONL file(s) and write them to ``db`` in one transaction (nothing on any error)."""
    from personagap.human_data.extraction import load_extraction

    result = load_extraction(path)
    write_batch(db, result.batch)
    return result


def judge_extraction(db: str | Path, judge_name: str, lm: LMConfig, *, datasets: Sequence[str] | None = None,
                     splits: Sequence[str] | None = None, extractor: str | None = None,
                     max_chars: int | None = None, concurrency: int = 8, limit: int | None = None,
                     max_retries: int = 4, progress: bool = True) -> RunSummary:
    """Run a stage-1 judge on stored items.

    * ``extract``: one call per chunk of each history (conversation items); ``limit`` keeps the
      first N histories (a history is only scored when all its chunks are judged). Afterwards the
      answers become extracted-attribute items.
    * ``verify``: one call per extracted attribute whose history is stored; ``limit`` = calls.
    * ``match``: one call per (extracted attribute, gold preference) of the same history.

    Args:
        db: The DuckDB file.
        judge_name: ``extract``, ``verify`` or ``match``.
        lm: Model settings.
        datasets: Only these datasets (default: all).
        splits: Only histories of these splits (LAPS ``train`` / ``val``; default: all).
        extractor: For verify/match, only this extractor's attributes (default: all).
        max_chars: Chunk budget for ``extract`` (default :data:`~personagap.judges.extraction.DEFAULT_MAX_CHARS`).
        concurrency: Calls in flight.
        limit: See above.
        max_retries: Retries on transient faults.
        progress: Show a progress bar.

    Raises:
        StoreError: Nothing to judge.
    """
    from personagap.judges import get_judge
    from personagap.judges.extraction import (
        DEFAULT_MAX_CHARS,
        Turn,
        Unit,
        extraction_tasks,
        match_item,
        match_tasks,
        verify_tasks,
    )
    from personagap.judges.runner import run_judge

    judge = get_judge(judge_name)
    with opened(db, read_only=True) as con:
        items = load_items(con, datasets=datasets)
    convs = items[items["kind"] == "conversation"]
    if splits is not None:
        keep_units = {u for u, p in zip(convs["unit"], convs["payload"], strict=True) if p.get("split") in splits}
        items = items[items["unit"].isin(keep_units)]
        convs = convs[convs["unit"].isin(keep_units)]
    history: dict[tuple[str, str], tuple[str, list[Turn]]] = {}
    for (dataset, unit), g in convs.groupby(["dataset", "unit"], sort=True):
        g = g.sort_values("position")
        turns = [Turn(t["turn_id"], t["role"], t["text"]) for p in g["payload"] for t in p["turns"]]
        history[(str(dataset), str(unit))] = (str(g["user_id"].iloc[0]), turns)
    source = ",".join(sorted(set(items["dataset"]))) or str(db)

    if judge_name == "extract":
        units = [Unit(d, u, user, tuple(turns)) for (d, u), (user, turns) in history.items()]
        units = units[:limit] if limit is not None else units
        if not units:
            raise StoreError(f"{db}: no conversations to extract from; import a LAPS release or an extraction JSONL "
                             "with conversations first")
        tasks, chunk_items = extraction_tasks(units, max_chars or DEFAULT_MAX_CHARS)
        _write_items(db, chunk_items)
        summary = run_judge(db, judge, tasks, lm, concurrency=concurrency, max_retries=max_retries,
                            progress=progress, source=source)
        materialise_extractions(db, summary.rater)
        return summary

    extracted = items[items["kind"] == "extracted"]
    if extractor is not None:
        extracted = extracted[extracted["payload"].map(lambda p: p.get("extractor") == extractor)]
    if judge_name == "verify":
        triples = [(i, str(a), history[(d, u)][1]) for i, a, d, u
                   in zip(extracted["item_id"], extracted["attribute"], extracted["dataset"], extracted["unit"],
                          strict=True) if (d, u) in history]
        if not triples:
            raise StoreError(f"{db}: no extracted attributes with a stored conversation to verify")
        return run_judge(db, judge, verify_tasks(triples), lm, concurrency=concurrency, limit=limit,
                         max_retries=max_retries, progress=progress, source=source)
    gold = items[items["kind"] == "gold"]
    gold = gold.assign(category=gold["payload"].map(lambda p: p.get("category")),
                       value=gold["payload"].map(lambda p: p.get("value")))
    gold_by_unit = {k: unit_gold(g) for k, g in gold.groupby(["dataset", "unit"], sort=True)}
    pairs, new_items = [], []
    for a in extracted.itertuples(index=False):
        for g in gold_by_unit.get((a.dataset, a.unit), gold.iloc[0:0]).itertuples(index=False):
            it = match_item(str(a.dataset), str(a.user_id), str(a.unit), str(a.item_id), str(g.item_id))
            new_items.append(it)
            pairs.append((it, str(a.attribute), f"{g.category}: {g.value}"))
    if not pairs:
        raise StoreError(f"{db}: no (extracted attribute, gold preference) pair of the same user to match")
    tasks = match_tasks(pairs)
    chosen = {t.key for t in (tasks[:limit] if limit is not None else tasks)}
    _write_items(db, [i for i in new_items if i.item_id in chosen])
    return run_judge(db, judge, tasks, lm, concurrency=concurrency, limit=limit, max_retries=max_retries,
                     progress=progress, source=source)


def _write_items(db: str | Path, items: Sequence[Any]) -> None:
    batch = ImportBatch()
    for it in items:
        batch.items[it.item_id] = it
    write_batch(db, batch)


def materialise_extractions(db: str | Path, rater: str | None = None) -> int:
    """Turn stored extractor answers on chunks into extracted-attribute items (idempotent).

    Args:
        db: The DuckDB file.
        rater: Only this extractor rater (default: every rater with labels on chunks).

    Returns:
        The number of extracted-attribute items written.
    """
    with opened(db, read_only=True) as con:
        chunks = load_items(con, kinds=("chunk",))
        labels = con.execute("SELECT item_id, rater, label FROM labels WHERE item_id IN (SELECT unnest(?))",
                             [chunks["item_id"].tolist()]).df()
    if rater is not None:
        labels = labels[labels["rater"] == rater]
    labels = labels.astype(object).where(labels.notna(), None)
    new = extracted_items(chunks.to_dict("records"), labels.to_dict("records"))
    _write_items(db, new)
    return len(new)
