"""In a real browser, the Annotate page's "routed to people" queue serves exactly the items `personagap route` routed.

The store is routed first (the judge keeps its confident labels); the page then offers only routed items, counts
exactly the routed ones as left, and each label given there lands on a routed item.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import duckdb
import pytest

from personagap.dashboard.annotate import ORDERS
from tests.support.browser_helpers import (
    SCREENSHOTS,
    browser,
    require_browser,
    screenshot_whole,
    serve_dashboard,
    wait_rendered,
)
from tests.support.route_store import DATASET, routed_store

pytestmark = pytest.mark.browser
NAME = "Browser Router"
LABELS = 3


def _choose(page: object, label: str, option: str) -> None:
    page.get_by_label(label, exact=True).click()  # type: ignore[attr-defined]
    page.get_by_role("option", name=option, exact=True).click()  # type: ignore[attr-defined]


def _left(page: object) -> int:
    main = page.locator('[data-testid="stMain"]').inner_text()  # type: ignore[attr-defined]
    found = re.search(r"([\d,]+) left in this queue", main)
    assert found, main
    return int(found.group(1).replace(",", ""))


def _left_once_settled(page: object, expected: int, timeout: float = 60.0) -> int:
    """The queue's count once it reads ``expected`` (or the last count read after ``timeout`` s).

    Choosing an order reruns the page; until the rerun lands, the count of the previous order is still on screen.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if _left(page) == expected:
                return expected
        except AssertionError:  # mid-rerun: no count on screen yet
            pass
        time.sleep(0.2)
    return _left(page)


def test_routed_queue_serves_exactly_the_routed_items_in_chromium(tmp_path: Path) -> None:
    chromium = require_browser()
    db, routed = routed_store(tmp_path / "routed.duckdb")
    with serve_dashboard(db, log=tmp_path / "streamlit.log") as url, browser(chromium) as ctx:
        page = ctx.new_page()
        page.goto(f"{url}/annotate")
        wait_rendered(page, "Your name")
        page.get_by_label("Your name", exact=True).fill(NAME)
        page.get_by_role("button", name="Start labelling").click()
        wait_rendered(page, "Labelling as")
        # One stage and one dataset in this store: the pickers start on them.
        _choose(page, "Which items first", ORDERS["routed"])
        wait_rendered(page, "Your verdict (blind")
        assert _left_once_settled(page, len(routed)) == len(routed)
        for k in range(LABELS):
            wait_rendered(page, "Your verdict (blind")
            page.locator('[data-testid="stRadio"] label').filter(has_text="yes").first.click()
            page.get_by_role("button", name="Save label").click()
            wait_rendered(page, "Your label:")
            page.get_by_role("button", name="Next item →").click()
            wait_rendered(page, f"{k + 1} labelled by you")
            assert _left(page) == len(routed) - k - 1
        screenshot_whole(page, SCREENSHOTS / "annotate-routed.png")
    with duckdb.connect(str(db), read_only=True) as con:
        labelled = [r[0] for r in con.execute(
            "SELECT l.item_id FROM labels l JOIN items i USING (item_id) WHERE l.rater = ? AND i.dataset = ?",
            [NAME, DATASET]).fetchall()]
    assert len(labelled) == LABELS and set(labelled) <= set(routed)
