"""The judge interface: a DSPy signature, a pure parser, and a registry by name.

A judge never calls the LLM itself: :mod:`personagap.judges.runner` does (with
concurrency, retries, the DuckDB cache and resumption). A judge says *what* to
ask (its DSPy signature and the inputs of each task) and *how to read* the answer
(:meth:`Judge.parse`, a pure function that returns a :class:`Verdict` per target
item, with ``label=None`` and an ``error`` when the answer does not parse).
"""

from __future__ import annotations

import difflib
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import dspy

from personagap.records import DatasetRecord, ItemKind, Stage


@dataclass(frozen=True)
class JudgeTask:
    """One LLM call: the signature's inputs and the item(s) its answer labels.

    Attributes:
        key: Unique within a run; identifies the call (e.g. the item id, or
            user+prompt for a batched call).
        targets: Item ids the answer labels (one for per-item judges, several for batched ones).
        inputs: Values for the signature's input fields.
        condition: Protocol variant stored on the labels ('' standard, 'no-profile', ...).
        meta: Per-task facts to store on each label (e.g. ``{"swapped": True}``) and to
            give to :meth:`Judge.parse` (e.g. to undo a swap).
    """

    key: str
    targets: tuple[str, ...]
    inputs: dict[str, str]
    condition: str = ""
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Verdict:
    """A parsed answer for one target item; ``label is None`` iff it is a failure with an ``error``."""

    label: str | None
    reason: str | None = None
    error: str | None = None

    def __post_init__(self) -> None:
        if (self.label is None) != (self.error is not None):
            raise ValueError("a Verdict has a label or an error, never both or neither")


@dataclass(frozen=True)
class Program:
    """What a judge's prompts are built from and its answers parsed with.

    Attributes:
        signature: The DSPy signature: instructions and input/output fields.
        demos: Few-shot examples shown before every task (plain dicts or ``dspy.Example``), e.g. the demos an
            optimiser picked. Empty for a plain judge.

    Everything here reaches the prompt, so all of it is part of the runner's cache key
    (:func:`personagap.judges.cache.call_identity`): change the instructions or a demo and the cached answers
    of the old program are not reused.
    """

    signature: type[dspy.Signature]
    demos: Sequence[Mapping[str, Any]] = ()


class Judge(ABC):
    """Base class of every LLM judge. Subclasses are registered with :func:`register_judge`."""

    name: ClassVar[str]
    version: ClassVar[int]
    """Bump on any change to the signature, instructions or parser: it is part of the rater name, so labels of
    two versions never mix. (The cache key covers the rendered prompt as well, so a forgotten bump of a prompt
    change cannot serve old answers; a parser change needs the bump.)"""
    stage: ClassVar[Stage]
    signature: ClassVar[type[dspy.Signature]]
    item_kind: ClassVar[ItemKind | None] = None
    """The kind of dataset item one of its labels answers (None: its labels are not scored on a dataset's scale,
    e.g. the extractor's attributes)."""
    answer_field: ClassVar[str | None] = None
    """The output field holding its one answer (whose tokens' probability is its ``--confidence logprobs``); None
    for judges whose one answer labels several items (a batched list) or is no label."""
    categories: ClassVar[tuple[str, ...]] = ()
    """Every label it can give. It fits a dataset only when they are exactly the dataset's categories
    (:func:`fits`): scoring a yes/no judge on a 1-5 scale would be meaningless."""

    @abstractmethod
    def parse(self, outputs: Mapping[str, Any], task: JudgeTask) -> dict[str, Verdict]:
        """Read the signature's parsed output fields into one verdict per target item.

        Pure: no I/O. Called only when the adapter could split the answer into
        fields; if it could not, the runner records every target as failed.
        """

    def program(self) -> Program:
        """The signature and demos the runner formats prompts from and parses answers with.

        A plain judge uses its class's :attr:`signature` and no demos. An optimised judge (new
        instructions, chosen demos) overrides this; the runner's cache key covers what it returns.
        """
        return Program(self.signature)

    def response_format(self) -> dict[str, Any] | None:
        """An OpenAI ``response_format`` to request (JSON schema), or None.

        Small local models only produce parseable answers under constrained
        decoding, so judges may offer a schema; the runner sends it when asked.
        """
        return None


