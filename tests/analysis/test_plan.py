"""`personagap plan`: label budgets by simulation, checked against the reports' own bootstrap on real data."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from personagap.analysis.agreement import estimate
from personagap.analysis.alt_test import indicators
from personagap.analysis.alt_test_stats import AnnotatorIndicators, Indicators
from personagap.analysis.budget import (
    alt_test_power,
    reach_share,
    simulated_halfwidth,
    smallest_sufficient,
    variance_ratios,
)
from personagap.analysis.robust import human_reference, individual_humans, judge_labels, user_tables
from personagap.cli import cli
from personagap.store import load_labels, opened
from tests.support.frames import plan_rows

SIMS = 60


@pytest.fixture(scope="module")
def relevance(recenter_db: Path) -> pd.DataFrame:
    with opened(recenter_db, read_only=True) as con:
        return load_labels(con, stage="relevance")


def _tables(labels: pd.DataFrame, dataset: str, judge: str) -> np.ndarray:
    frame = labels[labels["dataset"] == dataset]
    ref = human_reference(frame)
    [j] = [j for j in judge_labels(frame) if j.judge == judge]
    shared = j.labels.index.intersection(ref.index)
    tables, _ = user_tables(ref.loc[shared, "label"], j.labels.loc[shared], ref.loc[shared, "user_id"], ["no", "yes"])
    return tables


def test_cli_budget_holds_under_the_reports_ci_rule(recenter_db: Path, relevance: pd.DataFrame) -> None:
    out = CliRunner().invoke(cli, ["plan", "--stage", "relevance", "--dataset", "recenter-stage2", "--json",
                                   "--simulations", str(SIMS), "--db", str(recenter_db)])
    assert out.exit_code == 0, out.output
    plan = json.loads(out.output)
    assert plan["stage"] == "relevance" and {k["dataset"] for k in plan["kappa"]} == {"recenter-stage2"}
    assert len(plan["kappa"]) == 2
    rng = np.random.default_rng(12345)
    assert plan["assurance"] == 0.8 and "not coverage" in plan["halfwidth_note"]
    for row in plan["kappa"]:
        n = row["users_needed"]
        assert n is not None and row["projected_halfwidth"] <= 0.05 and row["projected_assurance"] >= 0.8
        assert row["n_users"] + row["additional_users"] >= n
        lo, hi = row["users_needed_range"]
        assert lo is not None and hi is not None and lo <= hi and row["range_resamples"] > 0
        tables = _tables(relevance, "recenter-stage2", row["judge"])
        # Independent check: studies of n users drawn from the stored ones (another generator than the plan's),
        # each with the CI the reports compute (agreement.estimate: the one CI rule); 80% should reach 0.05.
        widths = []
        for _ in range(60):
            study = tables[rng.integers(0, len(tables), size=n)]
            e = estimate(study, "kappa")
            widths.append((e.ci[1] - e.ci[0]) / 2)
        assert np.mean(np.array(widths) <= 0.05) >= 0.7, (row["judge"], n, np.mean(np.array(widths) <= 0.05))
        # ... and a study of today's size is wider than the target (else the budget would be 0 additional users).
        if row["additional_users"] > 0:
            assert row["halfwidth"] > 0.05


@pytest.mark.slow
def test_smaller_halfwidth_needs_more_users(relevance: pd.DataFrame) -> None:
    wide = plan_rows(relevance, ["recenter-stage2"], halfwidth=0.05, simulations=SIMS)
    narrow = plan_rows(relevance, ["recenter-stage2"], halfwidth=0.03, simulations=SIMS)
    for w, n in zip(wide.kappa, narrow.kappa, strict=True):
        assert w.judge == n.judge
        assert n.users_needed is not None and w.users_needed is not None
        assert n.users_needed > w.users_needed
        assert n.items_needed is not None and w.items_needed is not None and n.items_needed > w.items_needed
    again = plan_rows(relevance, ["recenter-stage2"], halfwidth=0.05, simulations=SIMS)
    assert again.model_dump() == wide.model_dump()  # seeded


def test_budget_is_the_smallest_sufficient_size(relevance: pd.DataFrame) -> None:
    tables = _tables(relevance, "recenter-stage2", "gpt-5.4")
    [row] = [k for k in plan_rows(relevance, ["recenter-stage2"], simulations=SIMS).kappa if k.judge == "gpt-5.4"]
    n = row.users_needed
    assert n is not None
    # The stored users are a sample: each simulated study gets a plausible between-user variance of its own.
    ratios = variance_ratios(tables, simulations=SIMS)
    low, mid, high = np.percentile(ratios, (10, 50, 90), method="inverted_cdf")
    assert row.variance_factors == pytest.approx([low, mid, high]) and low < 1 < high
    assert (reach_share(tables, n, 0.05, simulations=SIMS, ratios=ratios) >= 0.8
            > reach_share(tables, n - 1, 0.05, simulations=SIMS, ratios=ratios))
    assert row.projected_assurance == pytest.approx(reach_share(tables, n, 0.05, simulations=SIMS, ratios=ratios))
    # Sized for 80% of studies, not for the median one: the median study is narrower than the target.
    assert simulated_halfwidth(tables, n, simulations=SIMS, ratios=ratios) < 0.05


def test_smallest_sufficient() -> None:
    assert smallest_sufficient(lambda n: n >= 37, 5, lowest=2, highest=1000) == 37
    assert smallest_sufficient(lambda n: n >= 37, 900, lowest=2, highest=1000) == 37
    assert smallest_sufficient(lambda n: n >= 1, 50, lowest=2, highest=1000) == 2
    assert smallest_sufficient(lambda n: False, 50, lowest=2, highest=1000) is None


@pytest.mark.slow
def test_alt_test_power_on_the_anchored_pilot(relevance: pd.DataFrame) -> None:
    plan = plan_rows(relevance, ["recenter-pilot"], humans="anchored", simulations=SIMS)
    blind = plan_rows(relevance, ["recenter-pilot"], humans="blind", simulations=SIMS)
    assert blind.alt_test and not any(a.applicable for a in blind.alt_test)  # one blind annotator per item
    frame = relevance[relevance["dataset"] == "recenter-pilot"]
    people = individual_humans(frame, "anchored")
    judges = {j.judge: j for j in judge_labels(frame)}
    looser = {a.judge: a for a in plan_rows(relevance, ["recenter-pilot"], humans="anchored", epsilon=0.3,
                                            simulations=SIMS).alt_test}
    for a in plan.alt_test:
        assert a.applicable and a.humans == "anchored"
        m = a.items_per_annotator_needed
        assert m is not None and m >= 30
        assert a.projected_power is not None and a.projected_power >= 0.8
        ind = indicators(judges[a.judge].labels.to_dict(), people, min_items_per_annotator=1)
        # The annotators the report tests (30+ items), else every annotator with two or more.
        tested = [x for x in ind.annotators if len(x.items) >= 30] or [x for x in ind.annotators
                                                                       if len(x.items) >= 2]
        ind = type(ind)(tested, ind.n_items, ind.skipped, ind.cluster_unit)
        if m > 30:
            assert alt_test_power(ind, m - 1, simulations=SIMS) < 0.8
        needed_looser = looser[a.judge].items_per_annotator_needed
        assert needed_looser is not None and needed_looser <= m  # a bigger margin never needs more items


def test_unreachable_power_says_why() -> None:
    # Two annotators who always agree with each other; the judge always gives the other label: it never wins.
    items = [f"i{k}" for k in range(40)]
    rows = [{"item_id": i, "rater": r, "rater_kind": "human", "condition": "", "label": "yes", "user_id": i,
             "dataset": "d"} for i in items for r in ("a", "b")]
    rows += [{"item_id": i, "rater": "bad", "rater_kind": "llm", "condition": "", "label": "no", "user_id": i,
              "dataset": "d"} for i in items]
    [row] = plan_rows(pd.DataFrame(rows), simulations=20).alt_test
    assert row.applicable and row.current_power == 0.0 and row.items_per_annotator_needed is None
    assert row.reason is not None and "out of reach" in row.reason


def test_bad_input_is_one_line_exit_2(recenter_db: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    missing = runner.invoke(cli, ["plan", "--stage", "relevance", "--db", str(tmp_path / "none.duckdb")])
    assert missing.exit_code == 2 and "no such database" in missing.output
    assert "Traceback" not in missing.output and len(missing.output.strip().splitlines()) == 1
    unknown = runner.invoke(cli, ["plan", "--stage", "relevance", "--dataset", "nope", "--db", str(recenter_db)])
    assert unknown.exit_code == 2 and "'nope'" in unknown.output and "recenter-stage2" in unknown.output
    empty_stage = runner.invoke(cli, ["plan", "--stage", "extraction", "--db", str(recenter_db), "--simulations", "10"])
    # The pilot's stage-1 verdicts have humans but no judge: a plan that says so, not an error.
    assert empty_stage.exit_code == 0 and "(no judge labels)" in empty_stage.output
    bad = runner.invoke(cli, ["plan", "--stage", "relevance", "--halfwidth", "0", "--db", str(recenter_db)])
    assert bad.exit_code == 2 and "halfwidth" in bad.output


@pytest.mark.slow
def test_text_output(recenter_db: Path) -> None:
    out = CliRunner().invoke(cli, ["plan", "--stage", "relevance", "--simulations", "20", "--db", str(recenter_db)])
    assert out.exit_code == 0, out.output
    assert "recenter-stage2 / gpt-5.4: kappa" in out.output and "users (+" in out.output
    assert "not applicable" in out.output  # blind pilot humans: one per item
    assert "of simulated studies reach" in out.output and "range" in out.output
    assert "A half-width is precision, not coverage" in out.output


def test_alt_test_power_resamples_clusters_not_items() -> None:
    # The alt-test reads per-cluster (per-user) means, so its power is simulated by drawing whole clusters: the
    # same as a study whose "items" are the cluster means. Drawing items would overstate power when the judge's
    # advantage varies from user to user.
    rng = np.random.default_rng(4)
    clusters, per_cluster = 4, 10
    users = np.repeat(np.arange(clusters), per_cluster)
    clustered, collapsed, independent = [], [], []
    for name in ("a1", "a2", "a3"):
        lean = rng.uniform(-0.6, 0.9, size=clusters)  # the judge wins on some users, loses on others
        d = np.array([rng.choice([-1.0, 0.0, 1.0], p=_lean(x)) for x in np.repeat(lean, per_cluster)])
        items = [f"{name}-{k}" for k in range(d.size)]
        wj, wh = (d >= 0).astype(float), (d <= 0).astype(float)
        clustered.append(AnnotatorIndicators(name, items, wj, wh, users))
        independent.append(AnnotatorIndicators(name, items, wj, wh))
        means = clustered[-1].cluster_difference
        collapsed.append(AnnotatorIndicators(name, [f"{name}-u{c}" for c in range(clusters)], means,
                                             np.zeros(clusters)))
    by_user, by_mean, by_item = (Indicators(a, clusters * per_cluster, {}) for a in (clustered, collapsed, independent))
    for m_items, m_means in ((None, None), (2 * clusters * per_cluster, 2 * clusters)):
        power = alt_test_power(by_user, m_items, simulations=SIMS, seed=1)
        assert power == alt_test_power(by_mean, m_means, simulations=SIMS, seed=1)
        assert power < alt_test_power(by_item, m_items, simulations=SIMS, seed=1)


def _lean(x: float) -> list[float]:
    """Chances of (-1, 0, 1) for an item whose user leans ``x`` (-1: the human wins, 1: the judge wins)."""
    win, lose = max(x, 0.0), max(-x, 0.0)
    return [lose, 1.0 - win - lose, win]
