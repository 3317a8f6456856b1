"""`personagap jury` when no vote can be decided (issue 32 item 3), through the CLI.

A confidence-weighted jury with a juror that states no confidence is refused before anything is written (exit 2, one
line naming the juror and the option); a jury whose every item is undecided is stored 'failed' and exits 1, as a judge
run whose every call failed does; a jury that decided items is stored 'finished' and exits 0.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from personagap.cli import cli
from personagap.commands.jury import jury_rater
from personagap.records import Label
from personagap.store import opened, write_labels
from tests.support import release_builders


@pytest.fixture
def db(tmp_path: Path) -> tuple[Path, str, list[str]]:
    """A store of three items with judges j1..j3 (0-100 confidences), j4 (none) and j5 (always against j1)."""
    from personagap.stages.response import import_prism

    target = tmp_path / "jury.duckdb"
    import_prism(release_builders.write_release(tmp_path / "prism_judge", release_builders.prism()), target)
    with opened(target) as con:
        items = [r[0] for r in con.execute("SELECT item_id FROM items ORDER BY item_id").fetchall()]
        (dataset,), = con.execute("SELECT DISTINCT dataset FROM items").fetchall()
        votes = {"j1": ["A", "B", "A"], "j2": ["A", "A", "B"], "j3": ["B", "A", "B"], "j4": ["A", "A", "A"],
                 "j5": ["B", "A", "B"]}
        sure = {"j1": [90, 90, 60], "j2": [60, 10, 60], "j3": [60, 20, 60]}
        write_labels(con, [Label(item_id=i, rater=j, rater_kind="llm", label=v[k], run_id="r",
                                 meta={"confidence": sure[j][k], "confidence_scale": "0-100"} if j in sure else None)
                           for j, v in votes.items() for k, i in enumerate(items)])
    return target, str(dataset), items


def _jury(db: Path, dataset: str, judges: str, *extra: str) -> Result:
    return CliRunner().invoke(cli, ["jury", "--stage", "response", "--dataset", dataset, "--judges", judges,
                                    "--db", str(db), *extra])


def _jury_runs(db: Path) -> list[tuple[str, str]]:
    with opened(db, read_only=True) as con:
        return [(str(r), str(s)) for r, s in con.execute(
            "SELECT rater, status FROM runs WHERE run_id LIKE 'jury-%' ORDER BY started_at").fetchall()]


def test_a_confidence_jury_refuses_a_juror_without_confidence_before_writing(db: tuple[Path, str, list[str]]) -> None:
    path, dataset, _ = db
    out = _jury(path, dataset, "j1,j4,j2", "--weighting", "confidence")
    assert out.exit_code == 2, out.output
    lines = out.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ")
    assert "juror(s) j4 state no confidence" in lines[0] and "--weighting confidence" in lines[0]
    assert "j1" not in lines[0] and "j2" not in lines[0]  # only the juror at fault is named
    assert _jury_runs(path) == []  # refused up front: no run row, no label
    with opened(path, read_only=True) as con:
        assert con.execute("SELECT count(*) FROM labels WHERE rater LIKE 'jury-%'").fetchall()[0][0] == 0
    # The same judges under a majority need no confidence.
    assert _jury(path, dataset, "j1,j4,j2").exit_code == 0


def test_a_jury_that_decides_no_item_is_stored_failed_and_exits_1(db: tuple[Path, str, list[str]]) -> None:
    path, dataset, items = db
    out = _jury(path, dataset, "j1,j5")  # they disagree on every item: every majority ties
    assert out.exit_code == 1, out.output
    text = out.output
    assert "0 items labelled, 3 undecided" in text
    assert "error: jury run jury-" in text and "failed" in text and "undecided: the jurors' labels tie 3" in text
    rater = jury_rater("majority", ["j1", "j5"])
    assert _jury_runs(path) == [(rater, "failed")]
    with opened(path, read_only=True) as con:
        stored = con.execute("SELECT label, error FROM labels WHERE rater = ?", [rater]).fetchall()
    assert len(stored) == len(items) and all(label is None and error for label, error in stored)
    # A jury that decides its items is stored 'finished' and exits 0 (every decided item counts).
    done = _jury(path, dataset, "j1,j2,j3")
    assert done.exit_code == 0, done.output
    assert _jury_runs(path)[-1] == (jury_rater("majority", ["j1", "j2", "j3"]), "finished")
