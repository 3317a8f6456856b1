"""Every dashboard page in real headless Chromium (Debian's), served by `personagap dashboard`.

The assertions are on what a person sees: every chart's rendered box is big enough to read, no two
pieces of text overlap, no literal ``None``/``nan`` is on screen, imported Markdown is shown as text
(and fetches nothing), and a screenshot of every page lands in ``test-output/screenshots``.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import duckdb
import pytest

from personagap.dashboard import queries
from tests.support.browser_helpers import (
    SCREENSHOTS,
    browser,
    require_browser,
    screenshot_whole,
    serve_dashboard,
    wait_rendered,
)

pytestmark = pytest.mark.browser

# url path -> texts that prove the page's key content rendered
PAGES = {
    "": ["Overview", "Human ceiling", "Every judge against humans"],
    "stage1": ["Stage 1", "Human verdict mix per extractor"],
    "stage2": ["Stage 2", "Cohen's kappa per judge", "Confusion heatmaps", "Position and length bias",
               "Krippendorff"],
    "stage3": ["Stage 3", "Cohen's kappa per judge", "Confusion heatmaps", "Share choosing the longer answer"],
    "agreement": ["Agreement matrix", "Mean pairwise kappa"],
    "disagreements": ["Disagreements", "matching judge labels", "Judge labels"],
    "runs": ["Runs", "Compare two runs", "Shared items"],
    "annotate": ["Annotate", "Your name"],
}
INJECTION = "'; DROP TABLE labels; --"
MIN_CHART_PX = 150
REMOTE = "http://127.0.0.1:9/"  # nothing listens there; a request to it means Markdown was rendered

# Leaf elements with text in the main area, their boxes, and every pair of them that overlaps.
# Leaf elements with text in the main area and every pair of them whose line boxes overlap (an inline element
# wrapped over two lines has two line boxes; its bounding box would falsely cover its neighbours).
OVERLAPS_JS = """() => {
  const main = document.querySelector('[data-testid="stMain"]');
  const leaves = Array.from(main.querySelectorAll('h1,h2,h3,h4,p,span,label,li,code,td,th,summary,button'))
    .filter(e => e.children.length === 0 && e.textContent.trim() && e.offsetParent !== null)
    // The body of a closed expander is laid out but not shown.
    .filter(e => !(e.closest('details:not([open])') && !e.closest('summary')));
  const boxes = leaves.map(e => [e, Array.from(e.getClientRects()).filter(r => r.width > 1 && r.height > 1)])
    .filter(([e, rs]) => rs.length);
  const hit = (ra, rb) => Math.min(ra.right, rb.right) - Math.max(ra.left, rb.left) > 3
    && Math.min(ra.bottom, rb.bottom) - Math.max(ra.top, rb.top) > 3;
  const out = [];
  for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
    const [a, ra] = boxes[i], [b, rb] = boxes[j];
    if (a.contains(b) || b.contains(a)) continue;
    if (ra.some(x => rb.some(y => hit(x, y))))
      out.push([a.textContent.trim().slice(0, 40), b.textContent.trim().slice(0, 40)]);
  }
  return out;
}"""
# For a piece of text: every visible element holding it whole (the innermost), with whether it is cut off: wider
# or taller than its box, or outside a clipping ancestor (a table cell, say) or the main area.
FULL_TEXT_JS = """(needle) => {
  const main = document.querySelector('[data-testid="stMain"]');
  const m = main.getBoundingClientRect();
  const holders = Array.from(main.querySelectorAll('*')).filter(e => e.textContent.includes(needle)
    && !Array.from(e.children).some(c => c.textContent.includes(needle)));
  return holders.map(e => {
    const r = e.getBoundingClientRect();
    let clipped = e.scrollWidth > e.clientWidth + 1 || e.scrollHeight > e.clientHeight + 1
      || r.left < m.left - 1 || r.right > m.right + 1;
    for (let a = e.parentElement; a && a !== main; a = a.parentElement) {
      const st = getComputedStyle(a);
      if (st.overflowX === 'visible' && st.overflowY === 'visible') continue;
      const b = a.getBoundingClientRect();
      if (r.left < b.left - 1 || r.right > b.right + 1 || r.top < b.top - 1 || r.bottom > b.bottom + 1) clipped = true;
    }
    return {visible: e.offsetParent !== null && r.width > 1 && r.height > 1, clipped: clipped,
            tag: e.tagName, width: Math.round(r.width)};
  });
}"""
CHARTS_JS = """() => Array.from(document.querySelectorAll('[data-testid="stVegaLiteChart"]')).map(e => {
  const r = e.getBoundingClientRect(); return [Math.round(r.width), Math.round(r.height)]; })"""


@pytest.fixture(scope="module")
def chromium() -> str:
    return require_browser()


@pytest.fixture(scope="module")
def all_db(shared_data: Path, recenter_db: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """All four public releases in one store, plus one judge label whose texts are Markdown/HTML."""
    from personagap.stages.extraction import import_laps
    from personagap.stages.response import import_prism, import_usr

    db = tmp_path_factory.mktemp("all") / "all.duckdb"
    shutil.copy(recenter_db, db)
    import_laps(shared_data / "laps", db)
    import_prism(shared_data / "prism_judge", db)
    import_usr(shared_data / "usr_personachat", db)
    with duckdb.connect(str(db)) as con:
        item = con.execute("SELECT item_id FROM items WHERE dataset = 'prism-judge' ORDER BY item_id LIMIT 1"
                           ).fetchall()[0][0]
        con.execute("INSERT INTO runs VALUES ('md-run', 'judge', 'test', NULL, NULL, NULL, now(), now(), "
                    "'finished', NULL)")
        con.execute("INSERT INTO labels VALUES (?, ?, 'llm', '', 'A', ?, ?, NULL, 'md-run', ?)",
                    [item, f"md![x]({REMOTE}rater.png)", f"![]({REMOTE}raw.png)", f"<img src='{REMOTE}r.png'>",
                     json.dumps({"certainty": f"![]({REMOTE}certainty.png)", "swapped": False})])
    return db


_SCRIPT_RUNS_IN_ONE_SECOND = """() => new Promise((done) => {
  const app = document.querySelector('.stApp');
  let runs = 0;
  const seen = new MutationObserver(() => { if (app.getAttribute('data-test-script-state') === 'running') runs += 1; });
  seen.observe(app, {attributes: true, attributeFilter: ['data-test-script-state']});
  setTimeout(() => { seen.disconnect(); done(runs); }, 1000);
})"""


def _visible_problems(page: Any) -> list[str]:
    """Literal None/nan words in the visible text of the main area."""
    text = page.locator('[data-testid="stMain"]').inner_text()
    return re.findall(r"\b(?:None|nan|NaN)\b", text)


def _check_page(page: Any, name: str) -> list[list[int]]:
    main = page.locator('[data-testid="stMain"]').inner_text()
    assert "Traceback" not in main and "Error" not in main.split("\n")[0]
    assert not _visible_problems(page), (name, _visible_problems(page))
    charts = page.evaluate(CHARTS_JS)
    small = [c for c in charts if c[0] < MIN_CHART_PX or c[1] < MIN_CHART_PX]
    assert not small, f"{name}: charts too small to read: {small}"
    overlaps = page.evaluate(OVERLAPS_JS)
    assert not overlaps, f"{name}: overlapping text: {overlaps[:5]}"
    assert page.locator('[data-testid="stToolbar"]').get_by_text("Deploy").count() == 0  # no developer items
    return list(charts)


def _not_applicable_reasons(db: Path) -> dict[str, set[str]]:
    """Per stage page, the reasons its stage report gives for alternative-annotator tests that do not apply."""
    from personagap.stages.relevance import report_relevance
    from personagap.stages.response import report_response

    return {path: {str(t["reason"]).rstrip(".") for t in report.alt_test if not t.get("applicable", True)}
            for path, report in (("stage2", report_relevance(db)), ("stage3", report_response(db)))}


def _assert_readable_in_full(page: Any, name: str, texts: set[str]) -> None:
    """Each text is on screen whole: some visible element holds it and nothing cuts it off."""
    for text in texts:
        holders = [h for h in page.evaluate(FULL_TEXT_JS, text) if h["visible"]]
        assert holders, f"{name}: {text!r} is not on screen (at most in a tooltip or a cut-off cell)"
        assert any(not h["clipped"] for h in holders), f"{name}: {text!r} is cut off: {holders}"


def test_every_page_renders_readably_in_chromium(chromium: str, all_db: Path, tmp_path: Path):
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    reasons = _not_applicable_reasons(all_db)
    assert reasons["stage2"] and reasons["stage3"]  # the real releases have single-annotator datasets
    with serve_dashboard(all_db, log=tmp_path / "streamlit.log") as url, browser(chromium) as ctx:
        page = ctx.new_page()
        errors: list[str] = []
        remote: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.on("request", lambda r: remote.append(r.url) if r.url.startswith(REMOTE) else None)
        for path, texts in PAGES.items():
            page.set_viewport_size({"width": 1400, "height": 2000})
            page.goto(f"{url}/{path}")
            for text in texts:
                wait_rendered(page, text)
            charts = _check_page(page, path or "overview")
            if path in ("", "stage1", "stage2", "stage3", "agreement"):
                assert charts, f"{path}: no chart"
            if path in ("stage2", "stage3"):
                assert len(charts) >= 5  # forest, confusion heatmaps, bias
            if path in reasons:  # why an alternative-annotator test does not apply: readable whole, not cut off
                _assert_readable_in_full(page, path, reasons[path])
            if path == "stage3":  # its own bias panel: position and length of answers, not stage 2's quartiles
                main = page.locator('[data-testid="stMain"]').inner_text()
                assert "quartile" not in main.lower() and "Share choosing the answer shown first" in main
            screenshot_whole(page, SCREENSHOTS / f"{path or 'overview'}.png")
        assert not errors, errors
        assert not remote, remote


def test_disagreements_filters_cases_and_markdown_in_chromium(chromium: str, all_db: Path, tmp_path: Path):
    before = queries.db_state(all_db)
    expected = queries.count_disagreements(all_db, queries.DisagreementFilter(
        dataset="recenter-stage2", judge="gpt-5.4", kind="judge_yes_human_no"))
    with serve_dashboard(all_db, log=tmp_path / "streamlit.log") as url, browser(chromium) as ctx:
        page = ctx.new_page()
        remote: list[str] = []
        page.on("request", lambda r: remote.append(r.url) if r.url.startswith(REMOTE) else None)
        page.goto(f"{url}/disagreements")
        wait_rendered(page, "matching judge labels")

        def pick(label: str, value: str) -> None:
            page.get_by_label(label, exact=True).click()
            page.get_by_role("option", name=value, exact=True).click()
            page.wait_for_timeout(300)

        for label, value in (("Dataset", "recenter-stage2"), ("Judge", "gpt-5.4"),
                             ("Disagreement", "judge yes / human no")):
            pick(label, value)
        wait_rendered(page, f"{expected:,} matching judge labels")
        wait_rendered(page, "gpt-5.4: yes")
        assert not _visible_problems(page)
        screenshot_whole(page, SCREENSHOTS / "disagreements-gpt-yes-human-no.png")
        # A new filter starts at its own first case: the box and the panel show the same case.
        for label, value in (("Dataset", "(all)"), ("Judge", "(all)"), ("Disagreement", "any disagreement"),
                             ("Stage", "response")):
            pick(label, value)
        wait_rendered(page, "Question")
        box = page.get_by_label("Open a case", exact=True).input_value()
        assert box.startswith("1. "), box
        main = page.locator('[data-testid="stMain"]').inner_text()
        assert "response · prism-judge" in main and "no prompt" not in main.lower()
        # The box names the case the panel shows: its question is the prompt shown below.
        first = queries.disagreements_page(all_db, queries.DisagreementFilter(stage="response"), limit=1)
        assert str(first.iloc[0]["item_id"]) in main
        assert main.count("Profile\n") == 1  # the profile once
        assert not _visible_problems(page)
        screenshot_whole(page, SCREENSHOTS / "disagreements-prism-case.png")
        # Imported Markdown/HTML is shown as typed and fetches nothing.
        pick("Judge", f"md![x]({REMOTE}rater.png)")
        pick("Disagreement", "all judge labels (agreements too)")
        wait_rendered(page, "1 matching judge labels")
        page.get_by_text(f"md![x]({REMOTE}rater.png): A", exact=False).first.click()
        page.wait_for_timeout(500)
        main = page.locator('[data-testid="stMain"]').inner_text()
        assert f"![]({REMOTE}raw.png)" in main and "<img src=" in main
        screenshot_whole(page, SCREENSHOTS / "disagreements-markdown-as-text.png")
        search = page.get_by_label("Search prompt, attribute, reason")
        search.fill(INJECTION)
        search.press("Enter")
        wait_rendered(page, "Nothing matches these filters")
    assert not remote, remote
    assert queries.db_state(all_db) == before


def test_ten_labels_on_the_annotate_page_reach_the_report(chromium: str, recenter_db_copy: Path, tmp_path: Path):
    db = recenter_db_copy
    name = "Browser Annotator"
    with serve_dashboard(db, log=tmp_path / "streamlit.log") as url, browser(chromium) as ctx:
        page = ctx.new_page()
        page.goto(f"{url}/annotate")
        wait_rendered(page, "Your name")
        page.get_by_label("Your name", exact=True).fill(name)
        page.get_by_role("button", name="Start labelling").click()
        wait_rendered(page, "Labelling as")
        page.get_by_label("Dataset", exact=True).click()
        page.get_by_role("option", name="recenter-pilot", exact=True).click()
        wait_rendered(page, "Your verdict (blind")
        for k in range(10):
            wait_rendered(page, "Your verdict (blind")
            main = page.locator('[data-testid="stMain"]').inner_text()
            assert "Judge labels" not in main  # blind: nothing of the others before answering
            page.locator('[data-testid="stRadio"] label').filter(has_text="yes" if k % 3 else "no").first.click()
            page.get_by_role("button", name="Save label").click()
            wait_rendered(page, "Your label:")
            wait_rendered(page, "Judge labels")  # revealed after answering
            assert not _visible_problems(page)
            if k == 0:
                screenshot_whole(page, SCREENSHOTS / "annotate-revealed.png")
                page.set_viewport_size({"width": 1400, "height": 2000})
            page.get_by_role("button", name="Next item →").click()
            page.wait_for_timeout(300)
        wait_rendered(page, "10 labelled by you")
        screenshot_whole(page, SCREENSHOTS / "annotate.png")
    cli = Path(sys.executable).parent / "personagap"
    out = subprocess.run([str(cli), "report", "relevance", "--json", "--db", str(db)], capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    pilot = report["pilot"]
    assert pilot is not None and pilot["raters"].get(name) == "human"
    with duckdb.connect(str(db), read_only=True) as con:
        n = con.execute("SELECT count(*), count(DISTINCT item_id) FROM labels WHERE rater = ? AND condition = ''",
                        [name]).fetchall()[0]
    assert n == (10, 10)


def test_overview_answers_which_stage_fails_above_the_fold(chromium: str, all_db: Path, tmp_path: Path):
    from personagap.analysis.pipeline import pipeline_db
    from personagap.analysis.pipeline_text import TITLE

    view = pipeline_db(all_db)
    with serve_dashboard(all_db, log=tmp_path / "streamlit.log") as url, browser(chromium) as ctx:
        page = ctx.new_page()
        page.set_viewport_size({"width": 1280, "height": 800})  # a laptop's first screen
        page.goto(url)
        wait_rendered(page, TITLE)
        wait_rendered(page, view.verdict[:60])
        verdict = page.locator('[data-testid="stAlert"]').first
        assert verdict.inner_text().strip() == view.verdict
        box = verdict.bounding_box()
        assert box is not None and box["y"] + box["height"] <= 800, box  # read without scrolling
        # The stage table starts on the first screen too, and the page holds no literal None/nan.
        table = page.locator('[data-testid="stMarkdown"] table').first
        cell = table.get_by_text("1. attribute extraction", exact=False).first.bounding_box()
        assert cell is not None and cell["y"] < 800, cell
        wait_rendered(page, "Every judge against humans")
        assert not _visible_problems(page)
        # The placeholder's timer (the judges' part came in a second run) has stopped: no more script runs.
        runs = page.evaluate(_SCRIPT_RUNS_IN_ONE_SECOND)
        assert runs == 0, f"{runs} script runs on an idle Overview"
        assert page.get_by_text("Comparing every judge").count() == 0
        screenshot_whole(page, SCREENSHOTS / "overview-pipeline.png")
