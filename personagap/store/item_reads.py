"""Reads of items with what the trained judges and the extraction judge need beside them."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import duckdb
import pandas as pd

# The rule module whose SQL fragments the store uses (allowed store -> rule import, see .importlinter).
from personagap.analysis.comparable import reference_sql
from personagap.store.response_counts import GVP_KIND, PERSONALIZED
from personagap.vocabulary import SINGLE_KINDS


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


def relevance_prompt_items(con: duckdb.DuckDBPyConnection, datasets: Sequence[str]) -> pd.DataFrame:
    """Relevance items of ``datasets`` with their prompt text, in a stable order (dataset, user, prompt, attribute).

    Returns:
        Columns item_id, dataset, user_id, prompt_index, attribute, prompt_text.
    """
    return con.execute("""
        SELECT i.item_id, i.dataset, i.user_id, i.prompt_index, i.attribute, p.prompt_text
        FROM items i JOIN prompts p USING (dataset, user_id, prompt_index)
        WHERE i.stage = 'relevance' AND i.dataset IN (SELECT unnest(?)) AND p.prompt_text IS NOT NULL
        ORDER BY i.dataset, i.user_id, i.prompt_index, i.attribute
    """, [list(datasets)]).df()


def extraction_item_rows(con: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """Stage-1 items as stored (payload unparsed), ordered by dataset, user, item.

    Returns:
        Columns item_id, dataset, user_id, attribute, position, payload.
    """
    return con.execute("SELECT item_id, dataset, user_id, attribute, position, payload FROM items "
                       "WHERE stage = 'extraction' ORDER BY dataset, user_id, item_id").df()


def blind_reference_of(con: duckdb.DuckDBPyConnection, item_ids: Sequence[str]) -> dict[str, str]:
    """The blind human reference (:func:`~personagap.analysis.comparable.reference_sql`) of each of ``item_ids``.

    Items whose humans tie have none (absent from the result).
    """
    rows = con.execute(f"""
        WITH {reference_sql("blind")}
        SELECT item_id, human FROM reference WHERE item_id IN (SELECT unnest(?))
    """, [list(item_ids)]).fetchall()
    return {str(item): str(label) for item, label in rows}


def response_items(con: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """Stage-3 items with their payload flattened into the columns the judges and the report use.

    Returns:
        Columns item_id, dataset, user_id, kind, question, answer_a, answer_b, profile, split,
        tier, personalized (canonical position of a personalised answer), order_shown (whether
        the A/B order is the one the human saw), facts, context, response.
    """
    rows = con.execute("SELECT item_id, dataset, user_id, prompt_index, payload FROM items "
                       "WHERE stage = 'response' ORDER BY dataset, user_id, item_id").fetchall()
    prompts = {(d, u, p): t for d, u, p, t in con.execute(
        "SELECT dataset, user_id, prompt_index, prompt_text FROM prompts").fetchall()}
    attrs: dict[tuple[str, str], list[str]] = {}
    for d, u, a in con.execute("SELECT dataset, user_id, attribute FROM attributes ORDER BY attribute").fetchall():
        attrs.setdefault((d, u), []).append(a)
    out = []
    for iid, dataset, user, prompt_index, payload in rows:
        p = json.loads(payload) if isinstance(payload, str) else (payload or {})
        kind = p.get("kind")
        rec: dict[str, Any] = {"item_id": iid, "dataset": dataset, "user_id": user, "kind": kind,
                               "question": None, "answer_a": None, "answer_b": None, "profile": None,
                               "split": p.get("split"), "tier": p.get("tier"), "personalized": None,
                               "order_shown": p.get("order_seed") is None, "facts": None, "context": None,
                               "response": None}
        if kind == "pairwise":
            rec |= {"question": p["question"], "answer_a": p["answer_a"], "answer_b": p["answer_b"],
                    "profile": p.get("profile")}
        elif kind == GVP_KIND:
            profile = attrs.get((dataset, user))
            # Canonical order: A = the generic answer, B = the personalised one.
            rec |= {"question": prompts.get((dataset, user, prompt_index)), "answer_a": p["response_no_context"],
                    "answer_b": p["response_personalized"], "personalized": PERSONALIZED, "order_shown": False,
                    "profile": "\n".join(profile) if profile else None}
        elif kind in SINGLE_KINDS:
            rec |= {"facts": p.get("facts"), "context": p.get("context"), "response": p.get("response"),
                    "profile": p.get("profile")}
        out.append(rec)
    return pd.DataFrame(out, columns=["item_id", "dataset", "user_id", "kind", "question", "answer_a", "answer_b",
                                      "profile", "split", "tier", "personalized", "order_shown", "facts",
                                      "context", "response"])
