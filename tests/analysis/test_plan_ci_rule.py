"""`plan` follows the one CI rule and reads each dataset's categories from its record.

Before, ``analysis.budget.kappa_budget`` took the percentile interval directly: a 2-user pilot got a kappa CI and a
budget simulated from it, although every report withholds a CI below ``MIN_USERS_FOR_CI`` users.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from personagap.analysis import budget
from personagap.analysis.agreement import MIN_USERS_FOR_CI
from personagap.analysis.budget import simulated_halfwidth
from personagap.analysis.estimates import too_few_users_note
from personagap.commands.plan import load_plan, render_plan
from personagap.datasets import record_meta
from personagap.records import DatasetRecord, DatasetScale
from personagap.store import connect, upsert
from tests.support.frames import plan_rows

SIMS = 20


def _labels(n_users: int) -> pd.DataFrame:
    """``n_users`` users of eight items each: a blind human and a judge that flips every 2nd, 3rd or 4th answer."""
    human = [("yes" if (u + k) % 2 else "no") for u in range(n_users) for k in range(8)]
    frame = pd.DataFrame({"item_id": [f"i{n}" for n in range(len(human))], "human": human,
                          "user_id": [f"u{n // 8}" for n in range(len(human))]})
    # How often the judge errs varies by user, so the users' kappas differ (a bootstrap has something to resample).
    frame["judge"] = [h if n % (2 + n // 8 % 3) else {"yes": "no", "no": "yes"}[h] for n, h in enumerate(human)]
    tidy = frame.melt(["item_id", "user_id"], ["human", "judge"], var_name="rater", value_name="label")
    return tidy.assign(rater_kind=tidy["rater"].map({"human": "human", "judge": "llm"}), condition="", dataset="d")


def test_a_two_user_pilot_gets_no_interval_and_is_told_why() -> None:
    plan = plan_rows(_labels(2), simulations=SIMS)
    [row] = plan.kappa
    assert row.n_users == 2 and not math.isnan(row.kappa)  # the point estimate stays
    assert math.isnan(row.halfwidth)
    assert row.users_needed is None and row.items_needed is None and row.projected_halfwidth is None
    assert row.reason == too_few_users_note(2)
    text = render_plan(plan)
    assert f"on 2 users -> no budget: too few users for a CI: 2 users, {MIN_USERS_FOR_CI} needed" in text


@pytest.mark.parametrize("n_users", [MIN_USERS_FOR_CI, MIN_USERS_FOR_CI + 3])
def test_five_or_more_users_get_an_interval_and_a_budget(n_users: int) -> None:
    [row] = plan_rows(_labels(n_users), simulations=SIMS).kappa
    assert row.n_users == n_users and row.reason is None
    assert row.halfwidth > 0 and not math.isnan(row.halfwidth)
    assert row.users_needed is not None and row.users_needed >= MIN_USERS_FOR_CI
    assert row.projected_halfwidth is not None and row.projected_halfwidth <= row.target_halfwidth


def test_a_simulated_study_below_the_minimum_has_no_interval() -> None:
    tables = np.array([[[3.0, 1.0], [1.0, 3.0]], [[2.0, 0.0], [1.0, 3.0]], [[4.0, 1.0], [0.0, 1.0]]])
    assert math.isnan(simulated_halfwidth(tables, MIN_USERS_FOR_CI - 1, simulations=SIMS))
    assert simulated_halfwidth(tables, MIN_USERS_FOR_CI, simulations=SIMS) > 0


def test_plan_reads_declared_categories_from_the_dataset_record(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    labels = _labels(MIN_USERS_FOR_CI).assign(stage="relevance")
    db = tmp_path / "s.duckdb"
    items = labels.drop_duplicates("item_id")[["item_id", "user_id", "dataset", "stage"]].assign(
        prompt_index=0, attribute=None, position=None, payload="{}")
    rows = labels.assign(raw=None, reason=None, error=None, run_id="r", meta=None)
    # Declared: a third category nobody used; the record, not the labels, says the scale has it.
    record = DatasetRecord(stage="relevance", dataset="d", item_kind="relevance",
                           scale=DatasetScale(kind="nominal", categories=("maybe", "no", "yes")), question="q",
                           origin="synthetic", declared=True)
    with connect(db) as con:
        upsert(con, "items", items[["item_id", "dataset", "stage", "user_id", "prompt_index", "attribute",
                                    "position", "payload"]])
        upsert(con, "labels", rows[["item_id", "rater", "rater_kind", "condition", "label", "raw", "reason",
                                    "error", "run_id", "meta"]])
        for key, value in record_meta(record).items():
            con.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", [key, value])
    seen: dict[str, Any] = {}

    real = budget.plan_from_counts

    def spy(*args: Any, **kwargs: Any) -> budget.Plan:
        seen.update(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(budget, "plan_from_counts", spy)
    plan = load_plan(str(db), "relevance", None, humans="blind", halfwidth=0.05, power=0.8, epsilon=0.2,
                     simulations=SIMS, seed=0)
    assert {k: v.categories for k, v in seen["scales"].items()} == {"d": ("maybe", "no", "yes")}
    assert [k.dataset for k in plan.kappa] == ["d"]
