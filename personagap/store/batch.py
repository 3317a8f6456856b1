"""What an import writes, collected before the write: its records, column-wise labels, and the summary."""

from __future__ import annotations

import contextlib
import gc
import subprocess
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa

from personagap.records import Attribute, Item, Label, LabelRow, Prompt, Run, User
from personagap.store.schema import TABLES


def git_sha() -> str | None:
    """Return the git commit of the PersonaGap checkout, or None outside a checkout."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=Path(__file__).resolve().parent, capture_output=True,
            text=True, timeout=5, check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def now() -> datetime:
    """Return the current UTC time without tzinfo (DuckDB TIMESTAMP)."""
    return datetime.now(UTC).replace(tzinfo=None)


_JSON_COLUMNS = frozenset({"payload", "parameters", "usage", "meta"})
# Arrow type of every non-text column (all others are text; JSON columns are written as their text).
_ARROW_TYPES: dict[str, pa.DataType] = {
    "prompt_index": pa.int64(), "position": pa.int64(), "judge_version": pa.int64(), "confidence": pa.float64(),
    "started_at": pa.timestamp("us"), "finished_at": pa.timestamp("us"), "created_at": pa.timestamp("us"),
}


def columns_table(table: str, columns: dict[str, list[Any]]) -> pa.Table:
    """An Arrow table in ``table``'s column order from one list per column (JSON columns encoded).

    Arrow, not pandas: DuckDB scans it without converting Python objects row by row, and building it
    from lists is several times cheaper than a DataFrame of object columns at 10^6 rows.

    Args:
        table: One of :data:`TABLES`.
        columns: Every column of the table -> its values (dicts/lists for JSON columns).
    """
    names, _ = TABLES[table]
    arrays = []
    for name in names:
        values = columns[name]
        if name in _JSON_COLUMNS:
            values = [None if v is None else _json_text(v) for v in values]
        arrays.append(pa.array(values, type=_ARROW_TYPES.get(name, pa.string())))
    return pa.Table.from_arrays(arrays, names=list(names))


def _json_text(value: Any) -> str:
    # orjson: ~10x the stdlib's json.dumps per value, which matters at 10^5 payloads per import.
    return orjson.dumps(value, default=str, option=orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY).decode()


def rows_table(table: str, rows: Sequence[dict[str, Any]]) -> pa.Table:
    names, _ = TABLES[table]
    return columns_table(table, {c: [r.get(c) for r in rows] for c in names})


@dataclass(frozen=True)
class TableCounts:
    """What a write did to one table."""

    inserted: int = 0
    updated: int = 0
    removed: int = 0
    unchanged: int = 0

    @property
    def changed(self) -> bool:
        """Whether any row was inserted, updated or removed."""
        return bool(self.inserted or self.updated or self.removed)

    def render(self) -> str:
        """E.g. ``3 inserted, 1 updated, 2 removed, 14,899 unchanged`` (zero counts left out)."""
        parts = [f"{n:,} {what}" for what, n in (("inserted", self.inserted), ("updated", self.updated),
                                                  ("removed", self.removed), ("unchanged", self.unchanged)) if n]
        return ", ".join(parts) or "nothing"


@dataclass
class WriteSummary:
    """What :func:`write_batch` did, per table: rows inserted, updated, removed and left unchanged."""

    tables: dict[str, TableCounts] = field(default_factory=dict)
    gone: list[str] = field(default_factory=list)
    """Files imported earlier from the same folders that are no longer there (their rows were removed)."""

    def __getitem__(self, table: str) -> TableCounts:
        """The counts of one table (all zero for a table the batch did not touch)."""
        return self.tables.get(table, TableCounts())

    @property
    def changed(self) -> bool:
        """Whether the write changed anything at all."""
        return any(c.changed for c in self.tables.values())

    def gone_line(self) -> str:
        """``; no longer in the folder: FILE, ...`` when earlier-imported files have gone, else ''."""
        shown = ", ".join(self.gone[:5]) + (f" and {len(self.gone) - 5} more" if len(self.gone) > 5 else "")
        return f"; no longer in the folder, so removed with their rows: {shown}" if self.gone else ""

    def render(self) -> str:
        """One line for the terminal: ``unchanged (...)`` when nothing changed, else the counts per table."""
        if not self.changed:
            held = ", ".join(f"{c.unchanged:,} {table}" for table, c in self.tables.items() if c.unchanged)
            return f"unchanged (the database already held every row: {held or 'none'})"
        return "; ".join(f"{table} {c.render()}" for table, c in self.tables.items()
                         if c.changed or c.unchanged) + self.gone_line()


class ImportBatch:
    """Everything one import writes, collected first and written in one transaction."""

    def __init__(self) -> None:
        """Start an empty batch."""
        self.runs: list[Run] = []
        self.users: dict[tuple[str, str], User] = {}
        self.attributes: dict[tuple[str, str, str], Attribute] = {}
        self.prompts: dict[tuple[str, str, int], Prompt] = {}
        self.items: dict[str, Item] = {}
        self.labels: list[Label | LabelRow] = []
        self.label_columns = LabelColumns()
        """Bulk labels, column-wise (what large adapters append to); written together with ``labels``."""
        self.written: WriteSummary | None = None
        """What :func:`write_batch` did with this batch, once it has been written."""
        self.folders: list[str] = []
        """Real paths of folders this import reads completely: files imported from them before that the batch
        no longer holds (deleted from the release) have their rows removed too."""
        self.releases: list[str] = []
        """Scopes of releases this import reads completely (``recenter:``; see ``_jsonl.Release.scope``): files
        of the release imported before, from whatever folder, that the batch no longer holds go too."""
        self.meta: dict[str, str] = {}
        """Meta entries written with the batch (dataset records: :func:`personagap.datasets.record_meta`)."""
        self.owned: dict[str, set[str]] = {}
        """Run id -> the items its file mentions. A re-import removes items a file mentioned before and no
        longer does, once no file and no label refers to them (see :func:`write_batch`)."""

    def own(self, run_id: str, item_ids: Iterable[str]) -> None:
        """Record that the file of ``run_id`` mentions ``item_ids``."""
        self.owned.setdefault(run_id, set()).update(item_ids)

    def counts(self) -> dict[str, int]:
        """Return how many rows of each kind the batch holds."""
        return {
            "runs": len(self.runs), "users": len(self.users), "attributes": len(self.attributes),
            "prompts": len(self.prompts), "items": len(self.items),
            "labels": len(self.labels) + len(self.label_columns),
        }


class LabelColumns:
    """Labels kept as one list per column: at 10^6 labels, per-row objects cost more than the insert.

    Appenders must keep :class:`~personagap.records.Label`'s invariant (label is None iff error is set);
    :meth:`append` checks it.
    """

    def __init__(self) -> None:
        """Start empty."""
        self.columns: dict[str, list[Any]] = {c: [] for c in TABLES["labels"][0]}

    def __len__(self) -> int:
        return len(self.columns["item_id"])

    def append(self, item_id: str, rater: str, rater_kind: str, condition: str, label: str | None,
               raw: str | None, reason: str | None, error: str | None, run_id: str) -> None:
        """Add one label (``meta`` is left empty for bulk labels)."""
        if (label is None) != (error is not None):
            raise ValueError("a label is None exactly when error says why")
        c = self.columns
        c["item_id"].append(item_id)
        c["rater"].append(rater)
        c["rater_kind"].append(rater_kind)
        c["condition"].append(condition)
        c["label"].append(label)
        c["raw"].append(raw)
        c["reason"].append(reason)
        c["error"].append(error)
        c["run_id"].append(run_id)
        c["meta"].append(None)

    def extend(self, item_ids: list[str], rater: str, rater_kind: str, condition: str, labels: list[str | None],
               raws: list[str | None], reasons: list[str | None], errors: list[str | None], run_id: str) -> None:
        """Add many labels by one rater in one run (column-wise; the bulk path of large imports)."""
        n = len(item_ids)
        if not (len(labels) == len(raws) == len(reasons) == len(errors) == n):
            raise ValueError("label columns differ in length")
        if any((lab is None) != (err is not None) for lab, err in zip(labels, errors, strict=True)):
            raise ValueError("a label is None exactly when error says why")
        c = self.columns
        c["item_id"].extend(item_ids)
        c["rater"].extend([rater] * n)
        c["rater_kind"].extend([rater_kind] * n)
        c["condition"].extend([condition] * n)
        c["label"].extend(labels)
        c["raw"].extend(raws)
        c["reason"].extend(reasons)
        c["error"].extend(errors)
        c["run_id"].extend([run_id] * n)
        c["meta"].extend([None] * n)

    def rows(self) -> Iterator[LabelRow]:
        """Iterate the labels as typed rows."""
        for values in zip(*self.columns.values(), strict=True):
            yield LabelRow(*values)


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector around a bulk import (a decorator or a ``with`` block).

    An import allocates millions of small objects that form no cycles; the collector would rescan the
    growing heap again and again and free nothing: measured, a quarter of a 10^6-label import.
    The previous state is restored on exit, also on error.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
