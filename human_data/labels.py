"""Bring your own labels: one file format for every stage, read from JSONL, CSV, Parquet or pandas.

One row per (item, rater) label; the full format, with an example per stage, is in ``docs/formats.md``.

* required: ``item_id``, ``rater``, ``label``;
* optional: ``rater_kind`` (``human`` default | ``llm`` | ``trained``), ``user_id`` (the bootstrap's
  cluster, default ``item_id``), ``condition`` (default ``''``, the blind protocol; e.g. ``shown-llm``,
  ``no-profile``), ``reason``;
* optional item context, stored once per item: stage ``extraction``: ``conversation``, ``attribute``;
  stage ``relevance``: ``prompt``, ``attribute``, ``profile``; stage ``response``: ``prompt``, ``profile``,
  and either ``response_a`` + ``response_b`` (pairwise, labels ``A``/``B``/``tie``) or ``response``
  (single), and ``response_kind`` (``personalised``/``generic``).

Why DuckDB reads the files: a million labels validated row by row in Python take longer than DuckDB
takes to parse, check and write them; here every check is one vectorised query over all files at once,
and Python only runs on the offending row (to name its line) and on per-item context.

Every problem raises :class:`~personagap.human_data.DataError` naming file, line (JSONL, CSV) or row
(Parquet, DataFrame) and column; nothing is written then (the caller writes only a fully valid import).
"""

from __future__ import annotations

import csv
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import duckdb
import orjson
import pandas as pd
import pyarrow as pa

from personagap.human_data._jsonl import DataError, read_jsonl
from personagap.records import PAIRWISE_LABELS, RELEVANCE_LABELS, VERIFICATION_LABELS, Stage
from personagap.store import TABLES, columns_table

Scale = Literal["nominal", "ordinal"]
Origin = Literal["real", "synthetic"]

STAGES: tuple[Stage, ...] = ("extraction", "relevance", "response")
REQUIRED: tuple[str, ...] = ("item_id", "rater", "label")
OPTIONAL: tuple[str, ...] = ("rater_kind", "user_id", "condition", "reason")
CONTEXT: dict[str, tuple[str, ...]] = {
    "extraction": ("conversation", "attribute"),
    "relevance": ("prompt", "attribute", "profile"),
    "response": ("prompt", "profile", "response_a", "response_b", "response", "response_kind"),
}
RATER_KINDS: tuple[str, ...] = ("human", "llm", "trained")
#: The stage's question fixes its categories (its report and judges read exactly these); ``--categories``
#: changes them except for pairwise items, whose labels always say which answer won.
STAGE_CATEGORIES: dict[str, tuple[str, ...]] = {"extraction": VERIFICATION_LABELS, "relevance": RELEVANCE_LABELS}
RESPONSE_KINDS: dict[str, str] = {"personalised": "personalised", "personalized": "personalised", "generic": "generic"}
FORMATS: dict[str, str] = {".jsonl": "jsonl", ".ndjson": "jsonl", ".csv": "csv", ".parquet": "parquet",
                           ".pq": "parquet"}
#: Label of the extractor an imported stage-1 verdict is filed under (the format names no extractor).
IMPORTED_EXTRACTOR = "imported"
ID_TAG = "labels"
"""First part of every hashed id this importer makes, so its items never collide with a release adapter's."""

_SCALAR_JSON = ("VARCHAR", "BIGINT", "UBIGINT", "DOUBLE")
_MAX_ECHO = 60


@dataclass(frozen=True)
class LabelSpec:
    """What the labels are: which stage and dataset, on which scale."""

    stage: Stage
    dataset: str
    scale: Scale = "nominal"
    categories: tuple[str, ...] | None = None
    origin: Origin = "real"

    def meta(self) -> dict[str, Any]:
        """What the meta table records about the dataset (``labels:<dataset>:<stage>``)."""
        return {"stage": self.stage, "scale": self.scale,
                "categories": list(self.categories) if self.categories is not None else None}


