"""Issue 20: ``report response`` from DuckDB's per-user sums gives the figures computed label by label.

A small synthetic store (one blind human per pair, so the reference is that human's label) with everything the
pairwise figures read: swapped presentations, answers of equal and unequal length (with non-ASCII text: a length
is a count of characters), splits and tiers, failures, reverse-order runs, with- and without-profile conditions,
in-sample labels (never scored), a trained judge and generic-vs-personalised pairs. Every figure is recomputed
here from the labels themselves (sklearn for kappa, the per-label CI functions for the intervals).
"""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import cohen_kappa_score

from personagap.analysis.panel import scale_estimates
from personagap.analysis.pipeline_sql import reference_table
from personagap.analysis.response import accuracy_gap, clustered_rate
from personagap.records import Item, Label, Run
from personagap.stages.response import report_response
from personagap.stages.response_pairwise import PAIRWISE_SCALE
from personagap.store import opened, write_batch
from personagap.store.batch import ImportBatch
from personagap.store.response_counts import pair_judge_counts, single_human_labels, staged

AB = ["A", "B", "tie"]
USERS, PER_USER = 12, 8


def _build(db: Path) -> dict[str, Any]:
    """Write the store; return what was written, per item, to recompute every figure from."""
    rng = np.random.default_rng(7)
    batch = ImportBatch()
    batch.runs.append(Run(run_id="r", kind="import", source="synthetic", started_at=datetime(2026, 1, 1, tzinfo=UTC)))
    truth: dict[str, dict[str, Any]] = {}
    verdicts: list[dict[str, Any]] = []
    for u in range(USERS):
        for k in range(PER_USER):
            iid = f"p-{u}-{k}"
            la, lb = int(rng.integers(1, 5)), int(rng.integers(1, 5))
            payload = {"kind": "pairwise", "question": "q", "answer_a": "é" * la, "answer_b": "b" * lb,
                       "profile": "p", "split": ["s1", "s2"][k % 2]}
            if k % 3:
                payload["tier"] = ["easy", "hard"][k % 3 - 1]
            batch.items[iid] = Item(item_id=iid, dataset="pairs", stage="response", user_id=f"u{u:02d}",
                                    payload=payload)
            human = AB[int(rng.integers(0, 3))] if k != PER_USER - 1 else None  # the last item has no reference
            if human is not None:
                batch.labels.append(Label(item_id=iid, rater="ann", rater_kind="human", label=human, run_id="r"))
            truth[iid] = {"user": f"u{u:02d}", "human": human, "la": la, "lb": lb, **payload}
            for rater, kind in (("j1", "llm"), ("j2", "llm"), ("tp", "trained")):
                conditions = ["", "in-sample"] if kind == "trained" else ["all", "no-profile", "all+reversed"]
                for condition in conditions:
                    if rng.random() < 0.1:
                        continue
                    failed = kind == "llm" and rng.random() < 0.1
                    label = None if failed else (human if human and rng.random() < 0.6 else AB[int(rng.integers(0, 3))])
                    swapped = bool(rng.random() < 0.5)
                    error = ["timeout: slow", "parse: junk"][int(rng.integers(0, 2))] if failed else None
                    batch.labels.append(Label(item_id=iid, rater=rater, rater_kind=kind, condition=condition,
                                              label=label, error=error, run_id="r", meta={"swapped": swapped}))
                    verdicts.append({"item": iid, "rater": rater, "kind": kind, "condition": condition,
                                     "label": label, "error": error, "swapped": swapped})
    gvp: list[dict[str, Any]] = []
    for u in range(USERS):
        for k in range(3):
            iid = f"g-{u}-{k}"
            batch.items[iid] = Item(item_id=iid, dataset="gvp", stage="response", user_id=f"g{u:02d}",
                                    payload={"kind": "generic_vs_personalized", "model_tag": "m",
                                             "response_no_context": "generic", "response_personalized": "mine"})
            label = None if rng.random() < 0.1 else AB[int(rng.integers(0, 3))]
            batch.labels.append(Label(item_id=iid, rater="j1", rater_kind="llm", label=label, run_id="r",
                                      error=None if label else "timeout: slow"))
            gvp.append({"user": f"g{u:02d}", "label": label})
    write_batch(db, batch)
    return {"truth": truth, "verdicts": verdicts, "gvp": gvp}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    db = tmp_path_factory.mktemp("agg-response") / "store.duckdb"
    return db, _build(db)


