"""Which runs are still running, and whose journals may be stored: decided from real processes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import duckdb
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from personagap.judges.journal import Journal, journal_path, read_journal, recover_journals
from personagap.liveness import effective_status, mark_interrupted_runs, process_alive, process_marker
from personagap.records import Label, Run
from personagap.store import now, opened, upsert


def _dead_marker() -> dict:
    """The marker of a process that has run and been reaped."""
    child = subprocess.Popen([sys.executable, "-c", "import os, json; print(os.getpid())"], stdout=subprocess.PIPE,
                             text=True)
    out, _ = child.communicate(timeout=60)
    return process_marker() | {"pid": int(out)}


def test_alive_dead_recycled_and_foreign_processes() -> None:
    me = process_marker()
    assert me["pid"] == os.getpid() and process_alive(me) is True
    assert process_alive(_dead_marker()) is False
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        alive = process_marker() | {"pid": sleeper.pid, "start": None}
        assert process_alive(alive) is True
        if me["start"] is not None:  # Linux: a live pid that started at another time is another process
            assert process_alive(alive | {"start": me["start"] - 1}) is False
    finally:
        sleeper.kill()
        sleeper.wait()
    assert process_alive(me | {"host": "another-host"}) is None  # cannot tell: left alone
    assert process_alive(None) is None
    assert effective_status("finished", {"process": _dead_marker()}) == "finished"


def _run(db: Path, run_id: str, marker: dict) -> None:
    run = Run(run_id=run_id, kind="judge", source="test", rater="j/v1/m", started_at=now(), status="running",
              parameters={"process": marker})
    with opened(db) as con:
        upsert(con, "runs", [run.model_dump()])


def _label(item: str, run_id: str) -> Label:
    return Label(item_id=item, rater="j/v1/m", rater_kind="llm", condition="", label="yes", raw="YES",
                 run_id=run_id)


def test_only_journals_of_dead_runs_are_stored(tmp_path: Path) -> None:
    db = tmp_path / "runs.duckdb"
    _run(db, "judge-dead", _dead_marker())
    _run(db, "judge-live", process_marker())
    _run(db, "judge-foreign", process_marker() | {"host": "another-host"})
    for run_id in ("judge-dead", "judge-live", "judge-foreign"):
        journal = Journal(db, run_id)
        for i in range(3):
            cache = {"key": f"{run_id}-{i}", "judge": "j", "judge_version": 1, "model": "m", "label": None,
                     "raw": "YES", "reason": None, "error": None, "usage": None, "created_at": now()}
            journal.append([_label(f"{run_id}-item-{i}", run_id)], cache)
        journal.close(delete=False)
    with journal_path(db, "judge-dead").open("ab") as f:
        f.write(b'{"labels": [{"item_id": "cut sh')  # the kill came in the middle of a line

    with opened(db) as con:
        recovered = recover_journals(con, db)
        marked = mark_interrupted_runs(con)
    assert recovered == {"judge-dead": 3} and marked == ["judge-dead"]
    assert not journal_path(db, "judge-dead").exists()
    assert journal_path(db, "judge-live").exists() and journal_path(db, "judge-foreign").exists()
    con = duckdb.connect(str(db), read_only=True)
    try:
        labels = con.execute("SELECT run_id, count(*) FROM labels GROUP BY run_id").fetchall()
        cached = con.execute("SELECT count(*) FROM judge_cache").fetchall()[0][0]
        statuses = dict(con.execute("SELECT run_id, status FROM runs").fetchall())
    finally:
        con.close()
    assert labels == [("judge-dead", 3)] and cached == 3
    assert statuses == {"judge-dead": "interrupted", "judge-live": "running", "judge-foreign": "running"}


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.one_of(st.binary(max_size=80), st.sampled_from([b"5", b"[]", b'{"labels": 3}', b'{"labels": []}',
                                                                    b'{"labels": [], "cache": 1}']))))
def test_any_journal_bytes_give_answers_or_are_skipped(tmp_path: Path, lines: list[bytes]) -> None:
    path = tmp_path / "fuzz.journal"
    path.write_bytes(b"\n".join(lines))
    for labels, cache in read_journal(path):  # never an exception: what is not a whole answer is skipped
        assert all(isinstance(label, Label) for label in labels) and (cache is None or "created_at" in cache)


def test_dashboard_shows_a_killed_run_as_interrupted(tmp_path: Path) -> None:
    """The Runs page reads the database read-only: a dead run's stored 'running' is shown as 'interrupted'."""
    from personagap.dashboard.queries import runs

    db = tmp_path / "runs.duckdb"
    _run(db, "judge-dead", _dead_marker())
    _run(db, "judge-alive", process_marker())
    status = dict(zip(runs(db)["run_id"], runs(db)["status"], strict=True))
    assert status == {"judge-dead": "interrupted", "judge-alive": "running"}
    with opened(db) as con:  # the stored row is untouched: only a writer marks it
        assert con.execute("SELECT status FROM runs WHERE run_id = 'judge-dead'").fetchall() == [("running",)]