@dataclass(frozen=True)
class Source:
    """One input: a file (format by extension) or a DataFrame."""

    name: str
    kind: Literal["jsonl", "csv", "parquet", "frame"]
    path: Path | None = None
    frame: pd.DataFrame | None = None

    @classmethod
    def of_path(cls, path: str | Path) -> Source:
        """A file source; the extension picks the reader."""
        p = Path(path)
        kind = FORMATS.get(p.suffix.lower())
        if kind is None:
            raise DataError(p, None, None, f"unknown file type {p.suffix or '(none)'!r}: use .jsonl, .csv or .parquet")
        if not p.is_file():
            raise DataError(p, None, None, "no such file" if not p.exists() else "not a regular file")
        return cls(name=str(p), kind=kind, path=p)  # type: ignore[arg-type]

    def run_key(self) -> str:
        """What the run id hashes: the absolute path (re-importing a file replaces its rows)."""
        return str(self.path.resolve()) if self.path is not None else self.name


@dataclass
class LabelImport:
    """A validated import, not yet written: one Arrow table per store table."""

    spec: LabelSpec
    files: dict[str, int] = field(default_factory=dict)
    run_ids: dict[str, str] = field(default_factory=dict)
    tables: dict[str, pa.Table] = field(default_factory=dict)

    def render(self) -> str:
        """Plain-text summary of what was read."""
        lines = [f"Read {len(self.files)} label file(s) for stage {self.spec.stage}, dataset {self.spec.dataset!r} "
                 f"({self.spec.scale}, {self.spec.origin}):"]
        lines += [f"  {p}: {n} rows" for p, n in self.files.items()]
        return "\n".join(lines)


def run_id_for(source: Source, spec: LabelSpec) -> str:
    """The run id of one source's labels: a pure function of where they came from and what they are."""
    digest = hashlib.sha256(f"{source.run_key()}\x1f{spec.dataset}\x1f{spec.stage}".encode()).hexdigest()[:16]
    return f"import-labels-{digest}"


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _short(value: object) -> str:
    text = str(value)
    return repr(text if len(text) <= _MAX_ECHO else text[: _MAX_ECHO - 3] + "...")


def _known(stage: Stage) -> tuple[str, ...]:
    return REQUIRED + OPTIONAL + CONTEXT[stage]


# --------------------------------------------------------------------------- reading

def _read(con: duckdb.DuckDBPyConnection, source: Source, index: int, stage: Stage) -> pa.Table:
    """One source as an Arrow table of text columns plus ``_file``, ``_row`` and ``_bad``."""
    known = _known(stage)
    try:
        if source.kind == "jsonl":
            table = _read_jsonl(con, source, known)
        elif source.kind == "csv":
            table = _read_tabular(con, source, known, _csv_sql(source, _csv_header(source)))
        else:
            table = _read_tabular(con, source, known, _frame_sql(con, source))
    except duckdb.Error as exc:
        raise _read_error(source, exc) from None
    n = table.num_rows
    if n == 0:
        raise DataError(source.name, None, None, "the file holds no label rows")
    table = table.append_column("_file", pa.array([index] * n, pa.int32()))
    table = table.append_column("_row", pa.array(range(n), pa.int64()))
    missing = [c for c in REQUIRED if c not in table.column_names]
    if missing:
        raise DataError(source.name, None, missing[0], f"missing column (required: {', '.join(REQUIRED)})")
    return table


def _read_jsonl(con: duckdb.DuckDBPyConnection, source: Source, known: tuple[str, ...]) -> pa.Table:
    path = _quote(str(source.path))
    objects = f"read_json_objects({path}, format='newline_delimited')"
    keys = {k for (k,) in con.sql(f"SELECT DISTINCT unnest(json_keys(json)) FROM {objects} "
                                  f"WHERE json_type(json) = 'OBJECT'").fetchall()}
    unknown = sorted(keys - set(known))
    if unknown:
        first = con.sql(f"SELECT r FROM (SELECT row_number() OVER () - 1 AS r, json FROM {objects}) "
                        f"WHERE list_contains(json_keys(json), {_quote(unknown[0])}) ORDER BY r LIMIT 1").fetchall()
        raise _unknown_column(source, first[0][0] if first else None, unknown[0], known)
    present = [c for c in known if c in keys]
    # One column names the first problem of each row (NULL when none): JSON types DuckDB would coerce.
    checks = ["WHEN json_type(json) <> 'OBJECT' THEN '(row)'"]
    for c in present:
        if c != "conversation":
            checks.append(f"WHEN json_type(json, {_quote('$.' + c)}) NOT IN ({', '.join(map(_quote, _SCALAR_JSON))}, "
                          f"'NULL') THEN {_quote(c)}")
    cols = [f"json ->> {_quote('$.' + c)} AS {c}" for c in present]
    sql = f"SELECT {', '.join(cols + ['CASE ' + ' '.join(checks) + ' END AS _bad'])} FROM {objects}"
    return con.sql(sql).to_arrow_table()


