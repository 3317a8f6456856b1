"""Every dashboard page under Streamlit's AppTest, on the real Re-Centering data and on empty stores."""

from __future__ import annotations

import re
from pathlib import Path

import duckdb
import pytest
from streamlit.testing.v1 import AppTest

from personagap import store
from personagap.analysis.diagnosis_store import diagnose_store
from personagap.dashboard import queries
from tests.support.paths import REPO

APP = REPO / "dashboard" / "app.py"

pytestmark = pytest.mark.slow  # every page under AppTest, on the real release: minutes together
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
    else:
        at.run()  # the judges' part: the run the browser's timer asks for once the pipeline view is in
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
    d = diagnose_store(recenter_db).diagnosis
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
    with duckdb.connect(str(recenter_db), read_only=True) as con:
        (stored,) = con.execute("SELECT count(*) FROM runs").fetchone() or (0,)
    assert len(runs) == stored > 0  # every run the store holds, one row each
    ids = runs.set_index("rater")
    stage2 = runs[runs["source"].str.contains("stage2/llm_relevance")]
    gpt = stage2[stage2["rater"] == "gpt-5.4"]["run_id"].iloc[0]
    gemma = stage2[stage2["rater"] == "google_gemma-4-31b-it"]["run_id"].iloc[0]
    assert len(ids) == stored
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


def _alt_test_notes(at: AppTest) -> list[str]:
    """The numbered notes under the alternative-annotator table, as a reader sees them (Markdown escapes undone)."""
    (block,) = [m.value for m in at.markdown if m.value.startswith("**Why a test is not applicable**")]
    items = re.findall(r"^\d+\. (.*)$", block, flags=re.MULTILINE)
    return [re.sub(r"\\(.)", r"\1", item) for item in items]


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
    notes = _alt_test_notes(at)
    assert any(not t.get("applicable", True) for t in report.alt_test)
    for row in tests.to_dict("records"):
        t = expected[(row["judge"], row["dataset"], row["humans"])]
        if t.get("applicable", True):
            # The honest verdict, never the bare winning-rate criterion: anchored humans give "no verdict".
            assert row["verdict"] == t["verdict"]
            assert t["humans"] != "anchored" or row["verdict"] != "passed"
            assert row["winning rate"] == f"{t['winning_rate']:.2f}" and row["items"] == f"{t['n_items']:,}"
        else:
            # A short verdict in the table; the whole reason in the numbered note it points to, with the row's
            # judge, dataset and humans.
            number = re.fullmatch(r"not applicable \(note (\d+)\)", row["verdict"])
            assert number, row["verdict"]
            note = notes[int(number[1]) - 1]
            assert t["reason"].rstrip(".") in note and row["judge"] in note
            assert note.startswith(f"{row['dataset']}, {row['humans']} humans")
    # Pilot: blind and anchored humans are separate rows, never one.
    pilot = tests[tests["dataset"] == "recenter-pilot"]
    assert set(pilot["humans"]) == {"blind", "anchored"}
    for frame in (tests, estimates):
        cells = " ".join(frame.astype(str).to_numpy().ravel())
        assert "None" not in cells and "nan" not in cells


# --------------------------------------------------------------------------- robust panel from the diagnosis

