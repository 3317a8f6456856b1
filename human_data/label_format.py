"""The generic label format: its columns and vocabularies, what an import is (spec, source, result), aspects."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import duckdb
import orjson
import pandas as pd
import pyarrow as pa

from personagap.datasets import default_question
from personagap.human_data._jsonl import DataError
from personagap.linking import ATTRIBUTE_ID, ATTRIBUTES_USED, INPUT_CONDITION, PERSONALIZED, SYSTEM
from personagap.records import (
    RELEVANCE_LABELS,
    VERIFICATION_LABELS,
    DatasetRecord,
    DatasetScale,
    ItemKind,
    Stage,
)
from personagap.scales import PAIRWISE_SCALE
from personagap.stage_names import STAGES as STAGES  # re-exported: the format's stages

Scale = Literal["nominal", "ordinal"]
Origin = Literal["real", "synthetic"]

REQUIRED: tuple[str, ...] = ("item_id", "rater", "label")
OPTIONAL: tuple[str, ...] = ("rater_kind", "user_id", "condition", "reason", "confidence", "confidence_scale",
                             "failure")
"""Per-label columns. ``confidence`` (any numeric scale) and ``confidence_scale`` (what that scale is, e.g. ``0-1``)
are stored in the label's meta (:data:`CONFIDENCE`, :data:`CONFIDENCE_SCALE`); ``failure`` (:data:`FAILURE`) makes a
row without a label a judge's failure."""
CONTEXT: dict[str, tuple[str, ...]] = {
    "extraction": ("conversation", "attribute", ATTRIBUTE_ID, SYSTEM),
    "relevance": ("prompt", "attribute", "profile", ATTRIBUTE_ID, SYSTEM),
    "response": ("prompt", "profile", "response_a", "response_b", "response", "response_kind", ATTRIBUTES_USED,
                 INPUT_CONDITION, SYSTEM, PERSONALIZED),
}
"""Per-item columns: the item's context and its links across stages (:mod:`personagap.linking`)."""
LINK_COLUMNS: tuple[str, ...] = (ATTRIBUTE_ID, SYSTEM, ATTRIBUTES_USED, INPUT_CONDITION, PERSONALIZED)
"""Item columns that link stages: stored in the item's payload under their own names when a file fills them."""
CONFIDENCE = "confidence"
CONFIDENCE_SCALE = "confidence_scale"
FAILURE = "failure"
"""Why a judge gave no usable label (``unparseable: ...``, ``refused``): a row gives a label or a failure, never both
nor neither. Stored as a judge run stores a failure: label NULL, the reason in ``labels.error``, so every report counts
it under ``failures`` (its kind is the text up to the first colon)."""
FAILURE_KINDS: tuple[str, ...] = ("llm", "trained")
"""Rater kinds whose rows may be failures: the file's judge kinds (a person who gave no label has no row)."""
#: The stage's question fixes its categories (its report and judges read exactly these); ``--categories``
#: changes them except for pairwise items, whose labels always say which answer won.
STAGE_CATEGORIES: dict[str, tuple[str, ...]] = {"extraction": VERIFICATION_LABELS, "relevance": RELEVANCE_LABELS}
RESPONSE_KINDS: dict[str, str] = {"personalised": "personalised", "personalized": "personalised", "generic": "generic"}
FORMATS: dict[str, str] = {".jsonl": "jsonl", ".ndjson": "jsonl", ".csv": "csv", ".parquet": "parquet",
                           ".pq": "parquet"}
#: Label of the extractor an imported stage-1 verdict is filed under (the format names no extractor).
IMPORTED_EXTRACTOR = "imported"
ID_TAG = "labels"
"""First part of every hashed id this importer makes, so its items never collide with a release adapter's."""

KEY_SAMPLE = 20_480
#: A row's place across all sources (file, then row), computed where needed rather than stored per row.
ROW_ORDER = "(_file::BIGINT * 4294967296 + _row)"
#: Columns that must be plain text or numbers: a JSON list or object there is a format error.
ID_COLUMNS = ("item_id", "rater", "label", "rater_kind", "user_id", "condition", "confidence", "confidence_scale",
              FAILURE, ATTRIBUTE_ID, SYSTEM, INPUT_CONDITION, PERSONALIZED)
