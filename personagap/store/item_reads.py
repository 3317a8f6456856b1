"""Reads of items with what the trained judges and the extraction judge need beside them."""

from __future__ import annotations

from collections.abc import Sequence

import duckdb
import pandas as pd

# The rule module whose SQL fragments the store uses (allowed store -> rule import, see .importlinter).
from personagap.analysis.comparable import reference_sql


def relevance_item_rows(con: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """Relevance items with prompt text, the extractor's reason/confidence and the blind human reference.

    The human label is the one blind reference every report uses (:func:`~personagap.analysis.comparable.
    reference_sql`): the stored majority, or the unique most frequent label of individual blind humans.

    Returns:
        Columns item_id, dataset, user_id, prompt_index, attribute, prompt_text, reason, confidence, human
        (None without a reference), ordered by dataset, user, prompt, attribute.
    """
    return con.execute(f"""
        WITH {reference_sql()}
        SELECT i.item_id, i.dataset, i.user_id, i.prompt_index, i.attribute, p.prompt_text,
               a.reason, a.confidence, r.human
        FROM items i JOIN prompts p USING (dataset, user_id, prompt_index)
        LEFT JOIN attributes a USING (dataset, user_id, attribute)
        LEFT JOIN reference r ON r.item_id = i.item_id
        WHERE i.stage = 'relevance' AND p.prompt_text IS NOT NULL AND i.attribute IS NOT NULL
        ORDER BY i.dataset, i.user_id, i.prompt_index, i.attribute
    """).df()


def item_labels(con: duckdb.DuckDBPyConnection, item_ids: Sequence[str]) -> pd.DataFrame:
    """Every label (``item_id``, ``rater``, ``label``) of the items ``item_ids``."""
    return con.execute("SELECT item_id, rater, label FROM labels WHERE item_id IN (SELECT unnest(?))",
                       [list(item_ids)]).df()
