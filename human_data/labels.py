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

from personagap.datasets import default_question
from personagap.human_data._jsonl import DataError, read_jsonl
from personagap.records import (
    PAIRWISE_LABELS,
    RELEVANCE_LABELS,
    VERIFICATION_LABELS,
    DatasetRecord,
    DatasetScale,
    ItemKind,
    Stage,
)
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

_KEY_SAMPLE = 20_480
#: A row's place across all sources (file, then row), computed where needed rather than stored per row.
_ORD = "(_file::BIGINT * 4294967296 + _row)"
#: Columns that must be plain text or numbers: a JSON list or object there is a format error.
_ID_COLUMNS = ("item_id", "rater", "label", "rater_kind", "user_id", "condition")
_MAX_ECHO = 60


@dataclass(frozen=True)
class LabelSpec:
    """What the labels are: which stage and dataset, on which scale."""

    stage: Stage
    dataset: str
    scale: Scale = "nominal"
    categories: tuple[str, ...] | None = None
    origin: Origin = "real"
    question: str | None = None
    """What the raters were asked (``--question``); None: the stage's default for the item kind."""

    def meta(self) -> dict[str, Any]:
        """What the meta table records about the dataset (``labels:<dataset>:<stage>``)."""
        return {"stage": self.stage, "scale": self.scale,
                "categories": list(self.categories) if self.categories is not None else None}


ASPECTS_PREFIX = "aspects:response:"
"""Meta key prefix of the other questions a single-response dataset's raters answered (:func:`aspects_meta`)."""


@dataclass(frozen=True)
class RatedAspectSpec:
    """Another question the raters of a single-response dataset answered about the same responses.

    Stored as data (e.g. USR's Overall 1-5); its labels are the raters' labels under ``condition``.
    """

    condition: str
    question: str
    scale: DatasetScale


def aspects_meta(dataset: str, aspects: Sequence[RatedAspectSpec]) -> dict[str, str]:
    """The meta entry an importer writes (in its transaction) to store a dataset's rated aspects."""
    value = [{"condition": a.condition, "question": a.question, "scale": a.scale.kind,
              "categories": list(a.scale.categories)} for a in aspects]
    return {f"{ASPECTS_PREFIX}{dataset}": orjson.dumps(value).decode()}


def parse_aspects(meta: dict[str, str]) -> dict[str, list[RatedAspectSpec]]:
    """Dataset -> its stored aspects, from meta entries (:func:`aspects_meta`); other keys are ignored."""
    out: dict[str, list[RatedAspectSpec]] = {}
    for key, value in meta.items():
        if key.startswith(ASPECTS_PREFIX):
            out[key[len(ASPECTS_PREFIX):]] = [
                RatedAspectSpec(condition=str(a["condition"]), question=str(a["question"]),
                                scale=DatasetScale(kind=a["scale"], categories=tuple(map(str, a["categories"]))))
                for a in orjson.loads(value)]
    return out


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
    """A validated import, not yet written: its rows staged in SQL on a private in-memory connection.

    ``tables`` names, per store table, the relation on ``con`` that gives its rows (or holds them as Arrow
    when there are none). Close it (or use it as a context manager) once written.
    """

    spec: LabelSpec
    con: duckdb.DuckDBPyConnection
    files: dict[str, int] = field(default_factory=dict)
    run_ids: dict[str, str] = field(default_factory=dict)
    tables: dict[str, pa.Table | str] = field(default_factory=dict)
    item_kind: ItemKind = "single"
    """What the dataset's items are (stage 3: pairwise when most items are pairs, else single responses)."""

    def record(self) -> DatasetRecord:
        """The dataset record this import fixes (stored with :func:`personagap.datasets.record_meta`)."""
        spec = self.spec
        if self.item_kind == "pairwise":
            scale = DatasetScale(kind="pairwise", categories=PAIRWISE_LABELS)
        else:
            # Undeclared categories stay empty: the record reader then takes every label the raters gave.
            scale = DatasetScale(kind=spec.scale, categories=_categories(spec) or ())
        return DatasetRecord(stage=spec.stage, dataset=spec.dataset, item_kind=self.item_kind, scale=scale,
                             question=spec.question or default_question(spec.stage, self.item_kind),
                             origin=spec.origin, declared=True)

    def close(self) -> None:
        """Free the staged rows."""
        self.con.close()

    def __enter__(self) -> LabelImport:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

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
    # Only for the program's own constants (column names, rater kinds): user input is bound (see _bind).
    return "'" + text.replace("'", "''") + "'"


