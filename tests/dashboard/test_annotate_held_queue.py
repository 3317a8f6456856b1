"""The Annotate page holds a queue per store state (dashboard/annotate_page.py): read once, read again after a write.

A write by anything else (a judge run's labels) changes the file's stamp, and the next queue is read from the store
again, with the new judge label counted; the page's own write of a person's label keeps the held queue (it reads
judges' labels only), and the held orders are the ones order_items gives.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from personagap.dashboard import annotate, annotate_page
from personagap.records import Label
from personagap.store import opened, write_labels
from tests.dashboard.test_annotate_sql import _random_store


def test_a_queue_is_read_once_per_store_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "q.duckdb"
    _random_store(db, 6)
    reads: list[str] = []
    real = annotate.read_queue

    def counted(*args: object) -> annotate.Queue:
        reads.append("read")
        return real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(annotate, "read_queue", counted)
    monkeypatch.setattr(annotate_page, "_held", {})
    first = annotate_page._queue(str(db), "relevance", "d", "disagreement", 0, "b")
    again = annotate_page._queue(str(db), "relevance", "d", "disagreement", 0, "b")
    assert again is first and len(reads) == 1  # held, not recomputed (nor unpickled)
    items, scores = annotate.queue_inputs(db, "relevance", "d", meta_of="b")
    pd.testing.assert_frame_equal(first, annotate.order_items(items, scores, "disagreement", best_judge="b"))

    # A person's label written by the page: the queue is kept for the new stamp.
    run = annotate.session_run("ann")
    annotate.submit(db, annotate.make_label(item_id=items[0], name="ann", label="yes", categories=["yes", "no"],
                                            revealed=False, run_id=run.run_id), run)
    assert annotate_page.flush_pending(str(db)).written == 1
    assert annotate_page._queue(str(db), "relevance", "d", "disagreement", 0, "b") is first and len(reads) == 1

    # A judge's label written by another writer: read again, and the new label is counted.
    quiet = first["item_id"].iloc[-1]
    with opened(db) as con:
        write_labels(con, [Label(item_id=str(quiet), rater="o9", rater_kind="llm", label="maybe", run_id="j")])
    after = annotate_page._queue(str(db), "relevance", "d", "disagreement", 0, "b")
    assert len(reads) == 2 and after is not first
    items, scores = annotate.queue_inputs(db, "relevance", "d", meta_of="b")
    pd.testing.assert_frame_equal(after, annotate.order_items(items, scores, "disagreement", best_judge="b"))
