"""Building the store's rows (items, labels, runs, context) of a validated label import, in SQL."""

from __future__ import annotations

from collections.abc import Sequence

import duckdb
import pyarrow as pa

from personagap.human_data.label_format import (
    CONFIDENCE,
    CONFIDENCE_SCALE,
    CONTEXT,
    FAILURE,
    ID_TAG,
    IMPORTED_EXTRACTOR,
    LINK_COLUMNS,
    LabelSpec,
    Source,
)
from personagap.human_data.label_sources import sql_quote, variable
from personagap.linking import ATTRIBUTES_USED, PROMPT_ID, SYSTEM
from personagap.store import TABLES, columns_table
from personagap.store.label_import import any_value, set_variables, stage_view


def item_hash(*parts: str) -> str:
    """SQL for an id this importer makes from ``parts`` (SQL expressions), tagged so it never collides."""
    # Stable across DuckDB versions: sha256 of the parts joined by a unit separator, like records.item_id.
    return f"substr(sha256(concat_ws(chr(31), {sql_quote(ID_TAG)}, {', '.join(parts)})), 1, 20)"


def build_rows(con: duckdb.DuckDBPyConnection, spec: LabelSpec, sources: Sequence[Source],
           run_ids: dict[str, str], filled: dict[str, bool]) -> dict[str, pa.Table | str]:
    """Stage each store table's rows as a temporary view over ``vl`` and ``it`` (see :class:`LabelImport`).

    Views, not tables: the store reads each once, straight into its own tables (a million labels
    copied into Arrow and back cost a fifth of the import).
    """
    ds, st = variable("pg_dataset"), variable("pg_stage")
    # Each label's run is its file's: an index into the bound list of run ids, not a join over every label.
    set_variables(con, {"pg_run_ids": ([run_ids[s.name] for s in sources], "VARCHAR[]")})
    run_of_file = f"{variable('pg_run_ids')}[_file + 1]"
    prompt_index = ("CASE WHEN prompt IS NULL THEN NULL ELSE "
                    "CAST('0x' || substr(sha256(prompt), 1, 7) AS INTEGER) END")
    has_prompt = spec.stage in ("relevance", "response")
    has_profile = filled.get("profile", False)  # extraction items have no profile
    # A profile is the item's context (kept in its payload); the user's profile only when all its items agree.
    user_profile = "CASE WHEN count(DISTINCT profile) = 1 THEN max(profile) END" if has_profile else "NULL::VARCHAR"
    views = {
        "labels": f"""
            SELECT it.sid AS item_id, rater, kind AS rater_kind, cond AS condition, stored AS label,
                   CASE WHEN stored IS DISTINCT FROM label THEN label END AS raw, reason, {FAILURE} AS error,
                   {run_of_file} AS run_id, {_meta_sql(con)} AS meta
            FROM temp.vl JOIN temp.it ON vl.item_id = it.source_id""",
        "items": f"""
            SELECT sid AS item_id, {ds} AS dataset, {st} AS stage, user_id,
                   {prompt_index if has_prompt else 'NULL::INTEGER'} AS prompt_index,
                   {'attribute' if spec.stage != 'response' else 'NULL::VARCHAR'} AS attribute,
                   NULL::BIGINT AS position, {_payload_sql(spec, filled, prompt_index)} AS payload
            FROM temp.it""",
        "users": f"""
            SELECT {ds} AS dataset, user_id, {user_profile} AS profile_text FROM temp.it GROUP BY user_id""",
    }
    if has_prompt:
        views["prompts"] = f"""
            SELECT DISTINCT {ds} AS dataset, user_id, {prompt_index} AS prompt_index, prompt AS prompt_text
            FROM temp.it WHERE prompt IS NOT NULL"""
    if spec.stage != "response":
        views["attributes"] = f"""
            SELECT DISTINCT {ds} AS dataset, user_id, attribute, NULL::VARCHAR AS reason, NULL::DOUBLE AS confidence
            FROM temp.it WHERE attribute IS NOT NULL"""
    tables: dict[str, pa.Table | str] = {"prompts": _empty("prompts"), "attributes": _empty("attributes")}
    for table, sql in views.items():
        tables[table] = stage_view(con, table, sql)
    return tables