#: Session variables holding the user's values (see :func:`_bind`); SQL reads them with ``getvariable``.
_VARS = ("pg_dataset", "pg_stage", "pg_cat_keys", "pg_cat_values", "pg_cat_numbers", "pg_run_ids", "pg_paths")


def _var(name: str) -> str:
    assert name in _VARS
    return f"getvariable('{name}')"


def _bind(con: duckdb.DuckDBPyConnection, spec: LabelSpec, sources: Sequence[Source]) -> None:
    """Bind every user-given value the import's SQL reads (dataset, categories, paths) as a parameter.

    DuckDB's views and table functions take no ``?`` placeholders, so the values are set as session
    variables through a prepared statement and read with ``getvariable``: a category such as
    ``'); DROP TABLE labels; --`` stays data, whatever characters it holds.
    """
    cats = _stored_categories(spec)
    numbers = [float(c) for c in cats] if cats is not None and spec.scale == "ordinal" else None
    values: dict[str, object] = {
        "pg_dataset": spec.dataset, "pg_stage": spec.stage,
        "pg_cat_keys": None if cats is None else [c.lower() for c in cats],
        "pg_cat_values": None if cats is None else list(cats), "pg_cat_numbers": numbers,
        "pg_paths": [str(s.path) if s.path is not None else "" for s in sources]}
    for name, value in values.items():
        kind = {"pg_cat_numbers": "DOUBLE[]", "pg_dataset": "VARCHAR", "pg_stage": "VARCHAR"}.get(name, "VARCHAR[]")
        con.execute(f"SET VARIABLE {name} = CAST(? AS {kind})", [value])


def _stored_categories(spec: LabelSpec) -> tuple[str, ...] | None:
    # The declared categories, lower-cased when they are yes/no (the spelling the persona-use judge and the
    # stage-2 reports read).
    cats = _categories(spec)
    if cats is not None and spec.scale == "nominal" and {c.lower() for c in cats} <= set(RELEVANCE_LABELS):
        return tuple(c.lower() for c in cats)
    return cats


def _short(value: object) -> str:
    text = str(value)
    return repr(text if len(text) <= _MAX_ECHO else text[: _MAX_ECHO - 3] + "...")


def _known(stage: Stage) -> tuple[str, ...]:
    return REQUIRED + OPTIONAL + CONTEXT[stage]


# --------------------------------------------------------------------------- reading

def _source_sql(con: duckdb.DuckDBPyConnection, source: Source, index: int, stage: Stage, *, located: bool) -> str:
    """A query over one source giving every known column as text (NULL when absent), ``_bad``, ``_file``, ``_row``.

    ``_bad`` names a row's structural problem (not an object, a nested value where text belongs, an
    unknown key); ``_row`` is the 0-based data row in file order (DuckDB's ordinality / file row number).
    Unless ``located``, a JSONL or CSV source gives ``_row`` NULL: numbering rows makes DuckDB's text readers
    keep file order, which halves their speed, and a clean import never names a row (see :class:`_Checker`).
    """
    known = _known(stage)
    if source.kind == "jsonl":
        return _jsonl_sql(con, source, index, known, located=located)
    if source.kind == "csv":
        types = {c: "VARCHAR" for c in _csv_header(source)}
        columns = "{" + ", ".join(f"{_quote(c)}: 'VARCHAR'" for c in types) + "}"
        base = (f"SELECT * FROM read_csv({_path(index)}, header=true, columns={columns}, delim=',', "
                "quote='\"', escape='\"', strict_mode=true, auto_detect=false, encoding='utf-8')"
                + (" WITH ORDINALITY" if located else ""))
        row = "ordinality - 1" if located else "NULL::BIGINT"
    elif source.kind == "frame":
        assert source.frame is not None
        try:
            arrow = pa.Table.from_pandas(source.frame, preserve_index=False)
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            raise DataError(source.name, None, None,
                            f"a column mixes types Arrow cannot store together: {exc}") from None
        arrow = arrow.append_column("_frame_row", pa.array(range(arrow.num_rows), pa.int64()))
        con.register(f"_frame_{index}", arrow)
        base, row = f"SELECT * FROM _frame_{index}", "_frame_row"
    else:
        base = f"SELECT * FROM read_parquet({_path(index)}, file_row_number=true)"
        row = "file_row_number"
    if source.kind != "csv":
        types = {str(n): str(k) for n, k, *_ in con.sql(f"DESCRIBE {base}").fetchall()
                 if n not in ("_frame_row", "file_row_number")}
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
        elif nested and c != "conversation":
            raise DataError(source.name, None, c, f"has type {kind}; expected text or numbers")
        else:
            cols.append(f"to_json({c})::VARCHAR AS {c}" if nested else f"CAST({c} AS VARCHAR) AS {c}")
    return f"SELECT {', '.join(cols)}, NULL::VARCHAR AS _bad, {index} AS _file, {row} AS _row FROM ({base})"


