"""A small store written with the store's write API, for the pipeline-view tests (linked keys of issue 22)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from personagap.store import opened, upsert

RUN = "test-run"


def item(iid: str, dataset: str, stage: str, user: str, *, prompt_index: int | None = None,
         attribute: str | None = None, **payload: Any) -> dict[str, Any]:
    """An items row; keyword arguments go into its payload."""
    return {"item_id": iid, "dataset": dataset, "stage": stage, "user_id": user, "prompt_index": prompt_index,
            "attribute": attribute, "position": None, "payload": payload or None}


def label(iid: str, rater: str, kind: str, value: str | None, condition: str = "") -> dict[str, Any]:
    """A labels row (a failure when ``value`` is None)."""
    return {"item_id": iid, "rater": rater, "rater_kind": kind, "condition": condition, "label": value, "raw": None,
            "reason": None, "error": None if value is not None else "unparseable", "run_id": RUN, "meta": None}


def write_store(path: Path, items: list[dict[str, Any]], labels: list[dict[str, Any]]) -> Path:
    """Write ``items`` and ``labels`` into a new store at ``path`` (one transaction)."""
    with opened(path) as con:
        con.execute("BEGIN TRANSACTION")
        upsert(con, "items", items)
        upsert(con, "labels", labels)
        con.execute("COMMIT")
    return path
