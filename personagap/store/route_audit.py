"""Reads and writes of the audit draw of ``personagap route --audit N`` (issue 30).

The draw is a simple random sample of the items the judge keeps, for people to label, so that the human rate can be
estimated rather than assumed (:func:`personagap.analysis.routing.human_rate_with_audit`). It is stored with its
seed -- one draw per (stage, dataset), replaced by the next ``--audit`` -- so that it is reproducible and labels can
be collected for exactly these items.
"""

from __future__ import annotations

from dataclasses import dataclass

import duckdb

from personagap.store.atomic import transaction
from personagap.store.batch import now


@dataclass(frozen=True)
class AuditDraw:
    """A stored audit draw: the item ids in draw order, the seed that drew them, and what they were drawn from."""

    item_ids: tuple[str, ...]
    seed: int
    kept_sha: str
    """:func:`personagap.analysis.routing.kept_digest` of the kept items drawn from: the draw is a random sample of
    the kept items only while they are the same."""


def save_audit(con: duckdb.DuckDBPyConnection, stage: str, dataset: str, draw: AuditDraw) -> None:
    """Store the audit draw of a stage and dataset, replacing the last one (in one transaction).

    Args:
        con: A writable connection (the schema has the ``route_audit`` table).
        stage: Pipeline stage.
        dataset: Dataset.
        draw: The drawn item ids (in draw order), their seed and the kept set's digest.
    """
    stamp = now()
    with transaction(con):
        con.execute("DELETE FROM route_audit WHERE stage = ? AND dataset = ?", [stage, dataset])
        if draw.item_ids:
            con.executemany("INSERT INTO route_audit VALUES (?, ?, ?, ?, ?, ?, ?)",
                            [[stage, dataset, item, k, draw.seed, draw.kept_sha, stamp]
                             for k, item in enumerate(draw.item_ids)])


def load_audit(con: duckdb.DuckDBPyConnection, stage: str, dataset: str) -> AuditDraw | None:
    """The stored audit draw of a stage and dataset, or None (none drawn, or a store older than the table)."""
    present = con.execute("SELECT count(*) FROM duckdb_tables() WHERE database_name = current_database() "
                          "AND schema_name = 'main' AND table_name = 'route_audit'").fetchone()
    if not present or not present[0]:  # a read-only reader of a version-3 store
        return None
    rows = con.execute("SELECT item_id, seed, kept_sha FROM route_audit WHERE stage = ? AND dataset = ? "
                       "ORDER BY draw_order", [stage, dataset]).fetchall()
    if not rows:
        return None
    return AuditDraw(tuple(str(r[0]) for r in rows), int(rows[0][1]), str(rows[0][2]))
