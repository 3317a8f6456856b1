"""`personagap plan` follows the dataset's scale as the reports do, from the store's counts (issues 30 and 31).

Defects on main: on an ordinal dataset ``plan`` scored the alternative-annotator test by exact match (the report
scores it by negative RMSE) and sized unweighted kappa (the report's and ``diagnose``'s headline is quadratic-weighted
kappa); it loaded every label; and its assurance came from the stored users' variance with a fixed bound on it.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from sklearn.metrics import cohen_kappa_score

from personagap.analysis.budget import (
    Figure,
    jackknife_variance,
    kappa_budget,
    study_halfwidths,
    variance_ratios,
)
from personagap.analysis.headline import headline_metric
from personagap.api import import_labels
from personagap.cli import cli
from personagap.records import DatasetScale

LEVELS = ("1", "2", "3", "4", "5")
SIMS = "40"


def _ratings(n_users: int = 12, per_user: int = 5, seed: int = 3) -> pd.DataFrame:
    """Three humans who give the true level half the time and two levels off otherwise; a judge one level high.

    By exact match the judge (mostly one level off) rarely ties a human; by negative RMSE it is usually closer to
    the others than a left-out human two levels off: the two scorings give advantages about 0.6 and 0.7, so a plan
    scored the wrong way cannot match the report.
    """
    rng = np.random.default_rng(seed)
    rows = []
    for u in range(n_users):
        for k in range(per_user):
            item, truth = f"u{u}-{k}", int(rng.integers(2, 5))
            raters = [(h, truth if rng.random() < 0.5 else int(np.clip(truth + rng.choice([-2, 2]), 1, 5)), "human")
                      for h in ("h1", "h2", "h3")]
            raters.append(("judge", truth + int(rng.random() < 0.8), "llm"))
            rows += [{"item_id": item, "user_id": f"user{u}", "rater": r, "rater_kind": kind, "label": str(v),
                      "attribute": f"topic {k}", "prompt": "a prompt"} for r, v, kind in raters]
    return pd.DataFrame(rows)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, pd.DataFrame]:
    db = tmp_path_factory.mktemp("plan-scale") / "ordinal.duckdb"
    rows = _ratings()
    import_labels(rows, stage="relevance", dataset="stars", db=db, scale="ordinal", categories=list(LEVELS))
    return db, rows


def _json(*args: str) -> Any:
    out = CliRunner().invoke(cli, [*args, "--json"])
    assert out.exit_code == 0, out.output
    return json.loads(out.output)


def test_plan_on_an_ordinal_dataset_matches_the_report(store: tuple[Path, pd.DataFrame]) -> None:
    db, rows = store
    plan = _json("plan", "--stage", "relevance", "--simulations", SIMS, "--db", str(db))
    report = _json("report", "relevance", "--db", str(db))
    [tested] = [r for r in report["alt_test"] if r["judge"] == "judge" and r["applicable"]]
    [alt] = [a for a in plan["alt_test"] if a["judge"] == "judge"]
    assert tested["scoring"] == "neg_rmse" and alt["scoring"] == "neg_rmse"
    assert alt["advantage_probability"] == tested["advantage_probability"]
    assert alt["winning_rate"] == tested["winning_rate"]
    # Exact match gives another advantage on these ratings: a plan scored by accuracy could not equal the report.
    humans = rows[rows["rater_kind"] == "human"].pivot(index="item_id", columns="rater", values="label")
    judge = rows[rows["rater_kind"] == "llm"].set_index("item_id")["label"]
    by_match = []
    for left in ("h1", "h2", "h3"):
        others = humans.drop(columns=left)
        wins = [(others.loc[i] == judge[i]).mean() >= (others.loc[i] == humans.loc[i, left]).mean()
                for i in humans.index]
        by_match.append(np.mean(wins))
    assert abs(float(np.mean(by_match)) - alt["advantage_probability"]) > 0.05

    # The headline figure sized is weighted kappa against the majority reference (sklearn, by hand).
    [row] = plan["kappa"]
    reference = {}
    for item, g in rows[rows["rater_kind"] == "human"].groupby("item_id"):
        top = Counter(g["label"]).most_common()
        if len(top) == 1 or top[0][1] > top[1][1]:
            reference[item] = int(top[0][0])
    items = [i for i in judge.index if i in reference]
    expected = cohen_kappa_score([reference[i] for i in items], [int(judge[i]) for i in items],
                                 labels=[1, 2, 3, 4, 5], weights="quadratic")
    assert row["metric"] == "weighted_kappa" and row["scale"] == "ordinal"
    assert row["kappa"] == pytest.approx(expected) and row["n_items"] == len(items)
    [judged] = [j for j in report["judges"] if j["judge"] == "judge"]
    assert row["kappa"] == pytest.approx(judged["weighted_kappa"])
    assert row["halfwidth"] == pytest.approx((judged["weighted_kappa_ci"][1] - judged["weighted_kappa_ci"][0]) / 2)


def test_plan_reads_counts_not_every_label(store: tuple[Path, pd.DataFrame], monkeypatch: pytest.MonkeyPatch) -> None:
    import personagap.store as store_module

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("plan loaded every label")

    monkeypatch.setattr(store_module, "load_labels", refuse)
    out = CliRunner().invoke(cli, ["plan", "--stage", "relevance", "--simulations", "20", "--db", str(store[0])])
    assert out.exit_code == 0, out.output
    assert "weighted kappa" in out.output and "neg_rmse" in out.output


def test_unknown_dataset_is_one_line_and_exit_2(store: tuple[Path, pd.DataFrame]) -> None:
    out = CliRunner().invoke(cli, ["plan", "--stage", "relevance", "--dataset", "nope", "--db", str(store[0])])
    assert out.exit_code == 2
    assert "no relevance labels for dataset 'nope' (it has: stars)" in out.output
    assert len(out.output.strip().splitlines()) == 1


def test_headline_metric_by_scale() -> None:
    assert headline_metric(DatasetScale(kind="ordinal", categories=LEVELS)) == "weighted_kappa"
    assert headline_metric(DatasetScale(kind="nominal", categories=("no", "yes"))) == "kappa"
    assert headline_metric(DatasetScale(kind="pairwise", categories=("A", "B", "tie"))) == "kappa"


def _tables(*cells: tuple[int, int, int, int]) -> np.ndarray:
    """Per-user 2 x 2 tables from (no-no, no-yes, yes-no, yes-yes) counts (rows: human, columns: judge)."""
    return np.array([[[a, b], [c, d]] for a, b, c, d in cells], dtype=float)


def _kappa(t: np.ndarray) -> float:
    """Cohen's kappa of one 2 x 2 table, written out."""
    n = t.sum()
    observed = (t[0, 0] + t[1, 1]) / n
    chance = (t[0].sum() * t[:, 0].sum() + t[1].sum() * t[:, 1].sum()) / n**2
    return float((observed - chance) / (1 - chance))


