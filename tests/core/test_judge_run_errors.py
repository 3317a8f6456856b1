"""A judge run the store or a model file cannot serve is one line and exit 2 (the one error map), never a traceback."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from click.testing import CliRunner, Result

from personagap.cli import cli
from personagap.human_data import DataError
from personagap.judges.trained import sidecar_path
from personagap.labels_api import import_labels
from personagap.stages import trained_judging
from personagap.stages.trained import ModelFileError, open_model
from tests.support.byo_data import team_rows, write_rows


def _pairs_without_profile(tmp_path: Path) -> str:
    """A pairwise dataset whose items carry no profile: the record fits 'pairwise', yet no item can be judged
    with a profile."""
    rows = [{k: v for k, v in r.items() if k != "profile"} for r in team_rows("response", n_users=2, per_user=2)]
    db = str(tmp_path / "pairs.duckdb")
    import_labels(write_rows(tmp_path / "pairs.jsonl", rows), stage="response", dataset="team-resp", db=db)
    return db


def test_judge_response_with_no_judgeable_item_is_one_line_exit_2(tmp_path: Path) -> None:
    db = _pairs_without_profile(tmp_path)
    # No call is made (there is nothing to ask), so the API base is never contacted.
    result = CliRunner().invoke(cli, ["judge", "response", "--judge", "pairwise", "--model", "openai/scripted",
                                      "--api-base", "http://127.0.0.1:9", "--dataset", "team-resp", "--no-progress",
                                      "--db", db])
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit)  # mapped, not a ValueError's traceback
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "no stored items" in lines[0] and "--no-profile" in lines[0], result.output


def _trained(stage: str, model: Path, db: Path) -> Result:
    return CliRunner().invoke(cli, ["judge", stage, "--judge", "trained", "--model-path", str(model), "--db", str(db)])


@pytest.mark.parametrize("stage", ["relevance", "response", "extraction"])
def test_a_file_that_is_no_model_is_one_line_exit_2(stage: str, tmp_path: Path) -> None:
    model = tmp_path / "model.joblib"
    model.write_text("not a model")
    sidecar_path(model).write_text(json.dumps({"format_version": 1, "model_id": "x"}))
    result = _trained(stage, model, tmp_path / "none.duckdb")
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit)  # not pickle's traceback
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{model}: not a PersonaGap trained model"), result.output


def test_a_missing_model_file_is_a_model_file_error(tmp_path: Path) -> None:
    with pytest.raises(ModelFileError, match="no such model file") as raised:
        open_model(tmp_path / "nope.joblib", "relevance")
    assert isinstance(raised.value, DataError)  # the error map's "bad input file": exit 2


def test_a_bug_during_a_trained_run_keeps_its_traceback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The model loads; then something unrelated to the model file fails. That is a bug: no one-line exit 2.
    monkeypatch.setattr(trained_judging, "open_model", lambda path, kind: SimpleNamespace(vocab=None))

    def broken(db: object, datasets: object = None) -> None:
        raise ValueError("a bug in reading the items")

    monkeypatch.setattr(trained_judging, "relevance_items", broken)
    result = _trained("relevance", tmp_path / "model.joblib", tmp_path / "none.duckdb")
    assert result.exit_code == 1 and isinstance(result.exception, ValueError), result.output
    assert "a bug in reading the items" in str(result.exception)
