"""The server's prefetch in its child process and the start-up's warm-up: what the first Overview adopts.

The prefetch computes in a spawned child (so that its work never holds the server's interpreter lock); the view and
the diagnosis it sends must be the ones the page computes, a failure must reach the page as an error to recompute,
and the row counts read before the port opened are served once and never after a write.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from personagap.analysis.agreement import DEFAULT_RESAMPLES, DEFAULT_SEED
from personagap.analysis.diagnosis import diagnose_db
from personagap.analysis.pipeline import pipeline_db
from personagap.dashboard import prefetch, queries, serve
from personagap.sample_pipeline import import_sample_pipeline


@pytest.fixture(scope="module")
def sample_db(tmp_path_factory: pytest.TempPathFactory) -> str:
    folder = tmp_path_factory.mktemp("prefetch")
    db = folder / "sample.duckdb"
    import_sample_pipeline(folder / "files", db)
    return str(db)


def test_the_child_sends_the_view_and_the_diagnosis_the_page_computes(sample_db: str) -> None:
    prefetch.start(sample_db)
    early = prefetch.view(sample_db)
    assert early is not None
    read, future = early
    assert read == prefetch.stamp(sample_db)
    view = future.result(timeout=120)
    assert view == pipeline_db(sample_db)
    assert view.rows, "the sample pipeline has rows on every stage"
    got = prefetch.take(sample_db, DEFAULT_RESAMPLES, DEFAULT_SEED)
    assert got is not None and got.to_json_dict() == diagnose_db(sample_db).to_json_dict()


def test_a_failing_child_is_an_error_for_the_page_not_a_hang(tmp_path: Path) -> None:
    bad = tmp_path / "not-a-store.duckdb"
    bad.write_bytes(b"this is not a DuckDB file" * 100)
    prefetch.start(str(bad))
    early = prefetch.view(str(bad))
    assert early is not None
    with pytest.raises(prefetch.PrefetchError, match=r"\w"):
        early[1].result(timeout=120)
    assert prefetch.take(str(bad), DEFAULT_RESAMPLES, DEFAULT_SEED, timeout=120) is None


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
