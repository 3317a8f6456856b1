"""Building stage 1's report from stored items and labels (pure; :func:`load_items` reads a connection)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from personagap.analysis.aggregated import user_tables
from personagap.analysis.agreement import ci_list
from personagap.analysis.extraction import (
    OFFLINE_THRESHOLD,
    judge_vs_reference,
    match_unit,
    normalise_attribute,
    prf,
    rater_agreement,
    verdict_rates_from_counts,
)
from personagap.analysis.origins import tag_and_compare
from personagap.analysis.panel import panel_metrics, panel_values
from personagap.analysis.weighting import Weight, judge_row_figures
from personagap.datasets import build_records
from personagap.records import DatasetScale
from personagap.stages.extraction_records import (
    VERIFIER_KINDS,
    ExtractionReport,
    ExtractorRun,
    GoldSummary,
    HumanAgreement,
    MatchRow,
    VerdictRow,
    VerifierAgreement,
)
from personagap.store.item_reads import extraction_item_rows

if TYPE_CHECKING:
    pass


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


def inferred_scales(labels: pd.DataFrame) -> dict[str, DatasetScale]:
    """Each labelled dataset's scale as :func:`personagap.datasets.build_records` infers it from its labels alone.

    For a caller without stored records (the pure report on hand-made frames): no declared categories, verification
    items.
    """
    if labels.empty:
        return {}
    datasets = sorted(map(str, labels["dataset"].dropna().unique()))
    kinds = pd.DataFrame({"stage": "extraction", "dataset": datasets, "item_kind": "verification", "n": 1})
    # With item ids, so the category rule keeps only items a human labelled (what SCALE_LABELS_SQL selects).
    rows = labels.assign(stage="extraction")[["stage", "dataset", "item_id", "rater_kind", "condition", "label"]]
    return {ds: r.scale for (_, ds), r in build_records(kinds, rows, {}).items()}


def assemble_report(counts: pd.DataFrame, reference: pd.DataFrame, humans: pd.DataFrame,
                    scales: Mapping[str, DatasetScale], alt_test: list[dict[str, Any]],
                    estimates: list[dict[str, Any]], *, items: pd.DataFrame, side_labels: pd.DataFrame,
                    origins: Mapping[str, str] | None,
                    weight: Weight = "items") -> ExtractionReport:
    """The stage-1 report from verdict counts (whichever path counted them) and the side items and labels.

    Args:
        counts: Label counts (:func:`personagap.store.extraction_counts.verdict_counts`' columns).
        reference: Reference counts of the same call.
        humans: Per-item parsed blind human verdicts (``dataset``, ``item_id``, ``rater``, ``label``,
            ``user_id``), at least of every dataset with two or more human raters.
        scales: Dataset -> its scale (every dataset with verdicts).
        alt_test: The alternative-annotator test rows.
        estimates: The corrected-estimate rows.
        items: Stage-1 items (:func:`items_frame`) holding at least the conversations, chunks, gold, matcher pairs
            and the extracted attributes of datasets with chunks or gold.
        side_labels: Standard-protocol labels holding at least those on chunk and matcher-pair items.
        origins: Dataset -> ``real`` or ``synthetic``; datasets missing from it are real.
        weight: What the verifier rows' table figures weigh equally (``items`` or ``users``).
    """
    report = ExtractionReport(alt_test=alt_test, estimates=estimates,
        human_agreement=_human_agreement(counts, humans), acceptance=_acceptance(counts),
        verifiers=_verifiers(counts, reference, scales, weight), extractors=_extractor_runs(items, side_labels),
        gold=_gold_summary(items), matching=_matching(items, side_labels), weight=weight)
    report.origin_comparison = tag_and_compare(report, origins or {},
                                               lambda: ((v.verifier, v) for v in report.verifiers))
    return report


def _rates_row(dataset: str, extractor: str, rater: str, kind: str, rows: pd.DataFrame, failures: int) -> VerdictRow:
    # rows: parsed verdict counts (user_id, label, n) of one rater group.
    # Users as integer codes in sorted id order (the order per_cluster_sums gives string ids): it then sorts
    # integers, not 10^5 strings.
    users = pd.factorize(rows["user_id"].astype(str), sort=True)[0]
    r = verdict_rates_from_counts(rows["label"].to_numpy(dtype=object), users, rows["n"].to_numpy(dtype=float))
    return VerdictRow(dataset=dataset, extractor=extractor, rater=rater, rater_kind=kind, n=int(rows["n"].sum()),
                      n_users=int(rows["user_id"].nunique()), failures=failures,
                      ok=r["ok"].value, ok_ci=ci_list(r["ok"]), bad=r["bad"].value, bad_ci=ci_list(r["bad"]),
                      unsure=r["unsure"].value, unsure_ci=ci_list(r["unsure"]))


def _human_agreement(counts: pd.DataFrame, humans: pd.DataFrame) -> list[HumanAgreement]:
    out = []
    human_counts = counts[counts["rater_kind"] == "human"]
    for dataset, rows in human_counts.groupby("dataset", sort=True):
        if rows["rater"].nunique() < 2:
            continue
        mine = humans[humans["dataset"] == dataset]
        long = mine.rename(columns={"user_id": "cluster"})[["item_id", "rater", "label", "cluster"]]
        agr = rater_agreement(long)
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
            per_annotator=[_rates_row(str(dataset), "", str(r), "human", g, 0)
                           for r, g in rows.groupby("rater", sort=True)]))
    return out


def _acceptance(counts: pd.DataFrame) -> list[VerdictRow]:
    out = []
    for (dataset, extractor), rows in counts.groupby(["dataset", "extractor"], sort=True):
        humans = rows[rows["rater_kind"] == "human"]
        if not humans.empty:
            label = f"humans ({humans['rater'].nunique()})"
            out.append(_rates_row(str(dataset), str(extractor), label, "human", humans, 0))
        judges = rows[rows["rater_kind"].isin(VERIFIER_KINDS)]
        for (rater, kind), g in judges.groupby(["rater", "rater_kind"], sort=True):
            failed = g["label"].isna()
            out.append(_rates_row(str(dataset), str(extractor), str(rater), str(kind), g[~failed],
                                  int(g.loc[failed, "n"].sum())))
    return out


def _verifiers(counts: pd.DataFrame, reference: pd.DataFrame, scales: Mapping[str, DatasetScale],
               weight: Weight) -> list[VerifierAgreement]:
    out = []
    judged = counts[counts["rater_kind"].isin(VERIFIER_KINDS) & counts["label"].notna()]
    for dataset in sorted(map(str, reference["dataset"].unique())):
        scale = scales[dataset]
        for rater, g in judged[judged["dataset"] == dataset].groupby("rater", sort=True):
            joined = g[g["human"].notna()]
            if joined.empty:
                est = judge_vs_reference({}, {}, {}, extra=panel_metrics(False))
                weighting: dict[str, Any] = {"estimand": weight}  # no items: no figure under either weighting
            else:  # over the dataset's scale: a verifier that never says "unsure" still has K = 3
                tables, _ = user_tables(joined, scale)
                est, weighting = judge_row_figures(tables, ("kappa", "accuracy", *panel_metrics(False)), weight=weight,
                                                   levels=scale.levels() if scale.ordinal else None)
            out.append(VerifierAgreement(dataset=dataset, verifier=str(rater), n=int(joined["n"].sum()),
                                         n_users=int(joined["user_id"].nunique()),
                                         kappa=est["kappa"].value, kappa_ci=ci_list(est["kappa"]),
                                         undefined_resamples=est["kappa"].n_undefined,
                                         accuracy=est["accuracy"].value, accuracy_ci=ci_list(est["accuracy"]),
                                         **panel_values(est), **weighting))
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


def _matching(items: pd.DataFrame, labels: pd.DataFrame) -> list[MatchRow]:
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
                est = prf(f["tpa"], f["na"], f["tpg"], f["ng"], f["user"])
                out.append(MatchRow(dataset=str(dataset), extractor=str(extractor), matcher=matcher, split=str(sp),
                                    category=str(cat), units=int(f["unit"].nunique()), users=est.n_users,
                                    attributes=est.n_attributes, gold=est.n_gold,
                                    precision=est.precision.value, precision_ci=ci_list(est.precision),
                                    recall=est.recall.value, recall_ci=ci_list(est.recall),
                                    f1=est.f1.value, f1_ci=ci_list(est.f1)))
    out.sort(key=lambda r: (r.dataset, r.extractor, r.matcher, r.split, r.category != "all", r.category))
    return out


def load_items(con: Any, *, kinds: Sequence[str] | None = None, datasets: Sequence[str] | None = None) -> pd.DataFrame:
    """Stage-1 items from an open connection, with parsed payloads (see :func:`items_frame`)."""
    frame = items_frame(extraction_item_rows(con))
    if kinds is not None:
        frame = frame[frame["kind"].isin(list(kinds))]
    if datasets is not None:
        frame = frame[frame["dataset"].isin(list(datasets))]
    return frame
