"""A linked pipeline dataset with planted failure rates and a planted cascade: the view gets them back.

The generator draws each stage's human verdicts at known rates; the truth checked is the generating rate (not
the drawn sample's), so a CI that missed it would fail the test. The over-personalisation flags are computed here
from the generator's own records (which answer used which attribute, what humans said of it), not by the view.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from personagap.analysis.pipeline import pipeline_db
from personagap.analysis.pipeline_records import PipelineView
from tests.support.pipe_store import write_store
from tests.support.planted_pipeline import (
    NO_BETTER,
    TRUTH,
    USERS,
)
from tests.support.planted_pipeline import planted as _planted


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> tuple[PipelineView, set[str]]:
    items, labels, flagged = _planted()
    return pipeline_db(write_store(tmp_path_factory.mktemp("plant") / "p.duckdb", items, labels)), flagged


def _inside(row: Any, truth: float) -> bool:
    lo, hi = row.human_ci
    return lo is not None and lo <= truth <= hi


def test_planted_rates_within_their_cis(planted: tuple[PipelineView, set[str]]) -> None:
    view, _ = planted
    for quantity, truth in TRUTH.items():
        (row,) = [r for r in view.rows if r.quantity == quantity and r.input_condition is None]
        assert row.n_users == USERS
        assert _inside(row, truth), (quantity, truth, row.human, row.human_ci)
    for cond, truth in NO_BETTER.items():
        (row,) = [r for r in view.rows if r.quantity == "no_better_than_generic" and r.input_condition == cond]
        assert _inside(row, truth), (cond, truth, row.human, row.human_ci)
    (up,) = [u for u in view.upstream if u.quantity == "no_better_than_generic" and u.stage == 3]
    lo, hi = up.human_ci
    assert lo is not None and hi is not None and lo <= NO_BETTER["pipeline"] - NO_BETTER["oracle"] <= hi


def test_verdict_names_the_planted_worst_stage(planted: tuple[PipelineView, set[str]]) -> None:
    view, _ = planted
    # Planted: stage 3 (0.75 with the pipeline's input) > stage 2 (~0.57) > stage 1 (0.2), far apart at 40 users.
    assert view.worst_stage == 3
    assert view.verdict.startswith("Stage 3 (personalised response) fails most by human verdict")


def test_over_personalisation_flags_exactly_the_planted_ones(planted: tuple[PipelineView, set[str]]) -> None:
    view, flagged = planted
    assert {f["item_id"] for f in view.flagged} == flagged
    assert flagged  # the generator planted some
    oracle = next(c for c in view.cascade if c.input_condition == "oracle")
    # Oracle answers use only human-relevant attributes: flagged only through a stage-1 rejection.
    assert oracle.n_irrelevant == 0 and oracle.n_flagged == oracle.n_rejected


def test_stage2_with_human_accepted_attributes_only() -> None:
    # The stage-2 oracle input: the selector scored only on attributes humans accepted at stage 1, and the
    # difference from all attributes (the part stage 1 causes), paired over users.
    records: list[tuple[str, bool, bool, bool]] = []
    items, labels, _ = _planted(records=records)
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        view = pipeline_db(write_store(Path(folder) / "p.duckdb", items, labels))

    def irrelevant(keep: list[tuple[str, bool, bool, bool]]) -> float:
        picked = [r for r in keep if r[3]]
        return sum(not r[2] for r in picked) / len(picked)

    accepted = [r for r in records if not r[1]]
    (row,) = [r for r in view.rows if r.quantity == "irrelevant_selected" and r.input_condition == "oracle"]
    assert row.human == pytest.approx(irrelevant(accepted)) and row.n_items == len(records)
    assert row.n_human == len(accepted)
    (up,) = [u for u in view.upstream if u.stage == 2 and u.quantity == "irrelevant_selected"]
    assert up.human == pytest.approx(irrelevant(records) - irrelevant(accepted))
    lo, hi = up.human_ci
    assert lo is not None and hi is not None and lo <= up.human <= hi
    # The verdict compares stage 2 on every attribute, never on the oracle rows.
    assert [c for c in view.comparisons if 2 in (c.first, c.second)]