def _jsonl_sql(con: duckdb.DuckDBPyConnection, source: Source, index: int, known: tuple[str, ...], *,
               located: bool) -> str:
    # DuckDB's JSON reader with every column as text is ~4x cheaper than extracting fields from each parsed
    # object. Its price: keys are checked on the reader's sample (the first 20,480 rows), so a key that first
    # appears later is ignored; a nested value where text belongs is caught in _materialise.
    path = _path(index)
    if not _has_content(source):
        raise DataError(source.name, None, None, "the file holds no label rows")
    keys = [str(r[0]) for r in con.sql(f"DESCRIBE SELECT * FROM read_json({path}, format='newline_delimited', "
                                       f"sample_size={_KEY_SAMPLE}, maximum_depth=1)").fetchall()]
    unknown = [k for k in keys if k not in known]
    if unknown:
        raise _unknown_column(source, _first_row_with(source, unknown[0]), unknown[0], known)
    columns = "{" + ", ".join(f"{_quote(c)}: 'VARCHAR'" for c in known) + "}"
    nested = " ".join(f"WHEN left(ltrim({c}), 1) IN ('[', '{{') AND json_valid({c}) "
                      f"AND json_type({c}) IN ('ARRAY', 'OBJECT') THEN {_quote(c)}" for c in _ID_COLUMNS)
    row = "ordinality - 1" if located else "NULL::BIGINT"
    return (f"SELECT {', '.join(known)}, CASE {nested} END AS _bad, {index} AS _file, {row} AS _row "
            f"FROM read_json({path}, format='newline_delimited', columns={columns})"
            + (" WITH ORDINALITY" if located else ""))


def _path(index: int) -> str:
    """The path of source ``index``, bound (:func:`_bind`), as a table function's argument."""
    return f"{_var('pg_paths')}[{int(index) + 1}]"


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
    if spec.scale == "ordinal":
        for c in spec.categories or ():
            try:
                float(c)
            except ValueError:
                raise DataError("--categories", None, None, f"{_short(c)} is not a number (ordinal scale)") from None
    try:
        return _load(sources, spec, located=False)
    except _Unlocated:
        # Something is wrong in a JSONL or CSV file read without row numbers: read again, numbered, to name it.
        return _load(sources, spec, located=True)


class _Unlocated(Exception):
    """A problem was found on a row read without its row number (see :func:`_source_sql`)."""


def _load(sources: Sequence[Source], spec: LabelSpec, *, located: bool) -> LabelImport:
    con = duckdb.connect(config={"autoinstall_known_extensions": False, "autoload_known_extensions": False})
    try:
        _bind(con, spec, sources)
        queries = []
        for i, source in enumerate(sources):
            try:
                queries.append(_source_sql(con, source, i, spec.stage, located=located))
            except duckdb.Error as exc:
                raise _read_error(source, exc) from None
        _materialise(con, sources, queries, spec)
        counts = dict(con.sql("SELECT _file, count(*) FROM vl GROUP BY _file").fetchall())
        for i, source in enumerate(sources):
            if not counts.get(i):
                raise DataError(source.name, None, None, "the file holds no label rows")
        check = _Checker(con, sources)
        _check_rows(check, spec)
        filled = _check_items(check, spec)
        _check_duplicates(check)
        result = LabelImport(spec=spec, con=con, files={s.name: int(counts[i]) for i, s in enumerate(sources)},
                             run_ids={s.name: run_id_for(s, spec) for s in sources})
        result.tables = _build(con, spec, sources, result.run_ids, filled)
        result.item_kind = _item_kind(check, spec)
        return result
    except BaseException:
        con.close()
        raise