def test_jackknife_variance_and_its_degrees_of_freedom_by_hand() -> None:
    tables = _tables(*[(5, 1, 1, 3), (4, 2, 0, 4), (6, 0, 2, 2), (3, 1, 1, 5)] * 3)
    total = tables.sum(axis=0)
    d = np.array([_kappa(total - t) for t in tables])
    d -= d.mean()
    variance, df = jackknife_variance(tables)
    assert variance == pytest.approx(11 / 12 * float((d**2).sum()))
    assert df == pytest.approx(min(11.0, float((d**2).sum()) ** 2 / float((d**4).sum())))
    # Two users with identical tables: every leave-one-out kappa equal, variance 0 on U - 1 degrees of freedom.
    assert jackknife_variance(_tables((5, 1, 1, 3), (5, 1, 1, 3))) == (0.0, 1.0)


def test_variance_ratios_are_df_over_chi_square() -> None:
    alike = _tables(*[(5, 1, 1, 3), (4, 2, 1, 3), (5, 1, 2, 2), (4, 1, 1, 4)] * 10)
    assert np.all(variance_ratios(alike[[0] * 40], simulations=30) == 1.0)  # no spread: nothing to scale
    _, df = jackknife_variance(alike)
    draws = np.random.default_rng([0, 2]).chisquare(df, size=50)
    assert np.allclose(variance_ratios(alike, simulations=50), df / draws)
    # One heavy user unlike the rest carries the variance: few degrees of freedom, plausible variances far above.
    heavy = np.concatenate([alike, _tables((10, 60, 60, 10))])
    _, few = jackknife_variance(heavy)
    assert few < 3 < df
    calm, wild = variance_ratios(alike, simulations=400), variance_ratios(heavy, simulations=400)
    assert np.percentile(wild, 90) > 2 * np.percentile(calm, 90)


def test_study_halfwidth_scales_with_the_variance_ratio() -> None:
    tables = _tables(*[(5, 1, 1, 3), (4, 2, 0, 4), (6, 0, 2, 2), (3, 1, 1, 5)] * 5)
    plain = study_halfwidths(tables, 30, simulations=8)
    scaled = study_halfwidths(tables, 30, simulations=8, ratios=np.full(8, 4.0))
    assert np.allclose(scaled, 2 * plain)  # a half-width grows with the square root of the variance
    assert np.all(np.isnan(study_halfwidths(tables, 30, simulations=3, ratios=np.array([math.inf] * 3)))
                  | np.isinf(study_halfwidths(tables, 30, simulations=3, ratios=np.array([math.inf] * 3))))


def test_weighted_kappa_budget_reads_the_levels() -> None:
    rng = np.random.default_rng(5)
    tables = np.zeros((40, 5, 5))
    for u in range(40):
        for _ in range(15):
            h = int(rng.integers(0, 5))
            tables[u, h, int(np.clip(h + rng.integers(-1, 2), 0, 4))] += 1
    levels = (1.0, 2.0, 3.0, 4.0, 5.0)
    plan = kappa_budget(tables, target=0.05, simulations=30, metric="weighted_kappa", levels=levels)
    assert plan.metric == "weighted_kappa"
    assert plan.kappa == pytest.approx(float(Figure("weighted_kappa", levels)(tables.sum(axis=0))))
    assert plan.kappa != pytest.approx(float(Figure()(tables.sum(axis=0))))
    assert plan.users_needed is not None and plan.projected_assurance is not None
    assert plan.projected_assurance >= 0.8
    lo, hi = plan.users_range
    assert lo is not None and hi is not None and lo <= plan.users_needed <= hi
