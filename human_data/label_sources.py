"""Reading label sources with DuckDB: bound user values, one query per source, every row normalised into ``vl``."""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from typing import Any

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa

from personagap.confidence import PROBABILITY, UNSTATED
from personagap.human_data._jsonl import DataError, read_jsonl
from personagap.human_data.label_format import (
    CONFIDENCE,
    CONFIDENCE_SCALE,
    FAILURE,
    FAILURE_KINDS,
    ID_COLUMNS,
    KEY_SAMPLE,
    REQUIRED,
    RESPONSE_KINDS,
    LabelSpec,
    Source,
    echo,
    known_columns,
    spec_categories,
    stored_categories,
)
from personagap.linking import (
    ATTRIBUTES_USED,
    ATTRIBUTES_USED_SEPARATOR,
    INPUT_CONDITION,
    INPUT_CONDITIONS,
    PERSONALIZED,
)
from personagap.records import PAIRWISE_LABELS, Stage
from personagap.store.label_import import count_rows, describe, hold_rows, register_arrow, set_variables
from personagap.vocabulary import FILE_RATER_KINDS, RELEVANCE_LABELS


def sql_quote(text: str) -> str:
    """A program constant as an SQL string literal (never user input: that is bound)."""
    # Only for the program's own constants (column names, rater kinds): user input is bound (see bind_values).
    return "'" + text.replace("'", "''") + "'"


#: Session variables holding the user's values (see :func:`bind_values`); SQL reads them with ``getvariable``.
_VARS = ("pg_dataset", "pg_stage", "pg_cat_keys", "pg_cat_values", "pg_cat_numbers", "pg_run_ids", "pg_paths")


def variable(name: str) -> str:
    """SQL reading one of the bound session variables (:data:`_VARS`)."""
    assert name in _VARS
    return f"getvariable('{name}')"


def bind_values(con: duckdb.DuckDBPyConnection, spec: LabelSpec, sources: Sequence[Source]) -> None:
    """Bind every user-given value the import's SQL reads (dataset, categories, paths) as a parameter.

    DuckDB's views and table functions take no ``?`` placeholders, so the values are set as session
    variables through a prepared statement and read with ``getvariable``: a category such as
    ``'); DROP TABLE labels; --`` stays data, whatever characters it holds.
    """
    cats = stored_categories(spec)
    numbers = [float(c) for c in cats] if cats is not None and spec.scale == "ordinal" else None
    values: dict[str, object] = {
        "pg_dataset": spec.dataset, "pg_stage": spec.stage,
        "pg_cat_keys": None if cats is None else [c.lower() for c in cats],
        "pg_cat_values": None if cats is None else list(cats), "pg_cat_numbers": numbers,
        "pg_paths": [str(s.path) if s.path is not None else "" for s in sources]}
    kinds = {"pg_cat_numbers": "DOUBLE[]", "pg_dataset": "VARCHAR", "pg_stage": "VARCHAR"}
    set_variables(con, {name: (value, kinds.get(name, "VARCHAR[]")) for name, value in values.items()})


# --------------------------------------------------------------------------- reading

