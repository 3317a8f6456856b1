"""Per-label oracles: the figures of every report computed from every label in memory (pandas), for tests only.

The package computes each figure one way, from the store's counts (issue 31: one production path per figure).
These are the per-label twins that path replaced, kept here so that the equivalence tests still compare the
production (count) path with an independent computation over every label. Nothing under the package imports
this module. The in-memory helpers they build on (:func:`personagap.analysis.comparable.reference_labels`,
:mod:`personagap.analysis.robust`'s tidy-frame helpers) stay in the package: the alternative-annotator test, the
pilot's per-annotator agreement and ``plan`` read frames.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from personagap.analysis import agreement, robust
from personagap.analysis.agreement import Estimate, ci_list, json_safe_dict
from personagap.analysis.arrays import FloatArray
from personagap.analysis.codes import sorted_codes
from personagap.analysis.comparable import (
    YES_NO,
    categories_for,
    comparable_judge_mask,
    individual_human_mask,
    judge_display,
    reference_labels,
    roles,
)
from personagap.analysis.estimates import EstimateRow, estimate_row, human_rate_from_users
from personagap.analysis.panel import extras_rows, panel_values, scale_tables
from personagap.analysis.robust import JudgeLabels, human_reference, judge_labels
from personagap.analysis.weighting import Weight, judge_row_figures
from personagap.records import DatasetScale
from personagap.scales import on_scale
from personagap.stages.extraction_build import assemble_report as assemble_extraction
from personagap.stages.extraction_build import inferred_scales, items_frame
from personagap.stages.extraction_records import PILOT_EXTRACTOR, VERIFIER_KINDS, ExtractionReport
from personagap.stages.relevance_labels import assemble_report, dataset_scale, pilot_reports
from personagap.stages.relevance_records import JudgeAgreement, RelevanceReport, judge_metrics, selection_fields
from personagap.stages.response_pairwise import reason_kind
from personagap.vocabulary import HumanSet

# --------------------------------------------------------------------------- corrected estimates (estimates.py)

def user_counts(judge: pd.Series, human: pd.Series, users: pd.Series,
                positive: str) -> tuple[FloatArray, npt.NDArray[Any]]:
    """Per-user counts ``(U, 6)`` behind the naive and Rogan–Gladen estimates, users in sorted id order.

    Args:
        judge: The judge's label per item id.
        human: The human reference label per item id.
        users: User id per item id (covering both).
        positive: The label whose rate is estimated.
    """
    items = judge.index.union(human.index)
    ids, index = sorted_codes(users.reindex(items).astype(str).to_numpy())
    j = judge.reindex(items)
    h = human.reindex(items)
    jpos, hpos = (j == positive).to_numpy(), (h == positive).to_numpy()
    jn, hn = j.notna().to_numpy(), h.notna().to_numpy()
    both = jn & hn
    cols = [jpos & jn, jn, both & jpos & hpos, both & ~jpos & hpos, both & jpos & ~hpos, both & ~jpos & ~hpos]
    counts = np.zeros((len(ids), len(cols)))
    for k, col in enumerate(cols):
        counts[:, k] = np.bincount(index, weights=col.astype(float), minlength=len(ids))
    return counts, ids


def human_rate(reference: pd.DataFrame, *, positive: str = "yes", level: float = 0.95) -> Estimate:
    """The classical human-only estimate: the share of ``positive`` among the human reference labels.

    Args:
        reference: :func:`personagap.analysis.robust.human_reference` of one dataset.
        positive: The label whose rate is estimated.
        level: Confidence level.

    Returns:
        The estimate with its user-clustered CI (none below the minimum number of users).
    """
    y = (reference["label"] == positive).to_numpy(dtype=float)
    ids, index = sorted_codes(reference["user_id"].astype(str).to_numpy())
    per_user = np.column_stack([np.bincount(index, weights=y, minlength=len(ids)),
                                np.bincount(index, minlength=len(ids)).astype(float)])
    return human_rate_from_users(per_user, level)


def judge_estimates(judge: JudgeLabels, reference: pd.DataFrame, *, dataset: str, positive: str = "yes",
                    humans: HumanSet = "blind", level: float = 0.95, human_only: Estimate | None = None) -> EstimateRow:
    """Naive, Rogan–Gladen, PPI++ and human-only estimates of the human rate of ``positive`` for one judge.

    Args:
        judge: The judge's labels (:func:`personagap.analysis.robust.judge_labels`).
        reference: :func:`personagap.analysis.robust.human_reference` of the same dataset.
        dataset: Dataset key (recorded).
        positive: The label whose rate is estimated.
        humans: Which humans the reference came from (recorded).
        level: Confidence level.
        human_only: :func:`human_rate` of ``reference``, when the caller has it (the same for every judge).
    """
    users = pd.concat([judge.users, reference["user_id"]])
    users = users[~users.index.duplicated()]
    counts, _ = user_counts(judge.labels, reference["label"], users, positive)
    human = human_only or human_rate(reference, positive=positive, level=level)
    return estimate_row(counts, human, judge=judge.judge, dataset=dataset, quantity=f"{positive}_rate",
                        rater_kind=judge.rater_kind, humans=humans, n_human=len(reference), level=level)


def per_item_hits(labels: pd.Series, target: pd.Series) -> pd.Series:
    """``"yes"`` where an item's label equals its own target label, else ``"no"``; items without a target dropped.

    For quantities whose positive label differs by item, e.g. "the personalised answer is preferred" when the
    personalised answer is A on some items and B on others.
    """
    kept = labels[labels.index.isin(target.index)]
    hit = kept.to_numpy(dtype=object) == target.reindex(kept.index).astype(str).to_numpy(dtype=object)
    return pd.Series(np.where(hit, "yes", "no"), index=kept.index, dtype=object)


def estimate_rows(labels: pd.DataFrame, dataset: str, *, positive: str = "yes", humans: HumanSet = "blind",
                  positive_by_item: pd.Series | None = None, quantity: str | None = None,
                  level: float = 0.95) -> list[dict[str, Any]]:
    """Corrected estimates of the human rate of ``positive`` for every judge of ``dataset`` (report rows).

    Args:
        labels: Tidy labels of one stage (:func:`personagap.store.load_labels`); other datasets ignored.
        dataset: Dataset key.
        positive: The label whose human rate is estimated ("yes" for relevance and persona use).
        humans: HumanSet from blind (default) or anchored humans.
        positive_by_item: Instead of one ``positive`` label, the positive label of each item (item id ->
            label), e.g. the position of the personalised answer: the quantity is then the share of items
            whose label is their own positive one (stage 3: "humans prefer the personalised answer").
            Items without an entry are left out.
        quantity: Name of the quantity in the rows [default: ``<positive>_rate``, or ``hit_rate`` with
            ``positive_by_item``].
        level: Confidence level.

    Returns:
        One JSON-safe dict per judge sharing at least one item with the human reference; empty without a
        reference, without judges, or when nobody ever gave the ``positive`` label. Each estimate is of its
        own items: naive, Rogan–Gladen and PPI of the items the judge labelled, human-only of every item
        with a human reference (they differ where a judge covers a subset, e.g. one PRISM file).
    """
    frame = labels[labels["dataset"] == dataset]
    reference = human_reference(frame, humans)
    judges = list(judge_labels(frame))
    if positive_by_item is not None:
        hits = per_item_hits(reference["label"], positive_by_item)
        reference = pd.DataFrame({"label": hits, "user_id": reference["user_id"].reindex(hits.index)})
        judges = [replace(j, labels=per_item_hits(j.labels, positive_by_item)) for j in judges]
        positive, quantity = "yes", quantity or "hit_rate"
    used = (reference["label"] == positive).any() or any((j.labels == positive).any() for j in judges)
    if reference.empty or not used:
        return []  # no reference, or a label this dataset does not use (a "yes" rate of A/B preferences)
    out = []
    human = human_rate(reference, positive=positive, level=level)
    for j in judges:
        if j.labels.index.intersection(reference.index).empty:
            continue
        row = judge_estimates(j, reference, dataset=dataset, positive=positive, humans=humans,
                              level=level, human_only=human)
        if quantity:
            row.quantity = quantity
        out.append(json_safe_dict(row.model_dump()))
    return out


# --------------------------------------------------------------------------- report extras (panel.py)

def report_extras(labels: pd.DataFrame, datasets: Iterable[str], *, positive: str | None, anchored: Iterable[str] = (),
                  rate_datasets: Iterable[str] | None = None,
                  scales: Mapping[str, DatasetScale]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A report's ``alt_test`` and ``estimates`` lists over ``datasets``.

    Args:
        labels: The stage's tidy labels (item_id, rater, rater_kind, condition, label, user_id, dataset).
        datasets: Datasets to cover (blind humans).
        positive: The label whose human rate the estimates correct (None: no estimates, e.g. A/B/tie).
        anchored: Datasets to cover again with anchored humans, reported apart (rows say ``humans``).
        rate_datasets: Only these get estimates (default: all), e.g. the yes/no ones.
        scales: Dataset -> its scale (:func:`personagap.datasets.dataset_records`): the alt-test scores an
            ordinal dataset by negative RMSE (:func:`alt_test_scoring`), and no rate of ``positive`` is
            estimated on an ordinal scale or one without that category. Every dataset covered must have one
            (no silent default: a scale decides how the test scores).
    """
    from personagap.analysis.aggregated import frame_counts

    # Estimates from counts, as a report built from the store's aggregates computes them (the same rows as
    # estimate_rows up to float rounding), so both paths give identical figures.
    return extras_rows(datasets, alt_labels=lambda ds: labels,
                       counts=lambda ds, humans: frame_counts(labels, ds, humans), positive=positive,
                       anchored=anchored, rate_datasets=rate_datasets, scales=scales)


