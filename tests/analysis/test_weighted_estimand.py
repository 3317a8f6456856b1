"""Issue 30, build item 1: every figure says what it estimates, and the user-weighted figure is offered beside it.

Hand-worked point values; intervals are computed through the one rule (``cluster_estimate``), never hard-coded, since
the rule's numbers may change.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from personagap.analysis.agreement import cluster_estimate, kappa_from_tables
from personagap.analysis.weighting import (
    user_proportions,
    weight_gap,
    weighted_estimates,
)
from personagap.api import import_labels
from personagap.cli import cli
from personagap.stages.relevance import render_relevance, report_relevance

# Three users, tables[h, j] (human class, judge class), class 1 = "yes".
# u0 (heavy, 12 items) agrees on every item: [[6, 0], [0, 6]].
# u1 (2 items) disagrees on both:            [[0, 1], [1, 0]].
# u2 (2 items) agrees on both:               [[1, 0], [0, 1]].
TOY = np.array([[[6, 0], [0, 6]], [[0, 1], [1, 0]], [[1, 0], [0, 1]]], dtype=float)
# Items: the pooled table [[7, 1], [1, 7]] (16 items): p_o = 14/16, p_e = 1/2, kappa = (7/8 - 1/2) / (1/2) = 3/4.
KAPPA_ITEMS = 0.75
# Users: proportions [[.5, 0], [0, .5]] + [[0, .5], [.5, 0]] + [[.5, 0], [0, .5]] = [[1, .5], [.5, 1]] (3 users):
# p_o = 2/3, both margins (1/2, 1/2), p_e = 1/2, kappa = (2/3 - 1/2) / (1/2) = 1/3; accuracy 2/3.
KAPPA_USERS = 1.0 / 3.0
ACCURACY_USERS = 2.0 / 3.0


def test_user_weighted_kappa_by_hand() -> None:
    """Each user's table divided by its own total, then the same kappa: 1/3, against 3/4 pooling items."""
    props = user_proportions(TOY)
    assert np.allclose(props.sum(axis=(1, 2)), 1.0)
    users = weighted_estimates(TOY, ("kappa", "accuracy"), weight="users")
    items = weighted_estimates(TOY, ("kappa", "accuracy"), weight="items")
    assert users["kappa"].value == pytest.approx(KAPPA_USERS)
    assert users["accuracy"].value == pytest.approx(ACCURACY_USERS)
    assert items["kappa"].value == pytest.approx(KAPPA_ITEMS)
    assert users["kappa"].n_clusters == 3


def test_user_weighted_interval_is_the_one_rule_over_proportions() -> None:
    """The user-weighted CI is cluster_estimate over per-user proportion tables (leaving a user out drops its own)."""
    rng = np.random.default_rng(3)
    tables = rng.integers(0, 9, size=(14, 2, 2)).astype(float)
    got = weighted_estimates(tables, ("kappa",), weight="users")["kappa"]
    props = tables / tables.sum(axis=(1, 2), keepdims=True)
    want = cluster_estimate(kappa_from_tables, props, bounds=(-1.0, 1.0))
    assert got.value == pytest.approx(want.value) and got.ci == pytest.approx(want.ci)


def test_weight_gap_is_a_paired_jackknife_of_the_difference() -> None:
    """The gap's point is items minus users; its interval is the one rule over both figures from the same users."""
    rng = np.random.default_rng(5)
    tables = rng.integers(1, 9, size=(12, 2, 2)).astype(float)
    gap = weight_gap(tables)
    props = tables / tables.sum(axis=(1, 2), keepdims=True)
    point = float(kappa_from_tables(tables.sum(0)) - kappa_from_tables(props.sum(0)))
    assert gap.value == pytest.approx(point)
    paired = np.stack([tables, props], axis=1)
    want = cluster_estimate(lambda t: kappa_from_tables(t[..., 0, :, :]) - kappa_from_tables(t[..., 1, :, :]),
                            paired)
    assert gap.ci == pytest.approx(want.ci)


def _rows(users: dict[str, list[tuple[str, str]]]) -> pd.DataFrame:
    """Label rows of one relevance dataset: per user, (human, judge) pairs."""
    rows: list[dict[str, Any]] = []
    for user, pairs in users.items():
        for k, (human, judge) in enumerate(pairs):
            item = f"{user}-{k}"
            rows += [{"item_id": item, "user_id": user, "rater": "ann", "rater_kind": "human", "label": human},
                     {"item_id": item, "user_id": user, "rater": "gpt", "rater_kind": "llm", "label": judge}]
    return pd.DataFrame(rows)


def _store(tmp_path: Path, users: dict[str, list[tuple[str, str]]], name: str = "toy.db") -> Path:
    db = tmp_path / name
    import_labels(_rows(users), stage="relevance", dataset="toy", db=db, categories=["no", "yes"])
    return db


def _toy_users() -> dict[str, list[tuple[str, str]]]:
    """TOY's three users as labels ("no" = 0, "yes" = 1)."""
    agree = [("no", "no")] * 6 + [("yes", "yes")] * 6
    return {"u0": agree, "u1": [("no", "yes"), ("yes", "no")], "u2": [("no", "no"), ("yes", "yes")]}


