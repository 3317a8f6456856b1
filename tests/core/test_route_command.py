"""`personagap route` (issues 23, 30): the stored decision serves exactly the routed items, reruns are idempotent,
the threshold and figures match the analysis functions on the data as generated, the audit draw is stored and
counted, a cascade passes items on, bad input is one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from personagap.analysis.routing import ASSUMED, guaranteed_threshold, kept_mask, routing_estimate
from personagap.cli import cli
from personagap.dashboard import annotate
from personagap.store import opened
from personagap.store.route_audit import load_audit
from personagap.store.routing import route_items
from tests.support.route_store import CHEAP, DATASET, JUDGE, cheap_items, route_db

ROUTE = ["route", "--stage", "relevance", "--dataset", DATASET, "--judge", JUDGE]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory):
    return route_db(tmp_path_factory.mktemp("route") / "r.duckdb", users=30)


def _route(db: Path, *extra: str) -> dict:
    result = CliRunner().invoke(cli, [*ROUTE, "--db", str(db), "--json", *extra])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_route_stores_exactly_the_items_below_the_threshold_and_reruns_idempotently(store) -> None:
    db, items = store
    out = _route(db, "--target-accuracy", "0.8")
    assert out["method"] == "ltt" and out["delta"] == 0.1 and out["threshold"]["delta"] == 0.1
    threshold = out["threshold"]["min_confidence"]
    # The guaranteed threshold is the analysis function's on the data as generated (the store loses nothing).
    assert threshold == guaranteed_threshold(items, 0.8, delta=0.1).min_confidence
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
    # No audit: the human rate is the routed labelling's value, assumed, without an interval.
    assert out["estimate"]["human_rate"]["ci"] == [None, None] and out["estimate"]["human_rate_basis"] == ASSUMED
    assert out["audit"] == {"drawn": 0, "labelled": 0, "seed": None, "note": None}
    # A rerun replaces the one decision (same id, same routed items): idempotent.
    again = _route(db, "--target-accuracy", "0.8")
    with opened(db, read_only=True) as con:
        runs = con.execute("SELECT run_id FROM runs WHERE kind = 'route'").fetchall()
    assert runs == [(out["run_id"],)] and again["run_id"] == out["run_id"]
    assert annotate.routed_items(db, "relevance", DATASET) == routed


def test_a_target_nothing_reaches_routes_every_item_to_people(store) -> None:
    db, items = store
    out = _route(db, "--target-accuracy", "0.99", "--positive", "no")
    # 0.99 needs about 1.3^2 * .99 / .01 = 170 labelled items even if all were right: nothing can be tested.
    assert out["threshold"]["min_confidence"] is None and out["threshold"]["tests"] == []
    assert "even if every kept label were right" in out["threshold"]["stopped"]
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
    (["--target-kappa", "0.5"], "the guarantee (--method ltt) is on accuracy"),
    (["--target-accuracy", "0.9", "--delta", "0"], "--delta must be between 0 and 1"),
    (["--target-accuracy", "0.9", "--delta", "1.5"], "--delta must be between 0 and 1"),
    (["--target-accuracy", "1.0"], "must be in (0, 1) for a guarantee"),
    (["--target-accuracy", "0.9", "--audit", "0"], "--audit must be at least 1"),
    (["--target-accuracy", "0.9", "--cascade", f"{JUDGE},{CHEAP}"], "give --judge or --cascade (not both)"),
])
def test_bad_input_is_one_line_and_exit_2(store, args: list[str], says: str) -> None:
    db, _ = store
    result = CliRunner().invoke(cli, [*ROUTE, "--db", str(db), *args])
    assert result.exit_code == 2 and says in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_help_says_what_is_kept_routed_and_estimated() -> None:
    text = " ".join(CliRunner().invoke(cli, ["route", "--help"]).output.split())
    for phrase in ("other half", "Annotate", "routed to people", "--target-kappa", "--positive", "all-human",
                   "fixed-sequence", "--delta", "1 - delta", "--cascade", "--audit N", "--audit-seed",
                   "--method [ltt|split]", "assumes the judge's kept labels are right"):
        assert phrase in text, phrase


CASCADE = ["route", "--stage", "relevance", "--dataset", DATASET, "--target-accuracy", "0.8"]


@pytest.mark.parametrize(("args", "says"), [
    (["--cascade", JUDGE], "two or more judge names"),
    (["--cascade", f"{JUDGE},"], "two or more judge names"),
    (["--cascade", f"{JUDGE},{JUDGE}"], "names a judge twice"),
    (["--cascade", f"{JUDGE},nobody"], "no judge 'nobody'"),
    (["--cascade", f"{JUDGE},{CHEAP}", "--method", "split"], "--cascade needs --method ltt"),
    ([], "give --judge or --cascade"),
])
def test_a_bad_cascade_is_one_line_and_exit_2(store, args: list[str], says: str) -> None:
    db, _ = store
    result = CliRunner().invoke(cli, [*CASCADE, "--db", str(db), *args])
    assert result.exit_code == 2 and says in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_split_method_keeps_the_old_choice_and_a_kappa_target(store) -> None:
    db, items = store
    out = _route(db, "--target-kappa", "0.6", "--method", "split")
    assert out["method"] == "split" and out["delta"] is None and out["threshold"]["method"] == "split"
    assert out["threshold"]["target"] == {"metric": "kappa", "value": 0.6, "source": "given"}
    chosen = out["threshold"]["chosen_on"]
    assert chosen is None or chosen["kappa"] >= 0.6
    text = CliRunner().invoke(cli, [*ROUTE, "--db", str(db), "--target-kappa", "0.6", "--method", "split"]).output
    for line in ("--method split", "no guarantee", "routed labelling", "not the human rate", "all human",
                 "all judge", "human labels still needed"):
        assert line in text, line


def test_text_output_states_the_guarantee_and_the_assumption_in_one_line(store) -> None:
    db, _ = store
    result = CliRunner().invoke(cli, [*ROUTE, "--db", str(db), "--target-accuracy", "0.8"])
    assert result.exit_code == 0, result.output
    text = result.output
    assert "with probability >= 0.9" in text and "fixed-sequence testing" in text
    human = [line for line in text.splitlines() if line.strip().startswith("human rate")]
    assert len(human) == 1 and "no interval: assumed: the judge's kept labels are right" in human[0]
    assert "[" not in human[0]  # no interval printed for the human rate


@pytest.fixture()
def audit_store(tmp_path: Path):
    return route_db(tmp_path / "a.duckdb", users=30, cheap=True)


def test_an_audit_is_drawn_stored_reproducible_and_estimates_the_human_rate(audit_store) -> None:
    db, items = audit_store
    out = _route(db, "--target-accuracy", "0.8", "--audit", "40", "--audit-seed", "7")
    with opened(db, read_only=True) as con:
        draw = load_audit(con, "relevance", DATASET)
        stored = route_items(con, "relevance", DATASET, JUDGE, "")
    threshold = out["threshold"]["min_confidence"]
    assert threshold is not None and draw is not None and draw.seed == 7 and len(draw.item_ids) == 40
    kept = set(stored.loc[kept_mask(stored, threshold), "item_id"])
    assert set(draw.item_ids) <= kept and len(kept) > 40
    labelled = int(stored["item_id"].isin(draw.item_ids).to_numpy()[stored["human"].notna().to_numpy()].sum())
    assert out["audit"] == {"drawn": 40, "labelled": labelled, "seed": 7, "note": None} and labelled > 0
    expected = routing_estimate(stored, threshold, "yes", audit=list(draw.item_ids))
    assert expected.human_rate is not None
    assert out["estimate"]["human_rate"]["value"] == pytest.approx(expected.human_rate.value)
    assert out["estimate"]["human_rate"]["ci"] == pytest.approx(list(expected.human_rate.ci))
    assert out["estimate"]["human_rate_basis"].startswith(f"audit: people's labels on {labelled} of 40")
    # The same seed and kept items draw the same items; a rerun without --audit uses the stored draw.
    assert _route(db, "--target-accuracy", "0.8", "--audit", "40", "--audit-seed", "7")["audit"] == out["audit"]
    again = _route(db, "--target-accuracy", "0.8")
    assert again["audit"]["drawn"] == 40 and again["estimate"]["human_rate"] == out["estimate"]["human_rate"]
    with opened(db, read_only=True) as con:
        assert load_audit(con, "relevance", DATASET) == draw
    # Other kept items (another target): the stored draw is no random sample of them any more, and it says so.
    other = _route(db, "--target-accuracy", "0.6")
    if other["threshold"]["min_confidence"] != threshold:
        assert other["audit"]["drawn"] == 0 and "drawn from other kept items" in other["audit"]["note"]
        assert other["estimate"]["human_rate"]["ci"] == [None, None]


def test_a_cascade_passes_on_what_the_first_judge_does_not_keep(audit_store) -> None:
    db, items = audit_store
    result = CliRunner().invoke(cli, [*CASCADE, "--db", str(db), "--json", "--cascade", f"{JUDGE},{CHEAP}"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    first, second = out["cascade"]
    assert (first["judge"], second["judge"]) == (JUDGE, CHEAP) and out["judge"] == f"{JUDGE} then {CHEAP}"
    assert first["threshold"]["delta"] == second["threshold"]["delta"] == pytest.approx(0.05)
    # By hand from the generated items: the first judge's threshold at delta/2; the second judge tested on what is
    # left, at delta/2; kept = either.
    t1 = guaranteed_threshold(items, 0.8, delta=0.05).min_confidence
    assert first["threshold"]["min_confidence"] == t1
    kept1 = kept_mask(items, t1)
    cheap = cheap_items(items)
    t2 = guaranteed_threshold(cheap[~kept1], 0.8, delta=0.05).min_confidence
    assert second["threshold"]["min_confidence"] == t2
    kept2 = ~kept1 & kept_mask(cheap, t2)
    assert (first["kept"], second["kept"]) == (int(kept1.sum()), int(kept2.sum()))
    assert out["estimate"]["kept_by_judge"] == int((kept1 | kept2).sum())
    assert out["estimate"]["routed_to_people"] == len(items) - int((kept1 | kept2).sum())
    routed = annotate.routed_items(db, "relevance", DATASET)
    assert routed is not None and len(routed) == out["estimate"]["routed_to_people"]
    # The routed labelling takes each kept item's label from the judge that kept it.
    labels = items["label"].where(~kept2, cheap["label"])
    est = routing_estimate(items.assign(label=labels), None, "yes", kept=kept1 | kept2)
    assert out["estimate"]["combined"]["value"] == pytest.approx(est.combined.value)
    text = CliRunner().invoke(cli, [*CASCADE, "--db", str(db), "--cascade", f"{JUDGE},{CHEAP}"]).output
    assert f"{JUDGE}: " in text and f"{CHEAP}: " in text and "each at delta 0.05" in text