# --------------------------------------------------------------------------- stage 2 (relevance_labels.py)

def judge_agreements(labels: pd.DataFrame, dataset: str, *, which: HumanSet = "blind",
                     scale: DatasetScale | None = None, weight: Weight = "items") -> list[JudgeAgreement]:
    """Every comparable judge of ``dataset`` against its human majority, from every label (the per-label oracle).

    Args:
        labels: Output of :func:`personagap.store.load_labels` for stage 'relevance'.
        dataset: Dataset key.
        which: The blind reference (the default, what judges are scored against) or the anchored one.
        scale: The dataset's scale (:func:`personagap.datasets.dataset_records`); None: :func:`dataset_scale`.
        weight: What the table figures weigh equally: ``items`` or ``users`` (:mod:`personagap.analysis.weighting`).
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
        tables = scale_tables(joined["label_human"], joined["label"], joined["user_id"], scale)
        est, weighting = judge_row_figures(tables, judge_metrics(scale), weight=weight,
                                           levels=scale.levels() if scale.ordinal else None)
        reasons = Counter(reason_kind(e) for e in failed["error"])
        out.append(JudgeAgreement(
            judge=judge_display(str(rater), str(condition)), dataset=dataset, rater_kind=str(kind),
            condition=str(condition), reference=which, n=len(joined),
            n_users=int(joined["user_id"].nunique()), failures=len(failed), failure_reasons=dict(reasons),
            unmatched=len(parsed) - len(joined),
            kappa=est["kappa"].value, kappa_ci=ci_list(est["kappa"]), undefined_resamples=est["kappa"].n_undefined,
            accuracy=est["accuracy"].value, scale=scale.kind, **selection_fields(est), **panel_values(est),
            **weighting,
        ))
    return out


def relevance_report(labels: pd.DataFrame, *, pilot_dataset: str = "recenter-pilot",
                     origins: Mapping[str, str] | None = None,
                     scales: Mapping[str, DatasetScale] | None = None, weight: Weight = "items") -> RelevanceReport:
    """Build the stage-2 report from stored relevance labels.

    Args:
        labels: Output of :func:`personagap.store.load_labels` with ``stage='relevance'``.
        pilot_dataset: The dataset with per-annotator labels for the agreement table.
        origins: Dataset -> ``real`` or ``synthetic`` (:func:`personagap.labels_api.dataset_origins`); datasets
            missing from it are real.
        scales: Dataset -> its scale (:func:`personagap.datasets.dataset_records`); every judge of a dataset is
            scored over it. Datasets missing from it: :func:`dataset_scale`.
        weight: What the judge rows' table figures weigh equally (``items`` or ``users``).

    Returns:
        The report; ``judges`` covers every dataset but the pilot.
    """
    datasets = sorted(set(labels["dataset"])) if not labels.empty else []
    scale_of = {ds: dataset_scale(labels, ds, scales) for ds in datasets}
    judges = [j for ds in datasets if ds != pilot_dataset
              for j in judge_agreements(labels, ds, scale=scale_of[ds], weight=weight)]
    pilot_judges: dict[HumanSet, list[JudgeAgreement]] = {
        which: judge_agreements(labels, pilot_dataset, which=which, scale=scale_of[pilot_dataset], weight=weight)
        for which in ("blind", "anchored")} if pilot_dataset in datasets else {}
    pilot, anchored, notes = (pilot_reports(labels, pilot_dataset, scale=scale_of[pilot_dataset],
                                             weight=weight, judges=pilot_judges)
                              if pilot_dataset in datasets else (None, None, []))
    # Yes-rates are estimated on yes/no scales only; the alt-test scores ordinal datasets by negative RMSE.
    alt_test, estimates = report_extras(labels, datasets, positive="yes",
                                        anchored=[pilot_dataset] if pilot_dataset in datasets else [],
                                        rate_datasets=[ds for ds in datasets if scale_of[ds].categories == YES_NO],
                                        scales=scale_of)
    return assemble_report(judges, pilot, anchored, notes, alt_test, estimates, origins=origins, weight=weight)


# --------------------------------------------------------------------------- stage 1 (extraction_build.py)

def extraction_report(items: pd.DataFrame, labels: pd.DataFrame, *, origins: Mapping[str, str] | None = None,
                      scales: Mapping[str, DatasetScale] | None = None, weight: Weight = "items") -> ExtractionReport:
    """Build the stage-1 report from stored items and labels (pure).

    The verdict figures are computed from the counts :func:`verdict_counts_frame` builds, the ones the store
    path (:func:`personagap.stages.extraction.report_extraction`) has DuckDB build: the same figures.

    Args:
        items: Stage-1 items (columns item_id, dataset, user_id, attribute, position, payload),
            e.g. from :func:`load_items`; passed through :func:`items_frame`.
        labels: :func:`personagap.store.load_labels` with ``stage='extraction'``.
        origins: Dataset -> ``real`` or ``synthetic``; datasets missing from it are real.
        scales: Dataset -> its scale, from its record (:func:`personagap.datasets.dataset_records`): the
            categories a verifier is scored over. A dataset missing from it is read the way the record reader
            infers one from its labels.
        weight: What the verifier rows' table figures weigh equally (``items`` or ``users``); the other figures
            pool items.
    """
    items = items_frame(items)
    kind_of = dict(zip(items["item_id"], items["kind"], strict=True))
    extractor_of = {i: p.get("extractor", PILOT_EXTRACTOR)
                    for i, p in zip(items["item_id"], items["payload"], strict=True)}
    if labels.empty:
        labels = pd.DataFrame(columns=["item_id", "rater", "rater_kind", "condition", "label", "error", "user_id",
                                       "dataset"])
    # Each dataset's scale is its record's, as diagnose and the panel take it; the reader's rule for the rest.
    scales = {**inferred_scales(labels), **(scales or {})}
    # comparable.py's rule: blind humans and comparable judges (in-sample labels never), under the standard
    # protocol (anchored or other-question labels are not stage-1 verdicts).
    labels = labels[roles(labels).isin(["blind_human", "judge"]) & (labels["condition"].fillna("") == "")]
    labels = labels.assign(kind=labels["item_id"].map(kind_of))
    verdicts = labels[labels["kind"].isna() | (labels["kind"] == "extracted")]
    verdicts = verdicts.assign(extractor=verdicts["item_id"].map(extractor_of).fillna(PILOT_EXTRACTOR))
    verdict_sets = sorted(map(str, verdicts["dataset"].dropna().unique()))
    alt_test, estimates = report_extras(verdicts, verdict_sets, positive="ok",
                                        scales={ds: scales[ds] for ds in verdict_sets})
    counts, reference = verdict_counts_frame(verdicts)
    humans = verdicts[individual_human_mask(verdicts) & verdicts["label"].notna()]
    return assemble_extraction(counts, reference, humans[["dataset", "item_id", "rater", "label", "user_id"]],
                           scales, alt_test, estimates, items=items, side_labels=labels,
                           origins=origins, weight=weight)


def verdict_counts_frame(verdicts: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The counts of :func:`personagap.store.extraction_counts.verdict_counts`, from verdicts already in memory.

    Args:
        verdicts: Standard-protocol blind human and comparable judge labels on verdict items, with an
            ``extractor`` column.

    Returns:
        Label counts and reference counts, with the columns the store's query gives.
    """
    reference = reference_labels(verdicts, "blind")
    counted = verdicts[(individual_human_mask(verdicts) & verdicts["label"].notna())
                       | verdicts["rater_kind"].isin(VERIFIER_KINDS)]
    keys = ["dataset", "extractor", "rater", "rater_kind", "user_id", "human", "label"]
    counts = (counted.assign(human=counted["item_id"].map(reference))[keys]
              .groupby(keys, dropna=False, sort=True).size().rename("n").reset_index())
    with_reference = verdicts.drop_duplicates("item_id")
    with_reference = with_reference.assign(human=with_reference["item_id"].map(reference))
    with_reference = with_reference[with_reference["human"].notna()]
    ref_counts = (with_reference.groupby(["dataset", "user_id", "human"], sort=True).size().rename("n")
                  .reset_index())
    return counts, ref_counts