def _csv_sql(source: Source, header: list[str]) -> str:
    columns = "{" + ", ".join(f"{_quote(c)}: 'VARCHAR'" for c in header) + "}"
    return (f"SELECT * FROM read_csv({_quote(str(source.path))}, header=true, columns={columns}, delim=',', "
            "quote='\"', escape='\"', strict_mode=true, auto_detect=false, encoding='utf-8')")


def _frame_sql(con: duckdb.DuckDBPyConnection, source: Source) -> str:
    if source.kind == "frame":
        assert source.frame is not None
        try:
            arrow = pa.Table.from_pandas(source.frame, preserve_index=False)
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            raise DataError(source.name, None, None,
                            f"a column mixes types Arrow cannot store together: {exc}") from None
        con.register("_frame_source", arrow)
        return "SELECT * FROM _frame_source"
    return f"SELECT * FROM read_parquet({_quote(str(source.path))})"


def _read_tabular(con: duckdb.DuckDBPyConnection, source: Source, known: tuple[str, ...], base: str) -> pa.Table:
    if source.kind == "csv":
        types = {c: "VARCHAR" for c in _csv_header(source)}
    else:
        types = {str(name): str(kind) for name, kind, *_ in con.sql(f"DESCRIBE {base}").fetchall()}
    unknown = [c for c in types if c not in known]
    if unknown:
        raise _unknown_column(source, None, unknown[0], known)
    cols = []
    for c, kind in types.items():
        nested = kind.endswith("]") or kind.startswith(("STRUCT", "MAP", "UNION", "JSON"))
        if nested and c != "conversation":
            raise DataError(source.name, None, c, f"has type {kind}; expected text or numbers")
        cols.append(f"to_json({c})::VARCHAR AS {c}" if nested else f"CAST({c} AS VARCHAR) AS {c}")
    return con.sql(f"SELECT {', '.join(cols)}, NULL::VARCHAR AS _bad FROM ({base})").to_arrow_table()


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
            raise DataError(source.name, 1, f"column {i + 1}", f"header name {_short(name)} is empty or padded")
        if name in header[:i]:
            raise DataError(source.name, 1, name, "appears twice in the header")
    return header


def _unknown_column(source: Source, row: int | None, column: str, known: tuple[str, ...]) -> DataError:
    where = _where(source, row) if row is not None else None
    return DataError(source.name, where, column, f"unknown column (this stage reads: {', '.join(known)})")


def _read_error(source: Source, exc: duckdb.Error) -> DataError:
    """Locate a parse error by reading the file the slow, exact way; else echo DuckDB's first line."""
    if source.kind == "jsonl" and source.path is not None:
        for _ in read_jsonl(source.path):  # raises DataError at the malformed line
            pass
    if source.kind == "csv" and source.path is not None:
        _csv_scan(source)
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return DataError(source.name, None, None, text[:300])


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


def _where(source: Source, row: int) -> int | str:
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
        return f"row {source.frame.index[row]!r}"
    return f"row {row + 1}"


# --------------------------------------------------------------------------- validating and building

class _Checker:
    """Runs the validation queries over the registered view ``v`` and turns a hit into a DataError."""

    def __init__(self, con: duckdb.DuckDBPyConnection, sources: Sequence[Source]) -> None:
        self.con, self.sources = con, sources

    def error(self, file: int, row: int, column: str | None, message: str) -> DataError:
        source = self.sources[file]
        return DataError(source.name, _where(source, row), column, message)

    def first(self, sql: str) -> tuple[Any, ...] | None:
        rows = self.con.sql(sql + " ORDER BY _file, _row LIMIT 1").fetchall()
        return rows[0] if rows else None


