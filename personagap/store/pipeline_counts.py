"""The pipeline view's reads: per-(dataset, system, condition, user) counts that DuckDB builds from the store.

Nothing here reads one row per label into Python: every query groups by user (and by system, judge and input
condition), so the result is small at 10^7 labels. Which labels count is :mod:`personagap.analysis.comparable`'s
rule: the one blind human reference (:func:`~personagap.analysis.comparable.reference_sql`), comparable judges
(:func:`~personagap.analysis.comparable.comparable_judge_sql`) and a pipeline's own outputs (``SYSTEM_KINDS``).
:mod:`personagap.analysis.pipeline_sql` re-exports these names for the view (:mod:`personagap.analysis.pipeline`).

Linked data (issue 22's contract, stored in ``items.payload``): ``attribute_id`` on stage-1 and stage-2 items,
``attributes_used`` (attribute ids), ``input_condition`` (``pipeline`` | ``oracle`` | ``none``), ``system`` and
``prompt_id`` (``<user_id>_<prompt_index>``) on stage-3 items.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import cast

import duckdb
import pandas as pd

# The rule module whose SQL fragments the store uses (allowed store -> rule import, see .importlinter).
from personagap.analysis.comparable import JUDGE_KINDS, SYSTEM_KINDS, comparable_judge_sql, reference_sql
from personagap.linking import ATTRIBUTE_ID, ATTRIBUTES_USED, INPUT_CONDITION, PERSONALIZED, PROMPT_ID, SYSTEM
from personagap.store.response_counts import GVP_KIND, REVERSED
from personagap.store.temp_tables import held_table
from personagap.vocabulary import ATTRIBUTE_KINDS as ATTRIBUTE_KINDS
from personagap.vocabulary import VERIFICATION_LABELS as VERDICTS

REJECTED = "bad"
"""The stage-1 verdict that rejects an extracted attribute."""
UNSURE = "unsure"
"""The stage-1 verdict reported apart from rejections."""
SELECTED = "yes"
"""A selector's (and the human reference's) label for a relevant / selected attribute at stage 2."""

REFERENCE_TABLE = "_pipeline_reference"
"""The blind reference per item, computed once per view (:func:`reference_table`) and read by every query here."""
_JUDGE = comparable_judge_sql("j")
_VERDICTS = ", ".join(f"'{v}'" for v in VERDICTS)
_ATTRIBUTE_KIND = ("(json_extract_string(i.payload, '$.kind') IS NULL OR json_extract_string(i.payload, '$.kind') IN ("
                   + ", ".join(f"'{k}'" for k in ATTRIBUTE_KINDS if k is not None) + "))")
"""Stage-1 items that are extracted attributes (not gold preferences, chunks or conversations)."""
_NOT_REVERSED = f"NOT ends_with(j.condition, '{REVERSED}')"  # a reverse-order run is not a judge of its own


@contextlib.contextmanager
def reference_table(con: duckdb.DuckDBPyConnection) -> Iterator[str]:
    """Hold the blind reference of every item in a temporary table while the view's queries run.

    Every query of the view reads it: computed once (at 10^6 labels the reference is most of a query's time), and
    dropped afterwards. A temporary table is private to the connection, and allowed on a read-only one. Nested
    uses on one connection share the outer table (``diagnose`` counts its judges against it before the view), so
    the reference is computed once per connection.

    Yields:
        The table's name (:data:`REFERENCE_TABLE`): columns ``item_id``, ``human``.
    """
    with held_table(con, REFERENCE_TABLE, f"WITH {reference_sql('blind', 'l')} SELECT item_id, human FROM reference"
                    ) as name:
        yield name


def _frame(con: duckdb.DuckDBPyConnection, sql: str) -> pd.DataFrame:
    return cast(pd.DataFrame, con.sql(sql).to_arrow_table().to_pandas())


def _system(alias: str) -> str:
    # The producer of an item: its payload's system, else the extractor or (Re-Centering's answers) the model.
    return "coalesce(" + ", ".join(f"json_extract_string({alias}.payload, '$.{k}')"
                                   for k in (SYSTEM, "extractor", "model_tag")) + ")"


_STAGE1 = f"""
    units AS (
        SELECT i.item_id, i.dataset, {_system('i')} AS system, i.user_id, r.human
        FROM items i LEFT JOIN {REFERENCE_TABLE} r USING (item_id)
        WHERE i.stage = 'extraction' AND {_ATTRIBUTE_KIND}
    ),
    verified AS (SELECT dataset FROM units GROUP BY dataset HAVING bool_or(human IN ({_VERDICTS})))
"""

def _answer(alias: str, key: str) -> str:
    return f"json_extract_string({alias}.payload, '$.{key}')"


# A generic-vs-personalised pair: which canonical position holds the personalised answer (GVP items put the generic
# answer in A and the personalised one in B, stages/response.py load_items); the other position is the generic one.
# The same two answers stored twice count once (DUPLICATES below): every stored pair maps to its unit (``alias``), the
# unit's human verdict and judges' labels are read through it in the unit's positions, one label per judge.
_STAGE3 = f"""
    raw AS (
        SELECT i.item_id, i.dataset, {_system('i')} AS system,
               json_extract_string(i.payload, '$.{INPUT_CONDITION}') AS input_condition, i.user_id,
               coalesce(json_extract_string(i.payload, '$.{PERSONALIZED}'),
                        CASE WHEN json_extract_string(i.payload, '$.kind') = '{GVP_KIND}' THEN 'B' END) AS pers,
               coalesce({_answer('i', 'response_personalized')}, CASE pers WHEN 'A' THEN {_answer('i', 'answer_a')}
                        WHEN 'B' THEN {_answer('i', 'answer_b')} END) AS pers_text,
               coalesce({_answer('i', 'response_no_context')}, CASE pers WHEN 'A' THEN {_answer('i', 'answer_b')}
                        WHEN 'B' THEN {_answer('i', 'answer_a')} END) AS generic_text,
               CASE WHEN pers_text IS NULL OR generic_text IS NULL THEN i.item_id
                    ELSE md5(pers_text || chr(0) || generic_text) END AS answers
        FROM items i
        WHERE i.stage = 'response' AND (json_extract_string(i.payload, '$.kind') = '{GVP_KIND}'
                                        OR json_extract_string(i.payload, '$.{INPUT_CONDITION}') IS NOT NULL)
    ),
    keyed AS (
        -- A pair's unit: the user's pair of answers under one input condition; a pair that records none joins the
        -- same answers' pair that records one (two recorded conditions are two experiments, never merged).
        SELECT item_id, dataset, system, input_condition, user_id, pers, answers,
               coalesce(input_condition, first_value(input_condition) OVER (
                   PARTITION BY user_id, answers ORDER BY input_condition IS NULL, input_condition, item_id), '')
               AS unit_condition
        FROM raw WHERE pers IN ('A', 'B')
    ),
    pairs AS (
        -- One unit: the stored pair that records its input condition, else the first.
        SELECT * FROM keyed
        QUALIFY row_number() OVER (PARTITION BY user_id, answers, unit_condition
                                   ORDER BY input_condition IS NULL, item_id) = 1
    ),
    alias AS (
        SELECT r.item_id, p.item_id AS unit_id, r.pers AS own_pers, p.pers,
               CASE WHEN p.pers = 'A' THEN 'B' ELSE 'A' END AS generic
        FROM keyed r JOIN pairs p USING (user_id, answers, unit_condition)
    ),
    unit_ref AS (
        -- The unit's own verdict first, else a duplicate's, in the unit's positions.
        SELECT a.unit_id AS item_id,
               arg_min(CASE WHEN r.human = a.own_pers THEN a.pers WHEN r.human IN ('A', 'B') THEN a.generic
                            ELSE r.human END, a.item_id <> a.unit_id) AS human
        FROM alias a JOIN {REFERENCE_TABLE} r USING (item_id) GROUP BY a.unit_id
    ),
    units AS (
        SELECT p.* EXCLUDE (answers, unit_condition), CASE WHEN p.pers = 'A' THEN 'B' ELSE 'A' END AS generic,
               r.human
        FROM pairs p LEFT JOIN unit_ref r USING (item_id)
    ),
    unit_labels AS (
        -- Every comparable judge label of a unit's stored pairs, in the unit's positions; one per judge and unit.
        SELECT a.unit_id AS item_id, j.rater, j.rater_kind, j.condition,
               CASE WHEN j.label = a.own_pers THEN a.pers WHEN j.label IN ('A', 'B') THEN a.generic ELSE j.label END
               AS label
        FROM alias a JOIN labels j USING (item_id)
        WHERE {_JUDGE} AND {_NOT_REVERSED} AND j.label IS NOT NULL
        QUALIFY row_number() OVER (PARTITION BY a.unit_id, j.rater, j.condition ORDER BY a.item_id <> a.unit_id,
                                   a.item_id) = 1
    )
"""


def duplicate_pairs(con: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """Stored generic-vs-personalised pairs whose two answers another stored pair of the user holds (counted once).

    Re-Centering's ``recenter-stage2`` pairs (task6: the answer written from the human-relevant attributes beside
    the generic one) are ``recenter-stage3-conditions``' oracle pairs of the same model: one unit, reported under
    the pair that records its input condition.

    Returns:
        Per (``dataset``, ``system`` of the dropped pairs, ``unit_dataset``, ``unit_system``, ``unit_condition``)
        the number ``n`` of stored pairs counted in the other's unit.
    """
    return _frame(con, f"""
        WITH {_STAGE3}
        SELECT r.dataset, r.system, u.dataset AS unit_dataset, u.system AS unit_system,
               u.input_condition AS unit_condition, count(*) AS n
        FROM alias a JOIN raw r USING (item_id) JOIN pairs u ON u.item_id = a.unit_id
        WHERE a.item_id <> a.unit_id GROUP BY ALL ORDER BY ALL
    """)


def stage1_counts(con: duckdb.DuckDBPyConnection) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Stage 1: per (dataset, extractor, user) extracted attributes, human verdicts, rejections and unsure ones.

    Only datasets whose human reference uses the verification verdicts (ok / bad / unsure) are read.

    Returns:
        Human counts (``dataset``, ``system``, ``user_id``, ``n_items``, ``n_ref``, ``pos``, ``unsure``) and
        judge counts (``dataset``, ``system``, ``rater``, ``condition``, ``user_id`` and the six counts of
        :func:`judge_columns`: positive = a rejection).
    """
    human = _frame(con, f"""
        WITH {_STAGE1}
        SELECT dataset, system, user_id, count(*) AS n_items, count(human) FILTER (WHERE human IN ({_VERDICTS}))
               AS n_ref, count(*) FILTER (WHERE human = '{REJECTED}') AS pos,
               count(*) FILTER (WHERE human = '{UNSURE}') AS unsure
        FROM units SEMI JOIN verified USING (dataset) GROUP BY ALL
    """)
    judges = _frame(con, f"""
        WITH {_STAGE1}
        SELECT u.dataset, u.system, j.rater, j.condition, u.user_id, {judge_columns(f"j.label = '{REJECTED}'",
                                                                                    f"u.human = '{REJECTED}'")}
        FROM units u SEMI JOIN verified USING (dataset) JOIN labels j USING (item_id)
        WHERE {_JUDGE} AND j.label IN ({_VERDICTS}) GROUP BY ALL
    """)
    return human, judges


