"""A judge run the store or a model file cannot serve is one line and exit 2 (the one error map), never a traceback."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from personagap.cli import cli
from personagap.labels_api import import_labels
from tests.byo_data import team_rows, write_rows


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
