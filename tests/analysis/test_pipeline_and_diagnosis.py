"""The one diagnosis entry: the pipeline view and the diagnosis from one set of counts, counted once, view first."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from personagap.analysis import diagnosis, diagnosis_store, pipeline
from personagap.analysis.diagnosis_store import diagnose_store
from personagap.analysis.pipeline import pipeline_db
from personagap.store import aggregates


@pytest.mark.slow
def test_the_view_from_shared_counts_is_the_views_own(recenter_db: Path) -> None:
    done = diagnose_store(recenter_db, view=True)
    assert done.view == pipeline_db(recenter_db)
    assert done.extras == {}
    assert diagnose_store(recenter_db).view is None


@pytest.mark.slow
def test_counted_once_and_the_view_first(recenter_db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    events: list[str] = []
    real_counts, real_diagnose = aggregates.label_counts, diagnosis.diagnose

    def counts(*args: Any, **kwargs: Any) -> Any:
        events.append(f"counts {args[2] if len(args) > 2 else kwargs.get('which', 'blind')}")
        return real_counts(*args, **kwargs)

    def diagnose(*args: Any, **kwargs: Any) -> Any:
        events.append("diagnosis")
        return real_diagnose(*args, **kwargs)

    for module in (aggregates, diagnosis_store, pipeline):
        monkeypatch.setattr(module, "label_counts", counts)
    monkeypatch.setattr(diagnosis, "diagnose", diagnose)
    done = diagnose_store(recenter_db, extras=True,
                          on_view=lambda v: events.append(f"view {len(v.rows)}"))
    assert done.view is not None and done.extras
    assert events.count("counts blind") == 1
    assert events.index(f"view {len(done.view.rows)}") < events.index("diagnosis")