def _item_kind(check: _Checker, spec: LabelSpec) -> ItemKind:
    """The dataset's one item kind (its record holds one scale): fixed by the stage, or at stage 3 by its items.

    Raises:
        DataError: A stage-3 import mixes pairs and single responses (named at the first item of the fewer).
    """
    if spec.stage != "response":
        return "verification" if spec.stage == "extraction" else "relevance"
    pairs, total = check.con.execute("SELECT count(*) FILTER (WHERE is_pair), count(*) FROM temp.it").fetchall()[0]
    if 0 < pairs < total:
        fewer_pairs = 2 * int(pairs) < int(total)
        hit = check.first("SELECT _file, _row, item_id FROM vl WHERE is_pair = ?", [fewer_pairs])
        assert hit is not None
        kind, other = ("a pair", "single responses") if fewer_pairs else ("a single response", "pairs")
        raise check.error(hit[0], hit[1], "response_a" if fewer_pairs else "response",
                          f"item {_short(hit[2])} is {kind} but most items of dataset {_short(spec.dataset)} are "
                          f"{other}: a dataset holds one item kind (import the others under another --dataset)")
    return "pairwise" if pairs else "single"


def _spaceless(column: str) -> str:
    """SQL for ``trim(column)``, cheaper on the usual value.

    trim() strips spaces only, so a value that neither starts nor ends with one is its own trim, and that
    test is cheaper than the copy trim() makes of every value. (``_lt`` is the label's.)
    """
    return f"CASE WHEN starts_with({column}, ' ') OR ends_with({column}, ' ') THEN trim({column}) ELSE {column} END"


def _materialise(con: duckdb.DuckDBPyConnection, sources: Sequence[Source], queries: list[str],
                 spec: LabelSpec) -> None:
    """Read every source once into ``vl`` (Arrow): normalised text, the stored label, each row's problem.

    One pass over the files: every per-row check is a column here, so validation costs one scan, not one
    per rule.
    """
    norm = []
    for c in _known(spec.stage):
        # Empty text counts as absent (CSV has no null); ids, names and context are trimmed.
        norm.append(f"nullif({c}, '') AS {c}" if c in ("conversation", "label", "reason")
                    else f"nullif({_spaceless(c)}, '') AS {c}")
    kinds = ", ".join(map(_quote, RATER_KINDS))
    response_kind = ""
    if spec.stage == "response":
        allowed = ", ".join(map(_quote, RESPONSE_KINDS))
        response_kind = (f"WHEN response_kind IS NOT NULL AND lower(response_kind) NOT IN ({allowed}) "
                         "THEN 'response_kind'")
    # Only what later steps read is kept: user_key, cond and kind replace user_id, condition and rater_kind.
    kept = ", ".join(c for c in _known(spec.stage) if c not in ("user_id", "condition", "rater_kind"))
    sql = f"""
        SELECT _file, _row, {kept}, user_key, cond, kind, is_pair, is_yes_no, stored,
            CASE WHEN _bad IS NOT NULL THEN _bad WHEN item_id IS NULL THEN 'missing:item_id'
                 WHEN rater IS NULL THEN 'missing:rater' WHEN label IS NULL OR _lt = '' THEN 'missing:label'
                 WHEN kind NOT IN ({kinds}) THEN 'rater_kind' {response_kind}
                 WHEN stored IS NULL THEN '(scale)' END AS problem
        FROM (SELECT *, {_label_sql(spec)} AS stored FROM (
            SELECT *, {_shape_sql(spec)}, coalesce(user_id, item_id) AS user_key, coalesce(condition, '') AS cond,
                   lower(coalesce(rater_kind, 'human')) AS kind
            FROM (SELECT _file, _row, _bad, {', '.join(norm)}, {_spaceless('label')} AS _lt
                  FROM ({' UNION ALL '.join(queries)}))
            WINDOW w AS (PARTITION BY item_id)))"""
    try:
        # Held as Arrow, not as a temporary table: DuckDB fills an Arrow table ~30% faster than its own table
        # storage and scans it in place (zero copy) in each later step; measured 0.35 s of a 1.9 s import.
        # Streamed batch by batch into Arrow: the result is never held twice (a smaller, faster working set).
        con.register("vl", con.sql(sql).to_arrow_reader(122_880).read_all())
    except duckdb.Error as exc:
        for source, query in zip(sources, queries, strict=True):  # which file: read each alone
            try:
                con.sql(f"SELECT count(*) FROM ({query})").fetchall()
            except duckdb.Error as file_exc:
                raise _read_error(source, file_exc) from None
        raise DataError(sources[0].name if len(sources) == 1 else "(label files)", None, None,
                        str(exc).strip().splitlines()[0][:300]) from None


