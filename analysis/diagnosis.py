"""One diagnosis, two faces: which pipeline stage's automated evaluation is furthest from humans.

The dashboard's Overview and ``personagap diagnose`` both call :func:`diagnose`, a
pure function over small DataFrames that SQL aggregates out of the store (see
:func:`load_inputs`). Working from per-user confusion counts instead of raw labels
keeps it fast at a million stored labels: the database does the counting and the
user-clustered bootstrap of :mod:`personagap.analysis.agreement` runs on tables.

Human reference, per item: the stored ``human_majority`` label where there is one
(condition ''), otherwise the unique most frequent label among individual humans
(condition ''); items where humans tie have no reference. A judge is every rater
of kind llm/trained/baseline, one entry per (dataset, rater, condition).
"""

from __future__ import annotations

import functools
import math
from pathlib import Path
from typing import Any, cast

import duckdb
import numpy as np
import pandas as pd
from pydantic import BaseModel, Field

from personagap.analysis.agreement import (
    DEFAULT_RESAMPLES,
    DEFAULT_SEED,
    FloatArray,
    ci_list,
    estimate,
    json_safe_dict,
    resample_weights,
)
from personagap.analysis.pairwise import pairwise_agreement

STAGES: tuple[str, ...] = ("extraction", "relevance", "response")
STAGE_TITLES: dict[str, str] = {
    "extraction": "Stage 1 — attribute extraction",
    "relevance": "Stage 2 — relevance selection",
    "response": "Stage 3 — personalised response",
}
JUDGE_KINDS: tuple[str, ...] = ("llm", "trained", "baseline")
#: Judges with fewer shared items than this are listed but not eligible as best/worst.
MIN_ITEMS_FOR_RANKING = 20
_BINARY_CODES = {"no": 0, "yes": 1}

# Static SQL (no user input is ever formatted into it): per item, the human reference label.
REFERENCE_SQL = """
    ref_major AS (
        SELECT item_id, any_value(label) AS human
        FROM labels
        WHERE rater_kind = 'human_majority' AND condition = '' AND label IS NOT NULL
        GROUP BY item_id
    ),
    human_votes AS (
        SELECT item_id, label, count(*) AS c
        FROM labels
        WHERE rater_kind = 'human' AND condition = '' AND label IS NOT NULL
          AND item_id NOT IN (SELECT item_id FROM ref_major)
        GROUP BY item_id, label
    ),
    vote_top AS (
        SELECT item_id, label, c, max(c) OVER (PARTITION BY item_id) AS top FROM human_votes
    ),
    ref_vote AS (
        SELECT item_id, any_value(label) AS human FROM vote_top WHERE c = top
        GROUP BY item_id HAVING count(*) = 1
    ),
    reference AS (SELECT * FROM ref_major UNION ALL SELECT * FROM ref_vote)
"""


class JudgeScore(BaseModel):
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


class HumanCeiling(BaseModel):
    """Mean pairwise Cohen's kappa among humans who labelled the same items."""

    dataset: str
    mean_kappa: float
    ci: list[float]
    n_raters: int
    n_pairs: int
    n_items: int


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
    ceiling: HumanCeiling | None


class Diagnosis(BaseModel):
    """Per stage, the best and worst judge against humans, the human ceiling, and the verdict."""

    stages: list[StageDiagnosis]
    worst_stage: str | None = Field(description="The stage whose best judge is furthest from humans.")
    verdict: str
    n_resamples: int
    seed: int

    def stage(self, name: str) -> StageDiagnosis:
        """Return the diagnosis of one stage by name ('extraction', 'relevance', 'response')."""
        return next(s for s in self.stages if s.stage == name)

    def to_json_dict(self) -> dict[str, Any]:
        """Return JSON-safe data (NaN becomes null)."""
        return json_safe_dict(self.model_dump())




def _finite(x: float | None) -> bool:
    return x is not None and not math.isnan(x)


# --------------------------------------------------------------------------- loading (SQL)

