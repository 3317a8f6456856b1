"""Issue 31: the scale rules of personagap/scales.py (coercion and checks of labels on a dataset's scale)."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from personagap.analysis.headline import headline_metric
from personagap.records import DatasetScale
from personagap.scales import alpha_level, as_scale, level_value, on_scale, on_scale_mask, stored_scale

_WORDS = st.text(alphabet="abcxyz", min_size=1, max_size=4)
_NOMINAL = st.lists(_WORDS, min_size=1, max_size=5, unique=True).map(
    lambda cs: DatasetScale(kind="nominal", categories=tuple(cs)))
_ORDINAL = st.lists(st.integers(-3, 9), min_size=2, max_size=6, unique=True).map(
    lambda vs: DatasetScale(kind="ordinal", categories=tuple(str(v) for v in sorted(vs))))
_SCALES = st.one_of(_NOMINAL, _ORDINAL)
# Stored labels are text (or missing); an ordinal level may be stored as "3" or "3.0".
_LABELS = st.lists(st.one_of(_WORDS, st.integers(-4, 10).map(str), st.integers(-4, 10).map(lambda v: f"{v}.0"),
                             st.none()), max_size=12)


def _old_response_single_on_scale(labels: pd.Series, scale: DatasetScale) -> pd.Series:
    # stages/response_single.py's _on_scale before issue 31 (the oracle on_scale_mask keeps on stored labels).
    if scale.ordinal:
        levels = set(scale.levels())
        return labels.map(lambda v: level_value(v) in levels)
    return labels.astype(str).isin(scale.categories)


@given(_SCALES, _LABELS)
def test_on_scale_keeps_exactly_the_labels_on_the_scale_written_as_the_scale_writes_them(
        scale: DatasetScale, values: list[str | None]) -> None:
    labels = pd.Series(values, dtype=object)
    got = on_scale(labels, scale, strict=False)
    assert got.index.equals(labels.index)
    kept = got.dropna()
    assert set(kept) <= set(scale.categories)
    for raw, out in zip(values, got, strict=True):
        if scale.ordinal and level_value(raw) in scale.levels():
            assert out == scale.categories[scale.levels().index(level_value(raw))]
        elif not scale.ordinal and str(raw) in scale.categories:
            assert out == str(raw)
        else:
            assert pd.isna(out)
    # Idempotent: labels already on the scale stay as they are.
    assert on_scale(kept, scale).tolist() == kept.tolist()


@given(_SCALES, _LABELS)
def test_the_mask_is_what_on_scale_keeps_and_strict_raises_on_anything_else(
        scale: DatasetScale, values: list[str | None]) -> None:
    labels = pd.Series(values, dtype=object)
    mask = on_scale_mask(labels, scale)
    assert mask.dtype == bool
    assert mask.tolist() == on_scale(labels, scale, strict=False).notna().tolist()
    # Behaviour kept: the mask is response_single's former _on_scale on stored (text) labels.
    assert mask.tolist() == _old_response_single_on_scale(labels, scale).tolist()
    if mask.all():
        on_scale(labels, scale)
    else:
        with pytest.raises(ValueError, match="not on the"):
            on_scale(labels, scale)


@given(_SCALES)
def test_a_scale_round_trips_through_its_stored_form_and_as_scale(scale: DatasetScale) -> None:
    assert stored_scale(scale.kind, scale.categories) == scale
    assert as_scale(scale) is scale
    assert as_scale(list(scale.categories)) == DatasetScale(kind="nominal", categories=scale.categories)


@given(_SCALES)
def test_alpha_level_and_the_headline_read_ordinal_the_same_way(scale: DatasetScale) -> None:
    assert alpha_level(scale) == alpha_level(scale.kind) == ("ordinal" if scale.ordinal else "nominal")
    assert (alpha_level(scale) == "ordinal") == (headline_metric(scale) == "weighted_kappa")


def test_pairwise_is_read_at_the_nominal_level_and_a_bad_kind_is_refused() -> None:
    assert alpha_level("pairwise") == "nominal"
    with pytest.raises(ValueError):
        stored_scale("likert", ["1", "2"])


@given(st.one_of(st.integers(-5, 5), st.floats(allow_nan=False, allow_infinity=False, width=32)))
def test_level_value_reads_text_only(number: float) -> None:
    assert level_value(str(number)) == float(str(number))
    assert math.isnan(level_value(number))  # a non-text value is no stored label
    assert math.isnan(level_value(None)) and math.isnan(level_value("yes"))


def test_the_scale_rules_are_defined_once() -> None:
    """No package module but personagap/scales.py defines a scale coercion or spells the pairwise scale."""
    import re

    from tests.support.paths import REPO as repo
    home = repo / "personagap" / "scales.py"
    pattern = re.compile(r'^\s*def _?(as_scale|on_scale|on_scale_mask|level_value|_level|alpha_level|stored_scale)\('
                         r'|DatasetScale\(kind="pairwise"', re.M)
    found = [f"{p.relative_to(repo)}: {m.group(0).strip()}"
             for d in ("analysis", "stages", "judges", "human_data", "dashboard", "personagap")
             for p in sorted((repo / d).rglob("*.py")) if p != home
             for m in pattern.finditer(p.read_text(encoding="utf-8"))]
    assert found == []
