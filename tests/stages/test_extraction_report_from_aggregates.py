"""`report extraction` from DuckDB aggregates: the per-label report's figures, and figures computed by hand.

The store path (:func:`personagap.stages.extraction.report_extraction`) counts verdicts in DuckDB; the pure path
(:func:`~personagap.stages.extraction.extraction_report`) counts them from every loaded label. Both must give the
same report, and its figures must be those computed here directly from the rows: sklearn's kappa, shares, and the
jackknife-t interval over users (the figure without each user computed here, the interval by
tests/support/ci_oracle.py).
"""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import cohen_kappa_score

from personagap.analysis.ci_rule import MIN_USERS_FOR_CI
from personagap.labels_api import import_labels
from personagap.stages import extraction as stage1
from personagap.store import load_labels, opened
from tests.support.ci_oracle import rule_interval
from tests.support.oracles import extraction_report

SCALE = ["bad", "ok", "unsure"]
HUMANS = ("h1", "h2", "h3")
N_USERS = MIN_USERS_FOR_CI + 2


def _rows() -> list[dict[str, Any]]:
    rng = random.Random(11)
    rows: list[dict[str, Any]] = []
    for u in range(N_USERS):
        for k in range(5 + u % 3):  # users of unequal size: a per-user sum that ignored n would show
            item, user = f"u{u:02d}/a{k}", f"u{u:02d}"
            truth = rng.choice(SCALE)
            for i, h in enumerate(HUMANS):
                label = truth if rng.random() < 0.7 else rng.choice(SCALE)
                row = {"item_id": item, "user_id": user, "rater": h, "label": label}
                if i == 0:
                    row["attribute"] = f"The user likes thing {k}."
                rows.append(row)
            rows.append({"item_id": item, "user_id": user, "rater": "verifier", "rater_kind": "llm",
                         "label": truth if rng.random() < 0.6 else rng.choice(SCALE)})
            if k % 2:
                rows.append({"item_id": item, "user_id": user, "rater": "tiny", "rater_kind": "trained",
                             "label": rng.choice(["ok", "bad"])})
    return rows


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]], list[str]]:
    db = tmp_path_factory.mktemp("agg_extraction") / "team.duckdb"
    rows = _rows()
    import_labels(pd.DataFrame(rows), stage="extraction", dataset="team", db=db, categories=SCALE)
    # Failed verifier answers (label null, error set) on a few items: failures, never verdicts.
    with opened(db) as con:
        failed = [str(r[0]) for r in con.execute("SELECT item_id FROM items ORDER BY item_id").fetchall()][::7]
        for item in failed:
            con.execute("INSERT INTO labels (item_id, rater, rater_kind, condition, label, error, run_id) "
                        "VALUES (?, 'flaky', 'llm', '', NULL, 'parse: no verdict', 'test-run')", [item])
    return db, rows, failed


