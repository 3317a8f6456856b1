"""Issue 31: one production path per figure, checked against the per-label oracles of ``tests/support/oracles.py``.

The judge rows a frame gives (the dashboard's pilot page) go through the count path
(:func:`personagap.stages.relevance_labels.judge_agreements_from_counts`); they must be the per-label oracle's rows.
The per-label twins must not come back into the package, and the individual blind vote is written once.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from personagap.analysis.agreement import json_safe
from personagap.stages.relevance_labels import judge_agreements
from personagap.store import load_labels, opened
from tests.support import oracles
from tests.support.paths import REPO

PACKAGE_DIRS = ("analysis", "stages", "judges", "human_data", "dashboard", "personagap")


@pytest.mark.parametrize("which", ["blind", "anchored"])
def test_frame_judge_rows_are_the_per_label_rows(recenter_db: Path, which: str) -> None:
    """The pilot's judge rows from a frame's counts: the per-label oracle's rows, blind and anchored."""
    with opened(recenter_db, read_only=True) as con:
        labels = load_labels(con, stage="relevance", dataset="recenter-pilot")
    got = [json_safe(r.model_dump()) for r in judge_agreements(labels, "recenter-pilot", which=which)]  # type: ignore[arg-type]
    want = [json_safe(r.model_dump()) for r in oracles.judge_agreements(labels, "recenter-pilot", which=which)]  # type: ignore[arg-type]
    assert got and got == want


@pytest.mark.parametrize("name", ["relevance_report", "report_extras", "extraction_report", "verdict_counts_frame",
                                  "estimate_rows", "judge_estimates", "majority"])
def test_per_label_twins_live_in_the_tests_only(name: str) -> None:
    """No package module defines a per-label twin of a report figure again (they are oracles in tests/)."""
    defined = [str(p.relative_to(REPO)) for d in PACKAGE_DIRS for p in (REPO / d).rglob("*.py")
               if re.search(rf"^def {name}\((labels|items|verdicts)\b", p.read_text(encoding="utf-8"), re.M)]
    assert defined == []


# The report path's modules (issue 31's scope): each reads the individual human vote through comparable.py.
REPORT_MODULES = ("analysis/robust.py", "analysis/estimates.py", "analysis/aggregated.py", "analysis/panel.py",
                  "stages/relevance.py", "stages/relevance_labels.py", "stages/response.py",
                  "stages/response_single.py", "stages/response_pairwise.py", "stages/extraction.py",
                  "stages/extraction_build.py",
                  "personagap/store/extraction_counts.py", "personagap/store/response_counts.py",
                  "judges/optimize/data.py")


@pytest.mark.parametrize("module", REPORT_MODULES)
def test_individual_human_vote_is_written_once(module: str) -> None:
    """No report module rebuilds "an individual human's label" by hand: comparable.individual_human_sql/_mask do."""
    text = (REPO / module).read_text(encoding="utf-8")
    # SQL: the vote's kind test next to a protocol predicate; pandas: a protocol mask narrowed to kind "human". (Count
    # frames' human rows, already blind in SQL, and other-question conditions are not the vote.)
    assert not re.search(r"rater_kind = ('human'|\$human)", text)
    assert not re.search(r'_human_mask\([\s\S]{0,120}?rater_kind"\] == "human"', text)