def source_sql(con: duckdb.DuckDBPyConnection, source: Source, index: int, stage: Stage, *, located: bool) -> str:
    """A query over one source giving every known column as text (NULL when absent), ``_bad``, ``_file``, ``_row``.

    ``_bad`` names a row's structural problem (not an object, a nested value where text belongs, an
    unknown key); ``_row`` is the 0-based data row in file order (DuckDB's ordinality / file row number).
    Unless ``located``, a JSONL or CSV source gives ``_row`` NULL: numbering rows makes DuckDB's text readers
    keep file order, which halves their speed, and a clean import never names a row (see :class:`Checker`).
    """
    known = known_columns(stage)
    if source.kind == "jsonl":
        return _jsonl_sql(con, source, index, known, located=located)
    if source.kind == "csv":
        types = {c: "VARCHAR" for c in _csv_header(source)}
        columns = "{" + ", ".join(f"{sql_quote(c)}: 'VARCHAR'" for c in types) + "}"
        base = (f"SELECT * FROM read_csv({_path(index)}, header=true, columns={columns}, delim=',', "
                "quote='\"', escape='\"', strict_mode=true, auto_detect=false, encoding='utf-8')"
                + (" WITH ORDINALITY" if located else ""))
        row = "ordinality - 1" if located else "NULL::BIGINT"
    elif source.kind == "frame":
        assert source.frame is not None
        try:
            arrow = pa.Table.from_pandas(source.frame, preserve_index=False)
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            raise mixed_column_error(source, exc) from None
        arrow = arrow.append_column("_frame_row", pa.array(range(arrow.num_rows), pa.int64()))
        base, row = f"SELECT * FROM {register_arrow(con, f'_frame_{index}', arrow)}", "_frame_row"
    else:
        base = f"SELECT * FROM read_parquet({_path(index)}, file_row_number=true)"
        row = "file_row_number"
    if source.kind != "csv":
        types = {n: k for n, k in describe(con, base) if n not in ("_frame_row", "file_row_number")}
    unknown = [c for c in types if c not in known]
    if unknown:
        raise _unknown_column(source, None, unknown[0], known)
    missing = [c for c in REQUIRED if c not in types]
    if missing:
        raise DataError(source.name, None, missing[0], f"missing column (required: {', '.join(REQUIRED)})")
    cols = []
    for c in known:
        kind = types.get(c)
        nested = kind is not None and (kind.endswith("]") or kind.startswith(("STRUCT", "MAP", "UNION", "JSON")))
        if kind is None:
            cols.append(f"NULL::VARCHAR AS {c}")
        elif nested and c not in ("conversation", ATTRIBUTES_USED):
            raise DataError(source.name, None, c, f"has type {kind}; expected text or numbers")
        else:
            cols.append(f"to_json({c})::VARCHAR AS {c}" if nested else f"CAST({c} AS VARCHAR) AS {c}")
    return f"SELECT {', '.join(cols)}, NULL::VARCHAR AS _bad, {index} AS _file, {row} AS _row FROM ({base})"


def _kind(value: object) -> str:
    """What a cell holds, in a user's words (numbers of any width are one kind)."""
    if isinstance(value, str):
        return "text"
    if isinstance(value, bool | np.bool_):
        return "a boolean"
    if isinstance(value, int | float | np.integer | np.floating):
        return "a number"
    return f"a {type(value).__name__}"


def mixed_column_error(source: Source, exc: Exception) -> DataError:
    """Name the column and the first row of a DataFrame whose cells Arrow cannot hold as one type.

    Arrow's own message is a tuple naming neither the row nor (always) the column; the first cell whose kind
    differs from its column's first cell is the row to fix.
    """
    frame = source.frame
    assert frame is not None
    for column in frame.columns:
        try:
            pa.array(frame[column], from_pandas=True)
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            cells = [(i, v) for i, v in enumerate(frame[column]) if not (pd.api.types.is_scalar(v) and pd.isna(v))]
            first = _kind(cells[0][1]) if cells else ""
            row, value = next(((i, v) for i, v in cells if _kind(v) != first), cells[-1] if cells else (0, None))
            return DataError(source.name, row_place(source, row), str(column),
                             f"{echo(value)} is {_kind(value)} where {row_place(source, cells[0][0])} holds {first}: "
                             f"a column holds one type (e.g. df[{str(column)!r}] = df[{str(column)!r}].astype(str))")
    return DataError(source.name, None, None, f"a column mixes types: {str(exc).splitlines()[0][:200]}")


def _jsonl_sql(con: duckdb.DuckDBPyConnection, source: Source, index: int, known: tuple[str, ...], *,
               located: bool) -> str:
    # DuckDB's JSON reader with every column as text is ~4x cheaper than extracting fields from each parsed
    # object. Its price: keys are checked on the reader's sample (the first 20,480 rows), so a key that first
    # appears later is ignored; a nested value where text belongs is caught in materialise.
    path = _path(index)
    if not _has_content(source):
        raise DataError(source.name, None, None, "the file holds no label rows")
    keys = [n for n, _ in describe(con, f"SELECT * FROM read_json({path}, format='newline_delimited', "
                                        f"sample_size={KEY_SAMPLE}, maximum_depth=1)")]
    unknown = [k for k in keys if k not in known]
    if unknown:
        raise _unknown_column(source, _first_row_with(source, unknown[0]), unknown[0], known)
    columns = "{" + ", ".join(f"{sql_quote(c)}: 'VARCHAR'" for c in known) + "}"
    nested = " ".join(f"WHEN left(ltrim({c}), 1) IN ('[', '{{') AND json_valid({c}) "
                      f"AND json_type({c}) IN ('ARRAY', 'OBJECT') THEN {sql_quote(c)}" for c in ID_COLUMNS
                      if c in known)
    row = "ordinality - 1" if located else "NULL::BIGINT"
    return (f"SELECT {', '.join(known)}, CASE {nested} END AS _bad, {index} AS _file, {row} AS _row "
            f"FROM read_json({path}, format='newline_delimited', columns={columns})"
            + (" WITH ORDINALITY" if located else ""))


