"""The pipeline view and the diagnosis from one set of counts: the same figures as apart, counted once, view first."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from personagap.analysis import diagnosis, diagnosis_store, pipeline
from personagap.analysis.agreement import json_safe
from personagap.analysis.diagnosis import diagnose_db
from personagap.analysis.diagnosis_store import diagnose_from_store
from personagap.analysis.pipeline import pipeline_db
from personagap.analysis.pipeline_first import pipeline_and_diagnosis
from personagap.store import aggregates


def _json(d: Any, tests: dict[str, Any]) -> str:
    return json.dumps(d.to_json_dict() | {"tests": json_safe(tests)}, sort_keys=True)


@pytest.mark.slow
def test_same_figures_as_computed_apart(recenter_db: Path) -> None:
    view, diag, tests = pipeline_and_diagnosis(recenter_db)
    alone, alone_tests = diagnose_from_store(recenter_db)
    assert view == pipeline_db(recenter_db)
    assert _json(diag, tests) == _json(alone, alone_tests)
    _, lean, none = pipeline_and_diagnosis(recenter_db, extras=False)
    assert none == {} and lean.to_json_dict() == diagnose_db(recenter_db).to_json_dict()


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
    view, _, _ = pipeline_and_diagnosis(recenter_db, on_view=lambda v: events.append(f"view {len(v.rows)}"))
    assert events.count("counts blind") == 1
    assert events.index(f"view {len(view.rows)}") < events.index("diagnosis")
