"""The Overview leads with which stage fails (by human verdict); Disagreements filters over-personalised answers.

Streamlit's AppTest on a store with planted rates and cascade (tests/support/planted_pipeline.py's generator): what the
pages say is checked against :func:`personagap.analysis.pipeline.pipeline_db` of the same store.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from personagap.analysis.pipeline import pipeline_db
from personagap.analysis.pipeline_records import PipelineView
from personagap.analysis.pipeline_text import TITLE, figure
from personagap.dashboard.explore import OVER_PERSONALISED
from tests.support.paths import REPO
from tests.support.pipe_store import write_store
from tests.support.planted_pipeline import planted as _planted

APP = REPO / "dashboard" / "app.py"


@pytest.fixture(scope="module")
def planted_db(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, PipelineView]:
    items, labels, _ = _planted()
    db = write_store(tmp_path_factory.mktemp("dash") / "p.duckdb", items, labels)
    return db, pipeline_db(db)


def _open(db: Path, page: str, monkeypatch: pytest.MonkeyPatch) -> AppTest:
    monkeypatch.setenv("PERSONAGAP_DB", str(db))
    at = AppTest.from_file(str(APP), default_timeout=120).run()
    if page != "page_overview.py":
        at.switch_page(page).run()
    else:
        at.run()  # the judges' part: the run the browser's timer asks for once the pipeline view is in
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_overview_opens_with_the_failing_stage(planted_db: tuple[Path, PipelineView],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    db, view = planted_db
    at = _open(db, "page_overview.py", monkeypatch)
    assert at.subheader[0].value == TITLE  # the first section of the page
    assert view.worst_stage == 3 and at.warning[0].value.replace("\\", "") == view.verdict
    table = next(m.value for m in at.markdown if m.value.startswith("| stage |"))
    for row in view.rows:
        # Each stage's headline share: stage 2 over every attribute (its accepted-only rows are in diagnose).
        if (row.quantity in ("rejected_attributes", "irrelevant_selected") and row.input_condition is None) or (
                row.quantity == "no_better_than_generic" and row.input_condition == "pipeline"):
            assert figure(row.human, row.human_ci) in table, row
    assert not re.search(r"\b(None|nan|NaN)\b", table)
    # Then the judges: the section heading comes after the pipeline section.
    assert [h.value for h in at.header] == ["Can your judges tell you? Judge–human agreement per stage"]


def test_a_sessions_first_overview_sends_the_pipeline_view_then_the_judges(planted_db: tuple[Path, PipelineView],
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from personagap.dashboard.overview import JUDGES_TITLE

    db, view = planted_db
    monkeypatch.setenv("PERSONAGAP_DB", str(db))
    at = AppTest.from_file(str(APP), default_timeout=120).run()
    assert not at.exception, [e.value for e in at.exception]
    # The first run: the answer and the judges' heading, nothing of the judges yet.
    assert at.warning[0].value.replace("\\", "") == view.verdict
    assert [h.value for h in at.header] == [JUDGES_TITLE]
    assert [s.value for s in at.subheader] == [TITLE] and not at.error and not at.info
    assert [c.value for c in at.caption if c.value.startswith("Comparing every judge")]
    at.run()  # what the browser's timer asks for: the judges' part, in place of the placeholder
    judges_part = [s.value for s in at.subheader][1:]
    assert len(judges_part) == 3 and (at.error or at.info)  # a scorecard per stage after the diagnosis' verdict
    assert [h.value for h in at.header] == [JUDGES_TITLE]
    assert not [c.value for c in at.caption if c.value.startswith("Comparing every judge")]
    assert at.warning[0].value.replace("\\", "") == view.verdict
    at.run()  # and every later run of this session: the whole page at once
    assert [s.value for s in at.subheader][1:] == judges_part
    assert not [c.value for c in at.caption if c.value.startswith("Comparing every judge")]


def test_disagreements_filters_over_personalised_answers(planted_db: tuple[Path, PipelineView],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    db, view = planted_db
    at = _open(db, "page_disagreements.py", monkeypatch)
    at.toggle(key="dis_overp").set_value(True).run()
    assert not at.exception, [e.value for e in at.exception]
    assert f"**{len(view.flagged):,}** over-personalised answers" in [m.value for m in at.markdown]
    shown = at.dataframe[0].value
    assert set(shown["user_id"]) <= {f["user_id"] for f in view.flagged}
    # Filtering by user keeps exactly that user's flagged answers.
    user = view.flagged[0]["user_id"]
    at.text_input(key="op_user").set_value(user).run()
    mine = [f for f in view.flagged if f["user_id"] == user]
    assert f"**{len(mine):,}** over-personalised answers" in [m.value for m in at.markdown]
    assert len(at.dataframe[0].value) == len(mine)
    assert at.toggle(key="dis_overp").label == OVER_PERSONALISED
