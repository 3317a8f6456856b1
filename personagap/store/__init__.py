"""The DuckDB store: one embedded file, one versioned schema, short transactions.

A small package: :mod:`~personagap.store.connection` (opening the file, locks),
:mod:`~personagap.store.schema` (tables, keys, migrations), :mod:`~personagap.store.batch` (what an import
writes), :mod:`~personagap.store.writes` (upserts, the import transaction, stale rows),
:mod:`~personagap.store.queries` (reads), :mod:`~personagap.store.aggregates` (the per-user counts reports
compute their figures from). Every name callers use is re-exported here.
"""

from __future__ import annotations

import sys
import types
from importlib import import_module
from typing import TYPE_CHECKING, Any

from personagap.store.errors import DuplicateKeyError, StoreError

if TYPE_CHECKING:
    from personagap.store.aggregates import (
        diagnosis_inputs,
        has_anchored_humans,
        has_labels,
        judge_failures,
        label_counts,
        multi_human_labels,
    )
    from personagap.store.batch import (
        ImportBatch,
        LabelColumns,
        TableCounts,
        WriteSummary,
        columns_table,
        gc_paused,
        git_sha,
        now,
    )
    from personagap.store.connection import FORCE_SCHEMA, LOCK_MARKERS, attached, connect, opened
    from personagap.store.queries import load_labels, running_runs
    from personagap.store.schema import DEFAULT_DB, SCHEMA_VERSION, TABLES
    from personagap.store.writes import (
        IMPORT_RUN_VOLATILE,
        RELEASE_KEY,
        remove_stale,
        set_meta,
        set_run_status,
        upsert,
        upsert_counted,
        write_batch,
        write_labels,
    )

# Each name's module, imported on first use: importing the package (the CLI does, for its errors) loads neither
# DuckDB nor pandas nor pyarrow until a command reads or writes the store.
_LAZY: dict[str, str] = {
    **dict.fromkeys(("diagnosis_inputs", "has_anchored_humans", "has_labels", "judge_failures", "label_counts",
                     "multi_human_labels"), "aggregates"),
    **dict.fromkeys(("ImportBatch", "LabelColumns", "TableCounts", "WriteSummary", "columns_table", "gc_paused",
                     "git_sha", "now"), "batch"),
    **dict.fromkeys(("LOCK_MARKERS", "attached", "connect", "opened"), "connection"),
    **dict.fromkeys(("load_labels", "running_runs"), "queries"),
    **dict.fromkeys(("DEFAULT_DB", "SCHEMA_VERSION", "TABLES"), "schema"),
    **dict.fromkeys(("IMPORT_RUN_VOLATILE", "RELEASE_KEY", "remove_stale", "set_meta",
                     "set_run_status", "upsert", "upsert_counted", "write_batch", "write_labels"), "writes"),
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # later lookups are plain attribute reads
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY) | {"FORCE_SCHEMA"})


__all__ = [
    "DEFAULT_DB", "FORCE_SCHEMA", "RELEASE_KEY", "SCHEMA_VERSION", "TABLES", "DuplicateKeyError", "ImportBatch",
    "LabelColumns", "StoreError", "TableCounts", "WriteSummary", "IMPORT_RUN_VOLATILE", "LOCK_MARKERS",
    "attached", "columns_table", "connect", "gc_paused", "git_sha", "load_labels", "now", "opened",
    "remove_stale", "running_runs", "set_meta", "set_run_status", "upsert", "upsert_counted", "write_batch",
    "write_labels", "diagnosis_inputs", "has_anchored_humans", "has_labels", "judge_failures", "label_counts",
    "multi_human_labels",
]


class _Store(types.ModuleType):
    """The package module: ``store.FORCE_SCHEMA = True`` (what ``--force-schema`` does) reaches the connection."""

    @property
    def FORCE_SCHEMA(self) -> bool:  # noqa: N802 - the module constant's name
        """Whether PersonaGap adds its tables to a DuckDB file holding other tables."""
        from personagap.store import connection

        return connection.FORCE_SCHEMA

    @FORCE_SCHEMA.setter
    def FORCE_SCHEMA(self, value: bool) -> None:  # noqa: N802
        from personagap.store import connection

        connection.FORCE_SCHEMA = value


sys.modules[__name__].__class__ = _Store
