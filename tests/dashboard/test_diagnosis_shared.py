"""One diagnosis per store state, shared by the Overview and the stage pages (issue 31).

The Overview's pipeline view and the diagnosis come from one read of the per-user counts
(:func:`personagap.analysis.diagnosis_store.diagnose_store`); the Stage 2 page takes that diagnosis instead of
reading the counts again, and the cache holds it for as long as the file is unchanged (its change marker, not a
time to live). Counted here: the reads of the blind reference's per-user counts that the diagnosis and the pipeline
view make (the stage report's own count is another module's and not counted).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from streamlit.testing.v1 import AppTest

from personagap.analysis import diagnosis_store, pipeline
from personagap.dashboard import prefetch
from tests.support.paths import REPO

APP = REPO / "dashboard" / "app.py"

pytestmark = pytest.mark.slow  # the Overview and the Stage 2 page under AppTest, on the real release


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Calls of the diagnosis's and the pipeline view's per-user count reads, and of diagnose_store itself."""
    calls = {"counts": 0, "diagnose_store": 0}

    def counting(module: Any, name: str, key: str) -> None:
        real = getattr(module, name)

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            calls[key] += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(module, name, wrapper)

    counting(diagnosis_store, "label_counts", "counts")
    counting(pipeline, "label_counts", "counts")
    counting(diagnosis_store, "diagnose_store", "diagnose_store")
    return calls


def test_overview_and_stage2_share_one_diagnosis_per_store_state(recenter_db_copy: Path, counted: dict[str, int],
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    db = recenter_db_copy
    monkeypatch.setenv("PERSONAGAP_DB", str(db))
    at = AppTest.from_file(str(APP), default_timeout=300).run()  # the Overview: its pipeline view
    at.run()  # its judges' part (the run the browser's timer asks for): the diagnosis
    assert not at.exception, [e.value for e in at.exception]
    assert counted == {"counts": 1, "diagnose_store": 1}, "the Overview read the counts more than once"

    at.switch_page("page_stage2.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert "Stage 2" in at.title[0].value
    assert counted == {"counts": 1, "diagnose_store": 1}, "the Stage 2 page computed the diagnosis again"
    at.switch_page("page_overview.py").run()
    at.switch_page("page_stage2.py").run()
    assert counted == {"counts": 1, "diagnose_store": 1}, "a page revisited computed the diagnosis again"

    # A write changes the store's change marker: the next page computes a new diagnosis, once.
    before = prefetch.stamp(str(db))
    later = before[0] + 10**9
    os.utime(db, ns=(later, later))
    assert prefetch.stamp(str(db)) != before
    at.switch_page("page_overview.py").run()
    at.switch_page("page_stage2.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert counted == {"counts": 2, "diagnose_store": 2}


def test_stage2_alone_computes_the_diagnosis_once(recenter_db_copy: Path, counted: dict[str, int],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # Opened on the Stage 2 page directly (a bookmarked URL): no Overview worker to share with; still one read.
    monkeypatch.setenv("PERSONAGAP_DB", str(recenter_db_copy))
    at = AppTest.from_file(str(REPO / "dashboard" / "page_stage2.py"), default_timeout=300).run()
    assert not at.exception, [e.value for e in at.exception]
    at.run()
    assert counted == {"counts": 1, "diagnose_store": 1}
