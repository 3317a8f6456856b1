"""Bring your own labels from Python: import a DataFrame or files, load every label back as one tidy frame.

A notebook user never touches SQL::

    from personagap.api import import_labels, load_labels
    import_labels(df, stage="relevance", dataset="our-team", db="team.duckdb")
    frame = load_labels("team.duckdb", dataset="our-team")

The format (columns, scales, context per stage) is in :mod:`personagap.human_data.labels` and
``docs/formats.md``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import numpy as np
import orjson
import pandas as pd

from personagap.datasets import record_meta
from personagap.human_data._jsonl import DataError
from personagap.human_data.label_format import CONTEXT, IMPORTED_EXTRACTOR
from personagap.human_data.labels import (
    STAGES,
    LabelImport,
    LabelSpec,
    Origin,
    Scale,
    Source,
    load_label_sources,
)
from personagap.records import Stage
from personagap.store import (
    IMPORT_RUN_VOLATILE,
    TABLES,
    WriteSummary,
    attached,
    columns_table,
    gc_paused,
    git_sha,
    now,
    opened,
    remove_stale,
    set_meta,
    upsert_counted,
)
from personagap.store.atomic import transaction
from personagap.store.dataset_reads import DEFAULT_ORIGIN as DEFAULT_ORIGIN
from personagap.store.dataset_reads import dataset_origins as dataset_origins
from personagap.store.dataset_reads import tidy_label_rows

ORIGINS: tuple[str, ...] = ("real", "synthetic")
#: Order in which an import's tables are written (labels last: they reference items).
_WRITE_ORDER = ("runs", "users", "attributes", "prompts", "items", "labels")
#: Staged tables whose keys cannot repeat: load_label_sources refused any (item, rater, condition) given twice,
#: naming its line; items, users and attributes are grouped by their key. (A prompt's index is a hash prefix,
#: so prompts are still checked.)
_UNIQUE_BY_CONSTRUCTION = frozenset({"labels", "items", "users", "attributes"})


@dataclass(frozen=True)
class LabelsSummary:
    """What ``import labels`` read and wrote."""

    db: str
    stage: str
    dataset: str
    origin: str
    files: dict[str, int]
    written: WriteSummary
    question: str = ""
    """The question stored in the dataset's record (``--question``, else the stage's default)."""
    inferred_categories: tuple[str, ...] = ()
    """Stage 3, nominal, without ``--categories``: the categories taken from the labels (printed, so a stray label
    that became a category is seen at import)."""

    def render(self) -> str:
        """Plain-text summary for the terminal."""
        lines = [f"Imported {len(self.files)} label file(s) into {self.db} "
                 f"(stage {self.stage}, dataset {self.dataset!r}, {self.origin}):"]
        lines += [f"  {p}: {n} rows" for p, n in self.files.items()]
        if self.question:
            lines.append(f"  question: {self.question}")
        if self.inferred_categories:
            lines.append(f"  categories (inferred from the labels; --categories fixes them): "
                         f"{', '.join(self.inferred_categories)}")
        lines.append("  " + self.written.render())
        return "\n".join(lines)


def _sources(data: pd.DataFrame | str | Path | Sequence[str | Path], source_name: str) -> list[Source]:
    if isinstance(data, pd.DataFrame):
        return [Source(name=source_name, kind="frame", frame=data)]
    if isinstance(data, str | Path):
        return [Source.of_path(data)]
    return [Source.of_path(p) for p in data]


@gc_paused()
def import_labels(data: pd.DataFrame | str | Path | Sequence[str | Path], *, stage: Stage | None = None,
                  dataset: str | None = None, db: str | Path, scale: Scale = "nominal",
                  categories: Sequence[str] | None = None, origin: Origin | None = None,
                  source_name: str = "dataframe", question: str | None = None) -> LabelsSummary:
    """Validate labels in the generic format and write them to ``db`` in one transaction.

    Re-importing the same file (or a DataFrame under the same ``source_name``) replaces exactly the rows
    it held before: labels it no longer has are removed in the same transaction.

    A DataFrame may be :func:`load_labels`'s output: its ``dataset``, ``stage`` and ``origin`` columns then give
    the import's (each must hold one value, the argument's when one is given), ``run_id`` and ``stored_item_id``
    (the store's keys) are assigned anew, and another stage's context columns left empty are ignored. So
    ``import_labels(load_labels(db, dataset=d, stage=s), db=other)`` stores the same labels in ``other``.

    Args:
        data: A DataFrame, or one or more .jsonl/.csv/.parquet files.
        stage: ``extraction``, ``relevance`` or ``response``; None: the frame's ``stage`` column.
        dataset: Dataset key the items are filed under (``--dataset``); None: the frame's ``dataset`` column.
        db: The DuckDB file (created if missing).
        scale: ``nominal`` (categories) or ``ordinal`` (numbers).
        categories: Fix the allowed labels (nominal), or the allowed numbers (ordinal).
        origin: ``real`` users or ``synthetic`` personas (recorded per dataset, shown side by side); None: the
            frame's ``origin`` column, else ``real``.
        source_name: What a DataFrame is called in errors and which earlier rows it replaces.
        question: What the raters were asked (``--question``; stored in the dataset's record and used as its
            report section's title); None: the stage's default question for the dataset's item kind.

    Returns:
        What was read and written.

    Raises:
        DataError: The data deviates from the format (file, line or row, column named); nothing is written.
        ValueError: Unknown stage, scale or origin.
    """
    if isinstance(data, pd.DataFrame):
        data, found = _frame_of_store(data, source_name, {"stage": stage, "dataset": dataset, "origin": origin})
        stage = stage if stage is not None else _stage(found.get("stage"), source_name)
        dataset = dataset if dataset is not None else found.get("dataset")
        origin = origin if origin is not None else _origin(found.get("origin", "real"))
    if stage is None:
        raise ValueError("give stage= (extraction, relevance or response)")
    if dataset is None:
        raise DataError("--dataset", None, None, "give the dataset name (dataset=)")
    if origin is None:
        origin = "real"
    if origin not in ORIGINS:
        raise ValueError(f"origin must be one of {', '.join(ORIGINS)}, not {origin!r}")
    if scale not in ("nominal", "ordinal"):
        raise ValueError(f"scale must be nominal or ordinal, not {scale!r}")
    if not dataset.strip():
        raise DataError("--dataset", None, None, "the dataset name is empty")
    cats = None
    if categories is not None:
        cats = tuple(c.strip() for c in categories if c.strip())
        if len(set(cats)) != len(cats) or not cats:
            raise DataError("--categories", None, None, "give distinct, non-empty categories, e.g. yes,no")
    if question is not None and not question.strip():
        raise DataError("--question", None, None, "the question is empty")
    spec = LabelSpec(stage=stage, dataset=dataset.strip(), scale=scale, categories=cats, origin=origin,
                     question=question.strip() if question is not None else None)
    with load_label_sources(_sources(data, source_name), spec) as result:
        return write_label_import(db, result)


def write_label_import(db: str | Path, result: LabelImport) -> LabelsSummary:
    """Write a validated import in one transaction, replacing what its sources wrote before (issue 1's rule).

    The rows are staged in SQL on the import's own connection (a million labels never become Python
    objects); the store file is attached to it and they are written with the store's own upsert and stale-row
    removal, the same steps :func:`personagap.store.write_batch` takes. ``result`` stays open (close it).
    """
    spec = result.spec
    record = result.record()
    started = now()
    runs = [{"run_id": run_id, "kind": "import", "source": name, "rater": None, "judge_version": None,
             "git_sha": git_sha(), "started_at": started, "finished_at": now(), "status": "finished",
             "parameters": {"adapter": "labels", "dataset": spec.dataset, "rows": result.files[name], **spec.meta()}}
            for name, run_id in result.run_ids.items()]
    tables = dict(result.tables)
    tables["runs"] = columns_table("runs", {c: [r[c] for r in runs] for c in TABLES["runs"][0]})
    summary = WriteSummary()
    with attached(result.con, db) as con, transaction(con):
        for table in _WRITE_ORDER:
            summary.tables[table] = upsert_counted(con, table, tables[table],
                                                   IMPORT_RUN_VOLATILE if table == "runs" else frozenset(),
                                                   keys_checked=table in _UNIQUE_BY_CONSTRUCTION)
        if summary["runs"].inserted < len(runs):  # a run seen before may have left rows it no longer has
            remove_stale(con, summary, list(result.run_ids.values()), tables["labels"], tables["items"])
        # The dataset record (item kind, scale, question, origin) is fixed here, in the import's transaction;
        # the legacy labels: entry stays for readers of stores written before records existed.
        set_meta(con, {f"labels:{spec.dataset}:{spec.stage}": orjson.dumps(spec.meta()).decode(),
                       **record_meta(record)})
    return LabelsSummary(db=str(db), stage=spec.stage, dataset=spec.dataset, origin=spec.origin,
                         files=result.files, written=summary, question=record.question,
                         inferred_categories=result.inferred_categories or ())


#: Columns of :func:`load_labels` that are the store's, not the label format's: what a frame of it is filed under
#: (one value per import) and the keys the store assigns (assigned anew on import).
STORE_COLUMNS: tuple[str, ...] = ("dataset", "stage", "origin", "run_id", "stored_item_id")
_FILED_UNDER: tuple[str, ...] = ("dataset", "stage", "origin")


def _stage(value: str | None, source_name: str) -> Stage:
    if value is None:
        raise ValueError("give stage= (extraction, relevance or response)")
    if value not in STAGES:
        raise DataError(source_name, None, "stage", f"unknown stage {value!r} (one of {', '.join(STAGES)})")
    return value


def _origin(value: str) -> Origin:
    if value not in ORIGINS:
        raise ValueError(f"origin must be one of {', '.join(ORIGINS)}, not {value!r}")
    return cast("Origin", value)


def _frame_of_store(frame: pd.DataFrame, source_name: str,
                    given: dict[str, str | None]) -> tuple[pd.DataFrame, dict[str, str]]:
    """A :func:`load_labels` frame as the label format reads it, and the dataset, stage and origin it holds.

    Raises:
        DataError: A ``dataset``, ``stage`` or ``origin`` column holds two values, or one that is not the argument's
            (named at its first row).
    """
    if not any(c in frame.columns for c in STORE_COLUMNS):
        return frame, {}
    found: dict[str, str] = {}
    for column in _FILED_UNDER:
        if column not in frame.columns:
            continue
        values = frame[column]
        first = given[column] if given[column] is not None else (str(values.iloc[0]) if len(values) else None)
        if first is None:
            continue
        off = values.astype(str) != first
        if off.any():
            index = values.index[int(off.to_numpy().argmax())]
            where = f"row {(index.item() if isinstance(index, np.generic) else index)!r}"
            hint = (f"the import's {column} is {first!r}" if given[column] is not None
                    else f"row {values.index[0]!r} holds {first!r}: one import is one {column}")
            raise DataError(source_name, where, column,
                            f"{str(values[index])!r} where {hint} (import each: "
                            f"frame[frame[{column!r}] == {str(values[index])!r}])")
        found[column] = first
    stage = given["stage"] or found.get("stage")
    frame = frame.drop(columns=[c for c in STORE_COLUMNS if c in frame.columns])
    if stage in CONTEXT:
        # Another stage's context column (load_labels gives every stage's), left empty, holds nothing to import.
        others = {c for cols in CONTEXT.values() for c in cols} - set(CONTEXT[stage])
        empty = [c for c in frame.columns if c in others and _empty(frame[c])]
        frame = frame.drop(columns=empty)
    return frame, found


def _empty(column: pd.Series) -> bool:
    return bool((column.isna() | (column.astype(str).str.strip() == "")).all())


#: Columns of :func:`load_labels`, in order: the label format's (what :func:`import_labels` reads), then the store's.
TIDY_COLUMNS: tuple[str, ...] = (
    "dataset", "stage", "origin", "item_id", "user_id", "rater", "rater_kind", "condition", "label", "failure",
    "reason", "confidence", "confidence_scale", "conversation", "attribute", "prompt", "profile", "response_a",
    "response_b", "response", "response_kind", "attribute_id", "attributes_used", "input_condition", "system",
    "personalized", "run_id", "stored_item_id")


def load_labels(db: str | Path, *, stage: Stage | None = None, dataset: str | None = None,
                rater_kind: str | None = None, condition: str | None = None,
                include_failures: bool = True) -> pd.DataFrame:
    """Every stored label as one tidy DataFrame: one row per (item, rater, condition), with the item's context.

    One frame in, the same frame out: its columns are the label format's (``docs/formats.md``), so
    ``import_labels(load_labels(db, dataset=d, stage=s), db=other)`` stores the same labels in ``other``. ``item_id``
    is the id the labels were imported under (your own id for data imported with :func:`import_labels`; the stored
    id for releases); ``stored_item_id`` is the store's key. A judge's failure has no ``label`` and its reason in
    ``failure`` (``unparseable: ...``); ``confidence`` is a float, ``attributes_used`` a JSON list as text.

    Args:
        db: The DuckDB file (opened read-only).
        stage: Keep one stage.
        dataset: Keep one dataset.
        rater_kind: Keep one rater kind (``human``, ``human_majority``, ``llm``, ``trained``, ``baseline``).
        condition: Keep one condition (``''`` is the blind protocol).
        include_failures: Keep rows whose answer could not be parsed (``label`` null, ``failure`` says why).

    Returns:
        Columns :data:`TIDY_COLUMNS`.
    """
    with opened(db, read_only=True) as con:
        origins = dataset_origins(con)
        frame = tidy_label_rows(con, stage=stage, dataset=dataset, rater_kind=rater_kind, condition=condition,
                                include_failures=include_failures)
    frame.insert(2, "origin", frame["dataset"].map(lambda d: origins.get(d, DEFAULT_ORIGIN)))
    # A stage-1 item names its extractor; the label format's ``system`` (the importer's placeholder is no system).
    extractor = frame.pop("extractor").where(frame["stage"] == "extraction")
    frame["system"] = extractor.where(extractor != IMPORTED_EXTRACTOR).fillna(frame["system"]) \
        .where(lambda s: s.notna(), None)
    frame = frame.rename(columns={"error": "failure"})
    return frame[list(TIDY_COLUMNS)]
