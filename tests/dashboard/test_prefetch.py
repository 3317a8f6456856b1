"""The server's prefetch: the Overview adopts its pipeline view, and its diagnosis is the one the page computes."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from personagap.analysis.agreement import DEFAULT_SEED
from personagap.analysis.diagnosis_store import diagnose_store
from personagap.analysis.pipeline import pipeline_db
from personagap.dashboard import overview, prefetch


@pytest.mark.slow
def test_overview_adopts_the_prefetched_view(recenter_db: Path, tmp_path: Path) -> None:
    db = str(shutil.copy(recenter_db, tmp_path / "p.duckdb"))
    prefetch.start(db)
    early = prefetch.view(db)
    assert early is not None
    future = overview.pipeline(db)
    assert future is early[1]  # the page waits for the prefetch's work, never starts its own
    assert future.result(timeout=120) == pipeline_db(db)
    assert overview.pipeline(db) is future  # cached
    got = prefetch.take(db, DEFAULT_SEED)
    assert got is not None and got.to_json_dict() == diagnose_store(db).diagnosis.to_json_dict()
    assert prefetch.take(db, DEFAULT_SEED) is None  # taken once


@pytest.mark.slow
def test_other_settings_or_a_changed_file_are_not_served(recenter_db: Path, tmp_path: Path) -> None:
    db = str(shutil.copy(recenter_db, tmp_path / "q.duckdb"))
    prefetch.start(db)
    assert prefetch.take(db, DEFAULT_SEED + 1) is None
    prefetch.start(db)
    assert prefetch.view(db) is not None
    Path(db).touch()  # a write since the prefetch read the file
    assert prefetch.take(db, DEFAULT_SEED) is None
