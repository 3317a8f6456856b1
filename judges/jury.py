"""A jury: a rater whose label on an item is the vote of several judges' labels (majority, or confidence-weighted).

The jury is stored as a judge of its jurors' kind, so every report, ``diagnose`` and the dashboard score it like any
judge. Two uses: a jury of different judges (``rule="majority"`` or ``"confidence"``), and the majority of one
judge's K samples of each item (:mod:`personagap.judges.repeats`).

Rules (:func:`jury_vote`): ``majority`` is the project's one majority rule
(:func:`personagap.analysis.comparable.majority_label`: the unique most frequent label, a tie is undecided);
``confidence`` sums each juror's stated confidence, as a probability (:func:`personagap.confidence.as_probability`),
per label and takes the unique largest sum. An undecided item is stored as a failure with its reason, never as a
guess; jurors' failures are not votes.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import pandas as pd

from personagap.analysis.comparable import JUDGE_KINDS, majority_label
from personagap.confidence import UNSTATED, as_probability
from personagap.records import Label, Run
from personagap.store import git_sha, now, opened

JuryRule = Literal["majority", "confidence"]
JURY_RULES: tuple[JuryRule, ...] = ("majority", "confidence")


def jury_vote(votes: Sequence[tuple[str, float | None]], rule: JuryRule) -> tuple[str | None, str | None]:
    """The jury's label from its jurors' (label, confidence as a probability) votes. Pure.

    Returns:
        ``(label, None)`` or ``(None, why)`` (no vote, a tie, or a missing confidence under ``confidence``).
    """
    if not votes:
        return None, "no juror labelled this item"
    if rule == "majority":
        winner = majority_label([label for label, _ in votes])
        return (winner, None) if winner is not None else (None, "undecided: the jurors' labels tie")
    weights: dict[str, float] = {}
    for label, p in votes:
        if p is None:
            return None, "invalid: a juror's label carries no confidence"
        weights[label] = weights.get(label, 0.0) + p
    top = max(weights.values())
    best = [label for label, w in weights.items() if w == top]
    return (best[0], None) if len(best) == 1 else (None, "undecided: the jurors' confidences tie")


def jury_labels(votes: pd.DataFrame, rule: JuryRule, *, rater: str, rater_kind: str, condition: str,
                run_id: str) -> list[Label]:
    """One jury label per item from its jurors' parsed labels.

    Args:
        votes: ``item_id``, ``juror`` (rater and condition as one text), ``label``, ``probability`` (NaN without).
        rule: :data:`JURY_RULES`.
        rater: The jury's rater key.
        rater_kind: Its kind (its jurors').
        condition: The condition its labels are stored under.
        run_id: Its run.
    """
    out = []
    for item, group in votes.groupby("item_id", sort=True):
        cast_votes = [(str(r.label), None if pd.isna(r.probability) else float(r.probability))
                      for r in group.itertuples(index=False)]
        label, error = jury_vote(cast_votes, rule)
        out.append(Label(item_id=str(item), rater=rater, rater_kind=rater_kind, condition=condition,  # type: ignore[arg-type]
                         label=label, error=error, run_id=run_id,
                         meta={"rule": rule, "jurors": dict(zip(group["juror"], group["label"], strict=True))}))
    return out


def jury_status(labelled: int, undecided: int) -> Literal["finished", "failed"]:
    """A jury run's stored status: ``failed`` when it had items and labelled none (as a judge run's, issue 32)."""
    return "failed" if labelled == 0 and undecided > 0 else "finished"


@dataclass(frozen=True)
class JuryResult:
    """What a jury run stored."""

    rater: str
    condition: str
    labelled: int
    undecided: int
    run_id: str = ""
    failures_by_reason: dict[str, int] = field(default_factory=dict)

    @property
    def status(self) -> Literal["finished", "failed"]:
        """The run's stored status (:func:`jury_status`)."""
        return jury_status(self.labelled, self.undecided)

    def render(self) -> str:
        """One line for the terminal."""
        return f"jury {self.rater}: {self.labelled} items labelled, {self.undecided} undecided (stored as failures)"

    def failure_line(self) -> str:
        """One line saying that the run labelled nothing, and why (the commonest reasons first)."""
        reasons = ", ".join(f"{k} {v}" for k, v in sorted(self.failures_by_reason.items(), key=lambda kv: -kv[1]))
        return (f"jury run {self.run_id} ({self.rater}) failed: every one of its {self.undecided} items is undecided "
                f"({reasons}); no label was decided")