class _Checker:
    """Runs validation queries over ``vl`` and turns a hit into a located DataError.

    A hit on a row read without its number (``_row`` NULL) raises :class:`_Unlocated` instead: the
    caller reads the files again with row numbers, and the same check then names the first such row.
    """

    def __init__(self, con: duckdb.DuckDBPyConnection, sources: Sequence[Source]) -> None:
        self.con, self.sources = con, sources

    def error(self, file: int, row: int | None, column: str | None, message: str) -> DataError:
        source = self.sources[file]
        if row is None:
            raise _Unlocated
        return DataError(source.name, _where(source, row), column, message)

    def at(self, file: int, row: int | None) -> str:
        source = self.sources[file]
        if row is None:
            raise _Unlocated
        return f"{source.name}:{_where(source, row)}"

    def first(self, sql: str, params: list[Any] | None = None) -> tuple[Any, ...] | None:
        rows = self.con.execute(sql + " ORDER BY _file, _row LIMIT 1", params or []).fetchall()
        return rows[0] if rows else None


def _check_rows(check: _Checker, spec: LabelSpec) -> None:
    response_kind = "response_kind" if spec.stage == "response" else "NULL"
    hit = check.first(f"SELECT _file, _row, problem, label, is_pair, kind, {response_kind} FROM vl "
                      "WHERE problem IS NOT NULL")
    if not hit:
        return
    file, row, problem, label, is_pair, kind, response_kind = hit
    if problem == "(row)":
        raise check.error(file, row, None, "expected a JSON object")
    if problem.startswith("missing:"):
        raise check.error(file, row, problem.split(":", 1)[1], "missing or empty (required)")
    if problem == "rater_kind":
        raise check.error(file, row, "rater_kind", f"unknown rater kind {_short(kind)} "
                                                   f"(one of {', '.join(RATER_KINDS)})")
    if problem == "response_kind":
        raise check.error(file, row, "response_kind", f"{_short(response_kind)} is not personalised or generic")
    if problem == "(scale)":
        cats = PAIRWISE_LABELS if is_pair else _categories(spec)
        expected = f"one of {', '.join(cats)}" if cats is not None else "a number"
        scale = "pairwise" if is_pair else spec.scale
        hint = "" if is_pair else _zero_one_hint(cats, label) or ("" if spec.categories else _hint(spec))
        raise check.error(file, row, "label",
                          f"{_short(label)} is outside the {scale} scale (expected {expected}{hint})")
    raise check.error(file, row, problem, "expected a string or a number")