def load_label_sources(sources: Sequence[Source], spec: LabelSpec) -> LabelImport:
    """Read and validate label sources; build the store rows (nothing is written).

    Args:
        sources: Files or DataFrames in the format above.
        spec: Stage, dataset, scale and categories.

    Returns:
        The validated import with one Arrow table per store table.

    Raises:
        DataError: A row deviates from the format; the message names file, line or row, and column.
    """
    if spec.stage not in STAGES:
        raise ValueError(f"unknown stage {spec.stage!r}; one of {', '.join(STAGES)}")
    if not sources:
        raise DataError("(no files)", None, None, "give at least one label file")
    names = [s.name for s in sources]
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise DataError(dup, None, None, "given twice")
    con = duckdb.connect()
    try:
        con.execute("SET autoinstall_known_extensions = false; "
                    "SET autoload_known_extensions = false")
        parts = [_read(con, s, i, spec.stage) for i, s in enumerate(sources)]
        result = LabelImport(spec=spec, files={s.name: t.num_rows for s, t in zip(sources, parts, strict=True)},
                             run_ids={s.name: run_id_for(s, spec) for s in sources})
        columns = [c for c in _known(spec.stage) if any(c in t.column_names for t in parts)]
        unified = pa.concat_tables([_with_columns(t, columns) for t in parts])
        con.register("raw", unified)
        con.execute(_normalised_view(columns, spec.stage))
        check = _Checker(con, sources)
        _check_rows(check, spec)
        _check_items(check, spec, columns)
        _check_labels(check, spec)
        _check_duplicates(check)
        result.tables = _build(con, spec, sources, result.run_ids)
        return result
    finally:
        con.close()


def _with_columns(table: pa.Table, columns: list[str]) -> pa.Table:
    arrays = [table.column(c) if c in table.column_names else pa.nulls(table.num_rows, pa.string())
              for c in columns]
    extra = ["_file", "_row", "_bad"]
    return pa.Table.from_arrays(arrays + [table.column(c).cast(pa.string()) if c == "_bad" else table.column(c)
                                          for c in extra], names=columns + extra)


def _normalised_view(columns: list[str], stage: Stage) -> str:
    # Trimmed text; empty optional text counts as absent (CSV has no null). Ids and names are trimmed too.
    out = []
    for c in _known(stage):
        if c not in columns:
            out.append(f"NULL::VARCHAR AS {c}")
        elif c in ("conversation", "label", "reason"):
            out.append(f"nullif({c}, '') AS {c}")
        else:
            out.append(f"nullif(trim({c}), '') AS {c}")
    return ("CREATE TEMP VIEW v AS SELECT *, coalesce(user_id, item_id) AS user_key, coalesce(condition, '') AS cond, "
            "lower(coalesce(rater_kind, 'human')) AS kind, _file::BIGINT * 4294967296 + _row AS _ord "
            f"FROM (SELECT _file, _row, _bad, {', '.join(out)} FROM raw)")


def _check_rows(check: _Checker, spec: LabelSpec) -> None:
    hit = check.first("SELECT _file, _row, _bad FROM v WHERE _bad IS NOT NULL")
    if hit:
        if hit[2] == "(row)":
            raise check.error(hit[0], hit[1], None, "expected a JSON object")
        raise check.error(hit[0], hit[1], hit[2], "expected a string or a number")
    for c in REQUIRED:
        hit = check.first(f"SELECT _file, _row FROM v WHERE {c} IS NULL OR trim({c}) = ''")
        if hit:
            raise check.error(hit[0], hit[1], c, "missing or empty (required)")
    kinds = ", ".join(map(_quote, RATER_KINDS))
    hit = check.first(f"SELECT _file, _row, kind FROM v WHERE kind NOT IN ({kinds})")
    if hit:
        raise check.error(hit[0], hit[1], "rater_kind", f"unknown rater kind {_short(hit[2])} "
                                                        f"(one of {', '.join(RATER_KINDS)})")
    if spec.stage == "response":
        allowed = ", ".join(map(_quote, RESPONSE_KINDS))
        hit = check.first(f"SELECT _file, _row, response_kind FROM v WHERE response_kind IS NOT NULL "
                          f"AND lower(response_kind) NOT IN ({allowed})")
        if hit:
            raise check.error(hit[0], hit[1], "response_kind", f"{_short(hit[2])} is not personalised or generic")


