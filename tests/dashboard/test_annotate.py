"""The Annotate page: queue orders, blind labels, and labels that survive a writer holding the database."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import duckdb
import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from personagap.analysis.comparable import BLIND, SHOWN_LLM
from personagap.dashboard import annotate
from personagap.records import Label
from tests.support.apptest import button as _button
from tests.support.apptest import page_text as _text
from tests.support.apptest import served_item as _served
from tests.support.paths import REPO

APP = REPO / "dashboard" / "app.py"


# --------------------------------------------------------------------------- queue orders (pure)

def _labels(rows: list[tuple[str, str, str, dict | None]]) -> pd.DataFrame:
    return pd.DataFrame([{"item_id": i, "rater": r, "label": lab, "meta": json.dumps(m) if m else None}
                         for i, r, lab, m in rows])


def test_disagreement_order_puts_split_judges_first():
    labels = _labels([
        ("i1", "a", "yes", None), ("i1", "b", "no", None), ("i1", "c", "yes", None), ("i1", "d", "no", None),
        ("i2", "a", "yes", None), ("i2", "b", "yes", None), ("i2", "c", "yes", None),
        ("i3", "a", "yes", None), ("i3", "b", "no", None), ("i3", "c", "no", None),
    ])
    queue = annotate.order_items(["i4", "i3", "i2", "i1"], labels, "disagreement")
    # Shares of judge labels off the item's most common label: i1 2/4, i3 1/3, i2 0; i4 has no judge label.
    assert list(queue["item_id"]) == ["i1", "i3", "i2", "i4"]
    assert queue["score"].tolist()[:3] == pytest.approx([0.5, 1 / 3, 0.0])


def test_uncertain_order_uses_the_best_judges_certainty_then_its_inconsistency():
    labels = _labels([
        # Certainty on the judge's own scale (PRISM stores numeric text such as "60"): ranked, not read as 0-1.
        ("i1", "best", "yes", {"certainty": "90"}), ("i2", "best", "no", {"certainty": "20"}),
        ("i6", "best", "no", {"certainty": 50}),
        ("i3", "best", "yes", None), ("i3", "best", "no", None),  # two conditions, two answers: 0.5
        ("i4", "other", "yes", None), ("i5", "best", "yes", {"certainty": "NA"}),
    ])
    queue = annotate.order_items(["i1", "i2", "i3", "i4", "i5", "i6"], labels, "uncertain", best_judge="best")
    # 1 - percentile rank of certainty: i2 2/3, i6 1/3, i1 0; i3 (no certainty) its inconsistency 0.5;
    # i5 ("NA", one consistent answer) 0; i4 has no label by the best judge and comes last.
    order = list(queue["item_id"])
    assert order[:3] == ["i2", "i3", "i6"] and set(order[3:5]) == {"i1", "i5"} and order[5] == "i4"
    assert queue["score"].tolist()[:3] == pytest.approx([2 / 3, 0.5, 1 / 3])


def test_random_order_is_seeded_stable_and_stratified_in_every_prefix():
    items = [f"i{k:03d}" for k in range(100)]
    labels = _labels([(i, "best", "yes" if k < 20 else "no", None) for k, i in enumerate(items)])
    q0 = annotate.order_items(items, labels, "random", best_judge="best", seed=0)
    q0_again = annotate.order_items(list(reversed(items)), labels, "random", best_judge="best", seed=0)
    q1 = annotate.order_items(items, labels, "random", best_judge="best", seed=1)
    assert list(q0["item_id"]) == list(q0_again["item_id"])  # the seed decides, not the input order
    assert list(q0["item_id"]) != list(q1["item_id"])
    assert sorted(q0["item_id"]) == items
    for n in (10, 25, 50):
        yes = (q0["stratum"].head(n) == "yes").sum()
        assert abs(yes - 0.2 * n) <= 1, (n, yes)  # every prefix is a proportional stratified sample
    # Not sorted by item id or by stratum: a random order within strata.
    assert list(q0["item_id"]) != sorted(q0["item_id"]) and q0["stratum"].head(5).nunique() >= 1


def test_labels_after_the_reveal_are_stored_apart_from_blind_ones():
    blind = annotate.make_label(item_id="i", name="  Ann  Lee ", label="yes", categories=["no", "yes"],
                                revealed=False, run_id="r")
    shown = annotate.make_label(item_id="i", name="Ann Lee", label="no", categories=["no", "yes"],
                                revealed=True, run_id="r", note="saw the judges")
    assert (blind.rater, blind.rater_kind, blind.condition) == ("Ann Lee", "human", BLIND)
    assert (shown.condition, shown.reason) == (SHOWN_LLM, "saw the judges")
    with pytest.raises(annotate.AnnotateError):
        annotate.make_label(item_id="i", name="Ann", label="maybe", categories=["no", "yes"], revealed=False,
                            run_id="r")
    with pytest.raises(annotate.AnnotateError):
        annotate.clean_name("   ")


# --------------------------------------------------------------------------- the spool

HOLD = textwrap.dedent("""
    import sys, time
    from personagap import store
    with store.opened(sys.argv[1]) as con:
        con.execute("BEGIN TRANSACTION")
        print("locked", flush=True)
        sys.stdin.readline()  # hold the write lock until the test says so
        con.execute("COMMIT")