def _check_items(check: _Checker, spec: LabelSpec) -> dict[str, bool]:
    """Context and user are facts of the item: every row that gives them must agree (checked on ``it``).

    Returns:
        Per context column (and ``user_key``), whether any row fills it.
    """
    con = check.con
    context = CONTEXT[spec.stage]
    sid = _item_hash(_var("pg_dataset"), _var("pg_stage"), "item_id")
    # A column no row fills (a file without context, users that are their items) can hold no conflict: its
    # per-item min/max, string aggregates over every row, are skipped (a third of this step when all are absent).
    *given, keys = con.execute(f"SELECT bool_or(user_key <> item_id), {', '.join(f'count({c}) > 0' for c in context)}, "
                               "list(DISTINCT hash(rater, cond)) FROM vl").fetchall()[0]
    filled = dict(zip(("user_key", *context), (bool(g) for g in given), strict=True))
    values = ["min(user_key) AS user_id" if filled["user_key"] else "item_id AS user_id"]
    values += [f"max({c}) AS {c}" if filled[c] else f"NULL::VARCHAR AS {c}" for c in context]
    conflicts = [f"coalesce(min({c}) <> max({c}), FALSE)" if filled[c] else "FALSE" for c in ("user_key", *context)]
    shape = ("bool_or(is_pair) AS is_pair, bool_or(is_yes_no) AS is_yes_no" if spec.stage == "response"
             else "FALSE AS is_pair, FALSE AS is_yes_no")
    con.execute(f"""CREATE TEMP TABLE it AS SELECT item_id AS source_id, {sid} AS sid, {', '.join(values)},
        [{', '.join(conflicts)}] AS conflicts, {shape}, min({_ORD}) AS first_at,
        {_pair_conflict_sql(spec)} AS pair_conflict, {_maybe_twice_sql(keys or [])} AS maybe_twice
        FROM vl GROUP BY item_id""")
    hit = con.execute("SELECT source_id, conflicts, pair_conflict FROM it "
                      "WHERE list_bool_or(conflicts) OR pair_conflict IS NOT NULL ORDER BY first_at LIMIT 1").fetchall()
    if not hit:
        if spec.stage == "extraction":
            for file, row, text in con.sql(f"SELECT arg_min(_file, {_ORD}), arg_min(_row, {_ORD}), conversation "
                                           "FROM vl "
                                           "WHERE conversation IS NOT NULL GROUP BY conversation").fetchall():
                parse_conversation(text, lambda msg, f=file, r=row: check.error(f, r, "conversation", msg))
        return filled
    item, conflicts, pair_conflict = hit[0]
    if pair_conflict is not None:
        column, message = pair_conflict.split(":", 1)
        file, row = check.first(f"SELECT _file, _row FROM vl WHERE item_id = ? AND {column} IS NOT NULL", [item]) \
            or check.first("SELECT _file, _row FROM vl WHERE item_id = ?", [item]) or (0, 0)
        raise check.error(file, row, column, f"item {_short(item)} {message}")
    c = ("user_key", *context)[conflicts.index(True)]
    rows = con.execute(f"SELECT _file, _row, {c} FROM vl WHERE item_id = ? AND {c} IS NOT NULL ORDER BY {_ORD}",
                       [item]).fetchall()
    first = rows[0]
    file, row, _ = next(r for r in rows if r[2] != first[2])
    column = "user_id" if c == "user_key" else c
    raise check.error(file, row, column, f"item {_short(item)} has another {column} at {check.at(first[0], first[1])}")


