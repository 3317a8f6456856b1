"""Stage 3 (response judgment): do judges pick the answer the human preferred, and with what biases?

Library entry points (the CLI in :mod:`personagap.commands.response` is a thin layer over them):

* :func:`import_prism`, :func:`import_usr`, :func:`import_personafeedback` — validate a release
  and write it in one transaction;
* :func:`report_response` — read the store and build a :class:`ResponseReport`
  (:func:`response_report` is the pure part, :func:`render_response` the text view);
* :func:`judge_response` — build a judge's tasks from stored items and run it live.

Datasets and what each is compared with:

* pairwise items (``prism-judge``, ``personafeedback``, the demo sample): each judge's A/B/tie
  against the human label (the PRISM participant's own preference; PersonaFeedback's chosen
  answer), with position and length bias for judges *and* humans, trivial baselines and the
  with-profile vs no-profile gap on shared items;
* single-response datasets (``usr-personachat``, any imported yes/no, k-category or ordinal one): one
  section per dataset, titled with the question its record stores (:mod:`personagap.datasets`), with
  rater-rater agreement on its scale, each judge against every rater and the rater majority, and the
  aspects its raters also rated (USR's Overall, Engaging, ...: stored at import as data, not code);
* Re-Centering generic-vs-personalised pairs: the share of personalised answers a judge rates
  no better than the generic one (the release holds no human rating of these pairs).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
from pydantic import BaseModel, Field

from personagap.analysis.agreement import (
    DEFAULT_RESAMPLES,
    DEFAULT_SEED,
    MIN_USERS_FOR_CI,
    NAN_ESTIMATE,
    Estimate,
    Level,
    ci_list,
    ci_text,
    json_safe,
    json_safe_dict,
)
from personagap.analysis.comparable import (
    HUMAN_KINDS,
    JUDGE_KINDS,
    MAJORITY_RULE,
    blind_human_mask,
    comparable_judge_mask,
    judge_display,
    reference_labels,
    roles,
)
from personagap.analysis.origins import OriginComparison, OriginField, origin_lines, tag_and_compare, where
from personagap.analysis.panel import (
    PanelFields,
    extras_lines,
    panel_lines,
    panel_values,
    report_extras,
    scale_estimates,
)
from personagap.analysis.response import (
    BASELINES,
    accuracy_gap,
    baseline_labels,
    first_position_rate,
    longer_rate,
    no_better_rate,
    rater_agreement,
    rater_pairs,
    swap_consistency,
)
from personagap.datasets import dataset_records
from personagap.human_data.labels import ASPECTS_PREFIX, RatedAspectSpec, parse_aspects
from personagap.human_data.personafeedback import load_personafeedback
from personagap.human_data.prism import ResponseImport, load_prism
from personagap.human_data.usr import load_usr
from personagap.records import PAIRWISE_LABELS, DatasetRecord, DatasetScale
from personagap.store import gc_paused, load_labels, opened, write_batch

if TYPE_CHECKING:
    from personagap.judges.runner import LMConfig, RunSummary

__all__ = ["HUMAN_KINDS", "JUDGE_KINDS", "ResponseReport", "import_personafeedback", "import_prism", "import_usr",
           "judge_response", "load_items", "render_response", "report_response", "response_report"]
REVERSED = "+reversed"
NO_PROFILE = "no-profile"
GVP_KIND = "generic_vs_personalized"
USR_DATASET = "usr-personachat"
SINGLE_KINDS: tuple[str, ...] = ("persona_use", "single")
"""Payload kinds of single-response items (one answer rated on the dataset's scale)."""
_YES_NO = ["no", "yes"]


# --------------------------------------------------------------------------- report records

class GroupAccuracy(BaseModel):
    """A judge's accuracy on one split or tier."""

    n: int
    accuracy: float


class JudgeResult(PanelFields, OriginField):
    """One judge (rater + condition) on one dataset, compared with the human label."""

    judge: str = Field(description="Rater, with its condition in brackets when it has one.")
    rater: str
    condition: str
    dataset: str
    rater_kind: str
    reference: str = Field(description="What the judge is compared with.")
    n: int = Field(description="Items both the judge (parsed) and the reference labelled.")
    n_users: int
    accuracy: float
    accuracy_ci: list[float]
    kappa: float
    kappa_ci: list[float]
    failures: int = Field(description="Answers that could not be parsed (never counted as verdicts).")
    failure_reasons: dict[str, int]
    accuracy_failures_as_wrong: float | None = Field(
        default=None, description="Accuracy counting failures on human-labelled items as wrong (as papers often do).")
    first_position_rate: float | None = Field(
        default=None, description="Among A/B verdicts, the share choosing the answer shown first (0.5 = no bias).")
    first_position_ci: list[float] | None = None
    longer_rate: float | None = Field(
        default=None, description="Among A/B verdicts on unequal lengths, the share choosing the longer answer.")
    longer_ci: list[float] | None = None
    tie_rate: float | None = None
    human_tie_rate: float | None = None
    accuracy_without_human_ties: float | None = None
    always_a_accuracy: float | None = Field(default=None, description="Baseline 'always A' on the same items.")
    always_longer_accuracy: float | None = Field(default=None,
                                                 description="Baseline 'always longer' on the same items.")
    swap_consistency: float | None = Field(default=None, description="Same verdict in both orders (needs +reversed).")
    swap_pairs: int = 0
    undefined_resamples: int = Field(default=0, description="Resamples where kappa was undefined (not in its CI).")
    by_group: dict[str, GroupAccuracy] = Field(default_factory=dict, description="'split=...'/'tier=...' -> accuracy.")


class HumanBias(OriginField):
    """Position and length preferences of the human labels of one dataset."""

    dataset: str
    rater: str
    n: int
    n_users: int = 0
    first_position_rate: float | None = Field(description="None where the A/B order is not what the human saw.")
    first_position_ci: list[float] | None
    longer_rate: float
    longer_ci: list[float]
    tie_rate: float
    baselines: dict[str, float] = Field(description="Baseline -> accuracy against these human labels.")


class ProfileGap(OriginField):
    """One judge's accuracy with vs without the profile, on the items judged both ways."""

    rater: str
    dataset: str
    with_condition: str
    without_condition: str
    n: int = Field(description="Items both conditions judged (parsed) that have a human label: the only ones a "
                               "paired gap can use.")
    n_with: int = Field(default=0, description="Human-labelled items judged with the profile.")
    n_without: int = Field(default=0, description="Human-labelled items judged without the profile.")
    n_users: int = 0
    accuracy_with: float
    accuracy_without: float
    gap: float
    gap_ci: list[float]


class GenericVsPersonalized(OriginField):
    """How often a rater judged the personalised answer no better than the generic one."""

    rater: str
    condition: str
    dataset: str
    rater_kind: str
    n: int
    n_users: int = 0
    failures: int
    no_better_rate: float
    no_better_ci: list[float]
    personalized_preferred_rate: float


class RaterVsJudge(BaseModel):
    """A judge's agreement with one human rater (or the rater majority)."""

    judge: str
    rater: str
    n: int
    accuracy: float
    kappa: float
    kappa_ci: list[float]
    weighted_kappa: float | None = Field(default=None, description="Quadratic-weighted kappa; ordinal scales only.")
    weighted_kappa_ci: list[float] | None = None


class RatedAspect(BaseModel):
    """Another question the same raters answered about the same responses (a label condition, e.g. USR's Overall).

    Aspects are stored at import as data (meta ``aspects:response:<dataset>``: condition -> question, scale,
    categories); the report shows the raters' agreement on each, on its own scale.
    """

    condition: str
    question: str
    scale: str
    categories: list[str]
    n_items: int
    alpha: float = Field(description="Krippendorff's alpha at the aspect's level of measurement.")
    alpha_ci: list[float]


class SingleResponseReport(OriginField):
    """One single-response dataset, titled with its question: rater agreement on its scale, judges vs each rater."""

    dataset: str
    question: str = Field(description="What the raters were asked (the dataset's stored record).")
    scale: str = Field(description="nominal or ordinal.")
    categories: list[str] = Field(description="The scale's categories (ordinal: its levels, low to high).")
    n_items: int = Field(description="Items with at least one blind human label.")
    n_users: int = Field(description="Users (clusters: USR's dialogue contexts) of those items.")
    raters: dict[str, int] = Field(description="Rater -> items rated.")
    rater_label_rates: dict[str, dict[str, float]] = Field(description="Rater -> share of each category.")
    alpha: float = Field(description="Krippendorff's alpha among raters, at the scale's level of measurement.")
    alpha_ci: list[float]
    fleiss: float = Field(description="Fleiss' kappa among raters (categories unordered).")
    fleiss_ci: list[float]
    pair_kappa: dict[str, dict[str, float | None]] = Field(description="Cohen's kappa per rater pair.")
    rater_mean_kappa: dict[str, float | None] = Field(description="Per rater, mean kappa with the other raters.")
    reference_rates: dict[str, float] = Field(description="Share of each category in the human reference.")
    aspects: list[RatedAspect] = Field(default_factory=list)
    judges: list[RaterVsJudge]


class UsrReport(OriginField):
    """Deprecated: the old USR-shaped view of one yes/no single-response dataset (see ``single_responses``).

    Kept so that consumers of the former ``usr`` key keep working; every figure is copied from that dataset's
    :class:`SingleResponseReport` (``uses_knowledge_*`` = its ``alpha``/``fleiss``; ``overall_alpha`` = its
    ``overall`` aspect, if any).
    """

    dataset: str = USR_DATASET

    n_items: int
    n_contexts: int
    raters: dict[str, int] = Field(description="Rater -> items rated.")
    rater_yes_rate: dict[str, float]
    uses_knowledge_alpha: float
    uses_knowledge_alpha_ci: list[float]
    uses_knowledge_fleiss: float
    uses_knowledge_fleiss_ci: list[float]
    overall_alpha: float = Field(description="Krippendorff's alpha (ordinal) on Overall 1-5.")
    overall_alpha_ci: list[float]
    pair_kappa: dict[str, dict[str, float | None]] = Field(description="Cohen's kappa per rater pair (uses knowledge).")
    rater_mean_kappa: dict[str, float | None] = Field(description="Per rater, mean kappa with the other raters.")
    majority_yes_rate: float
    judges: list[RaterVsJudge]


class ResponseReport(BaseModel):
    """The stage-3 report."""

    judges: list[JudgeResult]
    humans: list[HumanBias]
    profile_gaps: list[ProfileGap]
    generic_vs_personalized: list[GenericVsPersonalized]
    single_responses: list[SingleResponseReport] = Field(
        default_factory=list, description="One section per single-response dataset, titled with its question.")
    usr: UsrReport | None = Field(default=None, description="Deprecated: single_responses' USR (or first yes/no) "
                                                            "section in the former USR-shaped fields.")
    alt_test: list[dict[str, Any]] = Field(default_factory=list, description="Alternative-annotator test per judge "
                                           "and dataset (needs several humans per item: USR, not PRISM).")
    estimates: list[dict[str, Any]] = Field(default_factory=list, description="Corrected human 'uses the persona' "
                                            "rate per judge (yes/no datasets only).")
    origin_comparison: list[OriginComparison] = Field(
        default_factory=list, description="Judges on both synthetic-persona and real-user datasets, side by side.")
    n_resamples: int
    seed: int
    ci_level: float = 0.95
    majority_rule: str = MAJORITY_RULE
    min_users_for_ci: int = MIN_USERS_FOR_CI

    def to_json_dict(self) -> dict[str, Any]:
        """Return the report as JSON-safe data (NaN becomes null)."""
        return json_safe_dict(self.model_dump())




# --------------------------------------------------------------------------- library API

def _import(result: ResponseImport, db: str | Path) -> ResponseImport:
    write_batch(db, result.batch)
    return result


@gc_paused()
def import_prism(path: str | Path, db: str | Path) -> ResponseImport:
    """Validate PRISM judge files (a file or folder) and write them to ``db`` in one transaction.

    Raises:
        personagap.human_data.DataError: A file deviates from the release format; nothing is written.
    """
    return _import(load_prism(path), db)


@gc_paused()
def import_usr(path: str | Path, db: str | Path) -> ResponseImport:
    """Validate the USR PersonaChat ratings and write them to ``db`` in one transaction."""
    return _import(load_usr(path), db)


@gc_paused()
def import_personafeedback(path: str | Path, db: str | Path) -> ResponseImport:
    """Validate a PersonaFeedback release folder and write it to ``db`` in one transaction."""
    return _import(load_personafeedback(path), db)


def load_items(con: Any) -> pd.DataFrame:
    """Stage-3 items with their payload flattened into the columns the judges and the report use.

    Returns:
        Columns item_id, dataset, user_id, kind, question, answer_a, answer_b, profile, split,
        tier, personalized (canonical position of a personalised answer), order_shown (whether
        the A/B order is the one the human saw), facts, context, response.
    """
    rows = con.execute("SELECT item_id, dataset, user_id, prompt_index, payload FROM items "
                       "WHERE stage = 'response' ORDER BY dataset, user_id, item_id").fetchall()
    prompts = {(d, u, p): t for d, u, p, t in con.execute(
        "SELECT dataset, user_id, prompt_index, prompt_text FROM prompts").fetchall()}
    attrs: dict[tuple[str, str], list[str]] = {}
    for d, u, a in con.execute("SELECT dataset, user_id, attribute FROM attributes ORDER BY attribute").fetchall():
        attrs.setdefault((d, u), []).append(a)
    out = []
    for iid, dataset, user, prompt_index, payload in rows:
        p = json.loads(payload) if isinstance(payload, str) else (payload or {})
        kind = p.get("kind")
        rec: dict[str, Any] = {"item_id": iid, "dataset": dataset, "user_id": user, "kind": kind,
                               "question": None, "answer_a": None, "answer_b": None, "profile": None,
                               "split": p.get("split"), "tier": p.get("tier"), "personalized": None,
                               "order_shown": "order_seed" not in p, "facts": None, "context": None,
                               "response": None}
        if kind == "pairwise":
            rec |= {"question": p["question"], "answer_a": p["answer_a"], "answer_b": p["answer_b"],
                    "profile": p.get("profile")}
        elif kind == GVP_KIND:
            profile = attrs.get((dataset, user))
            # Canonical order: A = the generic answer, B = the personalised one.
            rec |= {"question": prompts.get((dataset, user, prompt_index)), "answer_a": p["response_no_context"],
                    "answer_b": p["response_personalized"], "personalized": "B", "order_shown": False,
                    "profile": "\n".join(profile) if profile else None}
        elif kind in SINGLE_KINDS:
            rec |= {"facts": p.get("facts"), "context": p.get("context"), "response": p.get("response"),
                    "profile": p.get("profile")}
        out.append(rec)
    return pd.DataFrame(out, columns=["item_id", "dataset", "user_id", "kind", "question", "answer_a", "answer_b",
                                      "profile", "split", "tier", "personalized", "order_shown", "facts",
                                      "context", "response"])


def report_response(db: str | Path, *, n_resamples: int = DEFAULT_RESAMPLES,
                    seed: int = DEFAULT_SEED) -> ResponseReport:
    """Build the stage-3 report from a database (read-only)."""
    from personagap.labels_api import dataset_origins

    with opened(db, read_only=True) as con:
        labels = load_labels(con, stage="response")
        items = load_items(con)
        origins = dataset_origins(con)
        records = {ds: r for (st, ds), r in dataset_records(con).items() if st == "response"}
        aspects = parse_aspects(dict(con.execute("SELECT key, value FROM meta WHERE starts_with(key, ?)",
                                                 [ASPECTS_PREFIX]).fetchall()))
    return response_report(labels, items, n_resamples=n_resamples, seed=seed, origins=origins, records=records,
                           aspects=aspects)


def judge_response(db: str | Path, judge_name: str, lm: LMConfig, *, profile: bool = True,
                   datasets: tuple[str, ...] | None = None, concurrency: int = 8, limit: int | None = None,
                   seed: int = 0, both_orders: bool = False, max_retries: int = 4,
                   progress: bool = True) -> RunSummary:
    """Run a stage-3 judge live on the stored items and store its labels.

    Args:
        db: The DuckDB file.
        judge_name: 'pairwise' (every pairwise and generic-vs-personalised item) or
            'persona-use' (every persona-use item).
        lm: Model settings.
        profile: Show the user's profile (pairwise only).
        datasets: Judge only these datasets.
        concurrency: Calls in flight.
        limit: Judge only the first N tasks.
        seed: Seed of the pairwise position swap.
        both_orders: Also judge each pair in the opposite order (swap consistency).
        max_retries: Retries per call on 429/5xx/timeouts.
        progress: Progress bar on stderr.

    Returns:
        The runner's summary.

    Raises:
        ValueError: Unknown judge, --no-profile with persona-use, or no items to judge.
    """
    from personagap.judges.base import get_judge
    from personagap.judges.response import pairwise_tasks, persona_use_tasks
    from personagap.judges.runner import run_judge

    judge = get_judge(judge_name)
    if judge.stage != "response":
        raise ValueError(f"judge {judge_name!r} is a {judge.stage} judge, not a response judge")
    with opened(db, read_only=True) as con:
        items = load_items(con)
    if datasets:
        items = items[items["dataset"].isin(datasets)]
    if judge_name == "persona-use":
        if not profile:
            raise ValueError("persona-use judges whether a response uses the persona: it needs the persona")
        tasks = persona_use_tasks(items[items["kind"] == "persona_use"])
    else:
        tasks = pairwise_tasks(items[items["kind"].isin(["pairwise", GVP_KIND])], profile=profile, seed=seed,
                               both_orders=both_orders)
    if not tasks:
        raise ValueError(f"no stored items for judge {judge_name!r}; import a release first")
    return run_judge(db, judge, tasks, lm, concurrency=concurrency, limit=limit, progress=progress,
                     max_retries=max_retries, source=",".join(sorted(set(items["dataset"]))) or "response", seed=seed)


# --------------------------------------------------------------------------- building the report

def _meta(value: Any) -> dict[str, Any]:
    if isinstance(value, dict):
        return value
    if isinstance(value, str) and value:
        return dict(json.loads(value))
    return {}


def _reason_kind(error: str) -> str:
    return str(error).split(":", 1)[0].strip() or "unknown"


def _reference(labels: pd.DataFrame) -> pd.Series:
    """Per item, the blind human label: comparable.py's reference (stored majority, else the majority rule)."""
    return reference_labels(labels, "blind")


def response_report(labels: pd.DataFrame, items: pd.DataFrame, *, n_resamples: int = DEFAULT_RESAMPLES,
                    seed: int = DEFAULT_SEED, origins: Mapping[str, str] | None = None,
                    records: Mapping[str, DatasetRecord] | None = None,
                    aspects: Mapping[str, list[RatedAspectSpec]] | None = None) -> ResponseReport:
    """Build the stage-3 report from stored labels and items (pure: no I/O).

    Args:
        labels: :func:`personagap.store.load_labels` with ``stage='response'``.
        items: :func:`load_items`.
        n_resamples: Bootstrap resamples for every CI (clusters = users / dialogue contexts).
        seed: Bootstrap seed.
        origins: Dataset -> ``real`` or ``synthetic``; datasets missing from it are real.
        records: Dataset -> its stage-3 record (:func:`personagap.datasets.dataset_records`): the scale every
            judge is scored over and the question a section is titled with. A dataset missing from it is read
            the way the record reader infers one (pairs: A/B/tie; single responses: nominal over the labels).
        aspects: Dataset -> the other questions its raters answered (:func:`parse_aspects`).
    """
    judges: list[JudgeResult] = []
    humans: list[HumanBias] = []
    gaps: list[ProfileGap] = []
    gvp: list[GenericVsPersonalized] = []
    singles: list[SingleResponseReport] = []
    if labels.empty or items.empty:
        return ResponseReport(judges=judges, humans=humans, profile_gaps=gaps, generic_vs_personalized=gvp,
                              usr=None, n_resamples=n_resamples, seed=seed)
    item_index = items.set_index("item_id")
    datasets = sorted(map(str, labels["dataset"].unique()))
    for dataset in datasets:
        frame = labels[labels["dataset"] == dataset]
        ds_items = item_index[item_index["dataset"] == dataset]
        record = (records or {}).get(dataset)
        pair_frame = frame[frame["item_id"].isin(ds_items.index[ds_items["kind"] == "pairwise"])]
        if not pair_frame.empty:
            js, hb, gp = _pairwise_dataset(pair_frame, ds_items, dataset, scale=_PAIRWISE_SCALE,
                                           n_resamples=n_resamples, seed=seed)
            judges += js
            humans += hb
            gaps += gp
        gvp_frame = frame[frame["item_id"].isin(ds_items.index[ds_items["kind"] == GVP_KIND])]
        if not gvp_frame.empty:
            gvp += _gvp_dataset(gvp_frame, ds_items, dataset, n_resamples=n_resamples, seed=seed)
        single_frame = frame[frame["item_id"].isin(ds_items.index[ds_items["kind"].isin(SINGLE_KINDS)])]
        if not single_frame.empty:
            single_record = record if record is not None and record.item_kind == "single" else _inferred(
                dataset, single_frame)
            js, section = _single_dataset(single_frame, single_record, (aspects or {}).get(dataset, []),
                                          n_resamples=n_resamples, seed=seed)
            judges += js
            singles += [section] if section is not None else []
    # The test needs several humans per item (USR; PRISM rows say why not); the human rate is corrected for yes/no
    # datasets only (an A/B/tie preference has no single "positive" label).
    binary = [ds for ds in datasets if set(labels.loc[(labels["dataset"] == ds) & labels["label"].notna(), "label"])
              <= set(_YES_NO)]
    scales = {ds: r.scale for ds, r in (records or {}).items()}
    alt_test, estimates = report_extras(labels, datasets, positive="yes", rate_datasets=binary,
                                        n_resamples=n_resamples, seed=seed, scales=scales)
    out = ResponseReport(judges=judges, humans=humans, profile_gaps=gaps, generic_vs_personalized=gvp,
                         single_responses=singles, alt_test=alt_test, estimates=estimates, n_resamples=n_resamples,
                         seed=seed)
    out.origin_comparison = tag_and_compare(out, origins or {}, lambda: ((j.judge, j) for j in out.judges))
    out.usr = _legacy_usr(out.single_responses)
    return out


_PAIRWISE_SCALE = DatasetScale(kind="pairwise", categories=PAIRWISE_LABELS)


def _inferred(dataset: str, frame: pd.DataFrame) -> DatasetRecord:
    """The record of single-response items no stored single-response record describes (the reader's rule)."""
    from personagap.datasets import build_records

    kinds = pd.DataFrame({"stage": ["response"], "dataset": [dataset], "item_kind": ["single"], "n": [1]})
    kept = frame[frame["label"].notna() & frame["item_id"].isin(_human_labelled(frame))]
    rows = kept.assign(stage="response")[["stage", "dataset", "rater_kind", "condition", "label"]].drop_duplicates()
    return build_records(kinds, rows, {})[("response", dataset)]


def _human_labelled(frame: pd.DataFrame) -> set[str]:
    return set(frame.loc[roles(frame).isin(["blind_human", "anchored_human"]) & frame["label"].notna(), "item_id"])


def _pairwise_dataset(frame: pd.DataFrame, items: pd.DataFrame, dataset: str, *, scale: DatasetScale,
                      n_resamples: int, seed: int) -> tuple[list[JudgeResult], list[HumanBias], list[ProfileGap]]:
    ref = _reference(frame)
    len_a = items["answer_a"].str.len()
    len_b = items["answer_b"].str.len()
    results = []
    judge_rows = frame[comparable_judge_mask(frame)]
    verdicts: dict[tuple[str, str], pd.Series] = {}
    for (rater, condition), rows in judge_rows.groupby(["rater", "condition"], sort=True):
        verdicts[(str(rater), str(condition))] = rows[rows["label"].notna()].set_index("item_id")["label"]
    for (rater, condition, kind), rows in judge_rows.groupby(["rater", "condition", "rater_kind"], sort=True):
        if str(condition).endswith(REVERSED):
            continue  # the reverse-order run feeds swap consistency, not a separate judge row
        rater, condition = str(rater), str(condition)
        failed = rows[rows["label"].isna()]
        parsed = rows[rows["label"].notna()].drop_duplicates("item_id").set_index("item_id")
        joined = parsed.join(ref.rename("human"), how="inner")
        if joined.empty:
            continue
        ids = joined.index
        clusters = items.loc[ids, "user_id"].to_numpy()
        judge = joined["label"].to_numpy(dtype=object)
        human = joined["human"].to_numpy(dtype=object)
        est = scale_estimates(joined["human"], joined["label"], pd.Series(clusters), scale,
                              n_resamples=n_resamples, seed=seed)
        swapped = np.array([bool(_meta(m).get("swapped", False)) for m in joined["meta"]])
        first = first_position_rate(judge, swapped, clusters, n_resamples=n_resamples, seed=seed)
        longer = longer_rate(judge, len_a.loc[ids], len_b.loc[ids], clusters, n_resamples=n_resamples, seed=seed)
        not_tie = human != "tie"
        reverse = verdicts.get((rater, condition + REVERSED))
        consistency, swap_n = float("nan"), 0
        if reverse is not None:
            both = parsed.index.intersection(reverse.index)
            swap_n = len(both)
            consistency = swap_consistency(parsed.loc[both, "label"].to_numpy(), reverse.loc[both].to_numpy())
        by_group = {}
        for col in ("split", "tier"):
            groups = items.loc[ids, col]
            for value in sorted(groups.dropna().unique()):
                mask = (groups == value).to_numpy()
                by_group[f"{col}={value}"] = GroupAccuracy(n=int(mask.sum()),
                                                           accuracy=float((judge[mask] == human[mask]).mean()))
        results.append(JudgeResult(
            judge=judge_display(rater, condition), rater=rater, condition=condition, dataset=dataset,
            rater_kind=str(kind), reference="human", scale=scale.kind, n=len(joined), n_users=len(set(clusters)),
            accuracy=est["accuracy"].value, accuracy_ci=ci_list(est["accuracy"]),
            kappa=est["kappa"].value, kappa_ci=ci_list(est["kappa"]), undefined_resamples=est["kappa"].n_undefined,
            failures=len(failed), failure_reasons=dict(Counter(_reason_kind(e) for e in failed["error"])),
            accuracy_failures_as_wrong=float((judge == human).sum()
                                             / (len(joined) + int(failed["item_id"].isin(ref.index).sum()))),
            first_position_rate=first.value, first_position_ci=ci_list(first),
            longer_rate=longer.value, longer_ci=ci_list(longer),
            tie_rate=float((judge == "tie").mean()), human_tie_rate=float((~not_tie).mean()),
            accuracy_without_human_ties=float((judge[not_tie] == human[not_tie]).mean()) if not_tie.any()
            else float("nan"),
            always_a_accuracy=float((baseline_labels("always-A", len_a.loc[ids], len_b.loc[ids]) == human).mean()),
            always_longer_accuracy=float(
                (baseline_labels("always-longer", len_a.loc[ids], len_b.loc[ids]) == human).mean()),
            swap_consistency=consistency, swap_pairs=swap_n, by_group=by_group, **panel_values(est),
        ))

    human_rows = []
    if not ref.empty:
        ids = ref.index.intersection(items.index)
        h = ref.loc[ids].to_numpy(dtype=object)
        clusters = items.loc[ids, "user_id"].to_numpy()
        shown = bool(items.loc[ids, "order_shown"].all())
        first = first_position_rate(h, np.zeros(len(h), dtype=bool), clusters, n_resamples=n_resamples, seed=seed)
        longer = longer_rate(h, len_a.loc[ids], len_b.loc[ids], clusters, n_resamples=n_resamples, seed=seed)
        raters = sorted(frame.loc[blind_human_mask(frame), "rater"].unique())
        human_rows.append(HumanBias(
            dataset=dataset, rater=", ".join(map(str, raters)), n=len(h), n_users=len(set(clusters)),
            first_position_rate=first.value if shown else None, first_position_ci=ci_list(first) if shown else None,
            longer_rate=longer.value, longer_ci=ci_list(longer), tie_rate=float((h == "tie").mean()),
            baselines={b: float((baseline_labels(b, len_a.loc[ids], len_b.loc[ids]) == h).mean())
                       for b in BASELINES},
        ))

    gaps = []
    for (rater, cond_with), with_labels in sorted(verdicts.items()):
        base, _, suffix = cond_with.partition("+")
        if base == NO_PROFILE or cond_with.endswith(REVERSED):
            continue
        cond_without = NO_PROFILE + (f"+{suffix}" if suffix else "")
        without = verdicts.get((rater, cond_without))
        if without is None:
            continue
        # A paired gap needs both verdicts on the same human-labelled item: only those items count.
        n_with = len(with_labels.index.intersection(ref.index))
        n_without = len(without.index.intersection(ref.index))
        ids = with_labels.index.intersection(without.index).intersection(ref.index)
        if len(ids) == 0:
            continue
        acc_with, acc_without, gap = accuracy_gap(
            ref.loc[ids].to_numpy(dtype=object), with_labels.loc[ids].to_numpy(dtype=object),
            without.loc[ids].to_numpy(dtype=object), items.loc[ids, "user_id"].to_numpy(),
            n_resamples=n_resamples, seed=seed)
        gaps.append(ProfileGap(rater=rater, dataset=dataset, with_condition=cond_with, without_condition=cond_without,
                               n=len(ids), n_with=n_with, n_without=n_without,
                               n_users=int(items.loc[ids, "user_id"].nunique()),
                               accuracy_with=acc_with, accuracy_without=acc_without, gap=gap.value,
                               gap_ci=ci_list(gap)))
    return results, human_rows, gaps


def _gvp_dataset(frame: pd.DataFrame, items: pd.DataFrame, dataset: str, *, n_resamples: int,
                 seed: int) -> list[GenericVsPersonalized]:
    out = []
    judges = frame[comparable_judge_mask(frame)]
    for (rater, condition, kind), rows in judges.groupby(["rater", "condition", "rater_kind"], sort=True):
        if str(condition).endswith(REVERSED):
            continue
        parsed = rows[rows["label"].notna()].drop_duplicates("item_id")
        ids = parsed["item_id"].to_numpy()
        lab = parsed["label"].to_numpy(dtype=object)
        pers = items.loc[ids, "personalized"].to_numpy(dtype=object)
        est = (no_better_rate(lab, pers, items.loc[ids, "user_id"].to_numpy(), n_resamples=n_resamples, seed=seed)
               if len(ids) else NAN_ESTIMATE)
        out.append(GenericVsPersonalized(
            rater=str(rater), condition=str(condition), dataset=dataset, rater_kind=str(kind), n=len(ids),
            n_users=int(items.loc[ids, "user_id"].nunique()) if len(ids) else 0,
            failures=int(rows["label"].isna().sum()), no_better_rate=est.value, no_better_ci=ci_list(est),
            personalized_preferred_rate=float((lab == pers).mean()) if len(ids) else float("nan"),
        ))
    return out


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
    est = scale_estimates(human, labels, clusters, scale, metrics, n_resamples=n_resamples, seed=seed)
    weighted = est.get("weighted_kappa")
    return RaterVsJudge(judge=judge, rater=rater, n=len(human), accuracy=est["accuracy"].value,
                        kappa=est["kappa"].value, kappa_ci=ci_list(est["kappa"]),
                        weighted_kappa=weighted.value if weighted is not None else None,
                        weighted_kappa_ci=ci_list(weighted) if weighted is not None else None)


def _single_dataset(frame: pd.DataFrame, record: DatasetRecord, aspects: list[RatedAspectSpec], *, n_resamples: int,
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
    ref = _reference(frame)
    ref = ref[_on_scale(ref, scale)] if not ref.empty else ref

    judge_results, versus = [], []
    for (rater, condition, kind), rows in frame[comparable_judge_mask(frame)].groupby(
            ["rater", "condition", "rater_kind"], sort=True):
        name = judge_display(str(rater), str(condition))
        parsed = rows[rows["label"].notna()].drop_duplicates("item_id").set_index("item_id")
        on = _on_scale(parsed["label"], scale)
        # A judge's label outside the dataset's scale is no verdict on it: counted as a failure, never scored.
        reasons = Counter(_reason_kind(e) for e in rows.loc[rows["label"].isna(), "error"])
        if (~on).any():
            reasons["off-scale"] += int((~on).sum())
        parsed = parsed[on]
        joined = parsed.join(ref.rename("human"), how="inner")
        if joined.empty:
            continue
        clusters = pd.Series(joined["user_id"].to_numpy())
        est = scale_estimates(joined["human"], joined["label"], clusters, scale, n_resamples=n_resamples, seed=seed)
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


def _legacy_usr(sections: list[SingleResponseReport]) -> UsrReport | None:
    """The deprecated ``usr`` view: USR's section, else the first yes/no one (see :class:`UsrReport`)."""
    pick = next((s for s in sections if s.dataset == USR_DATASET), None) or next(
        (s for s in sections if s.categories == _YES_NO), None)
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


# --------------------------------------------------------------------------- rendering

def _fmt(v: float | None, digits: int = 3) -> str:
    return "n/a" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.{digits}f}"


def _fmt_ci(ci: list[float] | None, n_users: int | None = None) -> str:
    if ci is None:
        return ""
    if n_users is not None and n_users < MIN_USERS_FOR_CI:
        return "(too few users)"
    return f"[{_fmt(ci[0], 2)}, {_fmt(ci[1], 2)}]"


def render_response(report: ResponseReport) -> str:
    """Render the report as plain-text tables for the terminal."""
    lines = [f"Stage 3 — response judgment: judges vs humans (95% CIs: user-clustered bootstrap, "
             f"{report.n_resamples} resamples, seed {report.seed}; no CI below {report.min_users_for_ci} users)",
             f"Human reference where several humans label an item: {report.majority_rule}.", ""]
    pairwise = [j for j in report.judges if j.first_position_rate is not None]
    if pairwise:
        head = (f"{'judge':<44}{'dataset':<16}{'n':>5}{'users':>6}{'fail':>5}{'acc':>7}  {'95% CI':<16}{'kappa':>6}"
                f"{'1st pos':>8}{'longer':>7}{'ties':>6}{'alwaysA':>8}{'longer*':>8}")
        lines += [head, "-" * len(head)]
        for j in pairwise:
            lines.append(f"{j.judge[:43]:<44}{j.dataset[:15]:<16}{j.n:>5}{j.n_users:>6}{j.failures:>5}"
                         f"{_fmt(j.accuracy):>7}  {_fmt_ci(j.accuracy_ci, j.n_users):<16}{_fmt(j.kappa, 2):>6}"
                         f"{_fmt(j.first_position_rate, 2):>8}"
                         f"{_fmt(j.longer_rate, 2):>7}{_fmt(j.tie_rate, 2):>6}{_fmt(j.always_a_accuracy, 2):>8}"
                         f"{_fmt(j.always_longer_accuracy, 2):>8}")
            if j.failure_reasons:
                lines.append(f"{'':<4}failures: " + ", ".join(f"{k} {v}" for k, v in j.failure_reasons.items()))
            if j.undefined_resamples:
                lines.append(f"{'':<4}kappa undefined in {j.undefined_resamples}/{report.n_resamples} resamples "
                             "(left out of its CI)")
            if j.swap_pairs:
                lines.append(f"{'':<4}swap consistency {_fmt(j.swap_consistency, 2)} on {j.swap_pairs} pairs")
        lines += ["", "1st pos = share of A/B verdicts naming the answer shown first; longer = share naming the "
                      "longer answer;", "alwaysA / longer* = accuracy of those trivial baselines on the same items."]
    elif not report.single_responses:
        lines.append("(no pairwise judge shares items with a human label; import prism-judge or personafeedback)")
    if report.humans:
        lines += ["", "Humans (the same biases, measured on the human labels):", ""]
        for h in report.humans:
            pos = (f"1st pos {_fmt(h.first_position_rate, 2)} {_fmt_ci(h.first_position_ci)}"
                   if h.first_position_rate is not None else "1st pos n/a (order not shown to humans)")
            lines.append(f"  {h.dataset}: n {h.n} ({h.n_users} users), {pos}, longer {_fmt(h.longer_rate, 2)} "
                         f"{_fmt_ci(h.longer_ci, h.n_users)}, "
                         f"ties {_fmt(h.tie_rate, 2)}; baselines " +
                         ", ".join(f"{k} {_fmt(v, 3)}" for k, v in h.baselines.items()))
    if report.profile_gaps:
        lines += ["", "With vs without the profile (same judge; a paired gap uses only the items judged both ways):",
                  ""]
        for g in report.profile_gaps:
            lines.append(f"  {g.rater} on {g.dataset}: {g.with_condition} {_fmt(g.accuracy_with)} vs "
                         f"{g.without_condition} {_fmt(g.accuracy_without)} on the {g.n} items both conditions "
                         f"judged (of {g.n_with} judged with the profile, {g.n_without} without): gap "
                         f"{g.gap:+.3f} {ci_text(ci=g.gap_ci, n_users=g.n_users)}")
    groups = [j for j in pairwise if j.by_group]
    if groups:
        lines += ["", "Accuracy by split / tier:", ""]
        for j in groups:
            lines.append(f"  {j.judge} ({j.dataset}): " + ", ".join(
                f"{k} {_fmt(v.accuracy)} (n {v.n})" for k, v in j.by_group.items()))
    if report.generic_vs_personalized:
        lines += ["", "Generic vs personalised answers: share where the personalised one is judged no better:", ""]
        for gp in report.generic_vs_personalized:
            lines.append(f"  {judge_display(gp.rater, gp.condition)} ({gp.dataset}): {_fmt(gp.no_better_rate)} "
                         f"{ci_text(ci=gp.no_better_ci, n_users=gp.n_users)} on {gp.n} pairs, "
                         f"{gp.failures} failures")
    for section in report.single_responses:
        lines += _single_lines(section, [j for j in report.judges if j.dataset == section.dataset
                                         and j.first_position_rate is None], report.n_resamples)
    if report.judges:
        lines += ["", "Prevalence-robust panel (same items and resampled users as kappa):"]
        lines += panel_lines((f"{j.judge} ({where(j.dataset, j.origin)})", j) for j in report.judges)
    lines += origin_lines(report.origin_comparison)
    lines += extras_lines(report.alt_test, report.estimates)
    return "\n".join(lines)


def _single_lines(s: SingleResponseReport, judges: list[JudgeResult], n_resamples: int) -> list[str]:
    """One single-response dataset's section, titled with its question."""
    level = "ordinal" if s.scale == "ordinal" else "nominal"
    lines = ["", s.question,
             f"  {where(s.dataset, s.origin)}: {s.n_items} responses from {s.n_users} users, {s.scale} scale "
             f"{'/'.join(s.categories)}; raters " + ", ".join(f"{r} ({n})" for r, n in s.raters.items()),
             f"  Among raters: Krippendorff's alpha ({level}) {_fmt(s.alpha)} {_fmt_ci(s.alpha_ci, s.n_users)}, "
             f"Fleiss' kappa {_fmt(s.fleiss)} {_fmt_ci(s.fleiss_ci, s.n_users)}; human reference: "
             + ", ".join(f"{c} {_fmt(v, 2)}" for c, v in s.reference_rates.items()),
             "  per rater: " + ", ".join(f"{r} mean kappa with others {_fmt(k, 2)}"
                                         for r, k in s.rater_mean_kappa.items())]
    for a in s.aspects:
        lines.append(f"  Also rated: {a.question} ({a.scale} {'/'.join(a.categories)}): Krippendorff's alpha "
                     f"{_fmt(a.alpha)} {_fmt_ci(a.alpha_ci, s.n_users)} on {a.n_items} responses")
    if not judges:
        lines.append("  (no judge has labelled these responses yet)")
        return lines
    lines.append("  judges vs the human majority (n items, users, kappa with 95% CI"
                 + (", quadratic-weighted kappa" if s.scale == "ordinal" else "") + "):")
    for j in judges:
        weighted = (f", weighted kappa {_fmt(j.weighted_kappa)} {_fmt_ci(j.weighted_kappa_ci, j.n_users)}"
                    if j.weighted_kappa is not None else "")
        lines.append(f"    {j.judge}: n {j.n}, {j.n_users} users, accuracy {_fmt(j.accuracy)}, kappa {_fmt(j.kappa)} "
                     f"{_fmt_ci(j.kappa_ci, j.n_users)}{weighted}, {j.failures} failures")
        if j.undefined_resamples:
            lines.append(f"      kappa undefined in {j.undefined_resamples}/{n_resamples} resamples "
                         "(left out of its CI)")
    others = [v for v in s.judges if v.rater != "majority"]
    if others:
        lines.append("  judges vs each rater (Cohen's kappa): " + "; ".join(
            f"{v.judge} vs {v.rater} {_fmt(v.kappa, 2)} (n {v.n})" for v in others))
    return lines