def _check_items(check: _Checker, spec: LabelSpec, columns: list[str]) -> None:
    """Context and user are facts of the item: every row that gives them must agree."""
    for c in ("user_key", *[c for c in CONTEXT[spec.stage] if c in columns]):
        hit = check.first(f"""
            SELECT v._file, v._row, v.item_id, f.ff, f.fr FROM v JOIN (
                SELECT item_id, arg_min({c}, _ord) AS fv, arg_min(_file, _ord) AS ff, arg_min(_row, _ord) AS fr
                FROM v WHERE {c} IS NOT NULL GROUP BY item_id HAVING min({c}) <> max({c})
            ) f USING (item_id)
            WHERE v.{c} IS NOT NULL AND v.{c} <> f.fv""")
        if hit:
            first = check.sources[hit[3]]
            column = "user_id" if c == "user_key" else c
            raise check.error(hit[0], hit[1], column, f"item {_short(hit[2])} has another {column} at "
                                                      f"{first.name}:{_where(first, hit[4])}")
    if spec.stage == "response":
        hit = check.first("""
            SELECT _file, _row, item_id, pair, single FROM (
                SELECT *, bool_or(response_a IS NOT NULL OR response_b IS NOT NULL) OVER w AS pair,
                       bool_or(response IS NOT NULL) OVER w AS single,
                       bool_or(response_a IS NOT NULL) OVER w AS has_a, bool_or(response_b IS NOT NULL) OVER w AS has_b
                FROM v WINDOW w AS (PARTITION BY item_id))
            WHERE (pair AND single) OR (pair AND NOT (has_a AND has_b))""")
        if hit:
            column = "response" if hit[3] and hit[4] else "response_b"
            message = ("gives both a single response and a pair (response_a/response_b)" if hit[3] and hit[4]
                       else "gives only one of response_a/response_b (a pair needs both)")
            raise check.error(hit[0], hit[1], column, f"item {_short(hit[2])} {message}")
    if spec.stage == "extraction" and "conversation" in columns:
        for file, row, text in check.con.sql(
                "SELECT min_by(_file, (_file, _row)), min_by(_row, (_file, _row)), conversation FROM v "
                "WHERE conversation IS NOT NULL GROUP BY conversation").fetchall():
            parse_conversation(text, lambda msg, f=file, r=row: check.error(f, r, "conversation", msg))


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


def _categories(spec: LabelSpec) -> tuple[str, ...] | None:
    if spec.categories is not None:
        return spec.categories
    return STAGE_CATEGORIES.get(spec.stage)


def _label_sql(spec: LabelSpec) -> str:
    """SQL expression of the stored label (NULL = outside the scale); pairwise items always read A/B/tie."""
    cats = _categories(spec)
    if spec.scale == "ordinal":
        number = "TRY_CAST(trim(label) AS DOUBLE)"
        if cats is None:
            base = f"CASE WHEN {number} IS NULL THEN NULL ELSE trim(label) END"
        else:
            cases = " ".join(f"WHEN {number} = {float(c)!r} THEN {_quote(c)}" for c in cats)
            base = f"CASE {cases} ELSE NULL END"
    elif cats is None:
        base = "trim(label)"
    else:
        cases = " ".join(f"WHEN lower(trim(label)) = {_quote(c.lower())} THEN {_quote(c)}" for c in cats)
        base = f"CASE {cases} ELSE NULL END"
    if spec.stage != "response":
        return base
    pair = " ".join(f"WHEN lower(trim(label)) = {_quote(c.lower())} THEN {_quote(c)}" for c in PAIRWISE_LABELS)
    return f"CASE WHEN is_pair THEN (CASE {pair} ELSE NULL END) WHEN is_yes_no THEN lower(trim(label)) ELSE {base} END"