def _maybe_twice_sql(keys: list[int]) -> str:
    """Per item, TRUE when it may hold a (rater, condition) twice: fewer distinct key hashes than labels.

    ``keys`` are the distinct hashes of (rater, condition) in the files. With at most 64 of them (the usual
    case) each is one bit of a mask and an item's labels are OR-ed: far cheaper than collecting them in a
    list. A hash shared by two keys only flags an item for the exact check (:func:`_check_duplicates`), never
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
    return (f"CASE WHEN ({a} OR {b}) AND {one} THEN 'response:gives both a single response and a pair "
            f"(response_a/response_b)' WHEN {a} <> {b} THEN 'response_b:gives only one of response_a/response_b "
            "(a pair needs both)' END")


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
    """SQL expression of the stored label (NULL = outside the scale); pairwise items always read A/B/tie.

    Declared categories are bound (:func:`_bind`): a label is stored as the category it matches, looked up
    in the bound lists, so no category text is ever part of the SQL.
    """
    cats = _categories(spec)
    values = _var("pg_cat_values")
    if spec.scale == "ordinal":
        number = "TRY_CAST(_lt AS DOUBLE)"
        if cats is None:
            base = f"CASE WHEN {number} IS NULL THEN NULL ELSE _lt END"
        else:
            base = f"{values}[list_position({_var('pg_cat_numbers')}, {number})]"
    elif cats is None:
        base = "_lt"
    else:
        base = f"{values}[list_position({_var('pg_cat_keys')}, lower(_lt))]"
    if spec.stage != "response":
        return base
    pair = " ".join(f"WHEN lower(_lt) = {_quote(c.lower())} THEN {_quote(c)}" for c in PAIRWISE_LABELS)
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
              else str(spec.categories is not None and {c.lower() for c in spec.categories} <= {"yes", "no"}).upper())
    paired = "bool_or(response_a IS NOT NULL OR response_b IS NOT NULL) OVER w"
    single = "bool_or(response IS NOT NULL) OVER w"
    is_pair = f"({paired} OR (NOT {single} AND {pairish}))"
    return f"{is_pair} AS is_pair, (NOT {is_pair} AND {yes_no}) AS is_yes_no"


def _zero_one_hint(cats: tuple[str, ...] | None, label: object) -> str:
    # 0/1 labels on a yes/no scale are refused rather than read as no/yes: which of 0 and 1 means "yes" is the
    # file's convention, not ours to guess; the user writes yes/no, or keeps 0/1 as its own scale.
    if cats is None or {c.lower() for c in cats} != set(RELEVANCE_LABELS) or str(label).strip() not in ("0", "1"):
        return ""
    return "; 0/1 labels are not read as no/yes: write yes/no, or import with --categories 0,1"


def _hint(spec: LabelSpec) -> str:
    return "; --categories changes them" if spec.stage in STAGE_CATEGORIES and spec.scale == "nominal" else ""


def _check_duplicates(check: _Checker) -> None:
    # On the (usual) clean path the per-item grouping that built ``it`` has already looked: an item with
    # fewer distinct (rater, condition) hashes than labels may hold one twice (or two keys share a hash).
    if not check.con.sql("SELECT coalesce(bool_or(maybe_twice), FALSE) FROM it").fetchall()[0][0]:
        return
    hit = check.first(f"""
        SELECT _file, _row, item_id, rater, cond, first_file, first_row FROM (
            SELECT *, row_number() OVER w AS n, first_value(_file) OVER w AS first_file,
                   first_value(_row) OVER w AS first_row
            FROM vl WINDOW w AS (PARTITION BY item_id, rater, cond ORDER BY {_ORD}))
        WHERE n = 2""")
    if hit is None:
        return  # two keys shared a hash: no duplicate
    cond = f" under condition {_short(hit[4])}" if hit[4] else ""
    raise check.error(hit[0], hit[1], "rater", f"rater {_short(hit[3])} labels item {_short(hit[2])}{cond} twice "
                                               f"(first at {check.at(hit[5], hit[6])})")


def _item_hash(*parts: str) -> str:
    # Stable across DuckDB versions: sha256 of the parts joined by a unit separator, like records.item_id.
    return f"substr(sha256(concat_ws(chr(31), {_quote(ID_TAG)}, {', '.join(parts)})), 1, 20)"


def _build(con: duckdb.DuckDBPyConnection, spec: LabelSpec, sources: Sequence[Source],
           run_ids: dict[str, str], filled: dict[str, bool]) -> dict[str, pa.Table | str]:
    """Stage each store table's rows as a temporary view over ``vl`` and ``it`` (see :class:`LabelImport`).

    Views, not tables: the store reads each once, straight into its own tables (a million labels
    copied into Arrow and back cost a fifth of the import).
    """
    ds, st = _var("pg_dataset"), _var("pg_stage")
    # Each label's run is its file's: an index into the bound list of run ids, not a join over every label.
    con.execute("SET VARIABLE pg_run_ids = CAST(? AS VARCHAR[])", [[run_ids[s.name] for s in sources]])
    run_of_file = f"{_var('pg_run_ids')}[_file + 1]"
    prompt_index = ("CASE WHEN prompt IS NULL THEN NULL ELSE "
                    "CAST('0x' || substr(sha256(prompt), 1, 7) AS INTEGER) END")
    has_prompt = spec.stage in ("relevance", "response")
    has_profile = filled.get("profile", False)  # extraction items have no profile
    # A profile is the item's context (kept in its payload); the user's profile only when all its items agree.
    user_profile = "CASE WHEN count(DISTINCT profile) = 1 THEN max(profile) END" if has_profile else "NULL::VARCHAR"
    views = {
        "labels": f"""
            SELECT it.sid AS item_id, rater, kind AS rater_kind, cond AS condition, stored AS label,
                   CASE WHEN stored IS DISTINCT FROM label THEN label END AS raw, reason, NULL::VARCHAR AS error,
                   {run_of_file} AS run_id, NULL::VARCHAR AS meta
            FROM temp.vl JOIN temp.it ON vl.item_id = it.source_id""",
        "items": f"""
            SELECT sid AS item_id, {ds} AS dataset, {st} AS stage, user_id,
                   {prompt_index if has_prompt else 'NULL::INTEGER'} AS prompt_index,
                   {'attribute' if spec.stage != 'response' else 'NULL::VARCHAR'} AS attribute,
                   NULL::BIGINT AS position, {_payload_sql(spec)} AS payload
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
        con.execute(f"CREATE TEMP VIEW staged_{table} AS {sql}")
        tables[table] = f"temp.staged_{table}"
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