def json_schema_format(properties: dict[str, Any]) -> dict[str, Any]:
    """A judge's :meth:`Judge.response_format`: an object with exactly these (all required) properties."""
    return {"type": "json_schema", "name": "verdict", "schema": {
        "type": "object", "properties": properties, "required": list(properties), "additionalProperties": False,
    }}


JUDGES: dict[str, type[Judge]] = {}


def register_judge(cls: type[Judge]) -> type[Judge]:
    """Class decorator: register ``cls`` under ``cls.name``; duplicates are an error."""
    if cls.name in JUDGES:
        raise ValueError(f"duplicate judge {cls.name!r}")
    JUDGES[cls.name] = cls
    return cls


def get_judge(name: str) -> Judge:
    """Instantiate a registered judge, suggesting near names on a typo."""
    try:
        return JUDGES[name]()
    except KeyError:
        near = difflib.get_close_matches(name, JUDGES, n=3)
        hint = f"; did you mean {', '.join(near)}?" if near else f"; known: {', '.join(sorted(JUDGES))}"
        raise KeyError(f"unknown judge {name!r}{hint}") from None


def fits(judge: type[Judge] | Judge, record: DatasetRecord) -> bool:
    """Whether ``judge`` can label ``record``'s items.

    The one rule behind ``judge``'s hints and ``optimize``'s refusals: the same stage and item kind, and a class
    set that is exactly the dataset's categories.
    """
    return (judge.stage == record.stage and judge.item_kind == record.item_kind
            and set(judge.categories) == set(record.scale.categories))


def judges_for(record: DatasetRecord) -> list[str]:
    """Names of the registered judges that fit a dataset (:func:`fits`), sorted."""
    return sorted(name for name, cls in JUDGES.items() if fits(cls, record))


def describe_fit(record: DatasetRecord) -> str:
    """One clause naming a dataset, its item kind and scale, and the judges that fit it (for hints and refusals)."""
    fit = judges_for(record)
    use = " or ".join(f"--judge {name}" for name in fit) if fit else "no LLM judge answers this scale"
    scale = "/".join(record.scale.categories)
    return f"{record.dataset} ({record.item_kind} items, {record.scale.kind} scale {scale}): {use}"


VERBAL_CONFIDENCE = "verbal-confidence"
"""Marks the rater of a judge asked for a verbalised confidence: its prompt differs, so it is another rater."""
VERBAL_SCALE = "0-100"
"""The scale the verbalised confidence field asks for."""


def rater_name(judge: Judge, model: str, confidence: str = "none", sample: int | None = None) -> str:
    """The ``rater`` key of a judge's labels: judge, version and model, so a new version is a new rater.

    A judge asked for a verbalised confidence answers another prompt (:func:`verbal_program`), so its labels are
    another rater's (``pairwise+verbal-confidence/v1/MODEL``); log-probabilities change no prompt and keep the name.
    Sample ``k`` of a repeated run (``judge --repeats K``) is rater ``pairwise+sample-k/v1/MODEL``.
    """
    name = f"{judge.name}+{VERBAL_CONFIDENCE}" if confidence == "verbal" else judge.name
    if sample is not None:
        name += f"+sample-{sample}"
    return f"{name}/v{judge.version}/{model}"


def verbal_program(program: Program) -> Program:
    """``program`` with one more output field, ``confidence``: how sure the judge is that its answer is right."""
    field = dspy.OutputField(desc="How sure you are that your answer is right, as a number from 0 (a guess) to "
                                  "100 (certain).")
    return Program(program.signature.append("confidence", field, type_=str), program.demos)


def normalise_choice(text: object, choices: Mapping[str, str]) -> str | None:
    """Map a free-text answer onto a label by exact (case-, space- and punctuation-insensitive) match.

    Args:
        text: The model's answer for one field.
        choices: Accepted spellings -> label, e.g. ``{"yes": "yes", "y": "yes", "no": "no"}``.

    Returns:
        The label, or None when the answer is not exactly one of the choices.
    """
    if not isinstance(text, str | bool):
        return None
    key = str(text).strip().strip(".!\"'*`").strip().lower()
    return choices.get(key)