@pytest.fixture(scope="module")
def recenter_prism_db(shared_data: Path, recenter_db: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Re-Centering (yes/no) plus PRISM (A/B/tie, where some judges never say 'tie') in one store."""
    import shutil

    from personagap.stages.response import import_prism

    db = tmp_path_factory.mktemp("recenter-prism") / "store.duckdb"
    shutil.copy(recenter_db, db)
    import_prism(shared_data / "prism_judge", db)
    return db


def _same(a: object, b: object) -> bool:
    if isinstance(a, list | tuple):
        return isinstance(b, list | tuple) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and a != a:
        return isinstance(b, float) and b != b
    return a == b


def _full_reload_panel(db: Path, stage: str, datasets: list[str]) -> list[dict]:
    from tests.support.oracles import panel_rows

    with store.opened(db, read_only=True) as con:
        labels = store.load_labels(con, stage=stage)
    return [r for ds in datasets for r in panel_rows(labels, ds)]


@pytest.mark.parametrize("stage", ["relevance", "response"])
def test_robust_panel_from_the_diagnosis_equals_a_full_reload(recenter_prism_db: Path, stage: str):
    """Every figure of the stage pages' panel is the one panel_rows gives on the stage's reloaded labels."""
    from personagap.dashboard.robust_panel import dataset_categories, needs_recount, stage_panel

    d = diagnose_store(recenter_prism_db).diagnosis
    datasets = sorted({j.dataset for j in d.stage(stage).judges})
    expected = _full_reload_panel(recenter_prism_db, stage, datasets)
    got = stage_panel(recenter_prism_db, d, stage, datasets)
    assert [(r["dataset"], r["judge"]) for r in got] == [(r["dataset"], r["judge"]) for r in expected]
    for want, have in zip(expected, got, strict=True):
        assert set(want) <= set(have)
        assert all(_same(want[k], have[k]) for k in want), [(k, want[k], have[k]) for k in want
                                                          if not _same(want[k], have[k])]
    # One scale per dataset (comparable.categories_for): the diagnosis already scores PRISM's judges that never
    # say 'tie' over A/B/tie, so every panel figure comes straight from it (the recount path is exercised by
    # test_robust_panel_recounts_when_the_diagnosis_used_other_bootstrap_settings).
    reference, scales = queries.panel_reference(recenter_prism_db, stage)
    recount = needs_recount(d, stage, dataset_categories(reference, scales), level=d.ci_level)
    assert recount == []
    if stage == "response":
        never_tie = [j for j in d.stage(stage).judges if not any(row[2] for row in j.confusion)]
        assert never_tie and all(j.categories == ["A", "B", "tie"] for j in never_tie)


def test_robust_panel_recounts_when_the_diagnosis_used_other_bootstrap_settings(recenter_db: Path):
    from personagap.dashboard.robust_panel import stage_panel

    d = diagnose_store(recenter_db).diagnosis
    datasets = sorted({j.dataset for j in d.stage("relevance").judges})
    got = stage_panel(recenter_db, d, "relevance", datasets)
    expected = _full_reload_panel(recenter_db, "relevance", datasets)
    assert len(got) == len(expected)
    for want, have in zip(expected, got, strict=True):
        assert all(_same(want[k], have[k]) for k in want), want["judge"]
    by_judge = {(j.dataset, j.judge): j for j in d.stage("relevance").judges}
    # The one CI rule (a leave-one-user-out jackknife-t) draws no resamples: a diagnosis run with other resample
    # settings has the very same CIs as the recount.
    llm = [r for r in got if r["rater_kind"] == "llm"]
    assert llm and all(_same(r["ac1_ci"], by_judge[(r["dataset"], r["judge"])].ac1_ci) for r in llm)


@pytest.mark.slow
def test_stage3_page_shows_the_panel_figures_of_a_full_reload(recenter_prism_db: Path,
                                                             monkeypatch: pytest.MonkeyPatch):
    at = _open(recenter_prism_db, "page_stage3.py", monkeypatch)
    (table,) = [d.value for d in at.dataframe if "PABAK" in d.value.columns]
    d = diagnose_store(recenter_prism_db).diagnosis
    datasets = sorted({j.dataset for j in d.stage("response").judges})
    expected = _full_reload_panel(recenter_prism_db, "response", datasets)
    assert list(table["judge"]) == [r["judge"] for r in expected]
    for row, want in zip(table.to_dict("records"), expected, strict=True):
        for column, key in (("AC1", "ac1"), ("PABAK", "pabak"), ("MCC", "mcc"), ("kappa", "kappa")):
            value = "—" if want[key] != want[key] else f"{want[key]:.2f}"
            assert row[column].split(" ")[0] == value, (row["judge"], column, row[column], want[key])