def load_inputs(con: duckdb.DuckDBPyConnection) -> dict[str, pd.DataFrame]:
    """Aggregate what :func:`diagnose` needs out of an open store connection.

    Every query is static SQL; the heavy lifting (joins, counts) happens in DuckDB.

    Args:
        con: An open (read-only is enough) store connection.

    Returns:
        ``pairs``, ``failures``, ``humans`` and ``inventory`` frames, as :func:`diagnose` takes them.
    """
    pairs = con.execute(f"""
        WITH {REFERENCE_SQL}
        SELECT i.stage, i.dataset, l.rater, l.rater_kind, l.condition, i.user_id, r.human, l.label,
               count(*) AS n
        FROM labels l JOIN reference r USING (item_id) JOIN items i USING (item_id)
        WHERE l.rater_kind IN ('llm', 'trained', 'baseline') AND l.label IS NOT NULL
        GROUP BY ALL
    """).df()
    failures = con.execute("""
        SELECT i.stage, i.dataset, l.rater, l.rater_kind, l.condition, count(*) AS failures
        FROM labels l JOIN items i USING (item_id)
        WHERE l.rater_kind IN ('llm', 'trained', 'baseline') AND l.label IS NULL
        GROUP BY ALL
    """).df()
    # Only items that at least two individual humans labelled can say anything about the ceiling.
    humans = con.execute("""
        WITH multi AS (
            SELECT item_id FROM labels
            WHERE rater_kind = 'human' AND condition = '' AND label IS NOT NULL
            GROUP BY item_id HAVING count(*) >= 2
        )
        SELECT i.stage, i.dataset, l.item_id, l.rater, l.label, i.user_id
        FROM labels l JOIN multi USING (item_id) JOIN items i USING (item_id)
        WHERE l.rater_kind = 'human' AND l.condition = '' AND l.label IS NOT NULL
    """).df()
    inventory = con.execute("""
        SELECT i.stage, count(DISTINCT i.item_id) AS n_items, count(l.item_id) AS n_labels,
               count(l.item_id) FILTER (WHERE l.rater_kind IN ('human', 'human_majority')) AS n_human_labels,
               count(l.item_id) FILTER (WHERE l.rater_kind IN ('llm', 'trained', 'baseline')) AS n_judge_labels
        FROM items i LEFT JOIN labels l USING (item_id)
        GROUP BY i.stage
    """).df()
    return {"pairs": pairs, "failures": failures, "humans": humans, "inventory": inventory}


def diagnose_db(db: str | Path, *, n_resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED) -> Diagnosis:
    """Build the diagnosis from a database file, opened read-only for one short batch of queries.

    Raises:
        personagap.store.StoreError: The file is missing, not a PersonaGap store, or held by a writer too long.
    """
    from personagap.store import opened

    with opened(db, read_only=True) as con:
        inputs = load_inputs(con)
    return diagnose(**inputs, n_resamples=n_resamples, seed=seed)


# --------------------------------------------------------------------------- pure analysis

@functools.lru_cache(maxsize=16)
def _weights(n_users: int, n_resamples: int, seed: int) -> FloatArray:
    # The same draw agreement.agreement() makes for this many users and this seed, so CIs match
    # `personagap report`; drawing it once per size instead of once per judge saves ~0.1 s a judge.
    weights = resample_weights(n_users, n_resamples, seed)
    weights.setflags(write=False)
    return weights