_MAX_ECHO = 60

MAX_INFERRED_CATEGORIES = 12
"""Most distinct labels a stage-3 nominal import without ``--categories`` may hold: more is not a plausible scale
(free-text comments, ids) unless declared. 12 leaves room for a 0-10 rating read as categories."""
MAX_CATEGORY_WORDS = 4
MAX_CATEGORY_CHARS = 40
# A sentence break inside a label ("Refused. No answer"): punctuation, a space, more text. A final "Yes." and
# a number "4.5" are not breaks.
_SENTENCE_BREAK = re.compile(r"[.!?;:]\s+\S")
_BRACKETS = frozenset("()[]{}")


def free_text_reason(label: str) -> str | None:
    """Why ``label`` reads as free text rather than a category (None: it could be a category). Pure.

    Without ``--categories`` a stage-3 nominal import takes every distinct label as a category, so a comment such
    as "N/A (the model refused)" would silently become one; these are the shapes categories do not have.
    """
    if any(c in _BRACKETS for c in label):
        return "it holds brackets"
    words = len(label.split())
    if words > MAX_CATEGORY_WORDS:
        return f"it has {words} words, more than {MAX_CATEGORY_WORDS}"
    if len(label) > MAX_CATEGORY_CHARS:
        return f"it is {len(label)} characters long, more than {MAX_CATEGORY_CHARS}"
    if _SENTENCE_BREAK.search(label):
        return "it reads as more than one sentence"
    return None


@dataclass(frozen=True)
class LabelSpec:
    """What the labels are: which stage and dataset, on which scale."""

    stage: Stage
    dataset: str
    scale: Scale = "nominal"
    categories: tuple[str, ...] | None = None
    origin: Origin = "real"
    question: str | None = None
    """What the raters were asked (``--question``); None: the stage's default for the item kind."""

    def meta(self) -> dict[str, Any]:
        """What the meta table records about the dataset (``labels:<dataset>:<stage>``)."""
        return {"stage": self.stage, "scale": self.scale,
                "categories": list(self.categories) if self.categories is not None else None}


ASPECTS_PREFIX = "aspects:response:"
"""Meta key prefix of the other questions a single-response dataset's raters answered (:func:`aspects_meta`)."""


@dataclass(frozen=True)
class RatedAspectSpec:
    """Another question the raters of a single-response dataset answered about the same responses.

    Stored as data (e.g. USR's Overall 1-5); its labels are the raters' labels under ``condition``.
    """

    condition: str
    question: str
    scale: DatasetScale


def aspects_meta(dataset: str, aspects: Sequence[RatedAspectSpec]) -> dict[str, str]:
    """The meta entry an importer writes (in its transaction) to store a dataset's rated aspects."""
    value = [{"condition": a.condition, "question": a.question, "scale": a.scale.kind,
              "categories": list(a.scale.categories)} for a in aspects]
    return {f"{ASPECTS_PREFIX}{dataset}": orjson.dumps(value).decode()}


def parse_aspects(meta: dict[str, str]) -> dict[str, list[RatedAspectSpec]]:
    """Dataset -> its stored aspects, from meta entries (:func:`aspects_meta`); other keys are ignored."""
    out: dict[str, list[RatedAspectSpec]] = {}
    for key, value in meta.items():
        if key.startswith(ASPECTS_PREFIX):
            out[key[len(ASPECTS_PREFIX):]] = [
                RatedAspectSpec(condition=str(a["condition"]), question=str(a["question"]),
                                scale=DatasetScale(kind=a["scale"], categories=tuple(map(str, a["categories"]))))
                for a in orjson.loads(value)]
    return out