def judge_columns(judge_pos: str, human_pos: str, has_ref: str = "u.human IS NOT NULL", *, within: str = "TRUE",
                  suffix: str = "") -> str:
    """SQL select list of a judge's per-user counts for a corrected rate (static text of this module's predicates).

    ``j_n`` items the judge labelled, ``j_pos`` of them positive; on items with a human verdict, ``tp``, ``fn``,
    ``fp``, ``tn`` of the judge's positive against the human's. ``within`` restricts every count to a subgroup;
    ``suffix`` is appended to every name (several quantities in one query).
    """
    cells = {"j_n": "TRUE", "j_pos": judge_pos,
             "tp": f"{has_ref} AND {human_pos} AND {judge_pos}",
             "fn": f"{has_ref} AND {human_pos} AND NOT ({judge_pos})",
             "fp": f"{has_ref} AND NOT ({human_pos}) AND {judge_pos}",
             "tn": f"{has_ref} AND NOT ({human_pos}) AND NOT ({judge_pos})"}
    return ", ".join(f"count(*) FILTER (WHERE ({within}) AND {cond}) AS {name}{suffix}" for name, cond in cells.items())


def _stage2(kinds: tuple[str, ...], *, linked_only: bool = False) -> str:
    """CTEs ending in ``sel``: selections of stage-2 selectors of rater kinds ``kinds`` with the human reference.

    ``linked_only``: only attributes linked to a stage-1 verdict (the oracle-input counts; few rows, so the scan of
    every LLM label is not paid twice).
    """
    link = "JOIN accepted a" if linked_only else "LEFT JOIN accepted a"
    return f"""
    accepted AS (
        -- Stage-1 verdicts of linked attributes: accepted when every linked human verdict is ok.
        SELECT i.user_id, json_extract_string(i.payload, '$.{ATTRIBUTE_ID}') AS aid, bool_and(r.human = 'ok') AS ok
        FROM items i JOIN {REFERENCE_TABLE} r USING (item_id)
        WHERE i.stage = 'extraction' AND r.human IN ({_VERDICTS}) AND i.payload IS NOT NULL
        GROUP BY ALL HAVING aid IS NOT NULL
    ),
    sel AS (
        SELECT s.item_id, i.dataset, s.rater AS system, s.rater_kind AS system_kind, i.user_id, s.label = '{SELECTED}'
               AS selected, r.human, a.ok AS accepted
        FROM labels s JOIN items i USING (item_id) LEFT JOIN {REFERENCE_TABLE} r USING (item_id)
        {link} ON a.user_id = i.user_id AND a.aid = json_extract_string(i.payload, '$.{ATTRIBUTE_ID}')
        WHERE i.stage = 'relevance' AND s.label IS NOT NULL AND s.rater_kind IN ({_sql(kinds)})
          AND (s.rater_kind NOT IN ({_sql(JUDGE_KINDS)}) OR s.condition = '')
    )
"""


