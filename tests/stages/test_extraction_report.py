"""Stage 1 report on the real data (pilot agreement, LAPS gold), the CLI contract, the demo, the matcher threshold."""

from __future__ import annotations

import json
import math
from pathlib import Path

import krippendorff
import numpy as np
import pytest
from click.testing import CliRunner

from personagap.analysis.extraction import OFFLINE_THRESHOLD, calibrate_threshold, laps_calibration_scores
from personagap.cli import cli
from personagap.stages.extraction import import_laps, render_extraction, report_extraction
from tests.support.paths import FIXTURES

BAD = FIXTURES / "extraction_bad"


@pytest.fixture(scope="module")
def real_db(recenter_db: Path, shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    import shutil

    db = tmp_path_factory.mktemp("stage1") / "real.duckdb"
    shutil.copy(recenter_db, db)
    import_laps(shared_data / "laps", db)
    return db


def test_real_report_shows_pilot_human_agreement(real_db: Path, shared_data: Path):
    report = report_extraction(real_db)
    (pilot,) = report.human_agreement
    assert pilot.dataset == "recenter-pilot" and pilot.annotators == 8 and pilot.users == 5
    # Alpha recomputed straight from the release files (attributes by (file index, position)).
    code = {"ok": 0, "bad": 1, "unsure": 2}
    cells: dict[str, dict[tuple[int, int], int]] = {}
    for path in sorted((shared_data / "recenter" / "pilot" / "annotations").glob("*_task1.jsonl")):
        for line in path.read_text().splitlines():
            row = json.loads(line)
            for pos, j in enumerate(row["attr_judgments"]):
                cells.setdefault(row["annotator"], {})[(row["index"], pos)] = code[j["judgment"]]
    units = sorted({k for c in cells.values() for k in c})
    data = np.array([[c.get(u, np.nan) for u in units] for c in cells.values()], dtype=float)
    data = data[:, (~np.isnan(data)).sum(axis=0) >= 2]
    assert pilot.items == data.shape[1]
    assert pilot.alpha == pytest.approx(krippendorff.alpha(reliability_data=data, level_of_measurement="nominal"))
    # The pilot has 5 users, below MIN_USERS_FOR_CI: alpha is reported without an interval, and says why.
    from personagap.analysis.agreement import MIN_USERS_FOR_CI

    assert pilot.users < MIN_USERS_FOR_CI and all(math.isnan(c) for c in pilot.alpha_ci)
    assert not math.isnan(pilot.fleiss) and pilot.fleiss_raters_per_item >= 2
    rates = {r.rater: r for r in pilot.per_annotator}
    assert len(rates) == 8 and all(abs(r.ok + r.bad + r.unsure - 1) < 1e-9 for r in rates.values())
    (humans,) = [r for r in report.acceptance if r.dataset == "recenter-pilot"]
    assert humans.n == sum(r.n for r in rates.values())
    text = render_extraction(report)
    assert "Krippendorff's alpha (nominal)" in text and "annotator_01" in text
    assert f"{_fmt3(pilot.alpha)} (too few users for a CI: {pilot.users} users)" in text


def test_a_ci_over_too_few_users_is_not_printed_as_one(real_db: Path):
    # The pilot's Fleiss items (all eight annotators) come from a single user: an interval over one user means
    # nothing. The report gives no CI there and says why, with the user count.
    from personagap.analysis.agreement import MIN_USERS_FOR_CI

    report = report_extraction(real_db)
    (pilot,) = report.human_agreement
    assert pilot.fleiss_users < MIN_USERS_FOR_CI and pilot.fleiss_items > 0
    assert all(math.isnan(c) for c in pilot.fleiss_ci) and not math.isnan(pilot.fleiss)
    text = render_extraction(report)
    users = f"{pilot.fleiss_users} user{'s' if pilot.fleiss_users != 1 else ''}"
    assert f"{_fmt3(pilot.fleiss)} (too few users for a CI: {users})" in text
    # Alpha spans all of the pilot's users, still too few: no interval there either, the count given.
    assert f"{_fmt3(pilot.alpha)} (too few users for a CI: {pilot.users} users)" in text
    assert json.loads(json.dumps(report.to_json_dict()))["human_agreement"][0]["fleiss_ci"] == [None, None]


def _fmt3(v: float) -> str:
    return f"{v:.3f}"


def test_real_report_shows_laps_gold(real_db: Path):
    report = report_extraction(real_db)
    gold = {g.split: g for g in report.gold if g.dataset == "laps"}
    assert set(gold) == {"train", "val"}
    assert gold["train"].sessions == 981 and gold["val"].sessions == 143
    assert gold["train"].sessions_without_gold == 19 and gold["val"].sessions_without_gold == 0
    assert report.matching == []  # no extractor has run on LAPS in this database


def test_offline_threshold_is_the_one_chosen_on_laps_train(shared_data: Path):
    sessions = []
    for topic in ("movie", "recipe"):
        for w in json.loads((shared_data / "laps" / f"{topic}_dataset_train.json").read_text()):
            for s in w["sessions"]:
                turns = [t["message"] for t in s["dialogue"] if t["role"] == "User"]
                golds = sorted({v.strip() for vs in s["preferences"].values() for v in vs})
                sessions.append((topic, w["worker_id"], turns, golds))
    cal = calibrate_threshold(*laps_calibration_scores(sessions))
    assert cal.threshold == pytest.approx(OFFLINE_THRESHOLD)
    assert cal.tpr > 0.8 and cal.fpr < 0.1  # the figures stated in the report's matcher note


def test_cli_import_and_report_json(tmp_path: Path, shared_data: Path):
    db = str(tmp_path / "c.duckdb")
    runner = CliRunner()
    out = runner.invoke(cli, ["import", "laps", str(shared_data / "laps" / "movie_dataset_val.json"), "--db", db])
    assert out.exit_code == 0, out.output
    assert "19 workers" in out.output
    out = runner.invoke(cli, ["report", "extraction", "--db", db, "--json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    assert data["gold"][0]["split"] == "val" and data["threshold"] == pytest.approx(OFFLINE_THRESHOLD)
    assert data["human_agreement"] == []


def test_cli_bad_input_exits_2_with_location(tmp_path: Path):
    db = tmp_path / "c.duckdb"
    out = CliRunner().invoke(cli, ["import", "extraction", str(BAD / "jsonl_unknown_turn_id.jsonl"), "--db", str(db)])
    assert out.exit_code == 2
    assert "jsonl_unknown_turn_id.jsonl:2: field 'attributes[0].turn_ids[1]'" in out.output
    assert not db.exists()


def test_demo_step_reports_stage1_offline(tmp_path: Path):
    from personagap.commands.extraction import demo_extraction

    text = demo_extraction(tmp_path, tmp_path / "demo.duckdb")
    assert "Stage 1 — attribute extraction" in text
    assert "sample-extraction: 2 annotators" in text
    assert "sample-verifier" in text and "offline@" in text
    report = report_extraction(tmp_path / "demo.duckdb")
    # Expected counts are recounted from the sample JSONL the demo step wrote, not typed in.
    rows = [json.loads(line) for line in (tmp_path / "sample_extraction/extraction_sample.jsonl").open()]
    verdicts = [v for r in rows for a in r["attributes"] for v in a["verdicts"] if v.get("kind", "human") == "human"]
    (overall,) = [m for m in report.matching if m.category == "all"]
    assert (overall.attributes, overall.gold, overall.users) == (
        sum(len(r["attributes"]) for r in rows), sum(len(r["gold"]) for r in rows), len(rows))
    assert overall.users >= 5  # enough users for a CI
    (humans,) = [r for r in report.acceptance if r.rater.startswith("humans")]
    assert humans.n == len(verdicts)
    assert humans.ok == pytest.approx(sum(v["label"] == "ok" for v in verdicts) / len(verdicts))