def _shape_sql(spec: LabelSpec) -> str:
    """Per row, the shape of its item at stage 3: ``is_pair`` (A/B/tie) and ``is_yes_no`` (persona use).

    An item is pairwise when it gives response_a/response_b, or gives no response at all and every label
    on it is A, B or tie; a single-response item whose labels are all yes/no (and the scale leaves them
    free) is a "does it use the persona" item, which the USR report and the persona-use judge read.
    """
    if spec.stage != "response":
        return "FALSE AS is_pair, FALSE AS is_yes_no"
    free = spec.scale == "nominal" and spec.categories is None
    pairish = "bool_and(lower(trim(label)) IN ('a', 'b', 'tie')) OVER w"
    yes_no = ("bool_and(lower(trim(label)) IN ('yes', 'no')) OVER w" if free
              else str(spec.categories is not None and {c.lower() for c in spec.categories} <= {"yes", "no"}).upper())
    paired = "bool_or(response_a IS NOT NULL OR response_b IS NOT NULL) OVER w"
    single = "bool_or(response IS NOT NULL) OVER w"
    is_pair = f"({paired} OR (NOT {single} AND {pairish}))"
    return f"{is_pair} AS is_pair, (NOT {is_pair} AND {yes_no}) AS is_yes_no"


def _check_labels(check: _Checker, spec: LabelSpec) -> None:
    check.con.execute(f"CREATE TEMP TABLE vl AS SELECT *, {_label_sql(spec)} AS stored FROM "
                      f"(SELECT *, {_shape_sql(spec)} FROM v WINDOW w AS (PARTITION BY item_id))")
    if spec.scale == "ordinal":
        for c in spec.categories or ():
            try:
                float(c)
            except ValueError:
                raise DataError("--categories", None, None, f"{_short(c)} is not a number (ordinal scale)") from None
    hit = check.first("SELECT _file, _row, label, is_pair FROM vl WHERE stored IS NULL")
    if hit:
        cats = PAIRWISE_LABELS if hit[3] else _categories(spec)
        expected = (f"one of {', '.join(cats)}" if cats is not None else "a number")
        scale = "pairwise" if hit[3] else spec.scale
        raise check.error(hit[0], hit[1], "label", f"{_short(hit[2])} is outside the {scale} scale (expected "
                                                   f"{expected}{'' if hit[3] or spec.categories else _hint(spec)})")


def _hint(spec: LabelSpec) -> str:
    return "; --categories changes them" if spec.stage in STAGE_CATEGORIES and spec.scale == "nominal" else ""


def _check_duplicates(check: _Checker) -> None:
    dup = check.con.sql("SELECT count(*) FROM (SELECT 1 FROM v GROUP BY item_id, rater, cond HAVING count(*) > 1)")
    if not dup.fetchall()[0][0]:
        return
    hit = check.first("""
        SELECT _file, _row, item_id, rater, cond, first_file, first_row FROM (
            SELECT *, row_number() OVER w AS n, first_value(_file) OVER w AS first_file,
                   first_value(_row) OVER w AS first_row
            FROM v WINDOW w AS (PARTITION BY item_id, rater, cond ORDER BY _file, _row))
        WHERE n = 2""")
    assert hit is not None
    first = check.sources[hit[5]]
    cond = f" under condition {_short(hit[4])}" if hit[4] else ""
    raise check.error(hit[0], hit[1], "rater", f"rater {_short(hit[3])} labels item {_short(hit[2])}{cond} twice "
                                               f"(first at {first.name}:{_where(first, hit[6])})")


def _item_hash(*parts: str) -> str:
    # Stable across DuckDB versions: sha256 of the parts joined by a unit separator, like records.item_id.
    return f"substr(sha256(concat_ws(chr(31), {_quote(ID_TAG)}, {', '.join(parts)})), 1, 20)"