def _path(index: int) -> str:
    """The path of source ``index``, bound (:func:`bind_values`), as a table function's argument."""
    return f"{variable('pg_paths')}[{int(index) + 1}]"


def _has_content(source: Source) -> bool:
    assert source.path is not None
    try:
        with source.path.open("rb") as handle:
            return any(line.strip() for line in handle)
    except OSError as exc:
        raise DataError(source.name, None, None, f"cannot read: {exc.strerror or exc}") from None


def _first_row_with(source: Source, key: str) -> int | None:
    """0-based data row of the first JSON object holding ``key`` (to name its line in the error)."""
    for i, row in enumerate(read_jsonl(source.path or "")):
        if key in row.data:
            return i
    return None


def _csv_header(source: Source) -> list[str]:
    assert source.path is not None
    try:
        with source.path.open(encoding="utf-8-sig", newline="") as handle:
            header = next(csv.reader(handle), None)
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(source.name, 1, None, f"cannot read the header: {exc}") from None
    if not header:
        raise DataError(source.name, 1, None, "no header line (expected item_id,rater,label,...)")
    for i, name in enumerate(header):
        if name.strip() != name or not name:
            raise DataError(source.name, 1, f"column {i + 1}", f"header name {echo(name)} is empty or padded")
        if name in header[:i]:
            raise DataError(source.name, 1, name, "appears twice in the header")
    return header


def _unknown_column(source: Source, row: int | None, column: str, known: tuple[str, ...]) -> DataError:
    where = row_place(source, row) if row is not None else None
    return DataError(source.name, where, column, f"unknown column (this stage reads: {', '.join(known)})")


def read_error(source: Source, exc: duckdb.Error) -> DataError:
    """Locate a parse error by reading the file the slow, exact way; else echo DuckDB's first line."""
    locate(source)
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return DataError(source.name, None, None, text[:300])


def locate(source: Source) -> None:
    """Read a file that DuckDB refused the slow, exact way: raise the DataError naming its line, if one is found."""
    if source.kind == "jsonl" and source.path is not None:
        for _ in read_jsonl(source.path):  # raises DataError at the malformed line
            pass
        _refuse_duplicate_keys(source)
    if source.kind == "csv" and source.path is not None:
        _csv_scan(source)


def _refuse_duplicate_keys(source: Source) -> None:
    """Raise at the first JSON object (any depth) that gives one key twice, naming its line and the key.

    orjson keeps the last of two equal keys and DuckDB refuses the object with a raw "JSON transform error": which
    value is meant is the user's call, so it is named here. Only on the error path: the stdlib parser is slow.
    """
    assert source.path is not None

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        seen: set[str] = set()
        for key, _ in items:
            if key in seen:
                raise _DuplicateKey(key)
            seen.add(key)
        return dict(items)

    with source.path.open("rb") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                json.loads(line, object_pairs_hook=pairs)
            except _DuplicateKey as dup:
                raise DataError(source.name, number, dup.key, "is given twice in one JSON object (which value is "
                                                              "meant is unclear: keep one)") from None
            except ValueError:
                continue  # malformed lines are read_jsonl's to name


