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
* ``usr-personachat``: rater-rater agreement on "uses the persona" (and Overall), and each
  ``persona-use`` judge against every rater and the rater majority;
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
    categories_for,
    comparable_judge_mask,
    reference_labels,
)
from personagap.analysis.diagnosis import declared_categories, stage_declared
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
from personagap.analysis.response import (
    BASELINES,
    accuracy_gap,
    baseline_labels,
    first_position_rate,
    judge_vs_human,
    longer_rate,
    majority,
    no_better_rate,
    rater_agreement,
    rater_pairs,
    swap_consistency,
)
from personagap.human_data.personafeedback import load_personafeedback
from personagap.human_data.prism import ResponseImport, load_prism
from personagap.human_data.usr import load_usr
from personagap.store import gc_paused, load_labels, opened, write_batch

if TYPE_CHECKING:
    from personagap.judges.runner import LMConfig, RunSummary

__all__ = ["HUMAN_KINDS", "JUDGE_KINDS", "ResponseReport", "import_personafeedback", "import_prism", "import_usr",
           "judge_response", "load_items", "render_response", "report_response", "response_report"]
REVERSED = "+reversed"
NO_PROFILE = "no-profile"
GVP_KIND = "generic_vs_personalized"
USR_DATASET = "usr-personachat"
_YES = {"no": 0.0, "yes": 1.0}


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


class UsrReport(OriginField):
    """Persona use (USR PersonaChat, or an imported yes/no dataset): rater agreement, and judges against each rater."""

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
    usr: UsrReport | None
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
        elif kind == "persona_use":
            rec |= {"facts": p["facts"], "context": p["context"], "response": p["response"]}
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
        declared = stage_declared(declared_categories(con), "response")
    return response_report(labels, items, n_resamples=n_resamples, seed=seed, origins=origins, declared=declared)


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


def _judge_name(rater: str, condition: str) -> str:
    return f"{rater} [{condition}]" if condition else rater


def _reason_kind(error: str) -> str:
    return str(error).split(":", 1)[0].strip() or "unknown"


def _reference(labels: pd.DataFrame) -> pd.Series:
    """Per item, the blind human label: comparable.py's reference (stored majority, else the majority rule)."""
    return reference_labels(labels, "blind")


def response_report(labels: pd.DataFrame, items: pd.DataFrame, *, n_resamples: int = DEFAULT_RESAMPLES,
                    seed: int = DEFAULT_SEED, origins: Mapping[str, str] | None = None,
                    declared: Mapping[str, list[str]] | None = None) -> ResponseReport:
    """Build the stage-3 report from stored labels and items (pure: no I/O).

    Args:
        labels: :func:`personagap.store.load_labels` with ``stage='response'``.
        items: :func:`load_items`.
        n_resamples: Bootstrap resamples for every CI (clusters = users / dialogue contexts).
        seed: Bootstrap seed.
        origins: Dataset -> ``real`` or ``synthetic``; datasets missing from it are real.
        declared: Dataset -> its declared categories (part of its scale, the categories every judge is scored
            over: :func:`~personagap.analysis.comparable.categories_for`).
    """
    judges: list[JudgeResult] = []
    humans: list[HumanBias] = []
    gaps: list[ProfileGap] = []
    gvp: list[GenericVsPersonalized] = []
    usr = None
    if labels.empty or items.empty:
        return ResponseReport(judges=judges, humans=humans, profile_gaps=gaps, generic_vs_personalized=gvp,
                              usr=usr, n_resamples=n_resamples, seed=seed)
    item_index = items.set_index("item_id")
    for dataset in sorted(map(str, labels["dataset"].unique())):
        frame = labels[labels["dataset"] == dataset]
        ds_items = item_index[item_index["dataset"] == dataset]
        kind_counts = ds_items["kind"].value_counts()
        if kind_counts.get("pairwise", 0):
            pair_frame = frame[frame["item_id"].isin(ds_items.index[ds_items["kind"] == "pairwise"])]
            # The dataset's scale (comparable.py's rule), as diagnose and the panel score it.
            js, hb, gp = _pairwise_dataset(pair_frame, ds_items, dataset,
                                           categories=categories_for(frame, (declared or {}).get(dataset)),
                                           n_resamples=n_resamples, seed=seed)
            judges += js
            humans += hb
            gaps += gp
        if kind_counts.get(GVP_KIND, 0):
            gvp_frame = frame[frame["item_id"].isin(ds_items.index[ds_items["kind"] == GVP_KIND])]
            gvp += _gvp_dataset(gvp_frame, ds_items, dataset, n_resamples=n_resamples, seed=seed)
        if kind_counts.get("persona_use", 0):
            pu_frame = frame[frame["item_id"].isin(ds_items.index[ds_items["kind"] == "persona_use"])]
            js, report = _persona_use_dataset(pu_frame, dataset, n_resamples=n_resamples, seed=seed)
            judges += js
            if dataset == USR_DATASET or usr is None:
                usr = report
    # The test needs several humans per item (USR; PRISM rows say why not); the human rate is corrected for yes/no
    # datasets only (an A/B/tie preference has no single "positive" label).
    datasets = sorted(map(str, labels["dataset"].unique()))
    binary = [ds for ds in datasets if set(labels.loc[(labels["dataset"] == ds) & labels["label"].notna(), "label"])
              <= {"yes", "no"}]
    alt_test, estimates = report_extras(labels, datasets, positive="yes", rate_datasets=binary,
                                        n_resamples=n_resamples, seed=seed)
    out = ResponseReport(judges=judges, humans=humans, profile_gaps=gaps, generic_vs_personalized=gvp, usr=usr,
                         alt_test=alt_test, estimates=estimates, n_resamples=n_resamples, seed=seed)
    out.origin_comparison = tag_and_compare(out, origins or {}, lambda: ((j.judge, j) for j in out.judges))
    return out