def relevance_bias(labels: pd.DataFrame) -> pd.DataFrame:
    """The Stage 2 page's position/length bias from one row per label (``dashboard_reads.bias_labels``' rows).

    The per-label twin of :func:`personagap.dashboard.data.relevance_bias` (which reads ``bias_counts``).
    """
    from personagap.analysis.response import clustered_rate

    rows: list[dict[str, Any]] = []
    if labels.empty:
        return pd.DataFrame(rows)
    labels = labels.copy()
    lengths = labels["length"].dropna()
    if lengths.nunique() >= 4:
        edges = np.unique(np.quantile(lengths, [0, 0.25, 0.5, 0.75, 1]))
        names = [f"length Q{i + 1} ({int(edges[i])}–{int(edges[i + 1])} chars)" for i in range(len(edges) - 1)]
        labels["length_q"] = pd.cut(labels["length"], edges, labels=names, include_lowest=True).astype(object)
    for factor, column in {"position": "position", "length": "length_q"}.items():
        if column not in labels or labels[column].isna().all():
            continue
        part = labels.dropna(subset=[column])
        for (rater, who, bucket), g in part.groupby(["rater", "who", column], sort=True):
            if len(g) < 5:
                continue
            est = clustered_rate(g["hit"].to_numpy(bool), g["user_id"].to_numpy())
            label = f"position {int(bucket) + 1}" if factor == "position" else str(bucket)
            rows.append({"factor": factor, "bucket": label, "rater": rater, "who": who, "n": len(g),
                         "rate": est.value, "ci_low": est.ci[0], "ci_high": est.ci[1]})
    return pd.DataFrame(rows)


