"""`personagap route` (issue 23): the stored decision serves exactly the routed items, reruns are idempotent,
figures match the estimator on the data as generated, bad input is one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from personagap.analysis.routing import routing_estimate
from personagap.cli import cli
from personagap.dashboard import annotate
from personagap.store import opened
from tests.route_store import DATASET, JUDGE, route_db

ROUTE = ["route", "--stage", "relevance", "--dataset", DATASET, "--judge", JUDGE]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory):
    return route_db(tmp_path_factory.mktemp("route") / "r.duckdb")


def _route(db: Path, *extra: str) -> dict:
    result = CliRunner().invoke(cli, [*ROUTE, "--db", str(db), "--json", *extra])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_route_stores_exactly_the_items_below_the_threshold_and_reruns_idempotently(store) -> None:
    db, items = store
    out = _route(db, "--target-accuracy", "0.9")
    threshold = out["threshold"]["min_confidence"]
    assert threshold is not None and threshold > items["confidence"].min()  # a real split: some kept, some routed
    expected = sorted(items.loc[items["confidence"] < threshold, "item_id"])
    with opened(db, read_only=True) as con:
        # Stored ids are hashes of the generated ones: read each judge label's confidence back.
        conf = {r[0]: float(r[1]) for r in con.execute(
            "SELECT item_id, CAST(meta->>'$.confidence' AS DOUBLE) FROM labels WHERE rater = ?", [JUDGE]).fetchall()}
    routed = annotate.routed_items(db, "relevance", DATASET)
    assert routed is not None and sorted(routed) == sorted(i for i, c in conf.items() if c < threshold)
    assert len(routed) == len(expected) == out["estimate"]["routed_to_people"]
    # The combined figure is the estimator's on the data as generated (the store's query loses nothing).
    est = routing_estimate(items, threshold, "yes")
    assert out["estimate"]["combined"]["value"] == pytest.approx(est.combined.value)
    assert out["estimate"]["combined"]["ci"] == pytest.approx(list(est.combined.ci))
    assert out["estimate"]["human_labels_still_needed"] == est.still_needed > 0
    assert out["estimate"]["all_human"]["value"] == pytest.approx(est.all_human.value)
    # A rerun replaces the one decision (same id, same routed items): idempotent.
    again = _route(db, "--target-accuracy", "0.9")
    with opened(db, read_only=True) as con:
        runs = con.execute("SELECT run_id FROM runs WHERE kind = 'route'").fetchall()
    assert runs == [(out["run_id"],)] and again["run_id"] == out["run_id"]
    assert annotate.routed_items(db, "relevance", DATASET) == routed


def test_a_target_nothing_reaches_routes_every_item_to_people(store) -> None:
    db, items = store
    out = _route(db, "--target-accuracy", "1.0", "--positive", "no")
    assert out["threshold"]["min_confidence"] is None
    assert out["estimate"]["routed_to_people"] == len(items) and out["estimate"]["kept_by_judge"] == 0
    with opened(db, read_only=True) as con:
        every = sorted(r[0] for r in con.execute("SELECT item_id FROM items WHERE dataset = ?", [DATASET]).fetchall())
    assert sorted(annotate.routed_items(db, "relevance", DATASET) or []) == every
    assert out["estimate"]["combined"]["value"] == pytest.approx(routing_estimate(items, None, "no").combined.value)


@pytest.mark.parametrize(("args", "says"), [
    (["--target-accuracy", "0.9", "--judge", "nobody"], "no judge 'nobody'"),
    ([], "give --target-accuracy or --target-kappa"),
    (["--target-accuracy", "0.9", "--target-kappa", "0.5"], "not both"),
    (["--target-accuracy", "0.9", "--positive", "maybe"], "'maybe' is not one of no, yes"),
    (["--target-accuracy", "0.9", "--dataset", "other"], "no relevance dataset 'other'"),
])
def test_bad_input_is_one_line_and_exit_2(store, args: list[str], says: str) -> None:
    db, _ = store
    result = CliRunner().invoke(cli, [*ROUTE, "--db", str(db), *args])
    assert result.exit_code == 2 and says in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_help_says_what_is_kept_routed_and_estimated() -> None:
    text = CliRunner().invoke(cli, ["route", "--help"]).output
    for phrase in ("other half", "Annotate", "routed to people", "--target-kappa", "--positive", "all-human"):
        assert phrase in " ".join(text.split()), phrase


def test_a_kappa_target_is_chosen_on_kappa_and_text_output_names_the_three_rates(store) -> None:
    db, items = store
    out = _route(db, "--target-kappa", "0.6")
    assert out["threshold"]["target"] == {"metric": "kappa", "value": 0.6, "source": "given"}
    chosen = out["threshold"]["chosen_on"]
    assert chosen is None or chosen["kappa"] >= 0.6
    text = CliRunner().invoke(cli, [*ROUTE, "--db", str(db), "--target-kappa", "0.6"]).output
    for line in ("routed (judge + people)", "all human", "all judge", "human labels still needed"):
        assert line in text, line
