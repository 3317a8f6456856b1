"""Every dashboard page under Streamlit's AppTest, on the real Re-Centering data and on empty stores."""

from __future__ import annotations

import re
from pathlib import Path

import duckdb
import pytest
from streamlit.testing.v1 import AppTest

from personagap import store
from personagap.analysis.diagnosis import diagnose_db
from personagap.dashboard import queries

APP = Path(__file__).resolve().parents[1] / "dashboard" / "app.py"
PAGES = {
    "page_overview.py": "Overview",
    "page_stage1.py": "Stage 1",
    "page_stage2.py": "Stage 2",
    "page_stage3.py": "Stage 3",
    "page_agreement.py": "Agreement matrix",
    "page_disagreements.py": "Disagreements",
    "page_runs.py": "Runs",
}
INJECTION = "'; DROP TABLE labels; --"


def _open(db: Path, page: str, monkeypatch: pytest.MonkeyPatch) -> AppTest:
    monkeypatch.setenv("PERSONAGAP_DB", str(db))
    at = AppTest.from_file(str(APP), default_timeout=120).run()
    if page != "page_overview.py":
        at.switch_page(page).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _text(at: AppTest) -> str:
    parts = [e.value for kind in ("title", "markdown", "caption", "info", "warning", "error", "success", "subheader")
             for e in getattr(at, kind)]
    parts += [m.label + " " + str(m.value) for m in at.metric]
    return "\n".join(str(p) for p in parts)


@pytest.fixture
def empty_db(tmp_path: Path) -> Path:
    db = tmp_path / "empty.duckdb"
    store.connect(db).close()  # schema, no rows
    return db


@pytest.mark.parametrize("page", list(PAGES))
def test_every_page_renders_real_data(recenter_db: Path, page: str, monkeypatch: pytest.MonkeyPatch):
    at = _open(recenter_db, page, monkeypatch)
    text = _text(at)
    assert PAGES[page] in at.title[0].value
    assert "is empty" not in text and "No PersonaGap database" not in text
    assert not at.error or page == "page_overview.py"  # the Overview's verdict is the only error box


@pytest.mark.parametrize("page", list(PAGES))
@pytest.mark.parametrize("which", ["empty", "missing"])
def test_every_page_guides_on_an_empty_or_missing_store(empty_db: Path, tmp_path: Path, page: str, which: str,
                                                        monkeypatch: pytest.MonkeyPatch):
    db = empty_db if which == "empty" else tmp_path / "nothing-here.duckdb"
    at = _open(db, page, monkeypatch)
    text = _text(at)
    assert "personagap import recenter" in text
    assert ("is empty" if which == "empty" else "No PersonaGap database") in text
    assert not db.exists() or which == "empty"  # the dashboard never creates a file


def test_a_file_that_is_not_a_store_shows_an_error_not_a_traceback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    db = tmp_path / "other.duckdb"
    duckdb.connect(str(db)).close()
    at = _open(db, "page_overview.py", monkeypatch)
    assert "not a PersonaGap database" in at.error[0].value


def test_overview_states_the_failing_stage(recenter_db: Path, monkeypatch: pytest.MonkeyPatch):
    at = _open(recenter_db, "page_overview.py", monkeypatch)
    d = diagnose_db(recenter_db)
    # The verdict box: an error when a stage is named, an info box when the CIs cannot tell.
    verdict = (at.error if d.worst_stage else at.info)[0].value
    assert "stage 2 (relevance)" in verdict and "kappa" in verdict
    text = _text(at)
    assert ("⚠️ fails most" in text) == (d.worst_stage is not None)
    assert "Human ceiling" in text and "Over-selection" in text
    assert "Stage 1 has human labels but no judge labels yet" in text
    assert len(at.dataframe) == 1 and len(at.dataframe[0].value) == 6  # 2 stage-2 judges + 4 pilot judges


def test_stage2_page_shows_judges_charts_and_pilot_agreement(recenter_db: Path, monkeypatch: pytest.MonkeyPatch):
    at = _open(recenter_db, "page_stage2.py", monkeypatch)
    text = _text(at)
    assert "Krippendorff" in text and "Confusion heatmaps" in text and "Position and length bias" in text
    judges = at.dataframe[0].value
    assert {"gpt-5.4", "google_gemma-4-31b-it"} <= set(judges["judge"])
    charts = at.get("vega_lite_chart")
    assert len(charts) >= 4  # kappa, yes-rates, confusion heatmaps, bias