def judge_score(rows: pd.DataFrame, *, stage: str, dataset: str, rater: str, rater_kind: str, condition: str,
                failures: int, n_resamples: int, seed: int) -> JudgeScore:
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
    """
    seen = {str(v) for v in pd.unique(pd.concat([rows["human"], rows["label"]], ignore_index=True))}
    binary = seen <= set(_BINARY_CODES)
    categories = ["no", "yes"] if binary else sorted(seen)
    k = len(categories)
    # Integer codes via factorize/Categorical: per-element Python work is what costs at 10^6 labels.
    # Users sorted by id (as agreement() does), not in SQL row order: the same seed must draw the same users
    # whatever order DuckDB returns the rows in, or CIs would change from run to run.
    users, user_index = np.unique(rows["user_id"].astype(str).to_numpy(), return_inverse=True)
    h = pd.Categorical(rows["human"].astype(str), categories=categories).codes.astype(np.int64)
    j = pd.Categorical(rows["label"].astype(str), categories=categories).codes.astype(np.int64)
    flat = (user_index.astype(np.int64) * k + h) * k + j
    # With weights bincount returns float64; numpy's stubs type it as an integer array.
    tables = cast(FloatArray, np.bincount(flat, weights=rows["n"].to_numpy(dtype=float), minlength=len(users) * k * k))
    tables = tables.reshape(len(users), k, k)
    weights = _weights(len(users), n_resamples, seed)
    kap = estimate(tables, "kappa", weights)
    acc = estimate(tables, "accuracy", weights)
    total = tables.sum(axis=0)
    extra: dict[str, Any] = {}
    if binary:
        over = estimate(tables, "over_selection", weights)
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
    judge = rater if not condition else f"{rater} [{condition}]"
    return JudgeScore(
        stage=stage, dataset=dataset, judge=judge, rater=rater, rater_kind=rater_kind, condition=condition,
        n=int(total.sum()), n_users=len(users), failures=failures, categories=categories,
        confusion=total.astype(int).tolist(), kappa=kap.value, kappa_ci=ci_list(kap), accuracy=acc.value,
        accuracy_ci=ci_list(acc), binary=binary, **extra,
    )


def human_ceiling(humans: pd.DataFrame, *, n_resamples: int, seed: int, min_overlap: int = 10) -> HumanCeiling | None:
    """Mean pairwise kappa among individual humans on one dataset (None when no two share items).

    Args:
        humans: Columns ``dataset``, ``item_id``, ``rater``, ``label``, ``user_id`` for one dataset.
        n_resamples: Bootstrap resamples.
        seed: Bootstrap seed.
        min_overlap: Rater pairs sharing fewer items are left out.
    """
    if humans.empty or humans["rater"].nunique() < 2:
        return None
    labels, _ = pd.factorize(humans["label"], sort=True)
    # Integer codes for item, label and cluster: pairwise_agreement's encoding and pivot are much faster on ints.
    # Clusters coded in user-id order, not in row order: the bootstrap draws users by code, and SQL row order
    # varies from run to run, which would move the CI.
    frame = pd.DataFrame({"item_id": pd.factorize(humans["item_id"])[0],
                          "rater": humans["rater"].astype(str).to_numpy(),
                          "label": labels, "cluster": pd.factorize(humans["user_id"], sort=True)[0]})
    frame = frame.drop_duplicates(["item_id", "rater"])
    groups = {str(r): "human" for r in frame["rater"].unique()}
    result = pairwise_agreement(frame, groups, min_overlap=min_overlap, n_resamples=n_resamples, seed=seed)
    g = result.groups.get("human–human")
    if g is None or not _finite(g.mean_kappa.value):
        return None
    return HumanCeiling(dataset=str(humans["dataset"].iloc[0]), mean_kappa=g.mean_kappa.value, ci=ci_list(g.mean_kappa),
                        n_raters=len(groups), n_pairs=g.n_pairs, n_items=int(frame["item_id"].nunique()))


def _fmt(v: float | None, digits: int = 2) -> str:
    return "n/a" if not _finite(v) else f"{v:.{digits}f}"


def _kappa_text(j: JudgeScore) -> str:
    return f"kappa {_fmt(j.kappa)} [95% CI {_fmt(j.kappa_ci[0])}, {_fmt(j.kappa_ci[1])}]"


def _stage_message(status: str, stage: str, best: JudgeScore | None, ceiling: HumanCeiling | None) -> str:
    number = STAGES.index(stage) + 1
    ceiling_text = (f" Humans among themselves: mean kappa {_fmt(ceiling.mean_kappa)} "
                    f"[{_fmt(ceiling.ci[0])}, {_fmt(ceiling.ci[1])}] ({ceiling.dataset})." if ceiling else "")
    if status == "no_data":
        return f"No stage-{number} data yet: import a human-label release or run a {stage} judge."
    if status == "no_reference":
        return f"Stage {number} has items but no human labels to compare judges with." + ceiling_text
    if status == "no_judges":
        return f"Stage {number} has human labels but no judge labels yet." + ceiling_text
    assert best is not None
    return f"Best judge {best.judge} ({best.dataset}): {_kappa_text(best)} against humans." + ceiling_text


def diagnose(pairs: pd.DataFrame, failures: pd.DataFrame, humans: pd.DataFrame, inventory: pd.DataFrame, *,
             n_resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED,
             min_items: int = MIN_ITEMS_FOR_RANKING) -> Diagnosis:
    """Diagnose every stage from aggregated store data (pure: no I/O).

    Args:
        pairs: Per (stage, dataset, rater, rater_kind, condition, user_id, human, label) the count ``n`` of
            items where the judge gave ``label`` and the human reference ``human``.
        failures: Per (stage, dataset, rater, rater_kind, condition) the count ``failures`` of unparseable answers.
        humans: Individual human labels (columns stage, dataset, item_id, rater, label, user_id) on items
            that at least two humans labelled.
        inventory: Per stage ``n_items``, ``n_labels``, ``n_human_labels``, ``n_judge_labels``.
        n_resamples: Bootstrap resamples for every CI (whole users are resampled).
        seed: Bootstrap seed.
        min_items: Judges sharing fewer items with humans are not ranked as best/worst.

    Returns:
        The diagnosis of all three stages and a one-sentence verdict.
    """
    fail_count = {(r.stage, r.dataset, r.rater, r.condition): int(r.failures) for r in failures.itertuples()}
    inv = inventory.set_index("stage") if not inventory.empty else inventory
    stages = []
    for stage in STAGES:
        counts = inv.loc[stage] if stage in inv.index else None
        n_items = int(counts["n_items"]) if counts is not None else 0
        n_human = int(counts["n_human_labels"]) if counts is not None else 0
        n_judge = int(counts["n_judge_labels"]) if counts is not None else 0
        judges = []
        stage_pairs = pairs[pairs["stage"] == stage]
        for (dataset, rater, kind, condition), rows in stage_pairs.groupby(
                ["dataset", "rater", "rater_kind", "condition"], sort=True):
            judges.append(judge_score(rows, stage=stage, dataset=str(dataset), rater=str(rater), rater_kind=str(kind),
                                      condition=str(condition),
                                      failures=fail_count.get((stage, dataset, rater, condition), 0),
                                      n_resamples=n_resamples, seed=seed))
        judges.sort(key=lambda j: (not _finite(j.kappa), -(j.kappa if _finite(j.kappa) else 0.0), j.judge, j.dataset))
        ranked = [j for j in judges if _finite(j.kappa) and j.n >= min_items] or [j for j in judges if _finite(j.kappa)]
        ceilings = [c for ds, rows in humans[humans["stage"] == stage].groupby("dataset", sort=True)
                    if (c := human_ceiling(rows, n_resamples=n_resamples, seed=seed)) is not None]
        ceiling = max(ceilings, key=lambda c: (c.n_items, c.n_pairs)) if ceilings else None
        if n_items == 0:
            status = "no_data"
        elif ranked:
            status = "ok"
        elif n_human == 0:
            status = "no_reference"
        else:
            status = "no_judges" if n_judge == 0 or not judges else "no_reference"
        best, worst = (ranked[0], ranked[-1]) if ranked else (None, None)
        stages.append(StageDiagnosis(
            stage=stage, title=STAGE_TITLES[stage], status=status, message=_stage_message(status, stage, best, ceiling),
            n_items=n_items, n_labels=int(counts["n_labels"]) if counts is not None else 0, n_human_labels=n_human,
            n_judge_labels=n_judge, judges=judges, best=best, worst=worst, ceiling=ceiling,
        ))
    worst_stage, verdict = _verdict(stages)
    return Diagnosis(stages=stages, worst_stage=worst_stage, verdict=verdict, n_resamples=n_resamples, seed=seed)


def _verdict(stages: list[StageDiagnosis]) -> tuple[str | None, str]:
    scored = [s for s in stages if s.best is not None]
    missing = [s for s in stages if s.best is None]
    missing_text = ""
    if missing:
        names = " and ".join(f"stage {STAGES.index(s.stage) + 1} ({s.stage})" for s in missing)
        missing_text = f" No judge-vs-human comparison yet for {names}."
    if not scored:
        return None, "No stage has both judge and human labels yet, so no stage can be diagnosed." + missing_text
    # Furthest from humans = even the stage's best judge agrees least with them.
    worst = min(scored, key=lambda s: s.best.kappa if s.best else math.inf)
    assert worst.best is not None
    number = STAGES.index(worst.stage) + 1
    gap = ""
    if worst.ceiling is not None:
        gap = (f", while humans agree with each other at mean kappa {_fmt(worst.ceiling.mean_kappa)} "
               f"[{_fmt(worst.ceiling.ci[0])}, {_fmt(worst.ceiling.ci[1])}]")
    lead = ("Automated evaluation is furthest from humans at" if len(scored) > 1
            else "Only one stage can be compared with humans so far:")
    sentence = (f"{lead} stage {number} ({worst.stage}): its best judge, {worst.best.judge} on "
                f"{worst.best.dataset}, reaches only {_kappa_text(worst.best)} against humans{gap}.")
    return worst.stage, sentence + missing_text


def render_diagnosis(d: Diagnosis) -> str:
    """Render the diagnosis as plain text for the terminal."""
    lines = [f"Diagnosis (95% CIs: user-clustered bootstrap, {d.n_resamples} resamples, seed {d.seed})", ""]
    for s in d.stages:
        lines.append(f"{s.title}: {s.n_items} items, {s.n_human_labels} human labels, {s.n_judge_labels} judge labels")
        if s.best is not None and s.worst is not None:
            lines.append(f"  best judge:  {s.best.judge} ({s.best.dataset}, n={s.best.n}): {_kappa_text(s.best)}")
            lines.append(f"  worst judge: {s.worst.judge} ({s.worst.dataset}, n={s.worst.n}): {_kappa_text(s.worst)}")
        if s.ceiling is not None:
            c = s.ceiling
            lines.append(f"  human ceiling: mean pairwise kappa {_fmt(c.mean_kappa)} "
                         f"[{_fmt(c.ci[0])}, {_fmt(c.ci[1])}] ({c.dataset}, {c.n_raters} humans, {c.n_pairs} pairs)")
        if s.best is None:
            lines.append(f"  {s.message}")
        lines.append("")
    lines.append(d.verdict)
    return "\n".join(lines)