def _sql(values: tuple[str, ...] | list[str]) -> str:
    return ", ".join(f"'{v}'" for v in values)


_LINKED = """count(accepted) AS n_linked,
               count(*) FILTER (WHERE accepted AND selected AND human = 'yes') AS tp_ok,
               count(*) FILTER (WHERE accepted AND selected AND human = 'no') AS fp_ok,
               count(*) FILTER (WHERE accepted AND NOT selected AND human = 'yes') AS fn_ok,
               count(*) FILTER (WHERE accepted AND NOT selected AND human = 'no') AS tn_ok"""
_COUNTS = ["tp", "fp", "fn", "tn"]


def llm_selections(judges: pd.DataFrame) -> pd.DataFrame:
    """Every LLM selector's per-user counts against humans, from the relevance judge counts of ``label_counts``.

    An LLM relevance labeller's standard-protocol labels are its selection; ``judges`` (the judge frame of
    :func:`personagap.store.aggregates.label_counts`: per dataset, rater, kind, condition, user, reference and
    label, the number of items) already counts them, so no label is read again.

    Returns:
        Columns ``dataset``, ``system``, ``system_kind``, ``user_id``, ``n_items``, ``tp``, ``fp``, ``fn``, ``tn``.
    """
    mine = judges[(judges["stage"] == "relevance") & (judges["rater_kind"] == "llm") & (judges["condition"] == "")]
    picked, human = mine["label"].eq(SELECTED), mine["human"]
    cells = {"tp": picked & human.eq(SELECTED), "fp": picked & human.eq("no"),
             "fn": ~picked & human.eq(SELECTED), "tn": ~picked & human.eq("no")}
    n = mine["n"].astype("int64")
    frame = pd.DataFrame({"dataset": mine["dataset"], "system": mine["rater"], "system_kind": mine["rater_kind"],
                          "user_id": mine["user_id"], "n_items": n} | {k: n.where(v, 0) for k, v in cells.items()})
    return frame.groupby(["dataset", "system", "system_kind", "user_id"], as_index=False, sort=True).sum()


