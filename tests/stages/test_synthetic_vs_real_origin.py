"""Synthetic personas vs real users, side by side: every stage report and ``diagnose`` say which is which.

Two made-up team datasets per stage (tests/support/byo_data.py, written for the project) are imported with
``personagap import labels --origin synthetic`` and ``--origin real``; the same LLM judge labels both. On the
synthetic one it copies the first annotator (so it looks better there, as judges do on synthetic personas).
Expected kappas are recomputed here with scikit-learn from the rows the test wrote.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from personagap.cli import cli
from personagap.stages.relevance import render_relevance, report_relevance
from tests.support.byo_data import HUMANS, LLM, expected_vs_majority, team_rows, write_rows
from tests.support.paths import REPO

REAL, SYNTH = "team-real", "team-synth"


def _rows(stage: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    real = team_rows(stage, seed=11)
    synth = team_rows(stage, seed=12)
    first = {r["item_id"]: r["label"] for r in synth if r["rater"] == HUMANS[0]}
    synth = [r | {"label": first[r["item_id"]]} if r["rater"] == LLM else r for r in synth]
    return real, synth


def _import(tmp_path: Path, stage: str) -> tuple[str, list[dict[str, Any]], list[dict[str, Any]]]:
    real, synth = _rows(stage)
    db = str(tmp_path / "team.duckdb")
    for name, rows, origin in ((REAL, real, "real"), (SYNTH, synth, "synthetic")):
        result = CliRunner().invoke(cli, ["import", "labels", str(write_rows(tmp_path / f"{name}.jsonl", rows)),
                                          "--stage", stage, "--dataset", name, "--origin", origin, "--db", db])
        assert result.exit_code == 0, result.output
    return db, real, synth


def _cli(*args: str) -> str:
    result = CliRunner().invoke(cli, list(args))
    assert result.exit_code == 0, result.output
    return str(result.output)


def _report(stage: str, db: str) -> tuple[dict[str, Any], str]:
    args = ("report", stage, "--db", db)
    return json.loads(_cli(*args, "--json")), _cli(*args)


def _judge_rows(stage: str, report: dict[str, Any]) -> list[dict[str, Any]]:
    if stage == "extraction":
        return [v | {"judge": v["verifier"]} for v in report["verifiers"]]
    if stage == "response":
        return [j for j in report["judges"] if j["reference"] == "human"]
    return list(report["judges"])


def _in_ci(value: float, ci: list[float]) -> bool:
    return ci[0] is not None and ci[0] <= value + 1e-9 and value - 1e-9 <= ci[1]


@pytest.mark.slow
@pytest.mark.parametrize("stage", ["relevance", "response", "extraction"])
def test_report_shows_synthetic_beside_real(tmp_path: Path, stage: str) -> None:
    db, real, synth = _import(tmp_path, stage)
    report, text = _report(stage, db)

    rows = {j["dataset"]: j for j in _judge_rows(stage, report) if j["judge"] == LLM}
    assert {ds: r["origin"] for ds, r in rows.items()} == {REAL: "real", SYNTH: "synthetic"}
    (side,) = report["origin_comparison"]
    _, kappa_real = expected_vs_majority(real)
    _, kappa_synth = expected_vs_majority(synth)
    assert kappa_synth > kappa_real  # the made-up design: the judge copies an annotator on synthetic data
    assert side["judge"] == LLM
    assert (side["synthetic_dataset"], side["real_dataset"]) == (SYNTH, REAL)
    assert side["synthetic_kappa"] == pytest.approx(kappa_synth)
    assert side["real_kappa"] == pytest.approx(kappa_real)
    assert side["difference"] == pytest.approx(kappa_synth - kappa_real)
    assert _in_ci(side["real_kappa"], side["real_kappa_ci"])
    # A kappa of 1 (every synthetic label agrees, with or without any user) sits at the edge of its range: the rule
    # prints no interval rather than a zero-width [1, 1]; any other kappa gets one that holds it.
    if side["synthetic_kappa"] == pytest.approx(1.0):
        assert side["synthetic_kappa_ci"] == [None, None]
    else:
        assert _in_ci(side["synthetic_kappa"], side["synthetic_kappa_ci"])
    assert side["real_n_users"] == side["synthetic_n_users"] == 12
    # Every dataset entry of the report says its origin (alt-test rows too).
    assert {t["dataset"]: t["origin"] for t in report["alt_test"] if t["judge"] == LLM} == {
        REAL: "real", SYNTH: "synthetic"}

    assert "Synthetic personas vs real users" in text
    (line,) = [x for x in text.splitlines() if x.startswith(f"  {LLM}: synthetic {SYNTH}")]
    assert f"{kappa_synth:.2f}" in line and f"real {REAL} {kappa_real:.2f}" in line
    assert f"{SYNTH}, synthetic personas" in text


def _real_only(tmp_path: Path) -> str:
    real, _ = _rows("relevance")
    db = str(tmp_path / "team.duckdb")
    _cli("import", "labels", str(write_rows(tmp_path / "r.jsonl", real)), "--stage", "relevance", "--dataset", REAL,
         "--db", db)
    return db


def test_no_side_by_side_without_both_origins(tmp_path: Path) -> None:
    db = _real_only(tmp_path)
    report = report_relevance(db)
    assert report.origin_comparison == [] and {j.origin for j in report.judges} == {"real"}
    assert "Synthetic personas vs real users" not in render_relevance(report)


@pytest.mark.slow
def test_diagnose_labels_origins_and_says_when_the_best_judge_is_synthetic(tmp_path: Path) -> None:
    db, real, synth = _import(tmp_path, "relevance")
    diagnosis = json.loads(_cli("diagnose", "--db", db, "--json"))
    (stage,) = [s for s in diagnosis["stages"] if s["stage"] == "relevance"]
    scores = {j["dataset"]: j for j in stage["judges"] if j["judge"] == LLM}
    assert {ds: j["origin"] for ds, j in scores.items()} == {REAL: "real", SYNTH: "synthetic"}
    assert scores[SYNTH]["kappa"] == pytest.approx(expected_vs_majority(synth)[1])
    assert scores[REAL]["kappa"] == pytest.approx(expected_vs_majority(real)[1])
    assert {g["dataset"]: g["origin"] for g in stage["gaps"]} == {REAL: "real", SYNTH: "synthetic"}
    # Judges are ranked within one dataset (issue 21), real users before synthetic personas: the judge looks
    # better on synthetic personas (it copies an annotator there), and that figure is not the stage's best.
    assert stage["best"]["dataset"] == REAL and stage["best"]["origin"] == "real"
    assert "synthetic personas" not in diagnosis["verdict"].split("What would tell")[0].split("On synthetic")[0]
    # With synthetic personas only, the best judge is scored on them, and the verdict says so.
    _, synth_rows = _rows("relevance")
    only = str(tmp_path / "synth.duckdb")
    _cli("import", "labels", str(write_rows(tmp_path / "s.jsonl", synth_rows)), "--stage", "relevance", "--dataset",
         SYNTH, "--origin", "synthetic", "--db", only)
    diagnosis = json.loads(_cli("diagnose", "--db", only, "--json"))
    assert diagnosis["stages"][1]["best"]["origin"] == "synthetic"
    assert f"best judge {LLM} is scored on synthetic personas ({SYNTH})" in diagnosis["verdict"]
    text = _cli("diagnose", "--db", only)
    assert f"best judge:  {LLM} ({SYNTH}, synthetic personas" in text


def test_diagnose_without_synthetic_data_says_nothing_of_it(tmp_path: Path) -> None:
    db = _real_only(tmp_path)
    diagnosis = json.loads(_cli("diagnose", "--db", db, "--json"))
    assert "synthetic" not in diagnosis["verdict"]
    assert all(j["origin"] == "real" for s in diagnosis["stages"] for j in s["judges"])
    assert not math.isnan(diagnosis["stages"][1]["best"]["kappa"])


def test_origins_and_the_side_by_side_survive_an_export_import_round_trip(tmp_path: Path) -> None:
    db, _, _ = _import(tmp_path, "response")
    _cli("export", "--db", db, "--out", str(tmp_path / "export"))
    copy = str(tmp_path / "copy.duckdb")
    _cli("import", "parquet", str(tmp_path / "export"), "--db", copy)
    before, after = (_cli("report", "response", "--db", d, "--json") for d in (db, copy))
    assert json.loads(after)["origin_comparison"] and after == before  # byte for byte, PPI included


@pytest.mark.slow
def test_dashboard_stage_page_shows_synthetic_beside_real(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What a person sees on the Stage 2 page: the judge's kappa on synthetic personas beside real users."""
    from streamlit.testing.v1 import AppTest

    db, real, synth = _import(tmp_path, "relevance")
    _, kappa_real = expected_vs_majority(real)
    _, kappa_synth = expected_vs_majority(synth)
    monkeypatch.setenv("PERSONAGAP_DB", db)
    app = REPO / "dashboard" / "app.py"
    at = AppTest.from_file(str(app), default_timeout=120).run()
    at.switch_page("page_stage2.py").run()
    assert not at.exception, [e.value for e in at.exception]
    (table,) = [d.value for d in at.dataframe if "synthetic personas" in d.value.columns]
    (row,) = table.to_dict("records")
    assert row["judge"] == LLM
    assert row["synthetic personas"].startswith(f"{SYNTH}: {kappa_synth:.2f}")
    assert row["real users"].startswith(f"{REAL}: {kappa_real:.2f}")
    assert row["synthetic − real"] == f"{kappa_synth - kappa_real:.2f}"
    assert "synthetic personas" in " ".join(at.dataframe[0].value["dataset"])  # judge rows name the origin
