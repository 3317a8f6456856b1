"""The server's prefetch in its child process and the start-up's warm-up: what the first Overview adopts.

The prefetch computes in a spawned child (so that its work never holds the server's interpreter lock); the view and
the diagnosis it sends must be the ones the page computes, a failure must reach the page as an error to recompute,
and the row counts read before the port opened are served once and never after a write.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from personagap.analysis.agreement import DEFAULT_SEED
from personagap.analysis.diagnosis_store import diagnose_store
from personagap.analysis.pipeline import pipeline_db
from personagap.dashboard import prefetch, queries, serve
from personagap.sample_pipeline import import_sample_pipeline


@pytest.fixture(scope="module")
def sample_db(tmp_path_factory: pytest.TempPathFactory) -> str:
    folder = tmp_path_factory.mktemp("prefetch")
    db = folder / "sample.duckdb"
    import_sample_pipeline(folder / "files", db)
    return str(db)


@pytest.mark.slow
def test_the_child_sends_the_view_and_the_diagnosis_the_page_computes(sample_db: str) -> None:
    prefetch.start(sample_db)
    early = prefetch.view(sample_db)
    assert early is not None
    read, future = early
    assert read == prefetch.stamp(sample_db)
    view = future.result(timeout=120)
    assert view == pipeline_db(sample_db)
    assert view.rows, "the sample pipeline has rows on every stage"
    got = prefetch.take(sample_db, DEFAULT_SEED)
    assert got is not None and got.to_json_dict() == diagnose_store(sample_db).diagnosis.to_json_dict()


def test_a_failing_child_is_an_error_for_the_page_not_a_hang(tmp_path: Path) -> None:
    bad = tmp_path / "not-a-store.duckdb"
    bad.write_bytes(b"this is not a DuckDB file" * 100)
    prefetch.start(str(bad))
    early = prefetch.view(str(bad))
    assert early is not None
    with pytest.raises(prefetch.PrefetchError, match=r"\w"):
        early[1].result(timeout=120)
    assert prefetch.take(str(bad), DEFAULT_SEED, timeout=120) is None


def test_row_counts_read_at_start_up_are_served_once_and_never_after_a_write(sample_db: str, tmp_path: Path) -> None:
    state = queries.db_state(sample_db)
    prefetch.keep_state(sample_db, state, prefetch.stamp(sample_db))
    assert prefetch.take_state(sample_db) == state
    assert prefetch.take_state(sample_db) is None  # once: later reads go through the page's TTL cache

    copy = tmp_path / "copy.duckdb"
    copy.write_bytes(Path(sample_db).read_bytes())
    prefetch.keep_state(str(copy), state, prefetch.stamp(str(copy)))
    copy.touch()  # a write since the counts were read
    assert prefetch.take_state(str(copy)) is None


def test_warm_up_keeps_the_row_counts_and_skips_streamlits_repl_check(sample_db: str) -> None:
    import streamlit.delta_generator as dg

    serve.warm_up(sample_db)
    assert dg._use_warning_has_been_displayed is True
    assert prefetch.take_state(sample_db) == queries.db_state(sample_db)
    serve.warm_up(None)  # no database: nothing to count, nothing raised


def _descendants(pid: int) -> list[int]:
    from tests.support.processes import children as _children

    found = []
    for child in _children(pid):
        found += [child, *_descendants(child)]
    return found


@pytest.mark.slow
def test_sigterm_leaves_no_prefetch_process_behind(sample_db: str) -> None:
    import os
    import signal
    import subprocess
    import sys
    import time

    from tests.support.browser_helpers import free_port, wait_healthy
    from tests.support.processes import alive as _alive

    port = free_port()
    cli = [str(Path(sys.executable).parent / "personagap")]
    proc = subprocess.Popen([*cli, "dashboard", "--db", sample_db, "--port", str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        tree: list[int] = []
        while len(tree) < 2 and time.monotonic() < deadline:  # the server and its prefetch child (at least)
            tree = _descendants(proc.pid)
            time.sleep(0.05)
        assert len(tree) >= 2, f"expected the server and its prefetch child, found {tree}"
        wait_healthy(f"http://127.0.0.1:{port}", proc)
        tree = sorted(set(tree) | set(_descendants(proc.pid)))
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        deadline = time.monotonic() + 10
        while any(_alive(p) for p in tree) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [p for p in tree if _alive(p)], "processes left behind after SIGTERM"
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _prefetch_children(db: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if prefetch._CHILD.encode() in cmdline and db.encode() in cmdline:
                found.append(int(entry.name))
    return found


def test_the_child_ends_when_the_server_is_killed(sample_db: str, tmp_path: Path) -> None:
    import subprocess
    import sys
    import time

    import duckdb

    from tests.support.processes import alive as _alive

    db = str(tmp_path / "killed.duckdb")
    Path(db).write_bytes(Path(sample_db).read_bytes())
    # A writer holds the file: the child waits for it (the store retries a locked open for 10 s) when its server is
    # killed, with no chance to clean up (SIGKILL).
    with duckdb.connect(db):
        server = subprocess.Popen([sys.executable, "-c", "import sys, time\n"
                                   "from personagap.dashboard import prefetch\n"
                                   "prefetch.start(sys.argv[1])\n"
                                   "time.sleep(60)\n", db])
        try:
            deadline = time.monotonic() + 30
            while not _prefetch_children(db) and time.monotonic() < deadline:
                time.sleep(0.05)
            children = _prefetch_children(db)
            assert children, "the server started its prefetch child"
        finally:
            server.kill()
        server.wait(timeout=30)
        # Long before the file frees: the child saw its stdin close.
        deadline = time.monotonic() + 4
        while any(_alive(p) for p in children) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [p for p in children if _alive(p)], "the prefetch child outlived its server"


def _cpu_seconds(pid: int) -> float:
    import os

    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _view_sent(sample_db: str, db: Path, hold: float) -> list[int]:
    """Prefetch a copy of the sample store at ``db`` with ``hold``; wait for the view; return the child's pids."""
    Path(db).write_bytes(Path(sample_db).read_bytes())
    prefetch.start(str(db), hold=hold)
    early = prefetch.view(str(db))
    assert early is not None and early[1].result(timeout=120).rows
    return _prefetch_children(str(db))


