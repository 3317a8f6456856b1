"""Typed records that cross module boundaries.

Every stage of the pipeline (extraction, relevance, response) speaks in the same
few records: an :class:`Item` is one thing somebody judges (an extracted attribute,
a (prompt, attribute) pair, a pair of answers), a :class:`Label` is one verdict on
an item by one rater (a human annotator, the human majority, an imported LLM file,
a live judge), and a :class:`Run` says where a batch of labels came from. The
DuckDB tables in :mod:`personagap.store` mirror these classes column for column.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, model_validator

from personagap.stage_names import Stage as Stage  # re-exported: records name their stage

# The vocabularies live in personagap.vocabulary; re-exported here for the records' users.
from personagap.vocabulary import PAIRWISE_LABELS as PAIRWISE_LABELS
from personagap.vocabulary import RELEVANCE_LABELS as RELEVANCE_LABELS
from personagap.vocabulary import VERIFICATION_LABELS as VERIFICATION_LABELS
from personagap.vocabulary import RaterKind as RaterKind

if TYPE_CHECKING:
    from hashlib import _Hash

RunKind = Literal["import", "judge", "train", "annotate"]


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class User(_Record):
    """A real user whose data a dataset holds."""

    dataset: str = Field(description="Dataset key, e.g. 'recenter-stage2'.")
    user_id: str = Field(description="The release's user id.")
    profile_text: str | None = Field(default=None, description="Free-text profile, where the release has one.")


class Attribute(_Record):
    """One attribute in a user's profile (stage-1 output, stage-2 input)."""

    dataset: str
    user_id: str
    attribute: str = Field(description="The attribute sentence, e.g. 'The user works night shifts.'")
    reason: str | None = Field(default=None, description="The extractor's stated evidence.")
    confidence: float | None = Field(default=None, description="The extractor's confidence in [0, 1].")


class Prompt(_Record):
    """A prompt a user wrote (the thing to personalise an answer to)."""

    dataset: str
    user_id: str
    prompt_index: int
    prompt_text: str | None = None


class Item(_Record):
    """One unit that raters label; its id is a pure function of its key fields."""

    item_id: str = Field(description="Deterministic id, see :func:`item_id`.")
    dataset: str
    stage: Stage
    user_id: str
    prompt_index: int | None = Field(default=None, description="Which prompt of the user, if any.")
    attribute: str | None = Field(default=None, description="Attribute text (stages 1-2).")
    position: int | None = Field(default=None, description="Position in a list, where the release keys by it.")
    payload: dict[str, Any] = Field(default_factory=dict, description="Stage-specific content (answers, ...).")


class Label(_Record):
    """One rater's verdict on one item.

    ``label`` is ``None`` exactly when the rater's answer could not be parsed: such
    a row is a recorded failure (``error`` says why, ``raw`` keeps the text) and is
    never counted as a verdict.
    """

    item_id: str
    rater: str = Field(description="Annotator id, 'human_majority', an LLM file's model, or a judge key.")
    rater_kind: RaterKind
    condition: str = Field(default="", description="Protocol variant, e.g. 'blind', 'shown-llm', 'no-profile'.")
    label: str | None
    raw: str | None = Field(default=None, description="The rater's raw answer text, when there is one.")
    reason: str | None = Field(default=None, description="The rater's stated reason, when there is one.")
    error: str | None = Field(default=None, description="Why no label could be read; set iff label is None.")
    run_id: str
    meta: dict[str, Any] | None = Field(
        default=None, description="Per-label facts a metric needs, e.g. {'swapped': true} for position bias.")

    @model_validator(mode="after")
    def _failure_has_reason(self) -> Label:
        if (self.label is None) != (self.error is not None):
            raise ValueError("a label is None exactly when error says why (a failure is never a verdict)")
        return self


class LabelRow(NamedTuple):
    """The same fields as :class:`Label`, as a plain typed tuple for bulk imports.

    Building a pydantic model per label costs more than the whole DuckDB insert at 10^6
    labels; adapters that check every field as they read it (see ``human_data._jsonl.Row``)
    emit these instead and must keep Label's invariant (label is None iff error is set).
    """

    item_id: str
    rater: str
    rater_kind: RaterKind
    condition: str
    label: str | None
    raw: str | None
    reason: str | None
    error: str | None
    run_id: str
    meta: dict[str, Any] | None