""")


def _pilot_items(db: Path, n: int) -> list[str]:
    with duckdb.connect(str(db), read_only=True) as con:
        return [r[0] for r in con.execute(
            "SELECT item_id FROM items WHERE dataset = 'recenter-pilot' AND stage = 'relevance' "
            "ORDER BY item_id LIMIT ?", [n]).fetchall()]


def _stored(db: Path, rater: str) -> pd.DataFrame:
    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute("SELECT item_id, rater, rater_kind, condition, label, run_id FROM labels "
                           "WHERE rater = ?", [rater]).df()


def test_a_label_saved_while_a_writer_holds_the_file_is_pending_then_stored_exactly_once(recenter_db_copy: Path):
    db = recenter_db_copy
    items = _pilot_items(db, 3)
    run = annotate.session_run("Spool Tester")
    labels = [annotate.make_label(item_id=i, name="Spool Tester", label="yes", categories=["no", "yes"],
                                  revealed=False, run_id=run.run_id) for i in items]
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(db)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        for label in labels:
            annotate.submit(db, label, run)
        result = annotate.flush(db, wait_seconds=0.3)
        assert (result.written, result.pending) == (0, 3)
        assert result.error and "writing the database" in result.error
        assert len(annotate.pending(db)) == 3  # kept, not lost
    finally:
        assert holder.stdin is not None
        holder.stdin.write("go\n")
        holder.stdin.flush()
        holder.wait(timeout=30)
    assert annotate.flush(db).written == 3
    assert annotate.pending(db) == [] and not annotate.has_pending(db)
    stored = _stored(db, "Spool Tester")
    assert sorted(stored["item_id"]) == sorted(items) and set(stored["condition"]) == {BLIND}
    # A crash between the commit and emptying the spool replays the same labels: still stored once.
    for label in labels:
        annotate.submit(db, label, run)
    assert annotate.flush(db).written == 3
    assert len(_stored(db, "Spool Tester")) == 3
    # The session's run row is there, so an export of runs and labels carries these labels with their origin.
    with duckdb.connect(str(db), read_only=True) as con:
        runs = con.execute("SELECT rater, status, source FROM runs WHERE run_id = ?", [run.run_id]).fetchall()
    assert runs == [("Spool Tester", "finished", "dashboard Annotate page")]


# --------------------------------------------------------------------------- the page, under a busy writer

WRITER = textwrap.dedent("""
    import sys, time
    from personagap import store
    from personagap.records import Label
    from pathlib import Path
    db, items, stop = sys.argv[1], sys.argv[2].split(","), Path(sys.argv[3])
    end, b = time.monotonic() + 300, 0
    while time.monotonic() < end and (b < 2 or not stop.exists()):
        labels = [Label(item_id=i, rater="busy-writer", rater_kind="llm", condition=f"batch-{b}", label="yes",
                        raw="YES", run_id="busy-writer") for i in items]
        with store.opened(db) as con:  # a judge run's batch, held long: the Annotate page must not lose labels
            con.execute("BEGIN TRANSACTION")
            store.write_labels(con, labels)
            time.sleep(1.0)
            con.execute("COMMIT")
        print(b, flush=True)
        b += 1
        time.sleep(0.3)