def _empty(table: str) -> pa.Table:
    return columns_table(table, {c: [] for c in TABLES[table][0]})


def _meta_sql(con: duckdb.DuckDBPyConnection) -> str:
    """SQL of a label's meta: its ``confidence`` (a float) and the file's ``confidence_scale``, where given."""
    # Checked once over the column: an import without confidences keeps meta NULL at no per-row cost.
    if not any_value(con, CONFIDENCE):
        return "NULL::VARCHAR"
    value = f"TRY_CAST({CONFIDENCE} AS DOUBLE)"
    return (f"CASE WHEN {CONFIDENCE} IS NULL THEN NULL "
            f"WHEN {CONFIDENCE_SCALE} IS NULL THEN json_object({sql_quote(CONFIDENCE)}, {value})::VARCHAR "
            f"ELSE json_object({sql_quote(CONFIDENCE)}, {value}, {sql_quote(CONFIDENCE_SCALE)}, "
            f"{CONFIDENCE_SCALE})::VARCHAR END")


def _links_sql(spec: LabelSpec, filled: dict[str, bool], prompt_index: str) -> str:
    """The payload's linking keys (:mod:`personagap.linking`) a file fills, as ``json_object`` arguments.

    Only filled columns become keys: a file without links keeps the payload it always had. A stage-3 item that
    links also names its prompt (``prompt_id``, ``<user_id>_<prompt_index>``): the stage-2 items of the same
    prompt text carry the same prompt index (it is a hash of the text).
    """
    pairs = [f"{sql_quote(c)}, {'json(' + c + ')' if c == ATTRIBUTES_USED else c}"
             for c in LINK_COLUMNS if c in CONTEXT[spec.stage] and filled.get(c)]
    if spec.stage == "response" and pairs and filled.get("prompt"):
        pairs.append(f"{sql_quote(PROMPT_ID)}, CASE WHEN prompt IS NULL THEN NULL "
                     f"ELSE user_id || '_' || CAST({prompt_index} AS VARCHAR) END")
    return "".join(", " + p for p in pairs)


def _payload_sql(spec: LabelSpec, filled: dict[str, bool], prompt_index: str) -> str:
    """The item's payload in the shape the stage's reports and judges read (see docs/formats.md)."""
    links = _links_sql(spec, filled, prompt_index)
    if spec.stage == "extraction":
        extractor = f"coalesce({SYSTEM}, {sql_quote(IMPORTED_EXTRACTOR)})" if filled.get(SYSTEM) \
            else sql_quote(IMPORTED_EXTRACTOR)
        return (f"json_object('kind', 'extracted', 'unit', user_id, 'extractor', {extractor}, "
                f"'turn_ids', [], 'confidence', NULL, 'source_id', source_id, 'conversation', conversation{links})")
    if spec.stage == "relevance":
        return f"json_object('kind', 'relevance', 'source_id', source_id, 'profile', profile{links})"
    return f"""CASE WHEN is_pair THEN json_object(
            'kind', 'pairwise', 'question', coalesce(prompt, ''), 'answer_a', coalesce(response_a, ''),
            'answer_b', coalesce(response_b, ''), 'profile', profile, 'response_kind', lower(response_kind),
            'source_id', source_id{links})
        ELSE json_object('kind', CASE WHEN is_yes_no THEN 'persona_use' ELSE 'single' END,
            'facts', CASE WHEN profile IS NULL THEN []
            ELSE list_filter(string_split(profile, chr(10)), lambda x: trim(x) <> '') END,
            'context', coalesce(prompt, ''), 'response', coalesce(response, ''), 'profile', profile,
            'response_kind', lower(response_kind), 'source_id', source_id{links}) END"""
