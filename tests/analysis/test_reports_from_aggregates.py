"""Issue 20: reports computed from DuckDB's aggregates give every figure of the per-label path.

The per-label path (every label of the stage in pandas) is the reference: the aggregate path must give the same
JSON, figure by figure (exact, or within 1e-12 where only the order of a floating-point sum differs), on the real
Re-Centering, PRISM and USR stores and on the demo sample.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from personagap.analysis.agreement import json_safe
from personagap.datasets import dataset_records
from personagap.labels_api import dataset_origins
from personagap.stages.relevance import report_relevance
from personagap.stages.response import import_prism, import_usr
from personagap.store import load_labels, opened
from tests.support.oracles import estimate_rows, relevance_report, report_extras

TOLERANCE = 1e-12


def differences(old: Any, new: Any, path: str = "") -> list[str]:
    """Every place two JSON values differ (numbers beyond :data:`TOLERANCE`), as readable paths."""
    if isinstance(old, dict) and isinstance(new, dict):
        out = [f"{path}.{k}: only in {'old' if k in old else 'new'}" for k in set(old) ^ set(new)]
        return out + [d for k in sorted(set(old) & set(new)) for d in differences(old[k], new[k], f"{path}.{k}")]
    if isinstance(old, list) and isinstance(new, list):
        if len(old) != len(new):
            return [f"{path}: {len(old)} vs {len(new)} entries"]
        return [d for i, (a, b) in enumerate(zip(old, new, strict=True)) for d in differences(a, b, f"{path}[{i}]")]
    both_numbers = isinstance(old, int | float) and isinstance(new, int | float)
    if both_numbers and not isinstance(old, bool) and not isinstance(new, bool):
        if old == new or math.isclose(old, new, rel_tol=TOLERANCE, abs_tol=TOLERANCE):
            return []
    elif old == new:
        return []
    return [f"{path}: {old!r} vs {new!r}"]


def per_label_json(db: Path) -> dict[str, Any]:
    """The stage-2 report as it was built before issue 20: every relevance label loaded into pandas."""
    with opened(db, read_only=True) as con:
        labels = load_labels(con, stage="relevance")
        origins = dataset_origins(con)
        scales = {ds: r.scale for (stage, ds), r in dataset_records(con).items() if stage == "relevance"}
    report = relevance_report(labels, origins=origins, scales=scales)
    return json_safe(report.to_json_dict())  # type: ignore[no-any-return]


def test_differences_sees_a_changed_figure() -> None:
    """The comparison itself fails on a figure that moved, a missing row or a changed text."""
    assert differences({"a": [1.0, "x"]}, {"a": [1.0 + 1e-9, "x"]})
    assert differences({"a": [1.0]}, {"a": []})
    assert differences({"a": "x"}, {"a": "y"})
    assert not differences({"a": [1.0, None]}, {"a": [1.0 + 1e-15, None]})


@pytest.fixture(scope="module")
def real_db(recenter_db: Path, shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Re-Centering, PRISM and USR in one store."""
    import shutil

    db = tmp_path_factory.mktemp("agg") / "real.duckdb"
    shutil.copy(recenter_db, db)
    import_prism(shared_data / "prism_judge", db)
    import_usr(shared_data / "usr_personachat", db)
    return db


@pytest.fixture(scope="module")
def demo_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo sample (``personagap demo``)."""
    from click.testing import CliRunner

    from personagap.cli import cli

    db = tmp_path_factory.mktemp("agg-demo") / "demo.duckdb"
    result = CliRunner().invoke(cli, ["demo", "--db", str(db)])
    assert result.exit_code == 0, result.output
    return db


@pytest.mark.slow
@pytest.mark.parametrize("store", ["real_db", "demo_db"])
def test_report_relevance_from_aggregates_is_the_per_label_report(store: str, request: pytest.FixtureRequest) -> None:
    db = request.getfixturevalue(store)
    old = per_label_json(db)
    new = json_safe(report_relevance(db).to_json_dict())
    assert old["judges"], "the store must have judge rows for the comparison to mean something"
    assert differences(old, new) == []


def per_label_best_judge_rows(db: str, diagnosis: Any) -> dict[str, Any]:
    """The per-label reference path: each best judge's dataset loaded label by label, then report_extras."""
    from personagap.analysis.comparable import anchored_human_mask, judge_display

    out: dict[str, Any] = {}
    with opened(db, read_only=True) as con:
        records = dataset_records(con)
        for s in diagnosis.stages:
            if s.best is None:
                continue
            best, ds = s.best, s.best.dataset
            labels = load_labels(con, stage=s.stage, dataset=ds)
            anchored = [ds] if anchored_human_mask(labels).any() else []
            tests, rates = report_extras(labels, [ds], positive="yes" if best.binary else None, anchored=anchored,
                                         scales={ds: records[(s.stage, ds)].scale})
            name = judge_display(best.rater, best.condition)
            out[s.stage] = {"alt_test": [t for t in tests if t["judge"] == name],
                            "estimates": [e for e in rates if e["judge"] == name]}
    return out


@pytest.mark.slow
@pytest.mark.parametrize("store", ["real_db", "demo_db"])
def test_best_judge_extras_from_aggregates_are_the_per_label_rows(store: str, request: pytest.FixtureRequest) -> None:
    """diagnose's best-judge alternative-annotator test and corrected rate: the same rows without every label."""
    from personagap.analysis.diagnosis_store import best_judge_extras, diagnose_store

    db = request.getfixturevalue(store)
    diagnosis = diagnose_store(db).diagnosis
    old = json_safe(per_label_best_judge_rows(db, diagnosis))
    with opened(db, read_only=True) as con:
        new = json_safe(best_judge_extras(con, diagnosis))
    assert any(rows["alt_test"] or rows["estimates"] for rows in old.values())
    assert differences(old, new) == []


@pytest.mark.parametrize("store", ["real_db", "demo_db"])
def test_estimates_from_counts_are_the_per_item_estimates(store: str, request: pytest.FixtureRequest) -> None:
    """Corrected estimates from DuckDB's counts: estimate_rows' rows (PPI within float rounding of its sums)."""
    from personagap.analysis.aggregated import estimate_rows_from_counts
    from personagap.store.aggregates import label_counts

    db = request.getfixturevalue(store)
    compared = 0
    with opened(db, read_only=True) as con:
        labels = load_labels(con, stage="relevance")
        for ds in sorted(set(labels["dataset"])):
            for which in ("blind", "anchored"):
                old = estimate_rows(labels, ds, humans=which)
                judges, reference = label_counts(con, "relevance", which, ds)
                new = estimate_rows_from_counts(judges, reference, ds, humans=which, positive="yes")
                assert differences(json_safe(old), json_safe(new)) == []
                compared += len(old)
    assert compared


@pytest.mark.parametrize("store", ["real_db", "demo_db"])
def test_diagnose_store_best_judge_rows_are_the_per_label_rows(store: str, request: pytest.FixtureRequest) -> None:
    """`diagnose --json`'s best-judge rows from the one entry's shared counts: the per-label path's rows."""
    from personagap.analysis.diagnosis_store import diagnose_store

    db = request.getfixturevalue(store)
    done = diagnose_store(db, extras=True, seed=0)
    old = json_safe(per_label_best_judge_rows(db, done.diagnosis))
    assert done.diagnosis.stages[1].judges and old
    assert differences(old, json_safe(done.extras)) == []
