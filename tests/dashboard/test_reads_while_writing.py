"""The dashboard keeps reading while another process writes labels in short transactions (as a judge run does)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from personagap.analysis.diagnosis_store import diagnose_store
from personagap.dashboard import queries
from personagap.store import opened
from tests.support.paths import REPO

APP = REPO / "dashboard" / "app.py"
BATCHES, PER_BATCH = 30, 50

WRITER = textwrap.dedent("""
    import sys, time
    from personagap import store
    from personagap.records import Label
    db, items = sys.argv[1], sys.argv[2].split(",")
    for b in range({batches}):
        labels = [Label(item_id=i, rater="lock-writer", rater_kind="llm", condition=f"batch-{{b}}",
                        label="yes", raw="YES", run_id="lock-test") for i in items]
        with store.opened(db) as con:  # one short transaction per batch, then the file is free again
            con.execute("BEGIN TRANSACTION")
            store.write_labels(con, labels)
            con.execute("COMMIT")
        print(b, flush=True)
        time.sleep(0.08)
""").format(batches=BATCHES)


@pytest.mark.slow
def test_dashboard_reads_while_a_writer_commits_batches(recenter_db_copy: Path, monkeypatch):
    db = recenter_db_copy
    with opened(db, read_only=True) as con:
        items = [r[0] for r in con.execute(
            "SELECT item_id FROM items WHERE dataset = 'recenter-stage2' AND stage = 'relevance' "
            "ORDER BY item_id LIMIT ?", [PER_BATCH]).fetchall()]
    before = queries.db_state(db)["labels"]
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(db), ",".join(items)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    seen: list[int] = []
    reads = 0
    monkeypatch.setenv("PERSONAGAP_DB", str(db))
    try:
        assert writer.stdout is not None
        writer.stdout.readline()  # the first batch has landed: the writer is in its loop
        while writer.poll() is None:
            seen.append(queries.db_state(db)["labels"])  # fresh read-only open per batch of queries
            page = queries.disagreements_page(db, queries.DisagreementFilter(judge="lock-writer", kind="all"),
                                              limit=10)
            assert set(page["judge"]) <= {"lock-writer"}
            reads += 2
            if reads % 10 == 0:
                assert diagnose_store(db).diagnosis.stage("relevance").best is not None
                at = AppTest.from_file(str(APP), default_timeout=120)
                at.run().run()  # the Overview's two runs: the pipeline view, then the judges' part
                assert not at.exception and not [e for e in at.error if "Cannot read" in e.value]
                reads += 1
    finally:
        out, err = writer.communicate(timeout=120)
    assert writer.returncode == 0, err
    after = queries.db_state(db)["labels"]
    assert after == before + BATCHES * PER_BATCH  # every batch committed despite the readers
    assert reads >= 10
    assert seen == sorted(seen)  # readers only ever see whole committed batches, in order
    assert all((n - before) % PER_BATCH == 0 for n in seen)
    assert any(before < n < after for n in seen)  # reads really interleaved with the writes
    print(f"{reads} dashboard reads during {BATCHES} writer commits; label counts seen: {sorted(set(seen))[:5]}...")


def test_read_only_open_waits_for_a_writer_then_succeeds(recenter_db_copy: Path):
    # The writer holds the file for 1.5 s; the reader's retry (store.connect) outlasts it instead of failing.
    hold = textwrap.dedent("""
        import sys, time
        from personagap import store
        with store.opened(sys.argv[1]) as con:
            con.execute("BEGIN TRANSACTION")
            print("locked", flush=True)
            time.sleep(1.5)
            con.execute("COMMIT")
    """)
    writer = subprocess.Popen([sys.executable, "-c", hold, str(recenter_db_copy)], stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout is not None and writer.stdout.readline().strip() == "locked"
        start = time.monotonic()
        state = queries.db_state(recenter_db_copy)
        waited = time.monotonic() - start
    finally:
        writer.wait(timeout=30)
    assert state["labels"] > 0
    assert writer.returncode == 0
    print(f"read-only open waited {waited:.2f} s for the writer")