def panel_rows(labels: pd.DataFrame, dataset: str, *, humans: HumanSet = "blind",
               level: float = 0.95, declared: Iterable[str] | None = None) -> list[dict[str, Any]]:
    """The robust panel of every judge of ``dataset`` against the human reference, plus a base-rate row.

    Args:
        labels: Tidy labels of one stage (:func:`personagap.store.load_labels`); other datasets are ignored.
        dataset: Dataset key.
        humans: Reference from blind (default) or anchored human labels (labelled in each row).
        level: Confidence level.
        declared: The dataset's declared categories, part of its scale
            (:func:`~personagap.analysis.comparable.categories_for`: every judge is coded over that scale).

    Returns:
        One dict per judge: ``judge``, ``rater``, ``rater_kind``, ``condition``, ``dataset``, ``humans``,
        ``n``, ``n_users``, ``kappa``, ``kappa_ci`` and the :func:`panel_fields` keys; the last row is the
        base-rate judge (``rater_kind`` ``"base-rate"``) on every reference item. Empty without a reference.
        Class 1 of the binary indices is the later label in sorted order ("yes", "1").
    """
    frame = labels[labels["dataset"] == dataset]
    ref = human_reference(frame, humans)
    if ref.empty:
        return []
    judges = list(judge_labels(frame))
    # The dataset's scale (comparable.py's one rule), the same for every judge: AC1 and PABAK depend on K.
    categories = categories_for(frame, declared)
    out: list[dict[str, Any]] = []
    for j in judges:
        shared = j.labels.index.intersection(ref.index)
        if shared.empty:
            continue
        tables, ids = robust.user_tables(ref.loc[shared, "label"], j.labels.loc[shared], ref.loc[shared, "user_id"],
                                  categories)
        out.append(_row(j.judge, j.rater, j.rater_kind, j.condition, dataset, humans, tables, len(shared),
                        level))
    tables, ids = robust.user_tables(ref["label"], ref["label"], ref["user_id"], categories)
    base, _ = robust.base_rate_tables(tables)
    out.append(_row(robust.BASE_RATE_JUDGE, robust.BASE_RATE_JUDGE, "base-rate", "", dataset, humans, base, len(ref),
                    level))
    return out


