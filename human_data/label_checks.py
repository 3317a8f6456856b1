"""Validating the rows read into ``vl``: one vectorised query per rule, Python only on the offending row."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import duckdb
import orjson

from personagap.confidence import PROBABILITY, UNSTATED
from personagap.human_data._jsonl import DataError
from personagap.human_data.label_format import (
    CONFIDENCE,
    CONFIDENCE_SCALE,
    CONTEXT,
    FAILURE,
    FAILURE_KINDS,
    MAX_INFERRED_CATEGORIES,
    ROW_ORDER,
    STAGE_CATEGORIES,
    LabelSpec,
    Source,
    echo,
    free_text_reason,
    spec_categories,
)
from personagap.human_data.label_rows import item_hash
from personagap.human_data.label_sources import CONFIDENCE_RANGE, FAILURE_BOTH, FAILURE_KIND, row_place, variable
from personagap.linking import ATTRIBUTES_USED, INPUT_CONDITION, INPUT_CONDITIONS, PERSONALIZED
from personagap.records import PAIRWISE_LABELS, RELEVANCE_LABELS, ItemKind
from personagap.store.label_import import (
    build_items,
    fills,
    first_conflict,
    first_labels,
    first_of_each,
    first_row,
    item_rows,
    may_hold_twice,
    pair_counts,
    row_value,
)
from personagap.vocabulary import FILE_RATER_KINDS


class Unlocated(Exception):
    """A problem was found on a row read without its row number (see :func:`source_sql`)."""


def item_kind_of(check: Checker, spec: LabelSpec) -> ItemKind:
    """The dataset's one item kind (its record holds one scale): fixed by the stage, or at stage 3 by its items.

    Raises:
        DataError: A stage-3 import mixes pairs and single responses (named at the first item of the fewer).
    """
    if spec.stage != "response":
        return "verification" if spec.stage == "extraction" else "relevance"
    pairs, total = pair_counts(check.con)
    if 0 < pairs < total:
        fewer_pairs = 2 * int(pairs) < int(total)
        hit = check.first("SELECT _file, _row, item_id FROM vl WHERE is_pair = ?", [fewer_pairs])
        assert hit is not None
        kind, other = ("a pair", "single responses") if fewer_pairs else ("a single response", "pairs")
        if not fewer_pairs and not check.first("SELECT _file, _row FROM vl WHERE item_id = ? AND stored IS NOT NULL",
                                                [hit[2]]):
            raise check.error(hit[0], hit[1], "response_a",
                              f"item {echo(hit[2])} holds only failures and no response text, so nothing says it is "
                              f"a pair like the other items of dataset {echo(spec.dataset)}: give its "
                              "response_a/response_b")
        raise check.error(hit[0], hit[1], "response_a" if fewer_pairs else "response",
                          f"item {echo(hit[2])} is {kind} but most items of dataset {echo(spec.dataset)} are "
                          f"{other}: a dataset holds one item kind (import the others under another --dataset)")
    return "pairwise" if pairs else "single"


class Checker:
    """Runs validation queries over ``vl`` and turns a hit into a located DataError.

    A hit on a row read without its number (``_row`` NULL) raises :class:`Unlocated` instead: the
    caller reads the files again with row numbers, and the same check then names the first such row.
    """

    def __init__(self, con: duckdb.DuckDBPyConnection, sources: Sequence[Source]) -> None:
        self.con, self.sources = con, sources

    def error(self, file: int, row: int | None, column: str | None, message: str) -> DataError:
        source = self.sources[file]
        if row is None:
            raise Unlocated
        return DataError(source.name, row_place(source, row), column, message)

    def at(self, file: int, row: int | None) -> str:
        source = self.sources[file]
        if row is None:
            raise Unlocated
        return f"{source.name}:{row_place(source, row)}"

    def first(self, sql: str, params: list[Any] | None = None) -> tuple[Any, ...] | None:
        return first_row(self.con, sql, params)


def check_rows(check: Checker, spec: LabelSpec) -> None:
    """Refuse the first row with a problem of its own (structure, rater kind, a label off the scale)."""
    response_kind = "response_kind" if spec.stage == "response" else "NULL"
    hit = check.first(f"SELECT _file, _row, problem, label, is_pair, kind, {response_kind}, {FAILURE}, rater FROM vl "
                      "WHERE problem IS NOT NULL")
    if not hit:
        return
    file, row, problem, label, is_pair, kind, response_kind, failure, rater = hit
    if problem == "(row)":
        raise check.error(file, row, None, "expected a JSON object")
    if problem == "missing:label":
        raise check.error(file, row, "label", f"missing or empty (required: a label, or a '{FAILURE}' reason when a "
                                              "judge gave no usable answer)")
    if problem.startswith("missing:"):
        raise check.error(file, row, problem.split(":", 1)[1], "missing or empty (required)")
    if problem == FAILURE_BOTH:
        raise check.error(file, row, FAILURE, f"{echo(failure)} is given with label {echo(label)}: a row is a label "
                                              "or a judge's failure, not both (keep one)")
    if problem == FAILURE_KIND:
        raise check.error(file, row, FAILURE, f"rater {echo(rater)} is {kind}: only a judge's row (rater_kind "
                                              f"{' or '.join(FAILURE_KINDS)}) can be a failure; leave out items a "
                                              "person did not label")
    if problem == "rater_kind":
        raise check.error(file, row, "rater_kind", f"unknown rater kind {echo(kind)} "
                                                   f"(one of {', '.join(FILE_RATER_KINDS)})")
    if problem == "response_kind":
        raise check.error(file, row, "response_kind", f"{echo(response_kind)} is not personalised or generic")
    if problem == ATTRIBUTES_USED:
        raise check.error(file, row, ATTRIBUTES_USED, "expected a list of attribute ids: a JSON list of strings, "
                                                      "or ids separated by ';'")
    if problem == PERSONALIZED:
        raise check.error(file, row, PERSONALIZED, "expected A or B: the side holding the personalised answer")
    if problem in (CONFIDENCE, INPUT_CONDITION):
        check.at(file, row)  # raises Unlocated on a row read without its number, before the lookup below
        value = row_value(check.con, problem, file, row)
        if problem == CONFIDENCE:
            raise check.error(file, row, CONFIDENCE, f"{echo(value)} is not a number (any numeric scale: 0-1, "
                                                     "1-100, ...)")
        raise check.error(file, row, INPUT_CONDITION, f"unknown input condition {echo(value)} "
                                                      f"(one of {', '.join(INPUT_CONDITIONS)})")
    if problem in (CONFIDENCE_SCALE, CONFIDENCE_RANGE):
        check.at(file, row)  # as above: locate first
        scale = row_value(check.con, CONFIDENCE_SCALE, file, row)
        if problem == CONFIDENCE_SCALE:
            raise check.error(file, row, CONFIDENCE_SCALE, f"{echo(scale)} is not a confidence scale (write LO-HI, "
                                                           f"e.g. 0-1 or 1-100, or {PROBABILITY} or {UNSTATED})")
        value = row_value(check.con, CONFIDENCE, file, row)
        raise check.error(file, row, CONFIDENCE, f"{echo(value)} is outside its declared confidence_scale "
                                                 f"{echo(scale)} (fix the value or the row's confidence_scale)")
    if problem == "(scale)":
        cats = PAIRWISE_LABELS if is_pair else spec_categories(spec)
        expected = f"one of {', '.join(cats)}" if cats is not None else "a number"
        scale = "pairwise" if is_pair else spec.scale
        hint = "" if is_pair else _zero_one_hint(cats, label) or ("" if spec.categories else _category_hint(spec))
        raise check.error(file, row, "label",
                          f"{echo(label)} is outside the {scale} scale (expected {expected}{hint})")
    raise check.error(file, row, problem, "expected a string or a number")


def check_items(check: Checker, spec: LabelSpec) -> dict[str, bool]:
    """Context and user are facts of the item: every row that gives them must agree (checked on ``it``).

    Returns:
        Per context column (and ``user_key``), whether any row fills it.
    """
    con = check.con
    context = CONTEXT[spec.stage]
    sid = item_hash(variable("pg_dataset"), variable("pg_stage"), "item_id")
    # A column no row fills (a file without context, users that are their items) can hold no conflict: its
    # per-item min/max, string aggregates over every row, are skipped (a third of this step when all are absent).
    user_differs, given, keys = fills(con, context)
    filled = dict(zip(("user_key", *context), (user_differs, *given), strict=True))
    values = ["min(user_key) AS user_id" if filled["user_key"] else "item_id AS user_id"]
    values += [f"max({c}) AS {c}" if filled[c] else f"NULL::VARCHAR AS {c}" for c in context]
    conflicts = [f"coalesce(min({c}) <> max({c}), FALSE)" if filled[c] else "FALSE" for c in ("user_key", *context)]
    shape = ("bool_or(is_pair) AS is_pair, bool_or(is_yes_no) AS is_yes_no" if spec.stage == "response"
             else "FALSE AS is_pair, FALSE AS is_yes_no")
    build_items(con, f"""{sid} AS sid, {', '.join(values)},
        [{', '.join(conflicts)}] AS conflicts, {shape}, min({ROW_ORDER}) AS first_at,
        {_pair_conflict_sql(spec)} AS pair_conflict, {_maybe_twice_sql(keys)} AS maybe_twice""")
    hit = first_conflict(con)
    if not hit:
        if spec.stage == "extraction":
            for file, row, text in first_of_each(con, "conversation", ROW_ORDER):
                parse_conversation(text, lambda msg, f=file, r=row: check.error(f, r, "conversation", msg))
        return filled
    item, conflicting, pair_conflict = hit
    if pair_conflict is not None:
        column, message = pair_conflict.split(":", 1)
        file, row = check.first(f"SELECT _file, _row FROM vl WHERE item_id = ? AND {column} IS NOT NULL", [item]) \
            or check.first("SELECT _file, _row FROM vl WHERE item_id = ?", [item]) or (0, 0)
        raise check.error(file, row, column, f"item {echo(item)} {message}")
    c = ("user_key", *context)[conflicting.index(True)]
    rows = item_rows(con, item, c, ROW_ORDER)
    first = rows[0]
    file, row, _ = next(r for r in rows if r[2] != first[2])
    column = "user_id" if c == "user_key" else c
    raise check.error(file, row, column, f"item {echo(item)} has another {column} at {check.at(first[0], first[1])}")


def _maybe_twice_sql(keys: list[int]) -> str:
    """Per item, TRUE when it may hold a (rater, condition) twice: fewer distinct key hashes than labels.

    ``keys`` are the distinct hashes of (rater, condition) in the files. With at most 64 of them (the usual
    case) each is one bit of a mask and an item's labels are OR-ed: far cheaper than collecting them in a
    list. A hash shared by two keys only flags an item for the exact check (:func:`check_duplicates`), never
    hides a duplicate.
    """
    if len(keys) <= 64:
        bits = "[" + ", ".join(f"{k}::UBIGINT" for k in keys) + "]"
        return f"count(*) > bit_count(bit_or(1::UBIGINT << (list_position({bits}, hash(rater, cond)) - 1)))"
    return "count(*) > len(list_distinct(list(hash(rater, cond))))"


def _pair_conflict_sql(spec: LabelSpec) -> str:
    """Per item, 'column:message' when stage-3 context mixes a pair with a single response or half a pair."""
    if spec.stage != "response":
        return "NULL::VARCHAR"
    a, b, one = ("bool_or(response_a IS NOT NULL)", "bool_or(response_b IS NOT NULL)", "bool_or(response IS NOT NULL)")
    # Two identical answers are no choice at all: any label on them is noise, and a judge "agreeing" with it is
    # luck. Compared as stored (trimmed of spaces); a conflicting second text is caught by the context check.
    same = "min(response_a) = min(response_b)"
    return (f"CASE WHEN ({a} OR {b}) AND {one} THEN 'response:gives both a single response and a pair "
            f"(response_a/response_b)' WHEN {a} <> {b} THEN 'response_b:gives only one of response_a/response_b "
            f"(a pair needs both)' WHEN {same} THEN 'response_b:has the same text as its response_a (a pair needs "
            "two different answers)' END")


def parse_conversation(text: str, fail: Any) -> list[dict[str, str]]:
    """Turns of a ``conversation`` cell: plain text (one user turn) or a JSON list of {role, text[, turn_id]}.

    Args:
        text: The cell as read (JSON text for lists).
        fail: Called with a message to build the error to raise.
    """
    stripped = text.strip()
    if not stripped.startswith("["):
        return [{"turn_id": "1", "role": "user", "text": text}]
    try:
        turns = orjson.loads(stripped)
    except orjson.JSONDecodeError:
        return [{"turn_id": "1", "role": "user", "text": text}]
    out = []
    for i, t in enumerate(turns, start=1):
        if not isinstance(t, dict) or not isinstance(t.get("role"), str) or not isinstance(t.get("text"), str):
            raise fail(f"turn {i} is not an object with string 'role' and 'text'")
        out.append({"turn_id": str(t.get("turn_id", i)), "role": t["role"], "text": t["text"]})
    if not out:
        raise fail("is an empty list of turns")
    return out


def _zero_one_hint(cats: tuple[str, ...] | None, label: object) -> str:
    # 0/1 labels on a yes/no scale are refused rather than read as no/yes: which of 0 and 1 means "yes" is the
    # file's convention, not ours to guess; the user writes yes/no, or keeps 0/1 as its own scale.
    if cats is None or {c.lower() for c in cats} != set(RELEVANCE_LABELS) or str(label).strip() not in ("0", "1"):
        return ""
    return "; 0/1 labels are not read as no/yes: write yes/no, or import with --categories 0,1"


def _category_hint(spec: LabelSpec) -> str:
    return "; --categories changes them" if spec.stage in STAGE_CATEGORIES and spec.scale == "nominal" else ""


def check_inferred_categories(check: Checker, spec: LabelSpec) -> tuple[str, ...] | None:
    """The categories a stage-3 nominal import without ``--categories`` takes from its labels, if plausible.

    Returns:
        The inferred categories (sorted; empty when every item is a pair), or None when the import's categories
        are declared or fixed.

    Raises:
        DataError: More than :data:`MAX_INFERRED_CATEGORIES` distinct labels (named at the first row of the one
            over), or a label that reads as free text (:func:`free_text_reason`); the message names
            ``--categories``.
    """
    if spec.stage != "response" or spec.scale != "nominal" or spec.categories is not None:
        return None
    pairs, total = pair_counts(check.con)
    if pairs == total:  # pairs are always A/B/tie: no scan of the labels for them
        return ()
    found = first_labels(check.con, ROW_ORDER, MAX_INFERRED_CATEGORIES + 1)
    labels = [label for label, _, _ in found]
    if len(found) > MAX_INFERRED_CATEGORIES:
        label, file, row = found[-1]
        if row is None:  # which label is over the limit depends on file order: read again, numbered
            raise Unlocated
        raise check.error(file, row, "label", f"{echo(label)} is distinct label {len(found)}: more than "
                                              f"{MAX_INFERRED_CATEGORIES} categories is no plausible nominal scale; if "
                                              "they are categories, declare them with --categories (or use --scale "
                                              "ordinal for numbers)")
    for label in labels:
        reason = free_text_reason(label)
        if reason is not None:
            hit = check.first("SELECT _file, _row FROM vl WHERE stored = ? AND NOT is_pair", [label])
            assert hit is not None
            plausible = [c for c in sorted(labels) if free_text_reason(c) is None and "," not in c][:5]
            example = f" (e.g. --categories {','.join(plausible)})" if plausible else ""
            raise check.error(hit[0], hit[1], "label",
                              f"{echo(label)} looks like free text, not a category ({reason}): without --categories "
                              f"every distinct label becomes a category; declare them with --categories{example}")
    return tuple(sorted(labels))


def check_duplicates(check: Checker) -> None:
    """Refuse a rater labelling the same item twice under one condition (naming both places)."""
    # On the (usual) clean path the per-item grouping that built ``it`` has already looked: an item with
    # fewer distinct (rater, condition) hashes than labels may hold one twice (or two keys share a hash).
    if not may_hold_twice(check.con):
        return
    hit = check.first(f"""
        SELECT _file, _row, item_id, rater, cond, first_file, first_row FROM (
            SELECT *, row_number() OVER w AS n, first_value(_file) OVER w AS first_file,
                   first_value(_row) OVER w AS first_row
            FROM vl WINDOW w AS (PARTITION BY item_id, rater, cond ORDER BY {ROW_ORDER}))
        WHERE n = 2""")
    if hit is None:
        return  # two keys shared a hash: no duplicate
    cond = f" under condition {echo(hit[4])}" if hit[4] else ""
    raise check.error(hit[0], hit[1], "rater", f"rater {echo(hit[3])} labels item {echo(hit[2])}{cond} twice "
                                               f"(first at {check.at(hit[5], hit[6])})")