@dataclass(frozen=True)
class Source:
    """One input: a file (format by extension) or a DataFrame."""

    name: str
    kind: Literal["jsonl", "csv", "parquet", "frame"]
    path: Path | None = None
    frame: pd.DataFrame | None = None

    @classmethod
    def of_path(cls, path: str | Path) -> Source:
        """A file source; the extension picks the reader."""
        p = Path(path)
        kind = FORMATS.get(p.suffix.lower())
        if kind is None:
            raise DataError(p, None, None, f"unknown file type {p.suffix or '(none)'!r}: use .jsonl, .csv or .parquet")
        if not p.is_file():
            raise DataError(p, None, None, "no such file" if not p.exists() else "not a regular file")
        return cls(name=str(p), kind=kind, path=p)  # type: ignore[arg-type]

    def run_key(self) -> str:
        """What the run id hashes: the absolute path (re-importing a file replaces its rows)."""
        return str(self.path.resolve()) if self.path is not None else self.name


@dataclass
class LabelImport:
    """A validated import, not yet written: its rows staged in SQL on a private in-memory connection.

    ``tables`` names, per store table, the relation on ``con`` that gives its rows (or holds them as Arrow
    when there are none). Close it (or use it as a context manager) once written.
    """

    spec: LabelSpec
    con: duckdb.DuckDBPyConnection
    files: dict[str, int] = field(default_factory=dict)
    run_ids: dict[str, str] = field(default_factory=dict)
    tables: dict[str, pa.Table | str] = field(default_factory=dict)
    item_kind: ItemKind = "single"
    """What the dataset's items are (stage 3: pairwise when most items are pairs, else single responses)."""
    inferred_categories: tuple[str, ...] | None = None
    """Stage 3, nominal, no ``--categories``: the distinct labels of its single responses, which become its
    categories (printed at import so a stray one is seen)."""

    def record(self) -> DatasetRecord:
        """The dataset record this import fixes (stored with :func:`personagap.datasets.record_meta`)."""
        spec = self.spec
        if self.item_kind == "pairwise":
            scale = PAIRWISE_SCALE
        else:
            # Undeclared categories stay empty: the record reader then takes every label the raters gave.
            scale = DatasetScale(kind=spec.scale, categories=spec_categories(spec) or ())
        return DatasetRecord(stage=spec.stage, dataset=spec.dataset, item_kind=self.item_kind, scale=scale,
                             question=spec.question or default_question(spec.stage, self.item_kind),
                             origin=spec.origin, declared=True)

    def close(self) -> None:
        """Free the staged rows."""
        self.con.close()

    def __enter__(self) -> LabelImport:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def render(self) -> str:
        """Plain-text summary of what was read."""
        lines = [f"Read {len(self.files)} label file(s) for stage {self.spec.stage}, dataset {self.spec.dataset!r} "
                 f"({self.spec.scale}, {self.spec.origin}):"]
        lines += [f"  {p}: {n} rows" for p, n in self.files.items()]
        return "\n".join(lines)


def run_id_for(source: Source, spec: LabelSpec) -> str:
    """The run id of one source's labels: a pure function of where they came from and what they are."""
    digest = hashlib.sha256(f"{source.run_key()}\x1f{spec.dataset}\x1f{spec.stage}".encode()).hexdigest()[:16]
    return f"import-labels-{digest}"


def stored_categories(spec: LabelSpec) -> tuple[str, ...] | None:
    """The declared categories as stored: lower-cased when they are yes/no."""
    # Lower case is the spelling the persona-use judge and the stage-2 reports read.
    cats = spec_categories(spec)
    if cats is not None and spec.scale == "nominal" and {c.lower() for c in cats} <= set(RELEVANCE_LABELS):
        return tuple(c.lower() for c in cats)
    return cats


def echo(value: object) -> str:
    """A user's value quoted for an error message, cut to a readable length."""
    text = str(value)
    return repr(text if len(text) <= _MAX_ECHO else text[: _MAX_ECHO - 3] + "...")


def known_columns(stage: Stage) -> tuple[str, ...]:
    """Every column a file of ``stage`` may hold: required, optional and the stage's item context."""
    return REQUIRED + OPTIONAL + CONTEXT[stage]


def spec_categories(spec: LabelSpec) -> tuple[str, ...] | None:
    """The import's categories: the declared ones, else the stage's fixed ones (None: any label)."""
    if spec.categories is not None:
        return spec.categories
    return STAGE_CATEGORIES.get(spec.stage)
