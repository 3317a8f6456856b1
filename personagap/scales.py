"""How labels are read against a dataset's scale (issue 31): coercion and checks, defined here only.

A dataset's scale (:class:`~personagap.records.DatasetScale`) comes from its record
(:func:`personagap.datasets.dataset_records`); this module says what a label *is* on it:

* :data:`PAIRWISE_SCALE` -- the scale of every pairwise dataset;
* :func:`as_scale` -- a scale from a scale or a bare category list (read as nominal);
* :func:`stored_scale` -- a scale from its stored kind and categories (a report row, a record's JSON);
* :func:`on_scale` -- labels written as the scale writes its categories (an ordinal ``3.0`` is the level ``3``),
  raising on (``strict``) or blanking labels off the scale;
* :func:`on_scale_mask` -- which labels :func:`on_scale` keeps (a boolean mask, never raising);
* :func:`level_value` -- a stored label's number on an ordinal scale (NaN when it is none);
* :func:`alpha_level` -- the level Krippendorff's alpha reads a scale at.

Which figure heads a scale is :mod:`personagap.analysis.headline`; the vocabularies are
:mod:`personagap.vocabulary`; the category set of a dataset inferred from its labels is
:func:`personagap.analysis.comparable.categories_for`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Literal, cast

import pandas as pd

from personagap.records import DatasetScale, ScaleKind
from personagap.vocabulary import PAIRWISE_LABELS

__all__ = ["PAIRWISE_SCALE", "AlphaLevel", "alpha_level", "as_scale", "level_value", "on_scale", "on_scale_mask",
           "stored_scale"]

AlphaLevel = Literal["nominal", "ordinal"]

PAIRWISE_SCALE = DatasetScale(kind="pairwise", categories=PAIRWISE_LABELS)
"""The one scale of pairwise items (which answer won): A/B/tie."""


def as_scale(scale: DatasetScale | Iterable[str]) -> DatasetScale:
    """A scale from a :class:`~personagap.records.DatasetScale` or a bare category list (read as nominal)."""
    return scale if isinstance(scale, DatasetScale) else DatasetScale(kind="nominal", categories=tuple(scale))


def stored_scale(kind: str, categories: Iterable[str]) -> DatasetScale:
    """A scale from its stored kind and categories (a report row's ``scale``/``categories``, a record's JSON).

    Raises:
        pydantic.ValidationError: ``kind`` is no scale kind.
    """
    return DatasetScale(kind=cast(ScaleKind, kind), categories=tuple(str(c) for c in categories))


def on_scale(labels: pd.Series, scale: DatasetScale, *, strict: bool = True) -> pd.Series:
    """Labels as the scale writes its categories: an ordinal ``3.0`` is the level stored as ``3``.

    Args:
        labels: Labels (any type; compared as text, ordinal ones as numbers).
        scale: The dataset's scale.
        strict: Raise on a label that is not on the scale; else it becomes missing (NaN), e.g. to keep only
            the labels answering the scale's question.

    Raises:
        ValueError: With ``strict``, a label that is not on the scale (a nominal label outside its categories,
            or an ordinal label that is no level of it).
    """
    text = labels.astype(str)
    if scale.ordinal:
        level_of = {v: c for v, c in zip(scale.levels(), scale.categories, strict=True)}
        text = text.map(lambda v: _level_text(v, level_of))
    known = text.isin(scale.categories)
    if strict and not known.all():
        unknown = sorted({str(t) for t in text[~known]})[:5]  # a missing label (NaN) reads 'nan'
        raise ValueError(f"labels {unknown} are not on the {scale.kind} scale {list(scale.categories)}")
    return text.where(known)


def on_scale_mask(labels: pd.Series, scale: DatasetScale) -> pd.Series:
    """Which labels are on the scale (bool, same index): exactly those :func:`on_scale` keeps; never raises."""
    return on_scale(labels, scale, strict=False).notna()


def level_value(value: object) -> float:
    """A stored (text) label's number, to read it on an ordinal scale: ``"3.0"`` -> 3.0; NaN for anything else.

    Only text is read (labels are stored as text): a missing label or a non-text value is NaN.
    """
    try:
        return float(str(value)) if isinstance(value, str) else float("nan")
    except ValueError:
        return float("nan")


def alpha_level(scale: DatasetScale | ScaleKind | str) -> AlphaLevel:
    """The level Krippendorff's alpha (and the raters' agreement) reads a scale at: its order counts on ordinal."""
    kind = scale.kind if isinstance(scale, DatasetScale) else scale
    return "ordinal" if kind == "ordinal" else "nominal"


def _level_text(text: str, level_of: Mapping[float, str]) -> str:
    # The level's stored spelling when the text is that number, else the text itself (then off the scale).
    try:
        return level_of.get(float(text), text)
    except ValueError:
        return text
