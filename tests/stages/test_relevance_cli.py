"""The CLI contract of stage 2, checked against an independent computation from the release files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from sklearn.metrics import (
    balanced_accuracy_score,
    cohen_kappa_score,
    matthews_corrcoef,
    precision_score,
    recall_score,
)

from personagap.cli import cli
from tests.support.paths import FIXTURES


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _independent(root: Path, name: str) -> tuple[float, float, int]:
    """Kappa, over-selection and n for one LLM file, computed without PersonaGap."""
    human = {}
    for r in _jsonl(root / "stage2/task6_items.jsonl"):
        for a in r["attributes"]:
            human[(r["user_id"], int(r["prompt_id"].rsplit("_", 1)[1]), a["attribute"])] = int(a["is_relevant"])
    llm = {(r["user_id"], r["prompt_index"], i["attribute"]): int(i["relevant"])
           for r in _jsonl(root / f"stage2/llm_relevance/{name}.jsonl") for i in r["items"]}
    keys = sorted(set(human) & set(llm))
    h = [human[k] for k in keys]
    j = [llm[k] for k in keys]
    return cohen_kappa_score(h, j), sum(j) / sum(h), len(keys)


def _stage2_labels(root: Path, name: str) -> tuple[dict, dict, list]:
    """Human majority and one LLM file's labels keyed by (user, prompt, attribute), read from the release files."""
    human = {(r["user_id"], int(r["prompt_id"].rsplit("_", 1)[1]), a["attribute"]): int(a["is_relevant"])
             for r in _jsonl(root / "stage2/task6_items.jsonl") for a in r["attributes"]}
    llm = {(r["user_id"], r["prompt_index"], i["attribute"]): int(i["relevant"])
           for r in _jsonl(root / f"stage2/llm_relevance/{name}.jsonl") for i in r["items"]}
    return human, llm, sorted(set(human) & set(llm))


@pytest.fixture(scope="module")
def report_json(recenter_db: Path) -> dict:
    result = CliRunner().invoke(cli, ["report", "relevance", "--db", str(recenter_db), "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


@pytest.mark.parametrize("name", ["gpt-5.4", "google_gemma-4-31b-it"])
def test_report_recomputes_kappa_and_over_selection(report_json: dict, shared_data: Path, name: str) -> None:
    kappa, over, n = _independent(shared_data / "recenter", name)
    (row,) = [j for j in report_json["judges"] if j["judge"] == name]
    assert row["n"] == n
    assert row["kappa"] == pytest.approx(kappa)
    assert row["over_selection"] == pytest.approx(over)
    lo, hi = row["kappa_ci"]
    assert lo < row["kappa"] < hi
    assert set(row) >= {"judge", "n", "kappa", "kappa_ci", "over_selection", "human_yes_rate", "judge_yes_rate",
                        "precision", "recall", "f1"}


def test_report_precision_recall_match_sklearn(report_json: dict, shared_data: Path) -> None:
    human, llm, keys = _stage2_labels(shared_data / "recenter", "gpt-5.4")
    (row,) = [j for j in report_json["judges"] if j["judge"] == "gpt-5.4"]
    assert row["precision"] == pytest.approx(precision_score([human[k] for k in keys], [llm[k] for k in keys]))
    assert row["recall"] == pytest.approx(recall_score([human[k] for k in keys], [llm[k] for k in keys]))


def test_report_rows_carry_the_robust_panel_and_the_report_the_test_and_estimates(report_json: dict,
                                                                                   shared_data: Path) -> None:
    human, llm, keys = _stage2_labels(shared_data / "recenter", "gpt-5.4")
    h, j = [human[k] for k in keys], [llm[k] for k in keys]
    (row,) = [r for r in report_json["judges"] if r["judge"] == "gpt-5.4"]
    assert row["mcc"] == pytest.approx(matthews_corrcoef(h, j))
    assert row["balanced_accuracy"] == pytest.approx(balanced_accuracy_score(h, j))
    n = len(keys)
    both_yes, both_no = sum(a and b for a, b in zip(h, j, strict=True)), sum(not a and not b for a, b in zip(h, j,
                                                                                                             strict=True))
    assert row["prevalence_index"] == pytest.approx((both_yes - both_no) / n)
    assert row["bias_index"] == pytest.approx((sum(j) - sum(h)) / n)
    assert row["pabak"] == pytest.approx(2 * sum(a == b for a, b in zip(h, j, strict=True)) / n - 1)
    for name in ("ac1", "mcc", "balanced_accuracy"):
        lo, hi = row[f"{name}_ci"]
        assert lo <= row[name] <= hi
    assert {(t["judge"], t["dataset"]) for t in report_json["alt_test"]} >= {("gpt-5.4", "recenter-stage2")}
    rates = [e for e in report_json["estimates"] if e["judge"] == "gpt-5.4" and e["dataset"] == "recenter-stage2"]
    assert rates and rates[0]["naive"] == pytest.approx(sum(llm.values()) / len(llm))
    assert rates[0]["human_only"] == pytest.approx(sum(human.values()) / len(human))


def test_pilot_tables_have_all_three_pair_types(report_json: dict) -> None:
    # Blind and anchored pilot labels get a table each (the blind one only with two or more blind annotators).
    tables = [p for p in (report_json["pilot"], report_json["pilot_anchored"]) if p is not None]
    assert tables
    for pilot in tables:
        kinds = {g["pair_type"]: g for g in pilot["groups"]}
        assert set(kinds) == {"human–human", "human–llm", "llm–llm"}
        assert kinds["llm–llm"]["n_pairs"] == 6  # four pilot LLM files
        for g in kinds.values():
            assert g["ci"][0] <= g["mean_kappa"] <= g["ci"][1]
            assert g["n_users"] >= 1
        assert -1 <= pilot["human_alpha"] <= 1


def test_text_report_names_each_judge(recenter_db: Path) -> None:
    result = CliRunner().invoke(cli, ["report", "relevance", "--db", str(recenter_db)])
    assert result.exit_code == 0
    assert "gpt-5.4" in result.output and "google_gemma-4-31b-it" in result.output
    assert "human–human" in result.output


def test_missing_db_is_a_clear_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["report", "relevance", "--db", str(tmp_path / "none.duckdb")])
    assert result.exit_code == 2
    assert "no such database" in result.output


def test_bad_release_exits_2_with_location(tmp_path: Path) -> None:
    bad = FIXTURES / "recenter_bad/mistyped_field"
    result = CliRunner().invoke(cli, ["import", "recenter", str(bad), "--db", str(tmp_path / "x.duckdb")])
    assert result.exit_code == 2
    assert "task5_items.jsonl:1: field 'prompt_index'" in result.output


@pytest.mark.slow
def test_demo_runs_offline_as_installed_console_script(tmp_path: Path) -> None:
    exe = Path(sys.executable).with_name("personagap")
    out = subprocess.run([str(exe), "demo", "--db", str(tmp_path / "demo.duckdb")], capture_output=True, text=True,
                         timeout=300, env={"PATH": str(exe.parent), "HOME": str(tmp_path), "NO_PROXY": "*"})
    assert out.returncode == 0, out.stderr
    assert "SAMPLE" in out.stdout
    assert "sample-llm-eager" in out.stdout
    assert "too few users" not in out.stdout  # the sample has enough users for every CI
    assert (tmp_path / "demo.duckdb").exists()
