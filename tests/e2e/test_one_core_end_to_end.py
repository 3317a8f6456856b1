"""Issue 20, done-when: a 3-category relevance dataset, two yes/no single-response datasets and an ordinal one in
ONE database each get their own section and JSON rows in the text reports, ``diagnose`` and the dashboard.

The label rows are made up by the generators of the scale and stage-3 tests (seeded); expected kappas are
recomputed from the written rows with scikit-learn, never copied from the code under test.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from click.testing import CliRunner
from sklearn.metrics import cohen_kappa_score
from streamlit.testing.v1 import AppTest

from personagap.cli import cli
from personagap.labels_api import import_labels
from tests.support.ordinal_rows import TRI
from tests.support.ordinal_rows import aligned as _aligned
from tests.support.ordinal_rows import majority_reference as _reference
from tests.support.ordinal_rows import make_rows as _rows
from tests.support.paths import REPO
from tests.support.response_rows import FACTS, QUALITY, TONE, judge_pairs, single_rows

APP = REPO / "dashboard" / "app.py"
SINGLE = {"team-tone": TONE, "team-facts": FACTS, "team-quality": QUALITY}


@pytest.fixture(scope="module")
def one_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, pd.DataFrame, dict[str, list[dict[str, Any]]]]:
    db = tmp_path_factory.mktemp("one-core") / "one.duckdb"
    tri = _rows(TRI, ["h1", "h2", "h3"], ["judge-tri"], n_users=8, per_user=6, seed=1, item_column="attribute")
    import_labels(tri.assign(prompt="a prompt"), stage="relevance", dataset="tri", db=db, categories=list(TRI))
    singles = {"team-tone": single_rows("tone", ("yes", "no")), "team-facts": single_rows("facts", ("yes", "no")),
               "team-quality": single_rows("quality", ("1", "2", "3", "4", "5"))}
    for name, rows in singles.items():
        ordinal = name == "team-quality"
        import_labels(pd.DataFrame(rows), stage="response", dataset=name, db=db, question=SINGLE[name],
                      scale="ordinal" if ordinal else "nominal",
                      categories=["1", "2", "3", "4", "5"] if ordinal else ["yes", "no"], source_name=name)
    return db, tri, singles


def _cli(*args: str) -> str:
    out = CliRunner().invoke(cli, [*args])
    assert out.exit_code == 0, out.output
    return out.output


def test_reports_give_each_dataset_its_section_and_rows(one_store: Any) -> None:
    db, tri, singles = one_store
    relevance = json.loads(_cli("report", "relevance", "--db", str(db), "--json"))
    (row,) = [j for j in relevance["judges"] if j["dataset"] == "tri"]
    human, said = _aligned(tri, "judge-tri", _reference(tri))
    assert row["n"] == len(human) and row["kappa"] == pytest.approx(cohen_kappa_score(human, said))
    assert row["over_selection"] is None  # a yes/no figure, not on a three-category scale
    response = json.loads(_cli("report", "response", "--db", str(db), "--json"))
    assert {s["dataset"]: s["question"] for s in response["single_responses"]} == SINGLE
    for name, rows in singles.items():
        judged = {j["judge"]: j for j in response["judges"] if j["dataset"] == name}
        assert judged, name
        for judge, j in judged.items():
            h, s = judge_pairs(rows, judge)
            assert j["kappa"] == pytest.approx(cohen_kappa_score(h, s))
            assert j["scale"] == ("ordinal" if name == "team-quality" else "nominal")
    text = _cli("report", "response", "--db", str(db)).splitlines()
    assert all(text.count(q) == 1 for q in SINGLE.values())


def test_diagnose_scores_every_dataset_on_its_scale(one_store: Any) -> None:
    db, _, singles = one_store
    diagnosis = json.loads(_cli("diagnose", "--db", str(db), "--json"))
    rows = [j for s in diagnosis["stages"] for j in s["judges"]]
    by_dataset: dict[str, list[dict[str, Any]]] = {}
    for j in rows:
        by_dataset.setdefault(j["dataset"], []).append(j)
    assert set(by_dataset) == {"tri", *SINGLE}
    assert {j["scale"] for j in by_dataset["team-quality"]} == {"ordinal"}
    for j in by_dataset["team-quality"]:
        h, s = judge_pairs(singles["team-quality"], j["rater"])
        expected = cohen_kappa_score([int(x) for x in h], [int(x) for x in s], weights="quadratic",
                                     labels=[1, 2, 3, 4, 5])
        assert j["weighted_kappa"] == pytest.approx(expected)
    assert all(j["categories"] == ["maybe", "no", "yes"] for j in by_dataset["tri"])


def _page_text(at: AppTest) -> str:
    parts = [str(e.value) for kind in ("title", "markdown", "caption", "info", "warning", "subheader")
             for e in getattr(at, kind)]
    parts += [df.value.to_csv() for df in at.dataframe]
    return "\n".join(parts)


@pytest.mark.parametrize(("page", "datasets"), [("page_stage2.py", ["tri"]), ("page_stage3.py", list(SINGLE))])
def test_dashboard_stage_pages_show_each_dataset(one_store: Any, page: str, datasets: list[str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    db, _, _ = one_store
    monkeypatch.setenv("PERSONAGAP_DB", str(db))
    at = AppTest.from_file(str(APP), default_timeout=120).run()
    at.switch_page(page).run()
    assert not at.exception, [e.value for e in at.exception]
    text = _page_text(at)
    assert all(ds in text for ds in datasets), [ds for ds in datasets if ds not in text]
    assert "nan" not in text.replace("nan,", "").lower().split() and "None" not in text.split()
