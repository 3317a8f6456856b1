"""Issue 32, item 17: docs/formats.md states the confidence mapping and every condition name the code gives a meaning.

The worked examples of the mapping are computed by the code's one rule (:func:`personagap.confidence.as_probability`),
and every condition constant the reports, the reference rule, the judges and the PRISM importer read is in the
document's table of conditions.
"""

from __future__ import annotations

import re

import pytest

from personagap.analysis.comparable import (
    ANCHORED_MAJORITY,
    BLIND,
    CONVERTED_SHOWN_LLM,
    IN_SAMPLE,
    SHOWN_LLM,
    SHOWN_LLM_RATING,
)
from personagap.confidence import as_probability
from personagap.human_data.prism import PROFILE_VARIANTS, PROMPT_VARIANTS
from personagap.store.response_counts import NO_PROFILE, REVERSED
from tests.support.paths import REPO

DOC = (REPO / "docs" / "formats.md").read_text(encoding="utf-8")


def _section(title: str) -> str:
    start = DOC.index(f"## {title}")
    end = DOC.find("\n## ", start + 1)
    return DOC[start:end if end >= 0 else None]


def test_the_mapping_is_stated_as_the_code_computes_it() -> None:
    text = _section("Confidence: how it becomes a probability")
    assert "p = (c − lo) / (hi − lo)" in text
    examples = re.findall(r"on `(\d+-\d+)`, ((?:[\d.]+ → [\d.]+(?:,\s+)?)+)", text)
    checked = 0
    for scale, pairs in examples:
        for c, p in re.findall(r"([\d.]+) → ([\d.]+)", pairs):
            assert float(as_probability([float(c)], scale)[0]) == pytest.approx(float(p), abs=0.005), (scale, c, p)
            checked += 1
    assert checked >= 4


def test_every_condition_with_a_meaning_is_in_the_table() -> None:
    table = _section("Conditions with a meaning")
    named = set(re.findall(r"`([^`]*)`", table))
    meaningful = {SHOWN_LLM, CONVERTED_SHOWN_LLM, SHOWN_LLM_RATING, ANCHORED_MAJORITY, IN_SAMPLE, NO_PROFILE,
                  "profile", "+with-tie", *PROFILE_VARIANTS.values()}
    assert BLIND == "" and "`''` (empty, the default)" in table
    assert meaningful - named == set()
    assert f"`…{REVERSED}`" in table
    assert {f"+{v}" for v in PROMPT_VARIANTS.values()} - named == set()