def build_jury(db: str | Path, jurors: Sequence[tuple[str, str]], rule: JuryRule, *, rater: str,
               condition: str = "") -> JuryResult:
    """Store the jury of ``jurors`` as a rater, replacing that rater's earlier labels.

    Args:
        db: The DuckDB file.
        jurors: (rater, condition) of each juror: comparable judges of one kind.
        rule: :data:`JURY_RULES`.
        rater: The jury's rater key.
        condition: The condition the jury's labels are stored under.

    Raises:
        ValueError: Fewer than two jurors, a juror with no parsed label, jurors of different kinds, or (``confidence``)
            a juror none of whose labels states a confidence on a scale with stated ends.
    """
    from personagap.store.jury_counts import confidence_values, juror_summary, write_jury

    if len(set(jurors)) < 2:
        raise ValueError("a jury needs at least two different jurors")
    with opened(db, read_only=True) as con:
        found_rows = juror_summary(con, jurors)
        values = confidence_values(con, jurors) if rule == "confidence" else None
    found = set(zip(found_rows["rater"], found_rows["condition"], strict=True))
    missing = [f"{r} [{c}]" if c else r for r, c in jurors if (r, c) not in found]
    if missing:
        raise ValueError(f"no parsed label of juror(s) {', '.join(missing)}")
    kinds = set(found_rows["rater_kind"])
    if len(kinds) != 1 or not kinds <= set(JUDGE_KINDS):
        raise ValueError(f"jurors must be judges of one kind, got {', '.join(sorted(kinds))}")
    if values is not None:
        # The confidence-to-probability rule runs in Python on the distinct stated values only; the vote is SQL's.
        values["probability"] = [_probability(c, s) for c, s in zip(values["confidence"], values["scale"],
                                                                    strict=True)]
        values["probability"] = values["probability"].astype(float)
        weighed = set(zip(*(values.dropna(subset=["probability"])[k] for k in ("rater", "condition")), strict=True))
        unweighed = [f"{r} [{c}]" if c else r for r, c in dict.fromkeys(jurors) if (r, c) not in weighed]
        if unweighed:  # every item would be undecided ("invalid: ... no confidence"): refused before any write
            raise ValueError(f"juror(s) {', '.join(unweighed)} state no confidence on a scale with stated ends on any "
                             "label, so --weighting confidence cannot weigh their votes (use --weighting majority)")
    run = Run(run_id=f"jury-{uuid.uuid4().hex[:12]}", kind="judge",
              source=", ".join(f"{r} [{c}]" if c else r for r, c in jurors),
              rater=rater, git_sha=git_sha(), started_at=now(), finished_at=now(), status="finished",
              parameters={"rule": rule, "jurors": [list(j) for j in jurors]})
    with opened(db) as con:
        # The jury is recomputed whole: an item its jurors no longer label loses its jury label too.
        labelled, undecided, reasons = write_jury(
            con, jurors, rule, values if values is not None else pd.DataFrame(), rater=rater,
            rater_kind=kinds.pop(), condition=condition, run=run.model_dump(), status=jury_status)
    return JuryResult(rater=rater, condition=condition, labelled=labelled, undecided=undecided, run_id=run.run_id,
                      failures_by_reason=reasons)


def _probability(confidence: float, scale: str | None) -> float | None:
    # A confidence counts as a vote's weight only on a scale with stated ends.
    if pd.isna(confidence) or scale is None or scale == UNSTATED:
        return None
    return float(as_probability([confidence], scale)[0])