class Run(_Record):
    """Where a batch of labels came from: one import of a file set, or one judge run."""

    run_id: str
    kind: RunKind
    source: str = Field(description="Imported path, or the dataset a judge ran on.")
    rater: str | None = Field(default=None, description="Model or judge name, for judge runs and LLM files.")
    judge_version: int | None = None
    git_sha: str | None = None
    started_at: datetime
    finished_at: datetime | None = None
    status: Literal["running", "finished", "failed", "interrupted"] = "running"
    parameters: dict[str, Any] = Field(default_factory=dict)


def item_id(dataset: str, stage: Stage, *key: object) -> str:
    """Return the deterministic id of an item.

    The id hashes the dataset, the stage and the item's natural key, so that
    importing the same file twice, or judging the same item in two runs, lands on
    the same row.

    Args:
        dataset: Dataset key.
        stage: Pipeline stage.
        *key: The natural key within the dataset, e.g. (user_id, prompt_index, attribute).

    Returns:
        A 20-character hex id.
    """
    if not key:
        return _head(dataset, stage, ()).hexdigest()[:20]
    return item_ids(dataset, stage, key[:-1], [key[-1]])[0]


def item_ids(dataset: str, stage: Stage, prefix: tuple[object, ...], lasts: Sequence[object]) -> list[str]:
    """Ids of many items sharing all key parts but the last: ``item_id(dataset, stage, *prefix, last)``.

    Hashing the shared prefix once is what keeps 10^6-label imports fast.
    """
    head = _head(dataset, stage, prefix)
    out = []
    for last in lasts:
        h = head.copy()
        h.update(_part(last))
        out.append(h.hexdigest()[:20])
    return out


def _head(dataset: str, stage: str, prefix: tuple[object, ...]) -> _Hash:
    # Length-prefixed parts with their type: unambiguous like JSON, and cheap to extend part by part.
    return hashlib.sha256(b"".join(_part(p) for p in (dataset, stage, *prefix)))


def _part(value: object) -> bytes:
    if type(value) is str:  # the common case, spelled out: 10^6-label imports hash every attribute text
        return f"s{len(value)}:{value}".encode()
    text = str(value)
    return f"{type(value).__name__[0]}{len(text)}:{text}".encode()


ScaleKind = Literal["nominal", "ordinal", "pairwise"]
"""How a dataset's labels are measured: unordered categories, ordered levels, or which of two answers won."""
ItemKind = Literal["verification", "relevance", "pairwise", "single"]
"""What one item of a dataset is: an extracted attribute to verify (stage 1), a (prompt, attribute) pair
(stage 2), two answers to choose between, or one answer to rate (stage 3)."""

DEFAULT_QUESTIONS: dict[tuple[str, str], str] = {
    ("extraction", "verification"): "Does the user's conversation support this extracted attribute?",
    ("relevance", "relevance"): "Would knowing this attribute change a good answer to this prompt?",
    ("response", "pairwise"): "Which of the two answers would this user prefer?",
    ("response", "single"): "Is this answer right for this user?",
}
"""The question a dataset's raters answer when its import names none (``--question`` overrides it)."""


class DatasetScale(_Record):
    """The scale a dataset's labels are on: every figure of the dataset follows from it.

    nominal -> kappa, AC1, PABAK, MCC, balanced accuracy (macro over classes beyond two), alt-test by accuracy;
    ordinal -> quadratic-weighted kappa, Krippendorff's alpha (ordinal), Spearman, mean absolute difference,
    alt-test by negative RMSE; pairwise -> accuracy with and without ties, kappa over A/B/tie, position and
    length bias.
    """

    kind: ScaleKind
    categories: tuple[str, ...] = Field(
        description="The categories in reading order (ordinal: its levels, low to high, as stored text).")

    @property
    def ordinal(self) -> bool:
        """Whether the levels are ordered numbers (weighted figures apply)."""
        return self.kind == "ordinal"

    @property
    def binary(self) -> bool:
        """Whether the scale has exactly two categories."""
        return len(self.categories) == 2

    def levels(self) -> tuple[float, ...]:
        """The ordinal levels as numbers (ValueError on a nominal scale)."""
        if self.kind != "ordinal":
            raise ValueError(f"a {self.kind} scale has no numeric levels")
        return tuple(float(c) for c in self.categories)


class DatasetRecord(_Record):
    """What a dataset is, fixed at import and stored.

    Figures, titles and queues follow from it, never from which paper the data came from.
    """

    stage: Stage
    dataset: str
    item_kind: ItemKind
    scale: DatasetScale
    question: str = Field(description="What raters were asked (the import's --question, else the default).")
    origin: Literal["real", "synthetic"] = "real"
    declared: bool = Field(default=False, description="Whether the import stored this record (else inferred).")