def _row(judge: str, rater: str, kind: str, condition: str, dataset: str, humans: HumanSet, tables: FloatArray,
         n: int, level: float) -> dict[str, Any]:
    kappa = agreement.estimates(tables, ("kappa",), level=level)["kappa"]
    return {"judge": judge, "rater": rater, "rater_kind": kind, "condition": condition, "dataset": dataset,
            "humans": humans, "n": n, "n_users": int(tables.shape[0]), "kappa": kappa.value,
            "kappa_ci": ci_list(kappa), **robust.panel_fields(tables, level=level)}


def pairwise_per_label(labels: pd.DataFrame, groups: Mapping[Any, str], *, min_overlap: int = 10,
                       anchor_group: str | None = None,
                       metric: str = "kappa", levels: npt.ArrayLike | None = None) -> Any:
    """:func:`personagap.analysis.pairwise.pairwise_agreement` per label: an item x rater grid, each pair's tables.

    The per-label twin of the package's one count path (:func:`~personagap.analysis.pairwise.pairwise_from_counts`,
    which ``pairwise_agreement`` counts its frame for), kept as the oracle it is compared with.

    Args:
        labels: Long frame with columns ``item_id``, ``rater``, ``label``, ``cluster``
            (one row per rater and item; failures already removed).
        groups: Rater -> group name (e.g. 'human', 'llm'); raters not listed are ignored.
        min_overlap: Pairs sharing fewer items are left out (NaN in the matrix).
        anchor_group: Score only pairs with at least one rater of this group (e.g. 'human' when only
            human–human and human–judge kappas are needed); other pairs get an overlap but no kappa.
        metric: The registered table metric every pair is scored by (``weighted_kappa`` on ordinal scales;
            the fields keep the name ``kappa``). Its tables' categories are the label codes in order, so an
            ordinal metric needs labels coded in the scale's order (integer codes ``0..K-1``).
        levels: The ordinal levels' values (one per code), for metrics that read them.

    Returns:
        The matrices and group summaries (a :class:`~personagap.analysis.pairwise.PairwiseResult`).
    """
    from itertools import combinations

    from personagap.analysis.agreement import encode, get_metric, indexed_tables
    from personagap.analysis.pairwise import GroupAgreement, PairwiseResult, mean_pair_estimate

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

    matrix = pd.DataFrame(np.nan, index=raters, columns=raters)
    overlap = pd.DataFrame(0, index=raters, columns=raters)
    per_type: dict[str, list[tuple[Any, Any]]] = {}
    pair_tables: dict[tuple[Any, Any], FloatArray] = {}
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
    for a, b, tables, point, n in scored:
        key = (a, b) if a <= b else (b, a)
        pair_tables[key], pair_points[key] = tables, (point, n)
        per_type.setdefault("–".join(sorted((groups[a], groups[b]))), []).append(key)
    result = PairwiseResult(matrix=matrix, overlap=overlap, groups={}, tables=pair_tables, points=pair_points,
                            n_clusters=len(cluster_ids))
    for kind, keys in sorted(per_type.items()):
        result.groups[kind] = GroupAgreement(
            mean_kappa=mean_pair_estimate(result, keys, metric=metric, levels=levels), n_pairs=len(keys),
            n_items=int(sum(pair_points[k][1] for k in keys)), n_users=len(users_of[kind]))
    return result