""")


def _start(db: Path, name: str, monkeypatch: pytest.MonkeyPatch) -> AppTest:
    monkeypatch.setenv("PERSONAGAP_DB", str(db))
    at = AppTest.from_file(str(APP), default_timeout=180).run()
    at.switch_page("page_annotate.py").run()
    assert not at.exception, [e.value for e in at.exception]
    at.text_input[0].input(name)
    _button(at, "Start labelling").click().run()
    at.selectbox(key="annotate_dataset").set_value("recenter-pilot")
    at.selectbox(key="annotate_order").set_value("random").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _label_one(at: AppTest, choice: str) -> None:
    """Label the item on screen; check it was blind before and revealed after."""
    text = _text(at)
    assert "Your verdict (blind" in text
    assert "Judge labels" not in text and not at.expander  # nobody's label is visible before answering
    at.radio[0].set_value(choice)
    _button(at, "Save label").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert "Your label:" in _text(at) and "Judge labels" in _text(at)  # revealed after answering
    _button(at, "Next item →").click().run()


@pytest.mark.slow
def test_annotate_page_while_a_writer_holds_the_file_stores_every_label_exactly_once(
        recenter_db_copy: Path, monkeypatch: pytest.MonkeyPatch):
    db = recenter_db_copy
    name = "Page Tester"
    with duckdb.connect(str(db), read_only=True) as con:
        humans_before = con.execute("SELECT count(*) FROM labels l JOIN items i USING (item_id) WHERE "
                                    "i.stage = 'relevance' AND l.rater_kind IN ('human', 'human_majority')"
                                    ).fetchall()[0][0]
    at = _start(db, name, monkeypatch)
    stop = db.parent / "stop-writing"
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(db), ",".join(_pilot_items(db, 40)), str(stop)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    submitted, saw_pending = 0, False
    try:
        assert writer.stdout is not None
        writer.stdout.readline()  # the writer is in its loop
        while writer.poll() is None and submitted < 6:
            _label_one(at, "yes" if submitted % 2 else "no")
            submitted += 1
            saw_pending |= "pending" in _text(at)
        assert writer.poll() is None  # every label was given while the writer was still at it
    finally:
        stop.touch()
        out, err = writer.communicate(timeout=120)
    assert writer.returncode == 0, err
    batches = len(out.split())
    assert submitted == 6
    at.run()  # the file is free now: the page writes what is pending
    assert not at.exception
    stored = _stored(db, name)
    assert len(stored) == submitted and stored["item_id"].is_unique
    assert set(stored["condition"]) == {BLIND} and set(stored["rater_kind"]) == {"human"}
    assert not annotate.has_pending(db)
    print(f"{submitted} labels submitted during {batches} writer transactions; pending shown: {saw_pending}")
    # Every page reads them at once: the caches were cleared when they were written.
    at.switch_page("page_stage2.py").run()
    metrics = {m.label: m.value for m in at.metric}
    assert int(metrics["Human labels"].replace(",", "")) == humans_before + submitted


@pytest.mark.slow
def test_queue_never_serves_an_item_twice_and_the_reveal_label_is_apart(recenter_db_copy: Path,
                                                                       monkeypatch: pytest.MonkeyPatch):
    db = recenter_db_copy
    at = _start(db, "Twice Tester", monkeypatch)
    served = []
    for _ in range(3):
        served.append(_served(at))
        _label_one(at, "yes")
    stored = _stored(db, "Twice Tester")
    assert sorted(stored["item_id"]) == sorted(served) and stored["item_id"].is_unique
    # A new session of the same person (another day) gets none of those items again.
    again = _start(db, "Twice Tester", monkeypatch)
    assert _served(again) not in set(served)
    # Change one's mind after the reveal: a separate shown-llm label, the blind one untouched.
    again.radio[0].set_value("no")
    _button(again, "Save label").click().run()
    item = again.session_state["annotate_revealed"]["item_id"]
    again.radio[-1].set_value("yes")
    _button(again, "Save the after-reveal label").click().run()
    assert not again.exception, [e.value for e in again.exception]
    mine = _stored(db, "Twice Tester").set_index(["item_id", "condition"])["label"]
    assert mine[(item, BLIND)] == "no" and mine[(item, SHOWN_LLM)] == "yes"


def test_spooled_entries_are_plain_json_lines(tmp_path: Path):
    db = tmp_path / "x.duckdb"
    run = annotate.session_run("Json Tester")
    annotate.submit(db, Label(item_id="i", rater="Json Tester", rater_kind="human", label="yes", run_id=run.run_id),
                    run)
    lines = annotate.spool_path(db).read_text().splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["label"]["rater"] == "Json Tester"
    assert annotate.spool_path(db).parent == tmp_path


@pytest.mark.slow
def test_the_page_shows_a_label_as_pending_while_the_file_is_held_then_writes_it(
        recenter_db_copy: Path, monkeypatch: pytest.MonkeyPatch):
    db = recenter_db_copy
    at = _start(db, "Pending Tester", monkeypatch)
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(db)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)

    def release() -> None:
        assert holder.stdin is not None
        holder.stdin.write("go\n")
        holder.stdin.flush()

    # The page reads from its caches while the file is held; the one uncached read (the other labels of the
    # item) waits for the holder, which lets go after 4 s — after the page tried to write and had to spool.
    timer = threading.Timer(4.0, release)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        item = _served(at)
        timer.start()
        at.radio[0].set_value("yes")
        _button(at, "Save label").click().run()
        assert not at.exception, [e.value for e in at.exception]
        text = _text(at)
        assert "pending" in text and "Your label:" in text
        assert [e.label.item_id for e in annotate.pending(db)] == [item]
    finally:
        timer.join()
        holder.wait(timeout=30)
    assert _stored(db, "Pending Tester").empty  # not yet written ...
    at.run()  # ... the next rerun finds the file free and writes it
    stored = _stored(db, "Pending Tester")
    assert list(stored["item_id"]) == [item] and not annotate.has_pending(db)


def test_two_annotators_give_the_dataset_a_human_ceiling_and_their_labels_export(recenter_db_copy: Path,
                                                                                 tmp_path: Path):
    from personagap.analysis.diagnosis_store import diagnose_store
    from personagap.exchange import export_store

    db = recenter_db_copy
    stage, dataset = "relevance", "recenter-stage2"

    def ceiling_raters() -> int:
        d = diagnose_store(db).diagnosis
        found = [c for c in d.stage(stage).ceilings if c.dataset == dataset]
        return found[0].n_raters if found else 0

    assert ceiling_raters() == 0  # the release has no individual blind humans on stage 2
    items, judge_labels = annotate.queue_inputs(db, stage, dataset)
    queue = annotate.order_items(items, judge_labels, "random", best_judge="gpt-5.4", seed=3)
    cats = annotate.categories(db, stage, dataset)
    assert sorted(cats) == ["no", "yes"]
    served = list(queue["item_id"].head(30))
    truth = judge_labels[judge_labels["rater"] == "gpt-5.4"].set_index("item_id")["label"]
    for k, name in enumerate(["Ann One", "Bob Two"]):
        run = annotate.session_run(name)
        for j, item in enumerate(served):
            label = truth.get(item, "no")
            if (j + k) % 5 == 0:  # the two disagree now and then
                label = "yes" if label == "no" else "no"
            annotate.submit(db, annotate.make_label(item_id=item, name=name, label=label, categories=cats,
                                                    revealed=False, run_id=run.run_id), run)
    assert annotate.flush(db).written == 60
    assert ceiling_raters() == 2  # agreement among humans now exists, from the two annotators alone
    out = tmp_path / "export"
    export_store(db, out)
    with duckdb.connect() as con:
        rows = con.execute(f"SELECT rater, count(*) FROM read_parquet('{out}/labels/**/*.parquet', "
                           "hive_partitioning = true) WHERE rater IN ('Ann One', 'Bob Two') GROUP BY 1 ORDER BY 1"
                           ).fetchall()
        runs = con.execute(f"SELECT count(*) FROM read_parquet('{out}/runs/**/*.parquet') "
                           "WHERE source = 'dashboard Annotate page'").fetchall()[0][0]
    assert rows == [("Ann One", 30), ("Bob Two", 30)] and runs == 2


def test_routed_order_serves_exactly_the_routed_items_in_a_seeded_random_order():
    items = [f"i{k:02d}" for k in range(40)]
    routed = items[5:25:2] + ["not-an-item-any-more"]
    labels = _labels([(i, "best", "yes", None) for i in items])
    q = annotate.order_items(items, labels, "routed", best_judge="best", seed=3, routed=routed)
    # Exactly the routed items that still exist, each once; the seed, not the input order, decides the order.
    assert sorted(q["item_id"]) == sorted(items[5:25:2]) and q["item_id"].is_unique
    again = annotate.order_items(list(reversed(items)), labels, "routed", best_judge="best", seed=3, routed=routed)
    assert list(again["item_id"]) == list(q["item_id"])
    other = annotate.order_items(items, labels, "routed", best_judge="best", seed=4, routed=routed)
    assert list(other["item_id"]) != list(q["item_id"]) and list(q["item_id"]) != sorted(q["item_id"])
    with pytest.raises(annotate.AnnotateError, match="personagap route"):
        annotate.order_items(items, labels, "routed")