def _scored(data: dict[str, Any], rater: str, condition: str) -> list[dict[str, Any]]:
    """A judge's parsed verdicts on items with a reference, with the item's facts."""
    return [v | data["truth"][v["item"]] for v in data["verdicts"]
            if v["rater"] == rater and v["condition"] == condition and v["label"] is not None
            and data["truth"][v["item"]]["human"] is not None]


@pytest.mark.parametrize(("rater", "condition"), [("j1", "all"), ("j2", "no-profile"), ("tp", "")])
def test_judge_row_matches_the_labels(built: tuple[Path, dict[str, Any]], rater: str, condition: str) -> None:
    db, data = built
    row = next(j for j in report_response(db).judges if j.rater == rater and j.condition == condition)
    rows = _scored(data, rater, condition)
    human = np.array([r["human"] for r in rows], dtype=object)
    judge = np.array([r["label"] for r in rows], dtype=object)
    users = np.array([r["user"] for r in rows])
    assert row.n == len(rows) and row.n_users == len(set(users)) and row.scale == "pairwise"
    assert row.accuracy == pytest.approx(float((human == judge).mean()), abs=1e-12)
    assert row.kappa == pytest.approx(cohen_kappa_score(human, judge, labels=AB), abs=1e-12)
    per_label = scale_estimates(pd.Series(human), pd.Series(judge), pd.Series(users), PAIRWISE_SCALE)
    assert row.kappa_ci == pytest.approx(list(per_label["kappa"].ci), abs=1e-12)
    assert row.ac1 == pytest.approx(per_label["ac1"].value, abs=1e-12)
    # Position bias: a decisive verdict names the answer shown first when (label == A) != swapped.
    decisive = np.isin(judge, ["A", "B"])
    first = (judge == "A") != np.array([r["swapped"] for r in rows])
    expected = clustered_rate(first[decisive], users[decisive])
    assert row.first_position_rate == pytest.approx(expected.value, abs=1e-12)
    assert row.first_position_ci == pytest.approx(list(expected.ci), abs=1e-12)
    la, lb = np.array([r["la"] for r in rows]), np.array([r["lb"] for r in rows])
    counted = decisive & (la != lb)
    longer = clustered_rate(((judge == "A") == (la > lb))[counted], users[counted])
    assert row.longer_rate == pytest.approx(longer.value, abs=1e-12)
    assert row.longer_ci == pytest.approx(list(longer.ci), abs=1e-12)
    assert row.tie_rate == pytest.approx(float((judge == "tie").mean()))
    assert row.human_tie_rate == pytest.approx(float((human == "tie").mean()))
    not_tie = human != "tie"
    assert row.accuracy_without_human_ties == pytest.approx(float((judge[not_tie] == human[not_tie]).mean()))
    assert row.always_a_accuracy == pytest.approx(float((human == "A").mean()))
    assert row.always_longer_accuracy == pytest.approx(float((np.where(la >= lb, "A", "B") == human).mean()))
    failed = [v for v in data["verdicts"] if v["rater"] == rater and v["condition"] == condition
              and v["label"] is None]
    assert row.failures == len(failed)
    assert row.failure_reasons == dict(Counter(v["error"].split(":")[0] for v in failed))
    with_reference = sum(data["truth"][v["item"]]["human"] is not None for v in failed)
    assert row.accuracy_failures_as_wrong == pytest.approx((human == judge).sum() / (len(rows) + with_reference))
    for column in ("split", "tier"):
        values = np.array([r.get(column) for r in rows], dtype=object)
        for value in {v for v in values if v is not None}:
            mask = values == value
            group = row.by_group[f"{column}={value}"]
            assert group.n == int(mask.sum())
            assert group.accuracy == pytest.approx(float((judge[mask] == human[mask]).mean()))


