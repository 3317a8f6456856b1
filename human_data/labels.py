"""Bring your own labels: one file format for every stage, read from JSONL, CSV, Parquet or pandas.

One row per (item, rater) label; the full format, with an example per stage, is in ``docs/formats.md``.

* required: ``item_id``, ``rater``, and ``label`` (or, on a judge's row, ``failure``);
* optional: ``rater_kind`` (``human`` default | ``llm`` | ``trained``), ``user_id`` (the bootstrap's
  cluster, default ``item_id``), ``condition`` (default ``''``, the blind protocol; e.g. ``shown-llm``,
  ``no-profile``), ``reason``, ``confidence``, ``confidence_scale``, ``failure`` (a judge's row without a label: why
  it gave none; stored as a judge run's failure, label NULL and the reason in ``labels.error``);
* optional item context, stored once per item: stage ``extraction``: ``conversation``, ``attribute``;
  stage ``relevance``: ``prompt``, ``attribute``, ``profile``; stage ``response``: ``prompt``, ``profile``,
  and either ``response_a`` + ``response_b`` (pairwise, labels ``A``/``B``/``tie``) or ``response``
  (single), and ``response_kind`` (``personalised``/``generic``).

Why DuckDB reads the files: a million labels validated row by row in Python take longer than DuckDB
takes to parse, check and write them; here every check is one vectorised query over all files at once,
and Python only runs on the offending row (to name its line) and on per-item context.

Every problem raises :class:`~personagap.human_data.DataError` naming file, line (JSONL, CSV) or row
(Parquet, DataFrame) and column; nothing is written then (the caller writes only a fully valid import).

This module loads an import; the pieces: the format (:mod:`.label_format`), reading sources
(:mod:`.label_sources`), validating rows (:mod:`.label_checks`), building the store's rows (:mod:`.label_rows`).
"""

from __future__ import annotations

from collections.abc import Sequence

import duckdb

from personagap.human_data._jsonl import DataError
from personagap.human_data.label_checks import (
    Checker,
    Unlocated,
    check_duplicates,
    check_inferred_categories,
    check_items,
    check_rows,
    item_kind_of,
)
from personagap.human_data.label_format import (
    ASPECTS_PREFIX,
    STAGES,
    LabelImport,
    LabelSpec,
    Origin,
    RatedAspectSpec,
    Scale,
    Source,
    aspects_meta,
    echo,
    parse_aspects,
    run_id_for,
)
from personagap.human_data.label_rows import build_rows
from personagap.human_data.label_sources import bind_values, materialise, read_error, source_sql
from personagap.store.label_import import private_connection, rows_per_file

__all__ = ["ASPECTS_PREFIX", "STAGES", "LabelImport", "LabelSpec", "Origin", "RatedAspectSpec", "Scale", "Source",
           "aspects_meta", "load_label_sources", "parse_aspects"]


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
                raise DataError("--categories", None, None, f"{echo(c)} is not a number (ordinal scale)") from None
    try:
        return _load(sources, spec, located=False)
    except Unlocated:
        # Something is wrong in a JSONL or CSV file read without row numbers: read again, numbered, to name it.
        return _load(sources, spec, located=True)


def _load(sources: Sequence[Source], spec: LabelSpec, *, located: bool) -> LabelImport:
    con = private_connection()
    try:
        bind_values(con, spec, sources)
        queries = []
        for i, source in enumerate(sources):
            try:
                queries.append(source_sql(con, source, i, spec.stage, located=located))
            except duckdb.Error as exc:
                raise read_error(source, exc) from None
        materialise(con, sources, queries, spec)
        counts = rows_per_file(con)
        for i, source in enumerate(sources):
            if not counts.get(i):
                raise DataError(source.name, None, None, "the file holds no label rows")
        check = Checker(con, sources)
        check_rows(check, spec)
        filled = check_items(check, spec)
        check_duplicates(check)
        inferred = check_inferred_categories(check, spec)
        result = LabelImport(spec=spec, con=con, files={s.name: int(counts[i]) for i, s in enumerate(sources)},
                             run_ids={s.name: run_id_for(s, spec) for s in sources}, inferred_categories=inferred)
        result.tables = build_rows(con, spec, sources, result.run_ids, filled)
        result.item_kind = item_kind_of(check, spec)
        return result
    except BaseException:
        con.close()
        raise