def stage2_counts(con: duckdb.DuckDBPyConnection, judges: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Stage 2: per (dataset, selector, user) the selector's selection against the human relevance verdict.

    A selector is an LLM relevance labeller (its standard-protocol labels, counted from ``judges``: see
    :func:`llm_selections`) or a pipeline's own selection (a ``system`` rater, read here). Judges rate a pipeline's
    selection: for every comparable judge, its "relevant" verdicts on the attributes the pipeline selected
    (``g1``) and on those it left out (``g0``). LLM selectors' judges come from
    :func:`personagap.analysis.pipeline_cross.cross_judges`.

    Args:
        con: An open store connection holding :data:`REFERENCE_TABLE`.
        judges: The judge frame of :func:`personagap.store.aggregates.label_counts` (blind reference).

    Returns:
        Selector counts (``dataset``, ``system``, ``system_kind``, ``user_id``, ``n_items``, ``tp``, ``fp``,
        ``fn``, ``tn`` against the human reference; ``n_linked`` attributes linked to a stage-1 verdict and the four
        counts again over the attributes humans accepted at stage 1, suffixed ``_ok``) and judge counts
        (``dataset``, ``system``, ``rater``, ``condition``, ``user_id``, then :func:`judge_columns` of "relevant"
        per group, suffixed ``_g1``/``_g0``).
    """
    keys = ["dataset", "system", "system_kind", "user_id"]
    own = _frame(con, f"""
        WITH {_stage2(SYSTEM_KINDS)}
        SELECT {", ".join(keys)}, count(*) AS n_items,
               count(*) FILTER (WHERE selected AND human = 'yes') AS tp,
               count(*) FILTER (WHERE selected AND human = 'no') AS fp,
               count(*) FILTER (WHERE NOT selected AND human = 'yes') AS fn,
               count(*) FILTER (WHERE NOT selected AND human = 'no') AS tn,
               {_LINKED}
        FROM sel GROUP BY ALL
    """)
    linked = _frame(con, f"WITH {_stage2(('llm',), linked_only=True)} SELECT {', '.join(keys)}, {_LINKED} "
                         "FROM sel GROUP BY ALL")
    llm = llm_selections(judges).merge(linked, on=keys, how="left")
    extra = ["n_linked", *(f"{c}_ok" for c in _COUNTS)]
    llm[extra] = llm[extra].fillna(0).astype("int64")
    parts = [f for f in (own, llm) if not f.empty]
    sel = pd.concat(parts, ignore_index=True) if parts else own
    if own.empty:
        return sel, pd.DataFrame()  # no pipeline's own selection stored: nothing for judges to rate here
    relevant = (f"j.label = '{SELECTED}'", f"u.human = '{SELECTED}'", "u.human IN ('yes', 'no')")
    selects = ", ".join(judge_columns(*relevant, within=flag, suffix=suffix)
                        for flag, suffix in (("u.selected", "_g1"), ("NOT u.selected", "_g0")))
    judged = _frame(con, f"""
        WITH {_stage2(SYSTEM_KINDS)}
        SELECT u.dataset, u.system, j.rater, j.condition, u.user_id, {selects}
        FROM sel u JOIN labels j USING (item_id)
        WHERE {_JUDGE} AND j.label IS NOT NULL GROUP BY ALL
    """)
    return sel, judged


def stage3_counts(con: duckdb.DuckDBPyConnection) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Stage 3: per (dataset, generator, input condition, user) personalised answers and human verdicts on them.

    Returns:
        Human counts (``dataset``, ``system``, ``input_condition``, ``user_id``, ``n_items``, ``n_ref``,
        ``no_better``, ``worse``) and judge counts (``dataset``, ``system``, ``input_condition``, ``rater``,
        ``condition``, ``user_id`` and :func:`judge_columns` for "no better" then for "worse", suffixed
        ``_nb`` / ``_w``).
    """
    human = _frame(con, f"""
        WITH {_STAGE3}
        SELECT dataset, system, input_condition, user_id, count(*) AS n_items,
               count(human) AS n_ref, count(*) FILTER (WHERE human <> pers) AS no_better,
               count(*) FILTER (WHERE human = generic) AS worse
        FROM units GROUP BY ALL
    """)
    cols = ", ".join([judge_columns("j.label <> u.pers", "u.human <> u.pers", suffix="_nb"),
                      judge_columns("j.label = u.generic", "u.human = u.generic", suffix="_w")])
    judges = _frame(con, f"""
        WITH {_STAGE3}
        SELECT u.dataset, u.system, u.input_condition, j.rater, j.condition, u.user_id, {cols}
        FROM units u JOIN unit_labels j USING (item_id) GROUP BY ALL
    """)
    return human, judges


def cascade_items(con: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """Stage-3 answers written from linked attributes, with the upstream errors among the attributes they used.

    An attribute used by an answer is an upstream error when humans rejected it at stage 1 (the reference of a
    stage-1 item with its ``attribute_id`` is ``bad``) or judged it irrelevant for this prompt at stage 2 (the
    reference of the stage-2 item of the same user, prompt and ``attribute_id`` is ``no``). Where several datasets
    hold a stage-2 item of that key (a pilot and the final study number their prompts alike), the ones whose prompt
    text is the answer's question decide; without such a match, those whose prompt text is not stored; a stage-2
    item of another question is never linked. An error needs every linked human verdict to say so: where two
    studies' humans disagree on the same attribute, it is not flagged.

    Returns:
        One row per linked answer: ``item_id``, ``dataset``, ``system``, ``input_condition``, ``user_id``,
        ``n_used``, ``rejected`` and ``irrelevant`` (sorted lists of attribute ids; ``*_text``: the attributes'
        texts, the id where no text is stored), ``human`` (the answer's
        reference verdict) and ``pers`` (the personalised answer's position).
    """
    return _frame(con, f"""
        WITH {_STAGE3},
        used AS (
            SELECT i.item_id, i.user_id, json_extract_string(i.payload, '$.question') AS question,
                   coalesce(json_extract_string(i.payload, '$.{PROMPT_ID}'), i.user_id || '_' || i.prompt_index)
                   AS prompt_id,
                   unnest(from_json(json_extract(i.payload, '$.{ATTRIBUTES_USED}'), '["VARCHAR"]')) AS aid
            FROM items i
            WHERE i.stage = 'response' AND json_extract(i.payload, '$.{ATTRIBUTES_USED}') IS NOT NULL
        ),
        s1 AS (
            SELECT i.user_id, json_extract_string(i.payload, '$.{ATTRIBUTE_ID}') AS aid,
                   any_value(coalesce(i.attribute, aid)) AS text
            FROM items i JOIN {REFERENCE_TABLE} r USING (item_id)
            WHERE i.stage = 'extraction' AND r.human IN ({_VERDICTS}) GROUP BY ALL
            HAVING bool_and(r.human = '{REJECTED}')
        ),
        s2_all AS (
            SELECT i.user_id, i.user_id || '_' || i.prompt_index AS prompt_id,
                   json_extract_string(i.payload, '$.{ATTRIBUTE_ID}') AS aid, coalesce(i.attribute, aid) AS text,
                   r.human, p.prompt_text
            FROM items i JOIN {REFERENCE_TABLE} r USING (item_id)
            LEFT JOIN prompts p ON p.dataset = i.dataset AND p.user_id = i.user_id AND p.prompt_index = i.prompt_index
            WHERE i.stage = 'relevance'
        ),
        s2 AS (
            -- The linked stage-2 verdicts of each used attribute: same question first, then prompts without text.
            SELECT u.item_id, u.aid, s.text
            FROM used u JOIN s2_all s ON s.user_id = u.user_id AND s.prompt_id = u.prompt_id AND s.aid = u.aid
            WHERE s.prompt_text IS NULL OR u.question IS NULL OR s.prompt_text = u.question
            QUALIFY coalesce(s.prompt_text = u.question, false)
                    = bool_or(coalesce(s.prompt_text = u.question, false)) OVER (PARTITION BY u.item_id, u.aid)
                AND bool_and(s.human = 'no') OVER (PARTITION BY u.item_id, u.aid,
                                                   coalesce(s.prompt_text = u.question, false))
        ),
        traced AS (
            SELECT u.item_id, count(DISTINCT u.aid) AS n_used,
                   list_sort(list(DISTINCT u.aid) FILTER (WHERE s1.aid IS NOT NULL)) AS rejected,
                   list_sort(list(DISTINCT u.aid) FILTER (WHERE s2.aid IS NOT NULL)) AS irrelevant,
                   list_sort(list(DISTINCT s1.text) FILTER (WHERE s1.aid IS NOT NULL)) AS rejected_text,
                   list_sort(list(DISTINCT s2.text) FILTER (WHERE s2.aid IS NOT NULL)) AS irrelevant_text
            FROM used u
            LEFT JOIN s1 ON s1.user_id = u.user_id AND s1.aid = u.aid
            LEFT JOIN (SELECT DISTINCT item_id, aid, text FROM s2) s2 ON s2.item_id = u.item_id AND s2.aid = u.aid
            GROUP BY u.item_id
        )
        SELECT t.item_id, n.dataset, n.system, n.input_condition, n.user_id, t.n_used,
               coalesce(t.rejected, []) AS rejected, coalesce(t.irrelevant, []) AS irrelevant,
               coalesce(t.rejected_text, []) AS rejected_text, coalesce(t.irrelevant_text, []) AS irrelevant_text,
               n.human, n.pers
        FROM traced t JOIN units n USING (item_id)
        ORDER BY t.item_id
    """)


def cross_masks(con: duckdb.DuckDBPyConnection, judges: pd.DataFrame, reference: str, selected: str) -> pd.DataFrame:
    """Relevance items reduced to two bit masks per item, counted per (dataset, user, reference, masks).

    The masks (:func:`personagap.analysis.pipeline_cross.cross_judges`): bit ``k`` of ``seen`` when judge ``k``
    labelled the item, of ``yes`` when it said ``selected``.

    Args:
        con: An open store connection holding ``reference``.
        judges: ``rater``, ``condition`` and bit ``k`` of every comparable judge.
        reference: The table holding the blind reference (``item_id``, ``human``): a module constant.
        selected: The label of a selected / relevant attribute (static text).

    Returns:
        Columns ``dataset``, ``user_id``, ``human``, ``seen``, ``yes``, ``n``.
    """
    con.register("_cross_judges", judges)
    try:
        return cast(pd.DataFrame, con.sql(f"""
            WITH marks AS (
                SELECT l.item_id, bit_or(1::BIGINT << j.k) AS seen,
                       bit_or(CASE WHEN l.label = '{selected}' THEN 1::BIGINT << j.k ELSE 0::BIGINT END) AS yes
                FROM labels l JOIN _cross_judges j ON j.rater = l.rater AND j.condition = l.condition
                WHERE {comparable_judge_sql('l')} AND l.label IS NOT NULL
                GROUP BY l.item_id
            )
            SELECT i.dataset, i.user_id, r.human, m.seen, m.yes, count(*) AS n
            FROM marks m JOIN items i USING (item_id) LEFT JOIN {reference} r USING (item_id)
            WHERE i.stage = 'relevance'
            GROUP BY ALL
        """).to_arrow_table().to_pandas())
    finally:
        con.unregister("_cross_judges")
