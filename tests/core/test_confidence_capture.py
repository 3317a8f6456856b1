"""Confidence capture rules (issue 23), pure: parsing a stated confidence, its scale, PRISM's certainty, the target."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from personagap.analysis.confidence_report import target_for
from personagap.confidence import as_probability, confidence_meta, read_confidence, scale_bounds
from personagap.human_data.prism import certainty_scale, load_prism
from tests.support import release_builders


@pytest.mark.parametrize(("value", "scale", "expected"), [
    ("60", "1-100", 60.0), (0.83, "probability", 0.83), (" 85% ", "0-100", 85.0), ("2", "unstated", 2.0)])
def test_read_confidence_accepts_numbers_on_their_scale(value: object, scale: str, expected: float) -> None:
    assert read_confidence(value, scale) == (expected, None)


@pytest.mark.parametrize(("value", "scale", "why"), [
    ("very sure", "0-100", "not a number"), (True, "probability", "not a number"), ("nan", "1-5", "finite"),
    ("0", "1-100", "outside its scale 1-100"), (1.5, "probability", "outside"), (None, "0-100", "not a number")])
def test_read_confidence_refuses_with_a_reason(value: object, scale: str, why: str) -> None:
    number, error = read_confidence(value, scale)
    assert number is None and error is not None and why in error
    assert confidence_meta(value, scale) == {"confidence_scale": scale, "confidence_error": error}


def test_scales_map_their_ends_onto_zero_and_one() -> None:
    assert scale_bounds("1-100") == (1.0, 100.0)
    assert as_probability([1, 50.5, 100], "1-100").tolist() == [0.0, 0.5, 1.0]
    assert as_probability([1, 4, 5], "1-5").tolist() == [0.0, 0.75, 1.0]
    assert np.array_equal(as_probability([0.2], "probability"), [0.2])
    for bad in ("unstated", "100-1", "high"):
        with pytest.raises(ValueError, match="is not 'LO-HI'"):
            scale_bounds(bad)


def test_prism_certainty_scale_is_read_from_the_prompt() -> None:
    assert certainty_scale("... by assigning a certainty level from 1 to 100. Use ...") == "1-100"
    assert certainty_scale("assess your confidence ... a Certainty Level from 1 to 5.") == "1-5"
    assert certainty_scale("Declare your choice by using the format") == "unstated"
    assert certainty_scale(None) == "unstated"


def test_prism_unparseable_certainty_keeps_the_label_and_records_the_fields_failure(tmp_path: Path) -> None:
    rows = release_builders.prism()["prism_all_features_mini.jsonl"]
    prompt = "Assess your confidence by assigning a certainty level from 1 to 100."
    certainties = ["85", "high", "150"]
    folder = tmp_path / "prism_judge"
    folder.mkdir()
    (folder / "prism_all_features_mini.jsonl").write_text("".join(
        json.dumps({**r, "prompt": prompt, "certainty": c}) + "\n" for r, c in zip(rows, certainties, strict=True)))
    judged = [lab for lab in load_prism(folder).batch.labels if lab.rater_kind == "llm"]
    first, second, third = judged
    assert first.label == "A" and first.meta == {"swapped": False, "certainty": "85", "confidence": 85.0,
                                                 "confidence_scale": "1-100"}
    assert second.label == "A" and "confidence" not in second.meta
    assert "not a number" in second.meta["confidence_error"]
    # The third answer ('[') is a label failure of its own; its certainty's failure is recorded beside it.
    assert third.label is None and "outside its scale" in third.meta["confidence_error"]


def test_target_prefers_a_given_one_then_the_datasets_own_ceiling() -> None:
    ceilings = {"d": 0.6}
    assert target_for("d", target_accuracy=0.9, target_kappa=None, ceilings=ceilings).to_json() == {
        "metric": "accuracy", "value": 0.9, "source": "given"}
    assert target_for("d", target_accuracy=None, target_kappa=0.5, ceilings=ceilings).metric == "kappa"
    assert target_for("d", target_accuracy=None, target_kappa=None, ceilings=ceilings).source == "human ceiling"
    assert target_for("other", target_accuracy=None, target_kappa=None, ceilings=ceilings) is None
    with pytest.raises(ValueError, match="not both"):
        target_for("d", target_accuracy=0.9, target_kappa=0.5, ceilings=ceilings)


def test_unstated_scale_gets_a_curve_but_no_calibration_and_json_is_valid(tmp_path: Path) -> None:
    from personagap.analysis.confidence_report import confidence_json, judge_confidence
    from personagap.stages.response import import_prism
    from personagap.store import opened

    folder = tmp_path / "prism_judge"
    folder.mkdir()
    for name, rows in release_builders.prism().items():  # no prompt: the certainty's scale is not stated
        (folder / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
    db = tmp_path / "u.duckdb"
    import_prism(folder, db)
    with opened(db, read_only=True) as con:
        (entry,) = judge_confidence(con, "response", target_accuracy=0.5)
    assert entry.confidence_scale == "unstated" and entry.calibration is None
    assert "states no confidence scale" in str(entry.note)
    assert [p.n for p in entry.coverage_curve] == [2]  # the two parsed answers, both stated 3
    payload = confidence_json([entry])
    assert list(payload) == [("prism-judge", entry.judge)]
    text = json.dumps(payload[("prism-judge", entry.judge)], allow_nan=False)  # NaN became null
    assert '"calibration": null' in text


def test_a_store_without_any_confidence_skips_the_counts_and_one_with_a_failed_one_does_not(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import duckdb

    from personagap.analysis import confidence_report
    from personagap.store.confidence import any_confidence

    con = duckdb.connect(str(tmp_path / "c.duckdb"))
    con.execute("CREATE TABLE labels (meta JSON)")
    con.execute("""INSERT INTO labels VALUES (NULL), ('{"note": "no confidence here"}')""")
    assert any_confidence(con) is False
    counted: list[str] = []
    monkeypatch.setattr(confidence_report, "confidence_counts_by_judge", lambda *a, **k: counted.append("counts"))
    assert confidence_report.judge_confidence(con, "response") == []
    assert counted == []  # the early-out is what returned, not an empty count
    # A confidence that failed to parse still makes a judge's entry (its failures are counted), so it counts.
    con.execute("""INSERT INTO labels VALUES ('{"confidence_error": "not a number"}')""")
    assert any_confidence(con) is True
