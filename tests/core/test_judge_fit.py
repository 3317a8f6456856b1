"""Which judge fits which data (defect 7): the dataset record decides, and a mismatch is one line naming the fit."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from personagap.cli import cli
from personagap.datasets import dataset_records
from personagap.judges import get_judge
from personagap.judges.base import JUDGES, fits, judges_for
from personagap.judges.optimize import OptimizeError, dataset_classes
from personagap.store import opened
from tests.support.cli_checks import assert_one_line
from tests.support.stores import copy_store


@pytest.fixture(scope="module")
def usr_db(usr_release_db: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real USR PersonaChat ratings: single responses, 'does it use the persona' yes/no."""
    return copy_store(usr_release_db, tmp_path_factory.mktemp("usr"))


def _records(db: Path) -> dict[tuple[str, str], object]:
    with opened(db, read_only=True) as con:
        return dict(dataset_records(con))


def test_each_real_dataset_is_fitted_by_the_judges_of_its_item_kind_and_scale(usr_db: Path,
                                                                              recenter_db: Path) -> None:
    usr = _records(usr_db)[("response", "usr-personachat")]
    recenter = _records(recenter_db)
    assert judges_for(usr) == ["persona-use"]  # type: ignore[arg-type]
    assert judges_for(recenter[("response", "recenter-stage2")]) == ["pairwise"]  # type: ignore[arg-type]
    assert judges_for(recenter[("relevance", "recenter-stage2")]) == [  # type: ignore[arg-type]
        "relevance-batched", "relevance-per-attribute"]
    # A judge's labels must be exactly the dataset's categories: the yes/no judge never fits the A/B/tie data.
    assert not fits(JUDGES["persona-use"], recenter[("response", "recenter-stage2")])  # type: ignore[arg-type]


def test_judge_response_without_judge_names_the_judge_that_fits(usr_db: Path) -> None:
    result = CliRunner().invoke(cli, ["judge", "response", "--db", str(usr_db), "--dataset", "usr-personachat",
                                      "--model", "openai/x"])
    assert result.exit_code == 2
    assert "--judge persona-use" in result.stderr and "usr-personachat" in result.stderr
    assert "--judge pairwise" not in result.stderr


def test_judge_response_with_a_judge_that_fits_no_dataset_is_one_line(usr_db: Path) -> None:
    result = CliRunner().invoke(cli, ["judge", "response", "--judge", "pairwise", "--db", str(usr_db),
                                      "--model", "openai/x", "--api-base", "http://127.0.0.1:9/v1"])
    assert_one_line(result.exit_code, result.stdout, result.stderr, result.exception, str(usr_db),
                    "no dataset here fits judge 'pairwise'", "--judge persona-use")


def test_optimize_response_on_single_responses_names_the_judge_that_fits(usr_db: Path) -> None:
    result = CliRunner().invoke(cli, ["optimize", "response", "--model", "openai/x", "--dry-run",
                                      "--db", str(usr_db)])
    line = assert_one_line(result.exit_code, result.stdout, result.stderr, result.exception,
                           "no dataset fits judge 'pairwise'", "--judge persona-use")
    assert "import a release first" not in line


def test_optimize_classes_are_the_datasets_categories(usr_db: Path, recenter_db: Path) -> None:
    assert dataset_classes(usr_db, get_judge("persona-use"), None) == ("no", "yes")
    assert dataset_classes(recenter_db, get_judge("pairwise"), None) == ("A", "B", "tie")
    with pytest.raises(OptimizeError, match="persona-use"):
        dataset_classes(usr_db, get_judge("pairwise"), None)