def _pairwise_dataset(frame: pd.DataFrame, items: pd.DataFrame, dataset: str, *, categories: list[str],
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
        est = scale_estimates(joined["human"], joined["label"], pd.Series(clusters), categories,
                              ("accuracy", "kappa", *panel_metrics(False)), n_resamples=n_resamples, seed=seed)
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
            judge=_judge_name(rater, condition), rater=rater, condition=condition, dataset=dataset,
            rater_kind=str(kind), reference="human", n=len(joined), n_users=len(set(clusters)),
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


def _persona_use_dataset(frame: pd.DataFrame, dataset: str, *, n_resamples: int,
                         seed: int) -> tuple[list[JudgeResult], UsrReport | None]:
    main = frame[frame["condition"] == ""]
    human_rows = main[blind_human_mask(main) & (main["rater_kind"] == "human") & main["label"].notna()]
    if human_rows.empty:
        return [], None
    wide = human_rows.pivot_table(index="item_id", columns="rater", values="label", aggfunc="first")
    codes = wide.map(lambda v: _YES.get(v, np.nan) if isinstance(v, str) else np.nan)
    cluster = human_rows.drop_duplicates("item_id").set_index("item_id")["user_id"].reindex(wide.index)
    agree = rater_agreement(codes, [0.0, 1.0], cluster.to_numpy(), "nominal", n_resamples=n_resamples, seed=seed)

    overall_rows = frame[(frame["condition"] == "overall") & (frame["rater_kind"] == "human") & frame["label"].notna()]
    overall_alpha = NAN_ESTIMATE
    if not overall_rows.empty:
        ow = overall_rows.pivot_table(index="item_id", columns="rater", values="label", aggfunc="first")
        ow = ow.map(lambda v: float(v) if isinstance(v, str) else np.nan)
        oc = overall_rows.drop_duplicates("item_id").set_index("item_id")["user_id"].reindex(ow.index)
        overall_alpha = rater_agreement(ow, [1.0, 2.0, 3.0, 4.0, 5.0], oc.to_numpy(), "ordinal",
                                        n_resamples=n_resamples, seed=seed)["alpha"]

    pairs = rater_pairs(human_rows.rename(columns={"user_id": "cluster"})[["item_id", "rater", "label", "cluster"]],
                        n_resamples=n_resamples, seed=seed)
    matrix = {str(r): {str(c): json_safe(float(pairs.matrix.loc[r, c])) for c in pairs.matrix.columns}
              for r in pairs.matrix.index}
    mean_kappa = {}
    for r in pairs.matrix.index:
        others = pairs.matrix.loc[r].drop(r).dropna()
        mean_kappa[str(r)] = float(others.mean()) if not others.empty else None
    maj = majority(wide).dropna()

    judge_results, versus = [], []
    judge_rows = main[comparable_judge_mask(main)]
    for (rater, kind), rows in judge_rows.groupby(["rater", "rater_kind"], sort=True):
        failed = rows[rows["label"].isna()]
        parsed = rows[rows["label"].notna()].drop_duplicates("item_id").set_index("item_id")
        joined = parsed.join(maj.rename("human"), how="inner")
        if joined.empty:
            continue
        h = joined["human"].map(_YES).to_numpy().astype(int)
        j = joined["label"].map(_YES).to_numpy().astype(int)
        est = judge_vs_human(h, j, joined["user_id"].to_numpy(), n_resamples=n_resamples, seed=seed,
                             extra=panel_metrics(True))
        judge_results.append(JudgeResult(
            judge=str(rater), rater=str(rater), condition="", dataset=dataset, rater_kind=str(kind),
            reference="human majority (uses knowledge)", n=len(joined), n_users=int(joined["user_id"].nunique()),
            accuracy=est["accuracy"].value, accuracy_ci=ci_list(est["accuracy"]), kappa=est["kappa"].value,
            kappa_ci=ci_list(est["kappa"]), undefined_resamples=est["kappa"].n_undefined, failures=len(failed),
            failure_reasons=dict(Counter(_reason_kind(e) for e in failed["error"])), **panel_values(est),
        ))
        versus.append(RaterVsJudge(judge=str(rater), rater="majority", n=len(joined), accuracy=est["accuracy"].value,
                                   kappa=est["kappa"].value, kappa_ci=ci_list(est["kappa"])))
        for human_rater in wide.columns:
            col = wide[human_rater].dropna()
            both = parsed.index.intersection(col.index)
            if len(both) == 0:
                continue
            hr = col.loc[both].map(_YES).to_numpy().astype(int)
            jr = parsed.loc[both, "label"].map(_YES).to_numpy().astype(int)
            e = judge_vs_human(hr, jr, parsed.loc[both, "user_id"].to_numpy(), n_resamples=n_resamples, seed=seed)
            versus.append(RaterVsJudge(judge=str(rater), rater=str(human_rater), n=len(both),
                                       accuracy=e["accuracy"].value, kappa=e["kappa"].value,
                                       kappa_ci=ci_list(e["kappa"])))
    report = UsrReport(
        dataset=dataset, n_items=len(wide), n_contexts=int(cluster.nunique()),
        raters={str(c): int(wide[c].notna().sum()) for c in wide.columns},
        rater_yes_rate={str(c): float(codes[c].mean()) for c in codes.columns},
        uses_knowledge_alpha=agree["alpha"].value, uses_knowledge_alpha_ci=ci_list(agree["alpha"]),
        uses_knowledge_fleiss=agree["fleiss"].value, uses_knowledge_fleiss_ci=ci_list(agree["fleiss"]),
        overall_alpha=overall_alpha.value, overall_alpha_ci=ci_list(overall_alpha),
        pair_kappa=matrix, rater_mean_kappa=mean_kappa,
        majority_yes_rate=float((maj == "yes").mean()) if not maj.empty else float("nan"), judges=versus,
    )
    return judge_results, report


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
    else:
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
            lines.append(f"  {_judge_name(gp.rater, gp.condition)} ({gp.dataset}): {_fmt(gp.no_better_rate)} "
                         f"{ci_text(ci=gp.no_better_ci, n_users=gp.n_users)} on {gp.n} pairs, "
                         f"{gp.failures} failures")
    if report.usr is not None:
        u = report.usr
        title = "USR PersonaChat" if u.dataset == USR_DATASET else f"Persona use on {where(u.dataset, u.origin)}"
        lines += ["", f"{title}: {u.n_items} responses in {u.n_contexts} contexts, raters "
                      + ", ".join(f"{r} ({n})" for r, n in u.raters.items()), "",
                  f"  'Uses Knowledge' among raters: Krippendorff's alpha {_fmt(u.uses_knowledge_alpha)} "
                  f"{_fmt_ci(u.uses_knowledge_alpha_ci, u.n_contexts)}, Fleiss' kappa "
                  f"{_fmt(u.uses_knowledge_fleiss)} {_fmt_ci(u.uses_knowledge_fleiss_ci, u.n_contexts)}; "
                  f"majority yes-rate {_fmt(u.majority_yes_rate, 2)}",
                  f"  'Overall' (1-5) among raters: Krippendorff's alpha (ordinal) {_fmt(u.overall_alpha)} "
                  f"{_fmt_ci(u.overall_alpha_ci, u.n_contexts)}",
                  "  per rater: " + ", ".join(f"{r} yes-rate {_fmt(u.rater_yes_rate[r], 2)}, mean kappa with others "
                                              f"{_fmt(k, 2)}" for r, k in u.rater_mean_kappa.items())]
        if u.judges:
            lines.append("  persona-use judges vs raters (Cohen's kappa):")
            for v in u.judges:
                lines.append(f"    {v.judge} vs {v.rater}: n {v.n}, accuracy {_fmt(v.accuracy)}, kappa "
                             f"{_fmt(v.kappa)} {_fmt_ci(v.kappa_ci)}")
        else:
            lines.append("  (no persona-use judge yet: personagap judge response --judge persona-use --model M)")
    if report.judges:
        lines += ["", "Prevalence-robust panel (same items and resampled users as kappa):"]
        lines += panel_lines((f"{j.judge} ({where(j.dataset, j.origin)})", j) for j in report.judges)
    lines += origin_lines(report.origin_comparison)
    lines += extras_lines(report.alt_test, report.estimates)
    return "\n".join(lines)