class _DuplicateKey(Exception):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _csv_scan(source: Source) -> None:
    assert source.path is not None
    try:
        with source.path.open(encoding="utf-8-sig", newline="") as handle:
            reader = csv.reader(handle, strict=True)
            width = None
            for record in reader:
                if width is None:
                    width = len(record)
                elif record and len(record) != width:
                    raise DataError(source.name, reader.line_num, None,
                                    f"{len(record)} fields where the header has {width}")
    except csv.Error as exc:
        raise DataError(source.name, reader.line_num, None, f"malformed CSV: {exc}") from None
    except UnicodeDecodeError as exc:
        raise DataError(source.name, None, None, f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def row_place(source: Source, row: int) -> int | str:
    """Line (JSONL, CSV) or row (Parquet, DataFrame) of the 0-based data row ``row``."""
    if source.kind == "jsonl" and source.path is not None:
        seen = -1
        with source.path.open("rb") as handle:
            for number, line in enumerate(handle, start=1):
                if line.strip():
                    seen += 1
                    if seen == row:
                        return number
    if source.kind == "csv" and source.path is not None:
        with source.path.open(encoding="utf-8-sig", newline="") as handle:
            reader = csv.reader(handle)
            next(reader, None)
            end = 1
            for i, _ in enumerate(reader):
                if i == row:
                    return end + 1  # the record starts on the line after the previous one ended
                end = reader.line_num
    if source.kind == "frame" and source.frame is not None:
        label = source.frame.index[row]
        # An index of numpy integers would print as 'np.int64(3)': named by its plain value.
        return f"row {(label.item() if isinstance(label, np.generic) else label)!r}"
    return f"row {row + 1}"


def _spaceless(column: str) -> str:
    """SQL for ``trim(column)``, cheaper on the usual value.

    trim() strips spaces only, so a value that neither starts nor ends with one is its own trim, and that
    test is cheaper than the copy trim() makes of every value. (``_lt`` is the label's.)
    """
    return f"CASE WHEN starts_with({column}, ' ') OR ends_with({column}, ' ') THEN trim({column}) ELSE {column} END"


def materialise(con: duckdb.DuckDBPyConnection, sources: Sequence[Source], queries: list[str],
                 spec: LabelSpec) -> None:
    """Read every source once into ``vl`` (Arrow): normalised text, the stored label, each row's problem.

    One pass over the files: every per-row check is a column here, so validation costs one scan, not one
    per rule.
    """
    norm = []
    known = known_columns(spec.stage)
    for c in known:
        # Empty text counts as absent (CSV has no null); ids, names and context are trimmed.
        if c in ("conversation", "label", "reason"):
            norm.append(f"nullif({c}, '') AS {c}")
        elif c == ATTRIBUTES_USED:
            # The raw cell is kept apart to tell "not given" from "given but not a list of ids".
            raw = f"nullif({_spaceless(c)}, '')"
            norm.append(f"{raw} AS _used_raw, {attributes_used_sql(raw)} AS {c}")
        elif c == INPUT_CONDITION:
            norm.append(f"lower(nullif({_spaceless(c)}, '')) AS {c}")
        elif c == PERSONALIZED:
            norm.append(f"upper(nullif({_spaceless(c)}, '')) AS {c}")
        else:
            norm.append(f"nullif({_spaceless(c)}, '') AS {c}")
    finite = f"coalesce(isfinite(TRY_CAST({CONFIDENCE} AS DOUBLE)), FALSE)"
    link_checks = f"WHEN {CONFIDENCE} IS NOT NULL AND NOT {finite} THEN {sql_quote(CONFIDENCE)} "
    link_checks += _confidence_scale_checks()
    if INPUT_CONDITION in known:
        conditions = ", ".join(map(sql_quote, INPUT_CONDITIONS))
        link_checks += (f"WHEN {INPUT_CONDITION} IS NOT NULL AND {INPUT_CONDITION} NOT IN ({conditions}) "
                        f"THEN {sql_quote(INPUT_CONDITION)} ")
    if PERSONALIZED in known:
        link_checks += f"WHEN {PERSONALIZED} IS NOT NULL AND {PERSONALIZED} NOT IN ('A', 'B') " \
                       f"THEN {sql_quote(PERSONALIZED)} "
    if ATTRIBUTES_USED in known:
        link_checks += f"WHEN _used_raw IS NOT NULL AND {ATTRIBUTES_USED} IS NULL THEN {sql_quote(ATTRIBUTES_USED)} "
    kinds = ", ".join(map(sql_quote, FILE_RATER_KINDS))
    failure_kinds = ", ".join(map(sql_quote, FAILURE_KINDS))
    response_kind = ""
    if spec.stage == "response":
        allowed = ", ".join(map(sql_quote, RESPONSE_KINDS))
        response_kind = (f"WHEN response_kind IS NOT NULL AND lower(response_kind) NOT IN ({allowed}) "
                         "THEN 'response_kind'")
    # Only what later steps read is kept: user_key, cond and kind replace user_id, condition and rater_kind.
    kept = ", ".join(c for c in known_columns(spec.stage) if c not in ("user_id", "condition", "rater_kind"))
    sql = f"""
        SELECT _file, _row, {kept}, user_key, cond, kind, is_pair, is_yes_no, stored,
            CASE WHEN _bad IS NOT NULL THEN _bad WHEN item_id IS NULL THEN 'missing:item_id'
                 WHEN rater IS NULL THEN 'missing:rater'
                 WHEN (label IS NULL OR _lt = '') AND {FAILURE} IS NULL THEN 'missing:label'
                 WHEN {FAILURE} IS NOT NULL AND NOT (label IS NULL OR _lt = '') THEN {sql_quote(FAILURE_BOTH)}
                 WHEN kind NOT IN ({kinds}) THEN 'rater_kind'
                 WHEN {FAILURE} IS NOT NULL AND kind NOT IN ({failure_kinds}) THEN {sql_quote(FAILURE_KIND)}
                 {response_kind} {link_checks}
                 WHEN stored IS NULL AND {FAILURE} IS NULL THEN '(scale)' END AS problem
        FROM (SELECT *, {label_sql(spec)} AS stored FROM (
            SELECT *, {_shape_sql(spec)}, coalesce(user_id, item_id) AS user_key, coalesce(condition, '') AS cond,
                   lower(coalesce(rater_kind, 'human')) AS kind
            FROM (SELECT _file, _row, _bad, {', '.join(norm)}, {_spaceless('label')} AS _lt
                  FROM ({' UNION ALL '.join(queries)}))
            WINDOW w AS (PARTITION BY item_id)))"""
    try:
        # Held as Arrow, not as a temporary table: DuckDB fills an Arrow table ~30% faster than its own table
        # storage and scans it in place (zero copy) in each later step; measured 0.35 s of a 1.9 s import.
        # Streamed batch by batch into Arrow: the result is never held twice (a smaller, faster working set).
        hold_rows(con, sql)
    except duckdb.Error as exc:
        for source, query in zip(sources, queries, strict=True):  # which file: read each alone
            try:
                count_rows(con, query)
            except duckdb.Error as file_exc:
                raise read_error(source, file_exc) from None
        for source in sources:  # each reads alone when only its columns fail (a count reads none): look closer
            locate(source)
        raise DataError(sources[0].name if len(sources) == 1 else "(label files)", None, None,
                        str(exc).strip().splitlines()[0][:300]) from None


#: A declared ``confidence_scale`` "LO-HI": the same pattern :func:`personagap.confidence.scale_bounds` reads, so a
#: scale the import accepts is one every calibration figure can map onto [0, 1] (DuckDB's RE2 reads it alike).
SCALE_PATTERN = r"^\s*(-?\d+(?:\.\d+)?)\s*-\s*(-?\d+(?:\.\d+)?)\s*$"
CONFIDENCE_RANGE = "confidence:range"
"""The problem of a confidence outside its row's declared ``confidence_scale``."""
FAILURE_BOTH = "failure:both"
"""The problem of a row giving a label and a ``failure`` (a row is one or the other)."""
FAILURE_KIND = "failure:kind"
"""The problem of a ``failure`` on a row that is not a judge's (:data:`~.label_format.FAILURE_KINDS`)."""


def scale_end_sql(column: str, end: int) -> str:
    """SQL of a declared confidence scale's low (``end`` 1) or high (``end`` 2) end; NULL when it is not a scale."""
    named = {1: "0.0", 2: "1.0"}[end]  # 'probability' is 0-1 (personagap.confidence.PROBABILITY)
    return (f"(CASE WHEN {column} = {sql_quote(PROBABILITY)} THEN {named}::DOUBLE "
            f"ELSE TRY_CAST(regexp_extract({column}, {sql_quote(SCALE_PATTERN)}, {end}) AS DOUBLE) END)")


def _confidence_scale_checks() -> str:
    """CASE branches refusing an unreadable ``confidence_scale`` and a confidence outside the declared one.

    A confidence outside its scale is refused rather than stored: calibration maps it by (c - lo) / (hi - lo), so
    a 0-1 scale holding 1-100 values, or a typo of 700 on 1-100, would print a Brier score of thousands.
    """
    cs = CONFIDENCE_SCALE
    lo, hi = scale_end_sql(cs, 1), scale_end_sql(cs, 2)
    declared = f"{cs} IS NOT NULL AND {cs} <> {sql_quote(UNSTATED)}"
    return (f"WHEN {declared} AND coalesce(NOT ({lo} < {hi}), TRUE) THEN {sql_quote(CONFIDENCE_SCALE)} "
            f"WHEN {CONFIDENCE} IS NOT NULL AND {declared} "
            f"AND NOT (TRY_CAST({CONFIDENCE} AS DOUBLE) BETWEEN {lo} AND {hi}) THEN {sql_quote(CONFIDENCE_RANGE)} ")


def attributes_used_sql(cell: str) -> str:
    """SQL of an ``attributes_used`` cell as a canonical JSON list of ids (text); NULL when it is not one.

    A cell is a JSON list of strings (JSONL, or a Parquet/DataFrame list column read as JSON) or text
    separated by :data:`~personagap.linking.ATTRIBUTES_USED_SEPARATOR` (CSV); ids are trimmed and empty ones
    dropped. An empty list is an answer written from no attribute.
    """
    sep = sql_quote(ATTRIBUTES_USED_SEPARATOR)
    strings = (f"coalesce(list_bool_and(list_transform(json_extract({cell}, '$[*]'), "
               "lambda e: json_type(e) = 'VARCHAR')), TRUE)")

    def tidy(values: str) -> str:
        return f"to_json(list_filter(list_transform({values}, lambda s: trim(s)), lambda s: s <> ''))::VARCHAR"

    from_json = f"from_json({cell}, '[\"VARCHAR\"]')"
    return (f"CASE WHEN {cell} IS NULL THEN NULL WHEN left({cell}, 1) IN ('[', '{{') THEN (CASE WHEN "
            f"json_valid({cell}) AND json_type({cell}) = 'ARRAY' AND {strings} THEN {tidy(from_json)} END) "
            f"ELSE {tidy(f'string_split({cell}, {sep})')} END")


def label_sql(spec: LabelSpec) -> str:
    """SQL expression of the stored label (NULL = outside the scale); pairwise items always read A/B/tie.

    Declared categories are bound (:func:`bind_values`): a label is stored as the category it matches, looked up
    in the bound lists, so no category text is ever part of the SQL.
    """
    cats = spec_categories(spec)
    values = variable("pg_cat_values")
    if spec.scale == "ordinal":
        number = "TRY_CAST(_lt AS DOUBLE)"
        if cats is None:
            base = f"CASE WHEN {number} IS NULL THEN NULL ELSE _lt END"
        else:
            base = f"{values}[list_position({variable('pg_cat_numbers')}, {number})]"
    elif cats is None:
        base = "_lt"
    else:
        base = f"{values}[list_position({variable('pg_cat_keys')}, lower(_lt))]"
    if spec.stage != "response":
        return base
    pair = " ".join(f"WHEN lower(_lt) = {sql_quote(c.lower())} THEN {sql_quote(c)}" for c in PAIRWISE_LABELS)
    # Free yes/no labels are stored lower-cased; declared categories are enforced on every item kind.
    free = spec.scale == "nominal" and spec.categories is None
    yes_no = "WHEN is_yes_no THEN lower(_lt) " if free else ""
    return f"CASE WHEN is_pair THEN (CASE {pair} ELSE NULL END) {yes_no}ELSE {base} END"


def _shape_sql(spec: LabelSpec) -> str:
    """Per row, the shape of its item at stage 3: ``is_pair`` (A/B/tie) and ``is_yes_no`` (persona use).

    An item is pairwise when it gives response_a/response_b, or gives no response at all and every label
    on it is A, B or tie; a single-response item whose labels are all yes/no (and the scale leaves them
    free) is a "does it use the persona" item, which the USR report and the persona-use judge read.
    """
    if spec.stage != "response":
        return "FALSE AS is_pair, FALSE AS is_yes_no"
    free = spec.scale == "nominal" and spec.categories is None
    pairish = "bool_and(lower(_lt) IN ('a', 'b', 'tie')) OVER w"
    yes_no = ("bool_and(lower(_lt) IN ('yes', 'no')) OVER w" if free
              else str(spec.categories is not None
                       and {c.lower() for c in spec.categories} <= set(RELEVANCE_LABELS)).upper())
    paired = "bool_or(response_a IS NOT NULL OR response_b IS NOT NULL) OVER w"
    single = "bool_or(response IS NOT NULL) OVER w"
    # An item whose rows are all failures has no label to tell its shape: without response text it is single.
    is_pair = f"({paired} OR (NOT {single} AND coalesce({pairish}, FALSE)))"
    return f"{is_pair} AS is_pair, (NOT {is_pair} AND {yes_no}) AS is_yes_no"