@pytest.mark.slow
def test_the_child_holds_the_diagnosis_back_until_a_page_asks(sample_db: str, tmp_path: Path) -> None:
    import time

    from tests.support.processes import alive as _alive

    db = tmp_path / "held.duckdb"
    [child] = _view_sent(sample_db, db, hold=600)
    before = _cpu_seconds(child)
    time.sleep(2)
    # Held: alive and idle (unheld, it would have computed the diagnosis, sent it and ended).
    assert _alive(child) and _cpu_seconds(child) - before < 0.05
    got = prefetch.take(str(db), DEFAULT_SEED, timeout=120)  # asks: long before the 600 s
    assert got is not None and got.to_json_dict() == diagnose_store(db).diagnosis.to_json_dict()


@pytest.mark.slow
def test_the_child_computes_the_diagnosis_anyway_once_the_hold_has_passed(sample_db: str, tmp_path: Path) -> None:
    import time

    from tests.support.processes import alive as _alive

    db = tmp_path / "unasked.duckdb"
    children = _view_sent(sample_db, db, hold=0.5)
    deadline = time.monotonic() + 120
    while any(_alive(p) for p in children) and time.monotonic() < deadline:  # nobody asks: it ends by itself
        time.sleep(0.05)
    assert not [p for p in children if _alive(p)], "the child still waits after its hold"
    got = prefetch.take(str(db), DEFAULT_SEED, timeout=10)  # sent before it ended
    assert got is not None and got.to_json_dict() == diagnose_store(db).diagnosis.to_json_dict()
