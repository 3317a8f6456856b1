"""One diagnosis, two faces: which pipeline stage's automated evaluation is furthest from humans.

The dashboard's Overview and ``personagap diagnose`` both call :func:`diagnose`, a
pure function over small DataFrames that SQL aggregates out of the store (see
:func:`load_inputs`). Working from per-user confusion counts instead of raw labels
keeps it fast at a million stored labels: the database does the counting and the
user-clustered bootstrap of :mod:`personagap.analysis.agreement` runs on tables.

Which labels count is :mod:`personagap.analysis.comparable`'s rule, used through its SQL
predicates: the human reference is blind (anchored labels never are one), in-sample judge
labels are never scored, and rater kinds (llm, trained, baseline) stay apart.

The verdict ranks stages by the **gap to the human ceiling of the same dataset**: on a
dataset where several blind humans labelled the same items, the ceiling is their mean
pairwise Cohen's kappa, and a judge's figure is its mean kappa with each of those humans
on the same items (the same question, asked the same way). The gap's CI comes from a
paired bootstrap: each resample of users recomputes both the human–human and the
judge–human kappas. On an ordinal dataset (its record's scale, :mod:`personagap.datasets`)
every one of these kappas, and the judge's headline figure, is quadratic-weighted. A stage is
named only when its gap CI lies wholly above every other stage's; otherwise the verdict says it
cannot tell. A ceiling is never borrowed from another
dataset: a stage whose judged dataset has no multi-human ceiling is reported as unranked.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pandas as pd
from pydantic import BaseModel, Field

from personagap.analysis.aggregated import user_tables
from personagap.analysis.agreement import (
    DEFAULT_RESAMPLES,
    DEFAULT_SEED,
    MIN_USERS_FOR_CI,
    FloatArray,
    IntArray,
    bootstrap_estimate,
    ci_list,
    ci_text,
    estimates,
    json_safe_dict,
    krippendorff_alpha_ci,
    shared_resample_weights,
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
    rater_group,
    reference_sql,
)
from personagap.analysis.origins import REAL, OriginField, tag_origins, where
from personagap.analysis.pairwise import PairwiseResult, mean_pair_samples, pairwise_agreement
from personagap.analysis.panel import PanelFields, as_scale, on_scale, panel_lines, panel_values, scale_metrics
from personagap.datasets import dataset_records
from personagap.records import DatasetScale
from personagap.store.aggregates import diagnosis_inputs

STAGES: tuple[str, ...] = ("extraction", "relevance", "response")
STAGE_TITLES: dict[str, str] = {
    "extraction": "Stage 1 — attribute extraction",
    "relevance": "Stage 2 — relevance selection",
    "response": "Stage 3 — personalised response",
}
#: Judges with fewer shared items than this are listed but not eligible as best/worst.
MIN_ITEMS_FOR_RANKING = 20
#: Rater pairs sharing fewer items are left out of every mean pairwise kappa (ceiling and judge–human).
MIN_PAIR_OVERLAP = 10

# Static SQL (built from comparable.py's constants only, never user input): per item, the blind human reference.
REFERENCE_SQL = reference_sql("blind")
JUDGE_SQL = comparable_judge_sql("l")
"""Judge labels that may be compared with humans (what the dashboard's queries should select too)."""
BLIND_SQL = blind_human_sql("l")
ANCHORED_SQL = anchored_human_sql("l")


class JudgeScore(PanelFields, OriginField):
    """One judge's labels on one dataset of one stage, compared with the human reference."""

    stage: str
    dataset: str
    judge: str = Field(description="Display name: rater, plus [condition] when the protocol is not the default.")
    rater: str
    rater_kind: str
    condition: str
    n: int = Field(description="Items with both a parsed judge label and a human reference.")
    n_users: int
    failures: int = Field(description="Judge answers that could not be parsed (never counted as labels).")
    categories: list[str]
    confusion: list[list[int]] = Field(description="Rows: human label, columns: judge label (order: categories).")
    kappa: float
    kappa_ci: list[float]
    accuracy: float
    accuracy_ci: list[float]
    binary: bool = Field(description="Labels are yes/no, so yes-rates and over-selection are defined.")
    human_yes_rate: float | None = None
    judge_yes_rate: float | None = None
    over_selection: float | None = None
    over_selection_ci: list[float] | None = None
    precision: float | None = None
    recall: float | None = None
    f1: float | None = None
    undefined_resamples: int = Field(default=0, description="Resamples where kappa was undefined (left out of its CI).")

    @property
    def headline(self) -> float:
        """The scale's headline agreement: quadratic-weighted kappa on ordinal scales, else Cohen's kappa."""
        return self.weighted_kappa if self.scale == "ordinal" and self.weighted_kappa is not None else self.kappa


class HumanCeiling(OriginField):
    """Mean pairwise agreement among blind humans who labelled the same items of one dataset.

    Cohen's kappa, or quadratic-weighted kappa on ordinal scales (``metric``).
    """

    dataset: str
    metric: str = Field(default="kappa", description="The pairwise figure: 'kappa', or 'weighted_kappa' on "
                                                     "ordinal scales.")
    mean_kappa: float
    ci: list[float]
    n_raters: int
    n_pairs: int
    n_items: int
    n_users: int = Field(default=0, description="Users the bootstrap resamples (no CI below MIN_USERS_FOR_CI).")
    undefined_resamples: int = 0
    alpha: float | None = Field(default=None, description="Krippendorff's alpha (ordinal) among these humans; "
                                                          "ordinal scales only.")
    alpha_ci: list[float] | None = None


class CeilingGap(OriginField):
    """How far one judge falls below the human ceiling of the same dataset, with a paired-bootstrap CI."""

    stage: str
    dataset: str
    judge: str
    rater: str
    rater_kind: str
    condition: str
    metric: str = Field(default="kappa", description="The pairwise figure of both sides: 'kappa', or "
                                                     "'weighted_kappa' on ordinal scales.")
    judge_kappa: float = Field(description="Mean kappa (``metric``) of the judge with each blind human (same items).")
    judge_kappa_ci: list[float]
    ceiling: float = Field(description="Mean pairwise kappa (``metric``) among those blind humans.")
    ceiling_ci: list[float]
    gap: float = Field(description="ceiling - judge_kappa (> 0: the judge agrees with humans less than they do).")
    gap_ci: list[float] = Field(description="Paired bootstrap: each resample of users recomputes both kappas.")
    n_items: int = Field(description="Items the judge labelled among those the humans share.")
    n_users: int
    n_judge_pairs: int
    n_human_pairs: int
    undefined_resamples: int = Field(description="Resamples where the gap was undefined (left out of its CI).")


class StageDiagnosis(BaseModel):
    """What the store says about one stage."""

    stage: str
    title: str
    status: str = Field(description="'no_data' | 'no_reference' | 'no_judges' | 'ok'.")
    message: str
    n_items: int
    n_labels: int
    n_human_labels: int
    n_judge_labels: int
    judges: list[JudgeScore] = Field(description="Sorted by kappa, best first (NaN last).")
    best: JudgeScore | None
    worst: JudgeScore | None
    ceiling: HumanCeiling | None = Field(
        description="The ceiling of the dataset the stage is ranked on (the gap's, else the best judge's); None "
                    "when that dataset has none. Never a ceiling of another dataset: draw it only beside judges "
                    "of ceiling.dataset.")
    ceilings: list[HumanCeiling] = Field(default_factory=list, description="Every dataset's blind human ceiling.")
    gaps: list[CeilingGap] = Field(default_factory=list, description="Every judge's gap to its dataset's ceiling, "
                                                                     "smallest gap first.")
    gap: CeilingGap | None = Field(default=None, description="The stage's best judge by gap (smallest gap).")
    notes: list[str] = Field(default_factory=list, description="Why a ceiling or a gap is missing.")


class Diagnosis(BaseModel):
    """Per stage, the best and worst judge against humans, the human ceiling, the gap and the verdict."""

    stages: list[StageDiagnosis]
    worst_stage: str | None = Field(description="The stage whose best judge is furthest below its own dataset's "
                                                "human ceiling, when the gap CIs say so; None when they cannot tell.")
    verdict: str
    ranking: list[str] = Field(default_factory=list, description="Stages with a gap, largest gap first.")
    next_steps: list[str] = Field(default_factory=list, description="When the verdict cannot tell: per stage, what "
                                                                    "data would let it (also the verdict's last part).")
    n_resamples: int
    seed: int
    ci_level: float = 0.95
    min_users_for_ci: int = MIN_USERS_FOR_CI

    def stage(self, name: str) -> StageDiagnosis:
        """Return the diagnosis of one stage by name ('extraction', 'relevance', 'response')."""
        return next(s for s in self.stages if s.stage == name)

    def to_json_dict(self) -> dict[str, Any]:
        """Return JSON-safe data (NaN becomes null)."""
        return json_safe_dict(self.model_dump())


def _finite(x: float | None) -> bool:
    return x is not None and not math.isnan(x)


# --------------------------------------------------------------------------- loading (SQL)

def load_inputs(con: duckdb.DuckDBPyConnection) -> dict[str, Any]:
    """Aggregate what :func:`diagnose` needs out of an open store connection.

    The counting happens in DuckDB (:func:`personagap.store.aggregates.diagnosis_inputs`); which labels count
    comes from :mod:`personagap.analysis.comparable` (blind reference, comparable judges).

    Args:
        con: An open (read-only is enough) store connection.

    Returns:
        ``pairs``, ``failures``, ``humans``, ``inventory``, ``judge_items`` and ``human_counts`` frames and the
        datasets' ``scales``, as :func:`diagnose` takes them.
    """
    return {**diagnosis_inputs(con), "scales": dataset_scales(con)}


def dataset_scales(con: duckdb.DuckDBPyConnection) -> dict[tuple[str, str], DatasetScale]:
    """(stage, dataset) -> the dataset's scale, from its record (:func:`personagap.datasets.dataset_records`)."""
    return {key: record.scale for key, record in dataset_records(con).items()}


def stage_scales(con: duckdb.DuckDBPyConnection, stage: str) -> dict[str, list[str]]:
    """Dataset -> the categories its comparisons are scored over (in the scale's order), for one stage.

    The record's scale (:func:`personagap.datasets.dataset_records`), exactly as :func:`diagnose` scores it.

    Args:
        con: An open store connection.
        stage: Pipeline stage.
    """
    return {ds: list(scale.categories) for (st, ds), scale in dataset_scales(con).items() if st == stage}


def declared_categories(con: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """Every dataset's scale categories as rows (``stage``, ``dataset``, ``label``), from its record.

    Kept for callers that pass "declared" categories on to
    :func:`~personagap.analysis.comparable.categories_for`: a record's categories already hold the declared ones
    and every label raters used, so passing them gives the record's own category set. New code reads
    :func:`personagap.datasets.dataset_records` directly.

    Args:
        con: An open store connection.
    """
    rows = [(stage, ds, c) for (stage, ds), scale in dataset_scales(con).items() for c in scale.categories]
    return pd.DataFrame(rows, columns=["stage", "dataset", "label"])


def stage_declared(declared: pd.DataFrame, stage: str) -> dict[str, list[str]]:
    """Dataset -> categories of one stage, from :func:`declared_categories`'s rows."""
    rows = declared[declared["stage"] == stage]
    return {str(ds): g["label"].tolist() for ds, g in rows.groupby("dataset", sort=True)}


def _pairs_scales(pairs: pd.DataFrame) -> dict[tuple[str, str], DatasetScale]:
    # Without the store's records (a caller passing pairs only), each dataset's nominal scale is what its pairs
    # hold, by the one category rule.
    out = {}
    for (stage, ds), rows in pairs.groupby(["stage", "dataset"], sort=True):
        out[(str(stage), str(ds))] = DatasetScale(kind="nominal",
                                                  categories=tuple(categories_for(_as_scale_rows(rows))))
    return out


def _as_scale_rows(pairs: pd.DataFrame) -> pd.DataFrame:
    # The labels a pairs frame shows (reference and judge), as categories_for reads them.
    human = pd.DataFrame({"rater_kind": "human", "condition": "", "label": pairs["human"].astype(str)})
    judge = pd.DataFrame({"rater_kind": "llm", "condition": "", "label": pairs["label"].astype(str)})
    return pd.concat([human, judge], ignore_index=True)


def diagnose_db(db: str | Path, *, n_resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED) -> Diagnosis:
    """Build the diagnosis from a database file, opened read-only for one short batch of queries.

    Raises:
        personagap.store.StoreError: The file is missing, not a PersonaGap store, or held by a writer too long.
    """
    from personagap.labels_api import dataset_origins
    from personagap.store import opened

    with opened(db, read_only=True) as con:
        inputs = load_inputs(con)
        origins = dataset_origins(con)
    return diagnose(**inputs, n_resamples=n_resamples, seed=seed, origins=origins)


# --------------------------------------------------------------------------- pure analysis

def _weights(n_users: int, n_resamples: int, seed: int) -> FloatArray:
    # The same draw agreement.agreement() makes for this many users and this seed, so CIs match
    # `personagap report`; drawn once per size in the process (the reports share it), not once per judge.
    return shared_resample_weights(n_users, n_resamples, seed)


def judge_score(rows: pd.DataFrame, *, stage: str, dataset: str, rater: str, rater_kind: str, condition: str,
                failures: int, n_resamples: int, seed: int, level: float = 0.95,
                scale: DatasetScale | list[str] | None = None) -> JudgeScore:
    """Score one judge from its per-user (human, label, n) counts.

    Args:
        rows: Columns ``user_id``, ``human``, ``label``, ``n`` (counts of items per combination).
        stage: Pipeline stage.
        dataset: Dataset key.
        rater: The judge's rater name.
        rater_kind: llm, trained or baseline.
        condition: Protocol variant ('' is the default).
        failures: Unparseable answers of this judge.
        n_resamples: Bootstrap resamples (whole users are resampled).
        seed: Bootstrap seed.
        level: Confidence level of every CI.
        scale: The dataset's scale (:func:`dataset_scales`; a bare category list is nominal), so every judge of
            a dataset is scored over the same categories, and ordinal datasets by their levels; None: the
            nominal scale of ``rows`` alone.
    """
    if scale is None:
        scale = categories_for(_as_scale_rows(rows))
    s = as_scale(scale)
    categories = list(s.categories)
    binary = tuple(categories) == YES_NO
    tables, n_users = user_tables(rows, s)  # users in sorted id order: the same seed draws the same users
    weights = _weights(n_users, n_resamples, seed)
    est = estimates(tables, (*scale_metrics(s), *(("over_selection",) if binary else ())), weights, level,
                    s.levels() if s.ordinal else None)
    kap, acc = est["kappa"], est["accuracy"]
    total = tables.sum(axis=0)
    extra: dict[str, Any] = {}
    if binary:
        over = est["over_selection"]
        fp, fn, tp = total[0, 1], total[1, 0], total[1, 1]
        n = total.sum()
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
        **panel_values(est), **extra,
    )


def _dataset_agreement(humans: pd.DataFrame, judges: pd.DataFrame | None, *, n_resamples: int, seed: int,
                       scale: DatasetScale | None = None
                       ) -> tuple[PairwiseResult, dict[int, str], pd.DataFrame, IntArray] | None:
    """Every human–human and human–judge kappa of a dataset, over one set of user resamples.

    On an ordinal ``scale`` every pair is scored by quadratic-weighted kappa over the levels (labels coded in
    the scale's order); otherwise by Cohen's kappa.

    Raters are integer keys (humans first, then judges by (rater, condition)), labels and users integer codes:
    string work on a million labels is what costs. Users are coded in sorted id order, so SQL row order never
    moves a CI. The last element counts the distinct items of each rater key.
    """
    if humans.empty or humans["rater"].nunique() < 2:
        return None
    human_codes, human_names = pd.factorize(humans["rater"].astype(str), sort=True)
    groups: dict[int, str] = dict.fromkeys(range(len(human_names)), "human")
    parts = [humans]
    rater_codes = [human_codes]
    keys = pd.DataFrame(columns=["key", "rater", "rater_kind", "condition"])
    if judges is not None and not judges.empty:
        judge_codes = judges.groupby(["rater", "condition"], sort=True).ngroup().to_numpy() + len(human_names)
        parts.append(judges)
        rater_codes.append(judge_codes)
        keys = judges.assign(key=judge_codes)[["key", "rater", "rater_kind", "condition"]].drop_duplicates("key")
        groups |= {int(k): rater_group(str(kind)) for k, kind in zip(keys["key"], keys["rater_kind"], strict=True)}
    # Columns stay pandas Series (no round trip of strings through numpy objects); one label per (item, rater):
    # the first, as drop_duplicates keeps.
    def column(name: str) -> pd.Series:
        return pd.concat([p[name] for p in parts], ignore_index=True)

    rater = np.concatenate(rater_codes).astype(np.int64)
    items = pd.factorize(column("item_id"))[0].astype(np.int64)
    _, first = np.unique(items * len(groups) + rater, return_index=True)
    keep = np.sort(first)
    users = pd.factorize(column("user_id").take(keep), sort=True)[0]
    kept = column("label").take(keep)
    ordinal = scale is not None and scale.ordinal
    codes = (pd.Categorical(on_scale(kept, scale), categories=scale.categories).codes if scale is not None and ordinal
             else pd.factorize(kept, sort=True)[0])
    frame = pd.DataFrame({"item_id": pd.factorize(items[keep])[0], "rater": rater[keep],
                          "label": codes.astype(np.int64), "cluster": users})
    weights = _weights(int(users.max()) + 1, n_resamples, seed)
    result = pairwise_agreement(frame, groups, min_overlap=MIN_PAIR_OVERLAP, n_resamples=n_resamples, seed=seed,
                                anchor_group="human", weights=weights, metric=_pair_metric(scale),
                                levels=scale.levels() if scale is not None and ordinal else None)
    return result, groups, keys, np.bincount(frame["rater"].to_numpy(), minlength=len(groups))


def _ordinal_alpha(humans: pd.DataFrame, scale: DatasetScale, *, n_resamples: int, seed: int,
                   level: float) -> dict[str, Any]:
    """Krippendorff's alpha (ordinal) among the humans of an ordinal dataset, with its user-clustered CI."""
    values = humans.assign(value=on_scale(humans["label"], scale).map(dict(zip(scale.categories, scale.levels(),
                                                                               strict=True))))
    wide = values.drop_duplicates(["item_id", "rater"]).pivot(index="item_id", columns="rater", values="value")
    users = values.drop_duplicates("item_id").set_index("item_id")["user_id"].reindex(wide.index)
    est = krippendorff_alpha_ci(wide.to_numpy(dtype=float).T, users.astype(str).to_numpy(), "ordinal",
                                n_resamples=n_resamples, seed=seed, ci_level=level)
    return {"alpha": est.value, "alpha_ci": ci_list(est)}


def _pair_metric(scale: DatasetScale | None) -> str:
    # The scale's headline pairwise figure: the ceiling and the gap compare like with like.
    return "weighted_kappa" if scale is not None and scale.ordinal else "kappa"


def _human_pairs(groups: dict[int, str]) -> list[tuple[int, int]]:
    hs = sorted(k for k, g in groups.items() if g == "human")
    return [(a, b) for i, a in enumerate(hs) for b in hs[i + 1:]]


def _ceiling_from(result: PairwiseResult, groups: dict[int, str], dataset: str, n_items: int,
                  level: float, metric: str = "kappa") -> HumanCeiling | None:
    point, samples, n_pairs = mean_pair_samples(result, _human_pairs(groups))
    if not _finite(point):
        return None
    est = bootstrap_estimate(point, samples, result.n_clusters, level)
    return HumanCeiling(dataset=dataset, metric=metric, mean_kappa=est.value, ci=ci_list(est),
                        n_raters=sum(g == "human" for g in groups.values()), n_pairs=n_pairs, n_items=n_items,
                        n_users=result.n_clusters, undefined_resamples=est.n_undefined)


def human_ceiling(humans: pd.DataFrame, *, n_resamples: int, seed: int, min_overlap: int = MIN_PAIR_OVERLAP,
                  level: float = 0.95, scale: DatasetScale | None = None) -> HumanCeiling | None:
    """Mean pairwise kappa among individual blind humans on one dataset (None when no two share items).

    Args:
        humans: Columns ``dataset``, ``item_id``, ``rater``, ``label``, ``user_id`` for one dataset.
        n_resamples: Bootstrap resamples.
        seed: Bootstrap seed.
        min_overlap: Rater pairs sharing fewer items are left out (must be :data:`MIN_PAIR_OVERLAP`).
        level: Confidence level.
        scale: The dataset's scale (ordinal: quadratic-weighted kappa); None: Cohen's kappa.
    """
    if min_overlap != MIN_PAIR_OVERLAP:
        raise ValueError(f"the ceiling uses the diagnosis's pair overlap {MIN_PAIR_OVERLAP}")
    done = _dataset_agreement(humans, None, n_resamples=n_resamples, seed=seed, scale=scale)
    if done is None:
        return None
    result, groups, _, _ = done
    ceiling = _ceiling_from(result, groups, str(humans["dataset"].iloc[0]), int(humans["item_id"].nunique()), level,
                            _pair_metric(scale))
    if ceiling is not None and scale is not None and scale.ordinal:
        ceiling = ceiling.model_copy(update=_ordinal_alpha(humans, scale, n_resamples=n_resamples, seed=seed,
                                                           level=level))
    return ceiling


def ceiling_gaps(stage: str, humans: pd.DataFrame, judges: pd.DataFrame, *, n_resamples: int, seed: int,
                 level: float = 0.95,
                 scale: DatasetScale | None = None) -> tuple[HumanCeiling | None, list[CeilingGap]]:
    """One dataset's blind human ceiling and every judge's gap to it, from one paired bootstrap.

    Args:
        stage: Pipeline stage (recorded on the rows).
        humans: Blind individual human labels (``dataset``, ``item_id``, ``rater``, ``label``, ``user_id``) on
            items two or more of them labelled.
        judges: Comparable judge labels on those items (``item_id``, ``rater``, ``rater_kind``, ``condition``,
            ``label``, ``user_id``).
        n_resamples: Bootstrap resamples (whole users; the same resamples for every kappa).
        seed: Bootstrap seed.
        level: Confidence level.
        scale: The dataset's scale: on ordinal scales both sides are quadratic-weighted kappas.

    Returns:
        The ceiling (None when no two humans share enough items) and the gaps, smallest first.
    """
    done = _dataset_agreement(humans, judges, n_resamples=n_resamples, seed=seed, scale=scale)
    if done is None:
        return None, []
    result, groups, keys, n_items_of = done
    dataset = str(humans["dataset"].iloc[0])
    metric = _pair_metric(scale)
    ceiling = _ceiling_from(result, groups, dataset, int(humans["item_id"].nunique()), level, metric)
    if ceiling is None:
        return None, []
    if scale is not None and scale.ordinal:
        ceiling = ceiling.model_copy(update=_ordinal_alpha(humans, scale, n_resamples=n_resamples, seed=seed,
                                                           level=level))
    c_point, c_samples, _ = mean_pair_samples(result, _human_pairs(groups))
    human_keys = sorted(k for k, g in groups.items() if g == "human")
    gaps = []
    for key, rater, kind, condition in keys.itertuples(index=False):
        j_point, j_samples, n_pairs = mean_pair_samples(result, [(int(key), h) for h in human_keys])
        if not n_pairs:
            continue
        j_est = bootstrap_estimate(j_point, j_samples, result.n_clusters, level)
        gap = bootstrap_estimate(c_point - j_point, c_samples - j_samples, result.n_clusters, level)
        gaps.append(CeilingGap(
            stage=stage, dataset=dataset, judge=judge_display(str(rater), str(condition)), rater=str(rater),
            rater_kind=str(kind), condition=str(condition), metric=metric, judge_kappa=j_est.value,
            judge_kappa_ci=ci_list(j_est),
            ceiling=ceiling.mean_kappa, ceiling_ci=ceiling.ci, gap=gap.value, gap_ci=ci_list(gap),
            n_items=int(n_items_of[int(key)]), n_users=result.n_clusters, n_judge_pairs=n_pairs,
            n_human_pairs=ceiling.n_pairs, undefined_resamples=gap.n_undefined))
    gaps.sort(key=lambda g: (not _finite(g.gap), g.gap if _finite(g.gap) else 0.0, g.judge))
    return ceiling, gaps


def _fmt(v: float | None, digits: int = 2) -> str:
    return "n/a" if not _finite(v) else f"{v:.{digits}f}"


def _kappa_text(j: JudgeScore) -> str:
    kappa = f"kappa {_fmt(j.kappa)} {ci_text(ci=j.kappa_ci, n_users=j.n_users, undefined=j.undefined_resamples)}"
    if j.scale == "ordinal" and j.weighted_kappa is not None:
        return (f"quadratic-weighted kappa {_fmt(j.weighted_kappa)} "
                f"{ci_text(ci=j.weighted_kappa_ci, n_users=j.n_users)} (ordinal scale; unweighted {kappa})")
    return kappa


_METRIC_NAMES = {"kappa": "kappa", "weighted_kappa": "quadratic-weighted kappa"}


def _ceiling_text(c: HumanCeiling) -> str:
    alpha = ("" if c.alpha is None else
             f", Krippendorff's alpha (ordinal) {_fmt(c.alpha)} {ci_text(ci=c.alpha_ci, n_users=c.n_users)}")
    return (f"mean pairwise {_METRIC_NAMES[c.metric]} {_fmt(c.mean_kappa)} {ci_text(ci=c.ci, n_users=c.n_users)} "
            f"({where(c.dataset, c.origin)}, {c.n_raters} blind humans, {c.n_pairs} pairs{alpha})")


def _gap_text(g: CeilingGap) -> str:
    return (f"{g.judge} on {where(g.dataset, g.origin)}: mean {_METRIC_NAMES[g.metric]} with each blind human "
            f"{_fmt(g.judge_kappa)} "
            f"vs their own {_fmt(g.ceiling)}, gap {_fmt(g.gap)} "
            f"{ci_text(ci=g.gap_ci, n_users=g.n_users, undefined=g.undefined_resamples)}")


def _stage_message(status: str, stage: str, best: JudgeScore | None, ceiling: HumanCeiling | None) -> str:
    number = STAGES.index(stage) + 1
    ceiling_text = f" Blind humans among themselves: {_ceiling_text(ceiling)}." if ceiling else ""
    if status == "no_data":
        return f"No stage-{number} data yet: import a human-label release or run a {stage} judge."
    if status == "no_reference":
        return f"Stage {number} has items but no blind human labels to compare judges with." + ceiling_text
    if status == "no_judges":
        return f"Stage {number} has human labels but no judge labels yet." + ceiling_text
    assert best is not None
    return (f"Best judge {best.judge} ({where(best.dataset, best.origin)}): {_kappa_text(best)} against humans."
            + ceiling_text)


def _notes(stage: str, judges: list[JudgeScore], ceilings: list[HumanCeiling], counts: pd.DataFrame) -> list[str]:
    """Say plainly why a judged dataset has no ceiling, and that another dataset's ceiling is not used."""
    have = {c.dataset for c in ceilings}
    notes = []
    stage_counts = counts[counts["stage"] == stage] if not counts.empty else counts
    by_ds = {str(r.dataset): r for r in stage_counts.itertuples()} if not stage_counts.empty else {}
    for ds in sorted({j.dataset for j in judges} | set(by_ds)):
        if ds in have:
            continue
        row = by_ds.get(ds)
        blind = int(row.blind_raters) if row is not None else 0
        anchored = int(row.anchored_raters) if row is not None else 0
        if blind == 0 and anchored == 0 and ds not in {j.dataset for j in judges}:
            continue
        n_labels = int(row.blind_labels) if row is not None else 0
        text = (f"{ds}: no human ceiling: that needs two blind humans who labelled at least {MIN_PAIR_OVERLAP} of "
                f"the same items, and {ds} has too few blind labels ({blind} individual blind annotator"
                f"{'s' if blind != 1 else ''}, {n_labels} labels)")
        if anchored and row is not None:
            text += (f"; the {int(row.anchored_labels)} labels of {anchored} anchored annotators (they saw an LLM "
                     "label first) are reported apart and are not a ceiling")
        others = sorted(have)
        if others:
            text += f"; the ceiling of {', '.join(others)} belongs to another dataset and is not used for it"
        notes.append(text + ".")
    return notes


def diagnose(pairs: pd.DataFrame, failures: pd.DataFrame, humans: pd.DataFrame, inventory: pd.DataFrame, *,
             judge_items: pd.DataFrame | None = None, human_counts: pd.DataFrame | None = None,
             n_resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED,
             min_items: int = MIN_ITEMS_FOR_RANKING, level: float = 0.95,
             origins: Mapping[str, str] | None = None,
             scales: Mapping[tuple[str, str], DatasetScale] | None = None) -> Diagnosis:
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
        n_resamples: Bootstrap resamples for every CI (whole users are resampled).
        seed: Bootstrap seed.
        min_items: Judges sharing fewer items with humans are not ranked as best/worst.
        level: Confidence level of every CI.
        origins: Dataset -> ``real`` or ``synthetic`` (:func:`personagap.labels_api.dataset_origins`); every
            score, ceiling and gap carries its dataset's origin, and the verdict says when a best judge is scored
            on synthetic personas. Datasets missing from it are real.
        scales: (stage, dataset) -> the dataset's scale (:func:`dataset_scales`, from its record): every judge of
            a dataset is scored over it, and an ordinal dataset's headline figure, ceiling and gap are
            quadratic-weighted kappa. None, or a dataset missing from it: nominal over the labels in ``pairs``.

    Returns:
        The diagnosis of all three stages and the verdict.
    """
    fail_count = {(r.stage, r.dataset, r.rater, r.condition): int(r.failures) for r in failures.itertuples()}
    inv = inventory.set_index("stage") if not inventory.empty else inventory
    judge_items = judge_items if judge_items is not None else pd.DataFrame(
        columns=["stage", "dataset", "item_id", "rater", "rater_kind", "condition", "label", "user_id"])
    counts = human_counts if human_counts is not None else pd.DataFrame(
        columns=["stage", "dataset", "blind_raters", "blind_labels", "anchored_raters", "anchored_labels"])
    scales = {**_pairs_scales(pairs), **(scales or {})}
    stages = []
    for stage in STAGES:
        row = inv.loc[stage] if stage in inv.index else None
        n_items = int(row["n_items"]) if row is not None else 0
        n_human = int(row["n_human_labels"]) if row is not None else 0
        n_judge = int(row["n_judge_labels"]) if row is not None else 0
        judges = []
        stage_pairs = pairs[pairs["stage"] == stage]
        for (dataset, rater, kind, condition), rows in stage_pairs.groupby(
                ["dataset", "rater", "rater_kind", "condition"], sort=True):
            judges.append(judge_score(rows, stage=stage, dataset=str(dataset), rater=str(rater), rater_kind=str(kind),
                                      condition=str(condition),
                                      failures=fail_count.get((stage, dataset, rater, condition), 0),
                                      n_resamples=n_resamples, seed=seed, level=level,
                                      scale=scales.get((stage, str(dataset)))))
        judges.sort(key=lambda j: (not _finite(j.headline), -(j.headline if _finite(j.headline) else 0.0), j.judge,
                                   j.dataset))
        ranked = ([j for j in judges if _finite(j.headline) and j.n >= min_items]
                  or [j for j in judges if _finite(j.headline)])
        ceilings, gaps = [], []
        stage_judges = judge_items[judge_items["stage"] == stage]
        for ds, rows in humans[humans["stage"] == stage].groupby("dataset", sort=True):
            c, g = ceiling_gaps(stage, rows, stage_judges[stage_judges["dataset"] == ds],
                                n_resamples=n_resamples, seed=seed, level=level, scale=scales.get((stage, str(ds))))
            if c is not None:
                ceilings.append(c)
                gaps += g
        gaps.sort(key=lambda g: (not _finite(g.gap), g.gap if _finite(g.gap) else 0.0, g.judge, g.dataset))
        tag_origins([judges, ceilings, gaps], origins or {})
        eligible = [g for g in gaps if _finite(g.gap) and g.n_items >= min_items]
        gap = eligible[0] if eligible else None
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
        ceiling: HumanCeiling | None
        if gap is not None:
            ceiling = by_ds[gap.dataset]
        elif best is not None:
            ceiling = by_ds.get(best.dataset)  # never another dataset's ceiling beside this judge
        else:
            ceiling = max(ceilings, key=lambda c: (c.n_items, c.n_pairs)) if ceilings else None
        stages.append(StageDiagnosis(
            stage=stage, title=STAGE_TITLES[stage], status=status, message=_stage_message(status, stage, best, ceiling),
            n_items=n_items, n_labels=int(row["n_labels"]) if row is not None else 0, n_human_labels=n_human,
            n_judge_labels=n_judge, judges=judges, best=best, worst=worst, ceiling=ceiling, ceilings=ceilings,
            gaps=gaps, gap=gap, notes=_notes(stage, judges, ceilings, counts),
        ))
    worst_stage, verdict, ranking = _verdict(stages, level)
    # Two or more stages with a gap and no winner: their CIs overlap, so more users is what would tell.
    steps = [] if worst_stage is not None else _next_steps(stages, overlap=len(ranking) >= 2)
    if steps:
        verdict += " What would tell: " + "; ".join(steps) + "."
    return Diagnosis(stages=stages, worst_stage=worst_stage, verdict=verdict, ranking=ranking, next_steps=steps,
                     n_resamples=n_resamples, seed=seed, ci_level=level)


def _name(s: StageDiagnosis) -> str:
    return f"stage {STAGES.index(s.stage) + 1} ({s.stage})"


_JUDGE_COMMANDS = {"extraction": "personagap judge extraction --judge verify --model M",
                   "relevance": "personagap judge relevance --model M",
                   "response": "personagap judge response --judge pairwise --model M"}


def _next_steps(stages: list[StageDiagnosis], *, overlap: bool) -> list[str]:
    """Per stage, the data that would let the verdict tell (a ceiling, a judge, labels, or narrower CIs)."""
    steps = []
    for s in stages:
        if s.gap is not None:
            if overlap:
                steps.append(f"{_name(s)}: narrower gap CIs from more blind-labelled users on {s.gap.dataset} "
                             f"(`personagap plan --stage {s.stage} --dataset {s.gap.dataset}` says how many)")
        elif s.best is not None:
            ds = s.best.dataset
            steps.append(f"{_name(s)}: label at least two blind humans per item on {ds}, at least "
                         f"{MIN_ITEMS_FOR_RANKING} items the judge labelled (the dashboard's Annotate page; "
                         f"`personagap plan --stage {s.stage} --dataset {ds}` says how many)")
        elif s.status == "no_judges":
            steps.append(f"{_name(s)}: a judge on its human-labelled items (`{_JUDGE_COMMANDS[s.stage]}`)")
        elif s.status == "no_reference":
            steps.append(f"{_name(s)}: at least two blind humans per item on its items (the dashboard's Annotate "
                         "page)")
        else:
            steps.append(f"{_name(s)}: human and judge labels (`personagap import labels FILE --stage {s.stage} "
                         "--dataset NAME`, docs/formats.md)")
    return steps


def _synthetic_note(stages: list[StageDiagnosis]) -> str:
    """Say which stages' best judges are scored on synthetic personas, not real users."""
    flagged = []
    for s in stages:
        best = s.gap if s.gap is not None else s.best
        if best is not None and best.origin != REAL:
            flagged.append(f"{_name(s)}'s best judge {best.judge} is scored on {best.origin} personas "
                           f"({best.dataset})")
    if not flagged:
        return ""
    return (" On synthetic data: " + "; ".join(flagged) + ". Those figures are on synthetic personas, not real "
            "users: compare them with the same judges on real users' data before trusting them.")


def _verdict(stages: list[StageDiagnosis], level: float) -> tuple[str | None, str, list[str]]:
    """Name the stage furthest below its own ceiling only when its gap CI clears every other stage's."""
    pct = f"{level:.0%}"
    with_gap = sorted((s for s in stages if s.gap is not None), key=lambda s: -(s.gap.gap if s.gap else 0.0))
    ranking = [s.stage for s in with_gap]
    without = [s for s in stages if s.gap is None and s.best is not None]
    unranked = ""
    if without:
        unranked = (" Not ranked, for want of a blind human ceiling on the dataset their judges were scored on "
                    "(a ceiling is never borrowed from another dataset): "
                    + "; ".join(f"{_name(s)}, best judge {s.best.judge} on {where(s.best.dataset, s.best.origin)}, "
                                f"{_kappa_text(s.best)}" for s in without if s.best is not None) + ".")
    unranked += _synthetic_note(stages)
    if not with_gap:
        if not any(s.best is not None for s in stages):
            return None, "No stage has both judge and human labels yet, so no stage can be diagnosed.", ranking
        return None, ("Cannot tell which stage fails most: no stage has a judge scored on a dataset with its own "
                      "human ceiling." + unranked), ranking
    gap_lines = "; ".join(f"{_name(s)}: {_gap_text(s.gap)}" for s in with_gap if s.gap is not None)
    top = with_gap[0]
    assert top.gap is not None
    if len(with_gap) == 1:
        return None, (f"Cannot tell which stage fails most: only {_name(top)} can be compared with a human ceiling "
                      f"of its own dataset ({gap_lines})." + unranked), ranking
    lo = top.gap.gap_ci[0]
    others_hi = [s.gap.gap_ci[1] for s in with_gap[1:] if s.gap is not None]
    if _finite(lo) and all(_finite(h) and lo > h for h in others_hi):
        return top.stage, (f"Automated evaluation is furthest below humans at {_name(top)}: its best judge's gap to "
                           f"the human ceiling of the same dataset exceeds every other stage's ({pct} CIs do not "
                           f"overlap). Gaps: {gap_lines}." + unranked), ranking
    return None, (f"Cannot tell which stage fails most: the {pct} CIs of the gaps to each stage's own human ceiling "
                  f"overlap (or are missing). Gaps: {gap_lines}." + unranked), ranking


def render_diagnosis(d: Diagnosis) -> str:
    """Render the diagnosis as plain text for the terminal."""
    lines = [f"Diagnosis ({d.ci_level:.0%} CIs: user-clustered bootstrap, {d.n_resamples} resamples, seed {d.seed}; "
             f"no CI below {d.min_users_for_ci} users)", ""]
    for s in d.stages:
        lines.append(f"{s.title}: {s.n_items} items, {s.n_human_labels} human labels, {s.n_judge_labels} judge labels")
        if s.best is not None and s.worst is not None:
            lines.append(f"  best judge:  {s.best.judge} ({where(s.best.dataset, s.best.origin)}, n={s.best.n}): "
                         f"{_kappa_text(s.best)}")
            lines.append(f"  worst judge: {s.worst.judge} ({where(s.worst.dataset, s.worst.origin)}, "
                         f"n={s.worst.n}): {_kappa_text(s.worst)}")
            lines += [f"  robust panel, {line.strip()}" for line in panel_lines([(f"best {s.best.judge}", s.best)])]
        for c in s.ceilings:
            lines.append(f"  human ceiling: {_ceiling_text(c)}")
        if s.gap is not None:
            lines.append(f"  gap to the ceiling (best judge): {_gap_text(s.gap)}")
        for note in s.notes:
            lines.append(f"  note: {note}")
        if s.best is None:
            lines.append(f"  {s.message}")
        lines.append("")
    lines.append(d.verdict)
    return "\n".join(lines)