def test_toy_store_user_weighted_kappa(tmp_path: Path) -> None:
    """The three-user store: kappa 3/4 weighting items, 1/3 weighting users, both on the row whichever is chosen."""
    db = _store(tmp_path, _toy_users())
    items = report_relevance(db).judges
    users = report_relevance(db, weight="users").judges
    assert [j.estimand for j in items] == ["items"] and [j.estimand for j in users] == ["users"]
    assert items[0].kappa == pytest.approx(KAPPA_ITEMS) and users[0].kappa == pytest.approx(KAPPA_USERS)
    assert users[0].accuracy == pytest.approx(ACCURACY_USERS)
    for row in (items[0], users[0]):
        assert row.by_weight is not None and row.weight_gap is not None
        assert row.by_weight["items"].kappa == pytest.approx(KAPPA_ITEMS)
        assert row.by_weight["users"].kappa == pytest.approx(KAPPA_USERS)
        assert row.weight_gap.difference == pytest.approx(KAPPA_ITEMS - KAPPA_USERS)
        assert math.isnan(row.weight_gap.ci[0])  # 3 users: too few for any interval
        assert not row.weight_gap.differs


def _heavy_differ() -> dict[str, list[tuple[str, str]]]:
    """Six heavy users on whom the judge is always right; 24 light users on whom it is mostly wrong (30 users: the
    CI rule's fewest for an item-weighted interval when items per user are this unequal)."""
    right = [("no", "no")] * 50 + [("yes", "yes")] * 50
    users = {f"heavy{i}": right for i in range(6)}
    users |= {f"light{i:02d}": [("no", "yes"), ("yes", "no"), ("yes", "no"), ("no", "no")] for i in range(24)}
    return users


def _alike() -> dict[str, list[tuple[str, str]]]:
    """Fifteen users of different sizes that all judge alike: the same proportions in every user's table."""
    base = [("no", "no"), ("no", "no"), ("yes", "yes"), ("yes", "no")]
    return {f"u{i:02d}": base * (1 + i % 4) for i in range(15)}


def test_gap_line_when_heavy_users_differ(tmp_path: Path) -> None:
    """A heavy user who behaves differently: the paired difference's CI excludes 0 and one line says so."""
    report = report_relevance(_store(tmp_path, _heavy_differ()))
    [row] = report.judges
    assert row.weight_gap is not None and row.weight_gap.differs
    lo, hi = row.weight_gap.ci
    assert lo > 0 and row.weight_gap.difference > 0
    text = render_relevance(report)
    lines = [line for line in text.splitlines() if "heavy users behave differently" in line.lower()]
    assert len(lines) == 1 and "gpt" in lines[0]


def test_no_gap_line_when_users_are_alike(tmp_path: Path) -> None:
    """Users of unequal sizes with the same proportions: both figures are equal and nothing is printed."""
    report = report_relevance(_store(tmp_path, _alike()))
    [row] = report.judges
    assert row.weight_gap is not None and not row.weight_gap.differs
    assert row.weight_gap.difference == pytest.approx(0.0, abs=1e-12)
    assert "behave differently" not in render_relevance(report).lower()
    assert "Figures weight items (heavy users count most)" in render_relevance(report)


# Keys of report JSON that hold rows which are not estimates (tests, sub-objects of a row, confidence figures).
_NOT_ROWS = {"alt_test", "by_weight", "weight_gap", "calibration", "coverage_curve", "threshold", "bins", "by_group"}


def _figure_rows(value: Any, path: str = "") -> list[tuple[str, dict[str, Any]]]:
    """Every dict of a report's JSON that carries a figure with an interval (a key ``ci`` or ``*_ci``)."""
    out: list[tuple[str, dict[str, Any]]] = []
    if isinstance(value, dict):
        if any((k == "ci" or k.endswith("_ci")) and isinstance(v, list) for k, v in value.items()):
            out.append((path, value))
        for k, v in value.items():
            if k not in _NOT_ROWS:
                out += _figure_rows(v, f"{path}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _figure_rows(v, f"{path}[{i}]")
    return out


@pytest.fixture(scope="module")
def demo_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo's store (every stage's sample data)."""
    db = tmp_path_factory.mktemp("demo") / "demo.db"
    result = CliRunner().invoke(cli, ["demo", "--db", str(db)])
    assert result.exit_code == 0, result.output
    return db


@pytest.mark.slow
@pytest.mark.parametrize("stage", ["relevance", "response", "extraction"])
@pytest.mark.parametrize("weight", ["items", "users"])
def test_every_figure_row_states_its_estimand(demo_db: Path, stage: str, weight: str) -> None:
    """Every row with a figure and its interval says what it estimates; judge rows follow --weight."""
    result = CliRunner().invoke(cli, ["report", stage, "--json", "--db", str(demo_db), "--weight", weight])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    rows = _figure_rows(report)
    assert rows
    missing = [path for path, row in rows if row.get("estimand") not in ("items", "users")]
    assert not missing, missing
    judges = report.get("judges", []) + report.get("verifiers", [])
    assert judges and {j["estimand"] for j in judges} == {weight}
    assert report["weight"] == weight


def test_cli_weight_users_changes_figures_and_estimand(tmp_path: Path) -> None:
    """``--weight users`` moves the row's figures to the user-weighted ones; both stay in by_weight."""
    db = _store(tmp_path, _heavy_differ())
    runner = CliRunner()
    items = json.loads(runner.invoke(cli, ["report", "relevance", "--json", "--db", str(db)]).output)
    users = json.loads(runner.invoke(cli, ["report", "relevance", "--json", "--db", str(db), "--weight",
                                            "users"]).output)
    [a], [b] = items["judges"], users["judges"]
    assert (a["estimand"], b["estimand"]) == ("items", "users")
    assert a["kappa"] > b["kappa"] + 0.1
    assert a["kappa"] == pytest.approx(b["by_weight"]["items"]["kappa"])
    assert b["kappa"] == pytest.approx(a["by_weight"]["users"]["kappa"])
    assert b["kappa_ci"] == pytest.approx(b["by_weight"]["users"]["kappa_ci"])
    text = runner.invoke(cli, ["report", "relevance", "--db", str(db), "--weight", "users"]).output
    assert "Figures weight users (each user once" in text
    assert text.lower().count("heavy users behave differently") == 1