def _build(con: duckdb.DuckDBPyConnection, spec: LabelSpec, sources: Sequence[Source],
           run_ids: dict[str, str]) -> dict[str, pa.Table]:
    ds, st = _quote(spec.dataset), _quote(spec.stage)
    runs = pa.table({"_file": pa.array(range(len(sources)), pa.int32()),
                     "run_id": [run_ids[s.name] for s in sources]})
    con.register("file_runs", runs)
    sid = _item_hash(ds, st, "item_id")
    con.execute(f"""CREATE TEMP TABLE it AS SELECT item_id AS source_id, {sid} AS sid,
        any_value(user_key ORDER BY _file, _row) AS user_id,
        {', '.join(f'max({c}) AS {c}' for c in CONTEXT[spec.stage])},
        bool_or(is_pair) AS is_pair, bool_or(is_yes_no) AS is_yes_no, min(_ord) AS first_at,
        arg_min(_file, _ord) AS first_file, arg_min(_row, _ord) AS first_row
        FROM vl GROUP BY item_id""")
    tables: dict[str, pa.Table] = {}
    tables["labels"] = con.sql(f"""
        SELECT {sid} AS item_id, trim(rater) AS rater, kind AS rater_kind, cond AS condition, stored AS label,
               CASE WHEN stored IS DISTINCT FROM label THEN label END AS raw, reason, NULL::VARCHAR AS error,
               r.run_id, NULL::VARCHAR AS meta
        FROM vl JOIN file_runs r USING (_file) ORDER BY _file, _row""").to_arrow_table()
    prompt_index = ("CASE WHEN prompt IS NULL THEN NULL ELSE "
                    "CAST('0x' || substr(sha256(prompt), 1, 7) AS INTEGER) END")
    has_prompt = spec.stage in ("relevance", "response")
    payload = _payload_sql(spec)
    tables["items"] = con.sql(f"""
        SELECT sid AS item_id, {ds} AS dataset, {st} AS stage, user_id,
               {prompt_index if has_prompt else 'NULL::INTEGER'} AS prompt_index,
               {'attribute' if spec.stage != 'response' else 'NULL::VARCHAR'} AS attribute,
               NULL::BIGINT AS position, {payload} AS payload
        FROM it ORDER BY first_at""").to_arrow_table()
    profile = "profile" if spec.stage != "extraction" else "NULL::VARCHAR"
    # A profile is the item's context (kept in its payload); the user's profile only when all its items agree.
    tables["users"] = con.sql(f"""SELECT {ds} AS dataset, user_id,
                        CASE WHEN count(DISTINCT {profile}) = 1 THEN max({profile}) END AS profile_text
                        FROM it GROUP BY user_id ORDER BY min(first_at)""").to_arrow_table()
    tables["prompts"] = con.sql(f"""
        SELECT DISTINCT {ds} AS dataset, user_id, {prompt_index} AS prompt_index, prompt AS prompt_text FROM it
        WHERE prompt IS NOT NULL""").to_arrow_table() if has_prompt else _empty("prompts")
    tables["attributes"] = con.sql(f"""
        SELECT DISTINCT {ds} AS dataset, user_id, attribute, NULL::VARCHAR AS reason, NULL::DOUBLE AS confidence
        FROM it WHERE attribute IS NOT NULL""").to_arrow_table() if spec.stage != "response" else _empty("attributes")
    return tables


def _empty(table: str) -> pa.Table:
    return columns_table(table, {c: [] for c in TABLES[table][0]})


def _payload_sql(spec: LabelSpec) -> str:
    """The item's payload in the shape the stage's reports and judges read (see docs/formats.md)."""
    if spec.stage == "extraction":
        return (f"json_object('kind', 'extracted', 'unit', user_id, 'extractor', {_quote(IMPORTED_EXTRACTOR)}, "
                "'turn_ids', [], 'confidence', NULL, 'source_id', source_id, 'conversation', conversation)")
    if spec.stage == "relevance":
        return "json_object('kind', 'relevance', 'source_id', source_id, 'profile', profile)"
    return """CASE WHEN is_pair THEN json_object(
            'kind', 'pairwise', 'question', coalesce(prompt, ''), 'answer_a', coalesce(response_a, ''),
            'answer_b', coalesce(response_b, ''), 'profile', profile, 'response_kind', lower(response_kind),
            'source_id', source_id)
        ELSE json_object('kind', CASE WHEN is_yes_no THEN 'persona_use' ELSE 'single' END,
            'facts', CASE WHEN profile IS NULL THEN []
            ELSE list_filter(string_split(profile, chr(10)), lambda x: trim(x) <> '') END,
            'context', coalesce(prompt, ''), 'response', coalesce(response, ''), 'profile', profile,
            'response_kind', lower(response_kind), 'source_id', source_id) END"""


