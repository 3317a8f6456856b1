"""Every dashboard page in real headless Chromium (Debian's), served by `personagap dashboard`."""

from __future__ import annotations

from pathlib import Path

import pytest

from personagap.dashboard import queries
from tests.browser_helpers import SCREENSHOTS, browser, require_browser, serve_dashboard, wait_rendered

pytestmark = pytest.mark.browser

# url path -> (text that proves the page's key content rendered)
PAGES = {
    "": ["Overview", "fails most", "Human ceiling", "Every judge against humans"],
    "stage1": ["Stage 1", "no judge labels yet"],
    "stage2": ["Stage 2", "Cohen's kappa per judge", "Confusion heatmaps", "Krippendorff"],
    "stage3": ["Stage 3", "no human labels"],
    "agreement": ["Agreement matrix", "Mean pairwise kappa"],
    "disagreements": ["Disagreements", "matching judge labels", "Judge labels"],
    "runs": ["Runs", "Compare two runs", "Shared items"],
}
INJECTION = "'; DROP TABLE labels; --"


@pytest.fixture(scope="module")
def chromium() -> str:
    return require_browser()


def test_every_page_renders_in_chromium(chromium: str, recenter_db: Path, tmp_path: Path):
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    with serve_dashboard(recenter_db, log=tmp_path / "streamlit.log") as url, browser(chromium) as ctx:
        page = ctx.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        for path, texts in PAGES.items():
            page.goto(f"{url}/{path}")
            for text in texts:
                wait_rendered(page, text)
            main = page.locator('[data-testid="stMain"]').inner_text()
            assert "Traceback" not in main and "Error" not in main.split("\n")[0]
            if path in ("", "stage2", "agreement"):
                assert page.locator('[data-testid="stVegaLiteChart"]').count() >= 1
            page.screenshot(path=str(SCREENSHOTS / f"{path or 'overview'}.png"), full_page=True)
        assert not errors, errors


def test_disagreement_filters_and_injection_in_chromium(chromium: str, recenter_db: Path, tmp_path: Path):
    before = queries.db_state(recenter_db)
    expected = queries.count_disagreements(recenter_db, queries.DisagreementFilter(
        dataset="recenter-stage2", judge="gpt-5.4", kind="judge_yes_human_no"))
    with serve_dashboard(recenter_db, log=tmp_path / "streamlit.log") as url, browser(chromium) as ctx:
        page = ctx.new_page()
        page.goto(f"{url}/disagreements")
        wait_rendered(page, "matching judge labels")
        for label, value in (("Dataset", "recenter-stage2"), ("Judge", "gpt-5.4"),
                             ("Disagreement", "judge yes / human no")):
            page.get_by_label(label, exact=True).click()
            page.get_by_role("option", name=value, exact=True).click()
            page.wait_for_timeout(200)
        wait_rendered(page, f"{expected:,} matching judge labels")
        wait_rendered(page, "gpt-5.4: yes")
        page.screenshot(path=str(SCREENSHOTS / "disagreements-gpt-yes-human-no.png"), full_page=True)
        search = page.get_by_label("Search prompt, attribute, reason")
        search.fill(INJECTION)
        search.press("Enter")
        wait_rendered(page, "Nothing matches these filters")
        assert page.get_by_text("0 matching judge labels").count() >= 1
    assert queries.db_state(recenter_db) == before
