"""The Agreement page leaves a jury and its own jurors out of the judge–judge mean (issue 32 item 20)."""

from __future__ import annotations

from itertools import combinations
from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from personagap.judges.jury import build_jury
from personagap.records import Label
from personagap.store import opened, upsert, write_labels
from tests.support.paths import REPO

APP = REPO / "dashboard" / "app.py"
JURORS = ["j1", "j2", "j3"]
RATERS = [*JURORS, "j4"]


def _kappa(a: list[str], b: list[str]) -> float:
    """Cohen's kappa by its definition, on two raters' labels of the same items."""
    po = np.mean([x == y for x, y in zip(a, b, strict=True)])
    pe = sum(a.count(c) / len(a) * b.count(c) / len(b) for c in set(a) | set(b))
    return float((po - pe) / (1 - pe))


def _store(db: Path) -> dict[str, list[str]]:
    rng = np.random.default_rng(3)
    truth = rng.choice(["yes", "no"], size=40)
    given = {r: [str(t) if rng.random() < 0.8 else str(rng.choice(["yes", "no"])) for t in truth] for r in RATERS}
    with opened(db) as con:
        upsert(con, "items", [{"item_id": f"i{k:02d}", "dataset": "d", "stage": "relevance", "user_id": f"u{k % 8}",
                               "prompt_index": k, "attribute": None, "position": None, "payload": "{}"}
                              for k in range(40)])
        write_labels(con, [Label(item_id=f"i{k:02d}", rater=r, rater_kind="llm", condition="", label=v, run_id="r")
                           for r, values in given.items() for k, v in enumerate(values)])
    build_jury(db, [(r, "") for r in JURORS], "majority", rater="jury", condition="")
    # Three jurors, two labels: a majority always decides.
    votes = zip(*(given[r] for r in JURORS), strict=True)
    return {**given, "jury": [max(set(v), key=v.count) for v in votes]}


def test_the_judge_mean_leaves_the_jury_and_its_jurors_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "jury.duckdb"
    labels = _store(db)
    kept = [(a, b) for a, b in combinations(sorted(labels), 2) if "jury" not in (a, b) or "j4" in (a, b)]
    mean = np.mean([_kappa(labels[a], labels[b]) for a, b in kept])
    everything = np.mean([_kappa(labels[a], labels[b]) for a, b in combinations(sorted(labels), 2)])
    assert f"{mean:.2f}" != f"{everything:.2f}"  # the test tells the two apart
    monkeypatch.setenv("PERSONAGAP_DB", str(db))
    at = AppTest.from_file(str(APP), default_timeout=120).run()
    at.switch_page("page_agreement.py").run()
    assert not at.exception, [e.value for e in at.exception]
    summary = at.dataframe[0].value
    row = summary[summary["pairs"] == "judge–judge"].iloc[0]
    assert (row["mean kappa"], row["rater pairs"]) == (f"{mean:.2f}", len(kept))
    captions = [c.value for c in at.caption]
    assert "3 jury pair(s) left out of the group means: j1 – jury; j2 – jury; j3 – jury." in captions
    assert any("left out of the matrix (blank)" in c for c in captions)
