"""The registry of trained judges: name, version, stage and the task each learns."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

TrainedKind = Literal["relevance", "preference", "verifier"]


@dataclass(frozen=True)
class TrainedJudgeSpec:
    """A registered trained judge: its name, version and stage, and which task it learns."""

    name: str
    version: int
    """Bump on any change to features or model (a new version is a new rater in the store)."""
    stage: Literal["extraction", "relevance", "response"]
    kind: TrainedKind
    description: str


TRAINED_JUDGES: dict[str, TrainedJudgeSpec] = {}
"""Registered trained judges by name; the first one registered for a kind is that kind's default."""


def register_trained_judge(spec: TrainedJudgeSpec) -> TrainedJudgeSpec:
    """Register a trained judge under its name; duplicates are an error."""
    if spec.name in TRAINED_JUDGES:
        raise ValueError(f"duplicate trained judge {spec.name!r}")
    TRAINED_JUDGES[spec.name] = spec
    return spec


RELEVANCE_JUDGE = register_trained_judge(TrainedJudgeSpec(
    name="trained-relevance", version=1, stage="relevance", kind="relevance",
    description="logistic regression on lexical/structural (attribute, prompt, profile) features; "
                "threshold = human base rate"))
RELEVANCE_EMBED_JUDGE = register_trained_judge(TrainedJudgeSpec(
    name="trained-relevance-embed", version=1, stage="relevance", kind="relevance",
    description="trained-relevance's features plus sentence-encoder ones (prompt-attribute similarity, the "
                "attribute's embedding as its type); needs the optional `embed` extra"))
PREFERENCE_JUDGE = register_trained_judge(TrainedJudgeSpec(
    name="trained-preference", version=1, stage="response", kind="preference",
    description="Bradley-Terry (pairwise logistic, no intercept) on (profile, question, answer) features"))
VERIFIER_JUDGE = register_trained_judge(TrainedJudgeSpec(
    name="trained-verifier", version=1, stage="extraction", kind="verifier",
    description="logistic regression on lexical/structural (conversation, attribute) features; trained on LAPS "
                "gold preferences (positives) vs other users' preferences on the same topic (negatives); "
                "threshold 0.5 (balanced training data)"))


def get_trained_judge(name: str) -> TrainedJudgeSpec:
    """Return the trained judge named ``name``, or the default one of a kind ('relevance', 'preference', 'verifier')."""
    if name in TRAINED_JUDGES:
        return TRAINED_JUDGES[name]
    for spec in TRAINED_JUDGES.values():
        if spec.kind == name:
            return spec
    raise KeyError(f"unknown trained judge {name!r}; known: {', '.join(sorted(TRAINED_JUDGES))}")


def trained_rater(spec: TrainedJudgeSpec, tag: str) -> str:
    """The ``rater`` key of a trained judge's labels: ``name/vVERSION/tag`` (same shape as LLM judges)."""
    return f"{spec.name}/v{spec.version}/{tag}"