def _close(a: Any, b: Any, path: str = "") -> None:
    if isinstance(a, dict):
        assert set(a) == set(b), path
        for k in a:
            _close(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _close(x, y, f"{path}[{i}]")
    elif isinstance(a, float) and isinstance(b, float):
        assert a == pytest.approx(b, abs=1e-9), path
    else:
        assert a == b, path


def _pure(db: Path) -> dict[str, Any]:
    from personagap.datasets import dataset_records

    with opened(db, read_only=True) as con:
        items, labels = stage1.load_items(con), load_labels(con, stage="extraction")
        scales = {ds: r.scale for (s, ds), r in dataset_records(con).items() if s == "extraction"}
    return extraction_report(items, labels, scales=scales).to_json_dict()


def test_store_path_gives_the_per_label_report(store: tuple[Path, list[dict[str, Any]], list[str]]) -> None:
    db, _, _ = store
    report = stage1.report_extraction(db).to_json_dict()
    assert report["verifiers"] and report["acceptance"] and report["human_agreement"] and report["alt_test"]
    _close(report, _pure(db))


def test_store_path_on_the_sample_with_an_extractor_and_gold(tmp_path: Path) -> None:
    # The sample has an LLM extractor's chunk labels and gold: neither is a verdict, a verifier or an alt-test row.
    from personagap.sample_extraction import write_sample_extraction

    db = tmp_path / "sample.duckdb"
    laps_dir, jsonl = write_sample_extraction(tmp_path / "sample")
    stage1.import_laps(laps_dir, db)
    stage1.import_extraction(jsonl, db)
    report = stage1.report_extraction(db).to_json_dict()
    assert report["extractors"] and report["matching"] and report["verifiers"]
    extractors = {e["extractor"] for e in report["extractors"]}
    assert not extractors & {v["verifier"] for v in report["verifiers"]}
    assert not extractors & {t["judge"] for t in report["alt_test"]}
    _close(report, _pure(db))


def test_store_path_loads_no_labels(store: tuple[Path, list[dict[str, Any]], list[str]],
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    db, _, _ = store

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the store path must not load every label")

    monkeypatch.setattr(stage1, "load_labels", refuse)
    assert stage1.report_extraction(db).verifiers


def _jackknife(per_user: dict[str, list[Any]], figure: Any, bounds: tuple[float, float]) -> tuple[float, list[float]]:
    # The one CI rule: leave each user out (the figure recomputed here from the rows), then the interval of
    # tests/support/ci_oracle.py on the scale of the figure's range (the bounds the report's code passes),
    # Satterthwaite df.
    everyone = [x for xs in per_user.values() for x in xs]
    theta = [float(figure([x for v, xs in per_user.items() if v != u for x in xs])) for u in per_user]
    point = figure(everyone)
    return point, list(rule_interval(point, theta, bounds))


def test_verifier_kappa_and_rates_by_hand(store: tuple[Path, list[dict[str, Any]], list[str]]) -> None:
    db, rows, failed = store
    report = json.loads(json.dumps(stage1.report_extraction(db).to_json_dict()))
    votes: dict[str, list[str]] = {}
    verifier: dict[str, str] = {}
    user_of = {r["item_id"]: r["user_id"] for r in rows}
    for r in rows:
        if r["rater"] in HUMANS:
            votes.setdefault(r["item_id"], []).append(r["label"])
        elif r["rater"] == "verifier":
            verifier[r["item_id"]] = r["label"]
    reference = {}
    for item, vs in votes.items():
        top = Counter(vs).most_common()
        if len(top) == 1 or top[0][1] > top[1][1]:
            reference[item] = top[0][0]
    assert len(reference) < len(votes)  # some items tie and have no reference

    pairs: dict[str, list[tuple[str, str]]] = {}
    for item in sorted(reference):
        pairs.setdefault(user_of[item], []).append((reference[item], verifier[item]))

    def kappa(ps: list[tuple[str, str]]) -> float:
        return float(cohen_kappa_score([h for h, _ in ps], [j for _, j in ps], labels=SCALE))

    (row,) = [v for v in report["verifiers"] if v["verifier"] == "verifier"]
    point, ci = _jackknife(pairs, kappa, (-1.0, 1.0))
    assert row["n"] == sum(map(len, pairs.values())) and row["n_users"] == N_USERS
    assert row["kappa"] == pytest.approx(point, abs=1e-9)
    assert row["kappa_ci"] == pytest.approx(ci, abs=1e-9)
    every = [p for ps in pairs.values() for p in ps]
    assert row["accuracy"] == pytest.approx(np.mean([h == j for h, j in every]), abs=1e-12)

    # Pooled human acceptance (ok share of every human verdict) with its interval; the failing verifier's row.
    human: dict[str, list[str]] = {}
    for r in rows:
        if r["rater"] in HUMANS:
            human.setdefault(r["user_id"], []).append(r["label"])
    (pooled,) = [a for a in report["acceptance"] if a["rater"] == f"humans ({len(HUMANS)})"]
    point, ci = _jackknife(human, lambda ls: float(np.mean([v == "ok" for v in ls])), (0.0, 1.0))
    assert pooled["n"] == sum(map(len, human.values())) and pooled["ok"] == pytest.approx(point, abs=1e-12)
    assert pooled["ok_ci"] == pytest.approx(ci, abs=1e-9)
    (flaky,) = [a for a in report["acceptance"] if a["rater"] == "flaky"]
    assert flaky["failures"] == len(failed) and flaky["n"] == 0
    (tiny,) = [a for a in report["acceptance"] if a["rater"] == "tiny"]
    tiny_labels = [r["label"] for r in rows if r["rater"] == "tiny"]
    assert tiny["rater_kind"] == "trained" and tiny["n"] == len(tiny_labels)
    assert tiny["bad"] == pytest.approx(tiny_labels.count("bad") / len(tiny_labels), abs=1e-12)
    assert tiny["unsure"] == 0.0