def test_stage3_without_labels_says_so(recenter_db: Path, monkeypatch: pytest.MonkeyPatch):
    text = _text(_open(recenter_db, "page_stage3.py", monkeypatch))
    assert "human labels to compare judges with" in text


def test_agreement_matrix_covers_humans_and_judges(recenter_db: Path, monkeypatch: pytest.MonkeyPatch):
    at = _open(recenter_db, "page_agreement.py", monkeypatch)
    choices = queries.matrix_choices(recenter_db)
    most = choices.iloc[int(choices["raters"].to_numpy().argmax())]
    assert at.selectbox[0].value == f"{most['stage']} · {most['dataset']}"  # the dataset with most raters
    at.selectbox[0].set_value("relevance · recenter-pilot").run()
    summary = at.dataframe[0].value
    assert "human–judge" in set(summary["pairs"])
    # Only blind humans are raters of the matrix (comparable.py): anchored pilot annotators never appear.
    labels = queries.agreement_labels(recenter_db, "relevance", "recenter-pilot")
    assert set(labels[labels["rater_kind"] == "human"]["rater"]) == {"annotator_08"}


def test_disagreement_browser_finds_gpt_yes_human_no(recenter_db: Path, monkeypatch: pytest.MonkeyPatch):
    at = _open(recenter_db, "page_disagreements.py", monkeypatch)
    at.selectbox(key="dis_dataset").set_value("recenter-stage2")
    at.selectbox(key="dis_judge").set_value("gpt-5.4")
    at.selectbox(key="dis_kind").set_value("judge_yes_human_no").run()
    assert not at.exception
    expected = queries.count_disagreements(recenter_db, queries.DisagreementFilter(
        dataset="recenter-stage2", judge="gpt-5.4", kind="judge_yes_human_no"))
    assert expected > 100
    assert f"**{expected:,}** matching judge labels" in _text(at)
    page = at.dataframe[0].value
    assert len(page) == 25 and set(page["judge"]) == {"gpt-5.4"}
    assert set(page["judge_label"]) == {"yes"} and set(page["human_label"]) == {"no"}
    # The opened case is whole: attribute, prompt, profile, every human and judge label with its reason.
    text = _text(at)
    assert "Attribute judged" in text and "Prompt" in text and "User profile" in text
    codes = [c.value for c in at.code]
    assert page.iloc[0]["attribute"] in codes
    assert any(len(c) > 20 for c in codes[1:])  # prompt text from `prompts`
    assert "Human labels (1)" in text and "Judge labels (2)" in text
    assert any(e.label.startswith("gpt-5.4: yes") for e in at.expander)
    # Page 2 holds different rows.
    at.number_input(key="dis_page").set_value(2).run()
    key = ["user_id", "prompt_index", "attribute"]
    page2 = at.dataframe[0].value
    assert len(page2) == 25
    assert set(page2[key].itertuples(index=False)).isdisjoint(set(page[key].itertuples(index=False)))


@pytest.mark.parametrize("field", ["dis_text", "dis_user"])
def test_injection_strings_in_filters_change_nothing(recenter_db: Path, field: str, monkeypatch: pytest.MonkeyPatch):
    before = queries.db_state(recenter_db)
    at = _open(recenter_db, "page_disagreements.py", monkeypatch)
    at.text_input(key=field).input(INJECTION).run()
    assert not at.exception
    assert "**0** matching judge labels" in _text(at)
    at.text_input(key=field).input("x' OR '1'='1").run()
    assert "**0** matching judge labels" in _text(at)
    assert queries.db_state(recenter_db) == before


def test_runs_page_compares_two_runs(recenter_db: Path, monkeypatch: pytest.MonkeyPatch):
    at = _open(recenter_db, "page_runs.py", monkeypatch)
    # The default pair shares items (the two runs with the most items in common), and no picker entry says nan.
    first = {m.label: m.value for m in at.metric}
    assert int(first["Shared items"].replace(",", "")) > 0
    options = at.selectbox(key="run_a").options
    assert options and not any(re.search(r"\bnan\b|\bNone\b", str(o)) for o in options)
    runs = at.dataframe[0].value
    assert len(runs) == 28
    ids = runs.set_index("rater")
    stage2 = runs[runs["source"].str.contains("stage2/llm_relevance")]
    gpt = stage2[stage2["rater"] == "gpt-5.4"]["run_id"].iloc[0]
    gemma = stage2[stage2["rater"] == "google_gemma-4-31b-it"]["run_id"].iloc[0]
    assert len(ids) == 28
    at.selectbox(key="run_a").set_value(gpt)
    at.selectbox(key="run_b").set_value(gemma).run()
    assert not at.exception
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Shared items"] == "2,924"
    assert 0 < int(metrics["Same label"].replace(",", "")) < 2924


