"""The Annotate page's "routed to people" queue serves exactly the items `personagap route` left to people (AppTest)."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from personagap.commands.route import route
from personagap.dashboard import annotate
from personagap.store import opened
from tests.support.apptest import button as _button
from tests.support.apptest import page_text as _text
from tests.support.apptest import served_item as _served
from tests.support.paths import APP
from tests.support.route_store import DATASET, JUDGE, route_db, routed_store

LABELS = 3


def _left(text: str) -> int:
    found = re.search(r"([\d,]+) left in this queue", text)
    assert found, text
    return int(found.group(1).replace(",", ""))


@pytest.mark.slow
def test_the_routed_queue_serves_exactly_the_routed_items(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db, routed = routed_store(tmp_path / "routed.duckdb")
    with opened(db, read_only=True) as con:
        every = {r[0] for r in con.execute("SELECT item_id FROM items").fetchall()}
    assert set(routed) < every  # some items are kept by the judge: the queue must leave them out
    monkeypatch.setenv("PERSONAGAP_DB", str(db))
    at = AppTest.from_file(str(APP), default_timeout=180).run()
    at.switch_page("page_annotate.py").run()
    at.text_input[0].input("Router")
    _button(at, "Start labelling").click().run()
    at.selectbox(key="annotate_stage").set_value("relevance").run()
    at.selectbox(key="annotate_dataset").set_value(DATASET)
    at.selectbox(key="annotate_order").set_value("routed").run()
    assert not at.exception, [e.value for e in at.exception]
    assert _left(_text(at)) == len(routed)
    assert f"Routed by {JUDGE}" in _text(at) and f"{len(routed):,} items are left to people" in _text(at)
    served = []
    for k in range(LABELS):
        served.append(_served(at))
        at.radio[0].set_value("yes")
        _button(at, "Save label").click().run()
        _button(at, "Next item →").click().run()
        assert not at.exception, [e.value for e in at.exception]
        assert _left(_text(at)) == len(routed) - k - 1
    assert set(served) <= set(routed) and len(set(served)) == LABELS
    queue = annotate.order_items(sorted(every), annotate.queue_inputs(db, "relevance", DATASET)[1], "routed",
                                 routed=routed)
    assert served == list(queue["item_id"][:LABELS])  # in the queue's seeded order


def test_without_a_routing_decision_the_page_says_how_to_make_one(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    db, _ = route_db(tmp_path / "plain.duckdb", users=6)
    monkeypatch.setenv("PERSONAGAP_DB", str(db))
    at = AppTest.from_file(str(APP), default_timeout=180).run()
    at.switch_page("page_annotate.py").run()
    at.text_input[0].input("Router")
    _button(at, "Start labelling").click().run()
    at.selectbox(key="annotate_order").set_value("routed").run()
    assert not at.exception, [e.value for e in at.exception]
    assert "personagap route" in _text(at) and not at.radio


def test_the_audit_queue_serves_exactly_the_drawn_items_in_draw_order(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    db, _ = route_db(tmp_path / "audit.duckdb", users=30)
    route(str(db), "relevance", DATASET, JUDGE, target_accuracy=0.8, audit=12, audit_seed=3)
    drawn = annotate.audit_items(db, "relevance", DATASET)
    routed = annotate.routed_items(db, "relevance", DATASET)
    assert drawn is not None and len(drawn) == 12 and routed is not None and not set(drawn) & set(routed)
    monkeypatch.setenv("PERSONAGAP_DB", str(db))
    at = AppTest.from_file(str(APP), default_timeout=180).run()
    at.switch_page("page_annotate.py").run()
    at.text_input[0].input("Auditor")
    _button(at, "Start labelling").click().run()
    at.selectbox(key="annotate_stage").set_value("relevance").run()
    at.selectbox(key="annotate_dataset").set_value(DATASET)
    at.selectbox(key="annotate_order").set_value("audit").run()
    assert not at.exception, [e.value for e in at.exception]
    assert _left(_text(at)) == 12 and "personagap route --audit N" in _text(at)
    served = []
    for _ in range(2):
        served.append(_served(at))
        at.radio[0].set_value("no")
        _button(at, "Save label").click().run()
        _button(at, "Next item →").click().run()
        assert not at.exception, [e.value for e in at.exception]
    assert served == drawn[:2]  # the draw order: any labelled prefix is a random sample of the kept items


def test_audit_order_is_the_draw_and_needs_one() -> None:
    items = [f"i{k}" for k in range(10)]
    labels = pd.DataFrame(columns=["item_id", "rater", "label"])
    queue = annotate.order_items(items, labels, "audit", audit=["i7", "i2", "gone", "i5"])
    assert list(queue["item_id"]) == ["i7", "i2", "i5"]
    with pytest.raises(annotate.AnnotateError, match="--audit N"):
        annotate.order_items(items, labels, "audit")