def test_in_sample_and_reverse_runs_are_not_judges(built: tuple[Path, dict[str, Any]]) -> None:
    db, _ = built
    keys = {(j.rater, j.condition) for j in report_response(db).judges}
    assert keys == {("j1", "all"), ("j1", "no-profile"), ("j2", "all"), ("j2", "no-profile"), ("tp", "")}


def test_swap_consistency_gap_humans_and_gvp(built: tuple[Path, dict[str, Any]]) -> None:
    db, data = built
    report = report_response(db)
    parsed = {(v["item"], v["rater"], v["condition"]): v["label"] for v in data["verdicts"] if v["label"] is not None}
    j1 = next(j for j in report.judges if j.rater == "j1" and j.condition == "all")
    both = [(label, parsed[(i, r, "all+reversed")]) for (i, r, c), label in parsed.items()
            if r == "j1" and c == "all" and (i, r, "all+reversed") in parsed]
    assert j1.swap_pairs == len(both) > 0
    assert j1.swap_consistency == pytest.approx(sum(a == b for a, b in both) / len(both))

    gap = next(g for g in report.profile_gaps if g.rater == "j2")
    assert (gap.with_condition, gap.without_condition) == ("all", "no-profile")
    items = [i for (i, r, c) in parsed if r == "j2" and c == "all" and (i, r, "no-profile") in parsed
             and data["truth"][i]["human"] is not None]
    human = [data["truth"][i]["human"] for i in items]
    acc_with, acc_without, expected = accuracy_gap(human, [parsed[(i, "j2", "all")] for i in items],
                                                   [parsed[(i, "j2", "no-profile")] for i in items],
                                                   [data["truth"][i]["user"] for i in items])
    assert gap.n == len(items) and gap.accuracy_with == pytest.approx(acc_with)
    assert gap.accuracy_without == pytest.approx(acc_without)
    assert gap.gap == pytest.approx(expected.value) and gap.gap_ci == pytest.approx(list(expected.ci))

    humans = next(h for h in report.humans if h.dataset == "pairs")
    labelled = [t for t in data["truth"].values() if t["human"] is not None]
    h = np.array([t["human"] for t in labelled], dtype=object)
    assert humans.rater == "ann" and humans.n == len(labelled)
    decisive = np.isin(h, ["A", "B"])
    first = clustered_rate((h == "A")[decisive], np.array([t["user"] for t in labelled])[decisive])
    assert humans.first_position_rate == pytest.approx(first.value)
    assert humans.first_position_ci == pytest.approx(list(first.ci))
    assert humans.tie_rate == pytest.approx(float((h == "tie").mean()))

    row = next(g for g in report.generic_vs_personalized if g.dataset == "gvp")
    ok = [g for g in data["gvp"] if g["label"] is not None]
    expected = clustered_rate([g["label"] != "B" for g in ok], [g["user"] for g in ok])
    assert row.n == len(ok) and row.failures == len(data["gvp"]) - len(ok)
    assert row.no_better_rate == pytest.approx(expected.value)
    assert row.no_better_ci == pytest.approx(list(expected.ci))
    assert row.personalized_preferred_rate == pytest.approx(sum(g["label"] == "B" for g in ok) / len(ok))


def test_counts_come_from_duckdb_and_single_labels_skip_pairs(built: tuple[Path, dict[str, Any]]) -> None:
    """The report reads per-user sums (fewer rows than labels) and never the pairwise labels themselves."""
    db, data = built
    with opened(db, read_only=True) as con:
        with reference_table(con) as reference, staged(con, reference):
            counts = pair_judge_counts(con)
        # Every comparable judge label is counted once (reverse-order runs too: they feed swap consistency).
        assert int(counts["n"].sum()) == sum(v["condition"] != "in-sample" for v in data["verdicts"])
        assert len(counts) < len(data["verdicts"])
        assert single_human_labels(con, ["single", "persona_use"], ["pairs", "gvp"]).empty