def test_refresh_button_rereads(recenter_db: Path, monkeypatch: pytest.MonkeyPatch):
    at = _open(recenter_db, "page_overview.py", monkeypatch)
    at.sidebar.button[0].click().run()
    assert not at.exception and "stage 2 (relevance)" in (at.error or at.info)[0].value


def test_dashboard_command_binds_loopback_unless_asked(tmp_path: Path):
    from personagap.commands.dashboard import dashboard_env, streamlit_command

    cmd = streamlit_command(tmp_path / "x.duckdb", port=9999)
    assert cmd[cmd.index("--server.address") + 1] == "127.0.0.1"
    assert cmd[cmd.index("--server.port") + 1] == "9999"
    other = streamlit_command(tmp_path / "x.duckdb", host="0.0.0.0")
    assert other[other.index("--server.address") + 1] == "0.0.0.0"
    assert dashboard_env(tmp_path / "x.duckdb")["PERSONAGAP_DB"] == str((tmp_path / "x.duckdb").resolve())


@pytest.mark.parametrize("page", list(PAGES))
def test_no_table_cell_shows_none_or_nan(recenter_db: Path, page: str, monkeypatch: pytest.MonkeyPatch):
    at = _open(recenter_db, page, monkeypatch)
    for frame in at.dataframe:
        value = frame.value
        cells = value.astype(object)
        assert not cells.isna().any().any(), f"{page}: a missing value would show as None/nan: {value.head()}"
        assert not cells.map(lambda v: str(v) in ("None", "nan", "NaN")).any().any(), page


def test_an_unparseable_judge_answer_shows_as_unparseable_never_nan(recenter_db_copy: Path,
                                                                    monkeypatch: pytest.MonkeyPatch):
    db = recenter_db_copy
    with duckdb.connect(str(db)) as con:
        item = con.execute("SELECT item_id FROM items WHERE dataset = 'recenter-stage2' ORDER BY item_id LIMIT 1"
                           ).fetchall()[0][0]
        con.execute("INSERT INTO labels VALUES (?, 'broken-judge', 'llm', '', NULL, 'maybe?', NULL, "
                    "'unparseable: no yes/no', 'broken-run', NULL)", [item])
    at = _open(db, "page_disagreements.py", monkeypatch)
    at.selectbox(key="dis_judge").set_value("broken-judge")
    at.selectbox(key="dis_kind").set_value("judge_failed").run()
    assert not at.exception
    assert "**1** matching judge labels" in _text(at)
    labels = [e.label for e in at.expander]
    assert "broken-judge: unparseable (unparseable: no yes/no)" in labels
    assert not any("nan" in label.split(": ", 1)[-1] for label in labels)
    table = at.dataframe[0].value
    assert table.iloc[0]["judge_label"] == "(unparseable)"


def test_stage2_page_says_whether_a_judge_can_replace_humans(recenter_db: Path, monkeypatch: pytest.MonkeyPatch):
    """The alternative-annotator test and the corrected estimates, as the CLI report computes them, on the page."""
    from personagap.stages.relevance import report_relevance

    at = _open(recenter_db, "page_stage2.py", monkeypatch)
    frames = {tuple(d.value.columns): d.value for d in at.dataframe}
    (tests,) = [f for cols, f in frames.items() if "advantage probability" in cols]
    (estimates,) = [f for cols, f in frames.items() if "Rogan–Gladen" in cols]
    report = report_relevance(recenter_db)
    expected = {(t["judge"], t["dataset"], t["humans"]): t for t in report.alt_test}
    assert len(tests) == len(expected) and len(estimates) == len(report.estimates)
    for row in tests.to_dict("records"):
        t = expected[(row["judge"], row["dataset"], row["humans"])]
        if t.get("applicable", True):
            assert row["verdict"] == ("passes" if t["passed"] else "does not pass")
            assert row["winning rate"] == f"{t['winning_rate']:.2f}" and row["items"] == f"{t['n_items']:,}"
        else:
            assert row["verdict"].startswith("not applicable") and t["reason"] in row["verdict"]
    # Pilot: blind and anchored humans are separate rows, never one.
    pilot = tests[tests["dataset"] == "recenter-pilot"]
    assert set(pilot["humans"]) == {"blind", "anchored"}
    for frame in (tests, estimates):
        cells = " ".join(frame.astype(str).to_numpy().ravel())
        assert "None" not in cells and "nan" not in cells
