"""`import labels`: a team's own labels for every stage, end to end, and every malformed file as one line.

The label files are made up for these tests (tests/support/byo_data.py), in the three formats: several human
annotators and one LLM per item. Expected figures are recomputed here from the rows the test wrote
(scikit-learn's kappa on the test's own majority), never copied from the code under test.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd
import pytest
from click.testing import CliRunner

from personagap.cli import cli
from personagap.human_data import DataError
from personagap.labels_api import dataset_origins, import_labels, load_labels
from personagap.vocabulary import FILE_RATER_KINDS
from tests.support.byo_data import HUMANS, LLM, expected_vs_majority, team_rows, write_rows
from tests.support.openai_server import ScriptedOpenAIServer


def run(*args: str) -> Any:
    result = CliRunner().invoke(cli, list(args))
    return result


def ok_json(*args: str) -> Any:
    result = run(*args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_relevance_jsonl_end_to_end(tmp_path: Path) -> None:
    rows = team_rows("relevance")
    db = str(tmp_path / "team.duckdb")
    result = run("import", "labels", str(write_rows(tmp_path / "rel.jsonl", rows)), "--stage", "relevance",
                 "--dataset", "team-rel", "--db", db)
    assert result.exit_code == 0, result.output
    assert f"labels {len(rows)} inserted" in result.output

    report = ok_json("report", "relevance", "--db", db)
    (judge,) = [j for j in report["judges"] if j["dataset"] == "team-rel" and j["judge"] == LLM]
    n, kappa = expected_vs_majority(rows)
    assert judge["n"] == n and judge["n_users"] == 12
    assert judge["kappa"] == pytest.approx(kappa)

    diagnosis = ok_json("diagnose", "--db", db)
    (stage,) = [s for s in diagnosis["stages"] if s["stage"] == "relevance"]
    assert stage["n_items"] == 48 and stage["n_human_labels"] == 48 * len(HUMANS)
    assert stage["best"]["judge"] == LLM and stage["best"]["kappa"] == pytest.approx(kappa)


def test_anchored_human_labels_are_kept_out_of_the_blind_reference(tmp_path: Path) -> None:
    """A rater who saw the LLM first (condition shown-llm) is stored as given and never enters the reference."""
    rows = [r | {"condition": "shown-llm"} if r["rater"] == HUMANS[2] else r for r in team_rows("relevance")]
    # The anchored rater copies the LLM: counted as blind, it would pull the reference towards the judge.
    llm_of = {r["item_id"]: r["label"] for r in rows if r.get("rater_kind") == "llm"}
    rows = [r | {"label": llm_of[r["item_id"]]} if r.get("condition") else r for r in rows]
    db = str(tmp_path / "team.duckdb")
    import_labels(write_rows(tmp_path / "rel.jsonl", rows), stage="relevance", dataset="team-rel", db=db)
    stored = load_labels(db, dataset="team-rel")
    assert set(stored.loc[stored["rater"] == HUMANS[2], "condition"]) == {"shown-llm"}
    report = ok_json("report", "relevance", "--db", db)
    (judge,) = [j for j in report["judges"] if j["dataset"] == "team-rel" and j["judge"] == LLM]
    n, kappa = expected_vs_majority([r for r in rows if not r.get("condition")])
    assert judge["n"] == n and judge["kappa"] == pytest.approx(kappa)
    assert n < 48  # two blind raters tie on some items: those have no reference


def test_relevance_items_are_judgeable_by_an_llm_over_http(tmp_path: Path) -> None:
    """`judge relevance --dataset NAME` runs on imported items: the prompt and attribute reach the model."""
    rows = team_rows("relevance", n_users=3, per_user=2)
    db = str(tmp_path / "team.duckdb")
    import_labels(write_rows(tmp_path / "rel.csv", rows), stage="relevance", dataset="team-rel", db=db)
    attribute_of = {r["item_id"]: r["attribute"] for r in rows if "attribute" in r}
    # The answer depends on which attribute the prompt carries: a label stored on the wrong item would show.
    says_yes = {a: i % 2 == 0 for i, a in enumerate(sorted(set(attribute_of.values())))}

    def answer(body: dict[str, Any]) -> str:
        text = json.dumps(body["messages"])
        (shown,) = [a for a in says_yes if a in text]
        return json.dumps({"reason": "r", "answer": "YES" if says_yes[shown] else "NO"})

    with ScriptedOpenAIServer(answer) as server:
        result = run("judge", "relevance", "--model", "openai/scripted", "--api-base", server.base_url,
                     "--dataset", "team-rel", "--no-progress", "--db", db)
        assert result.exit_code == 0, result.output
        assert server.count == 6
    frame = load_labels(db, dataset="team-rel", rater_kind="llm")
    judged = frame[frame["rater"] != LLM]
    assert len(judged) == 6
    assert {i: lab == "yes" for i, lab in zip(judged["item_id"], judged["label"], strict=True)} == {
        i: says_yes[a] for i, a in attribute_of.items()}


def test_response_pairwise_csv_and_single_parquet(tmp_path: Path) -> None:
    # A dataset record has one item kind: pairs and single responses are two datasets of one stage.
    pairs, singles = team_rows("response"), team_rows("response", shape="single")
    db = str(tmp_path / "team.duckdb")
    result = run("import", "labels", str(write_rows(tmp_path / "pairs.csv", pairs)), "--stage", "response",
                 "--dataset", "team-resp", "--origin", "synthetic", "--db", db)
    assert result.exit_code == 0, result.output
    result = run("import", "labels", str(write_rows(tmp_path / "single.parquet", singles)), "--stage", "response",
                 "--dataset", "team-single", "--origin", "synthetic", "--db", db)
    assert result.exit_code == 0, result.output

    report = ok_json("report", "response", "--db", db)
    pairwise = [j for j in report["judges"] if j["dataset"] == "team-resp" and j["reference"] == "human"]
    assert [j["judge"] for j in pairwise] == [LLM]
    n, kappa = expected_vs_majority(pairs)
    assert pairwise[0]["n"] == n and pairwise[0]["kappa"] == pytest.approx(kappa)
    # Single yes/no responses get their own section: the rater panel and the LLM vs the majority.
    (single,) = [s for s in report["single_responses"] if s["dataset"] == "team-single"]
    assert single["raters"] == {h: 48 for h in HUMANS}
    vs_majority = [v for v in single["judges"] if v["judge"] == LLM and v["rater"] == "majority"]
    n_single, kappa_single = expected_vs_majority(singles)
    assert vs_majority[0]["n"] == n_single and vs_majority[0]["kappa"] == pytest.approx(kappa_single)

    diagnosis = ok_json("diagnose", "--db", db)
    (stage,) = [s for s in diagnosis["stages"] if s["stage"] == "response"]
    assert stage["n_items"] == 96 and stage["n_judge_labels"] == 96
    with duckdb.connect(db, read_only=True) as con:
        assert dataset_origins(con) == {"team-resp": "synthetic", "team-single": "synthetic"}


def test_response_items_are_judgeable_pairwise(tmp_path: Path) -> None:
    rows = team_rows("response", n_users=2, per_user=2)
    db = str(tmp_path / "team.duckdb")
    import_labels(write_rows(tmp_path / "pairs.jsonl", rows), stage="response", dataset="team-resp", db=db)
    answers = {r["response_b"] for r in rows if "response_b" in r}
    seen: list[str] = []

    def answer(body: dict[str, Any]) -> str:
        text = json.dumps(body["messages"])
        seen.append(text)
        return json.dumps({"reason": "r", "verdict": "A"})

    with ScriptedOpenAIServer(answer) as server:
        result = run("judge", "response", "--judge", "pairwise", "--model", "openai/scripted", "--api-base",
                     server.base_url, "--dataset", "team-resp", "--no-progress", "--db", db)
        assert result.exit_code == 0, result.output
    assert len(seen) == 4 and all(any(json.dumps(a)[1:-1] in t for a in answers) for t in seen)
    report = ok_json("report", "response", "--db", db)
    assert any(j["judge"].startswith("pairwise/") and j["dataset"] == "team-resp" for j in report["judges"])


def test_single_yes_no_items_are_judgeable_by_persona_use(tmp_path: Path) -> None:
    rows = team_rows("response", n_users=2, per_user=2, shape="single")
    db = str(tmp_path / "team.duckdb")
    import_labels(write_rows(tmp_path / "single.jsonl", rows), stage="response", dataset="team-single", db=db)
    responses = {r["response"] for r in rows if "response" in r}
    shown: list[str] = []

    def answer(body: dict[str, Any]) -> str:
        text = json.dumps(body["messages"])
        shown.extend(r for r in responses if json.dumps(r)[1:-1] in text)
        return json.dumps({"reason": "r", "uses_persona": "yes"})

    with ScriptedOpenAIServer(answer) as server:
        result = run("judge", "response", "--judge", "persona-use", "--model", "openai/scripted", "--api-base",
                     server.base_url, "--dataset", "team-single", "--no-progress", "--db", db)
        assert result.exit_code == 0, result.output
    assert sorted(shown) == sorted(responses)  # each item's own response reached the model once
    judged = load_labels(db, dataset="team-single", rater_kind="llm")
    assert (judged[judged["rater"] != LLM]["label"] == "yes").sum() == 4


def test_extraction_verdicts_end_to_end_and_in_the_dashboard(tmp_path: Path) -> None:
    from personagap.dashboard.queries import DisagreementFilter, case_detail, disagreements_page

    rows = team_rows("extraction")
    db = str(tmp_path / "team.duckdb")
    result = run("import", "labels", str(write_rows(tmp_path / "ext.jsonl", rows)), "--stage", "extraction",
                 "--dataset", "team-ext", "--db", db)
    assert result.exit_code == 0, result.output
    report = ok_json("report", "extraction", "--db", db)
    (agreement,) = [h for h in report["human_agreement"] if h["dataset"] == "team-ext"]
    assert agreement["annotators"] == 3 and agreement["items"] == 48
    (verifier,) = [v for v in report["verifiers"] if v["dataset"] == "team-ext"]
    n, kappa = expected_vs_majority(rows)
    assert verifier["verifier"] == LLM and verifier["n"] == n and verifier["kappa"] == pytest.approx(kappa)

    page = disagreements_page(db, DisagreementFilter(dataset="team-ext"))
    assert not page.empty and set(page["judge"]) == {LLM}
    case = case_detail(db, str(page["item_id"].iloc[0]))
    assert case is not None and case["item"]["payload"]["conversation"]
    assert set(case["labels"]["rater"]) == {*HUMANS, LLM}


def test_dataframe_api_matches_files_and_load_labels_is_tidy(tmp_path: Path) -> None:
    rows = team_rows("relevance", n_users=4, per_user=2)
    frame = pd.DataFrame(rows)
    from_frame, from_file = tmp_path / "frame.duckdb", tmp_path / "file.duckdb"
    import_labels(frame, stage="relevance", dataset="team", db=from_frame)
    import_labels(write_rows(tmp_path / "rel.parquet", rows), stage="relevance", dataset="team", db=from_file)
    a, b = load_labels(from_frame), load_labels(from_file)
    assert len(a) == len(rows)
    pd.testing.assert_frame_equal(a.drop(columns="run_id"), b.drop(columns="run_id"))
    # Your own ids come back, with every row's context filled from the item.
    assert set(a["item_id"]) == {r["item_id"] for r in rows}
    first = a[a["item_id"] == rows[0]["item_id"]]
    assert set(first["prompt"]) == {rows[0]["prompt"]} and set(first["attribute"]) == {rows[0]["attribute"]}
    assert list(a.sort_values(["item_id", "rater"])["label"]) == [
        r["label"] for r in sorted(rows, key=lambda r: (r["item_id"], r["rater"]))]


def test_reimport_replaces_exactly_that_files_rows(tmp_path: Path) -> None:
    rows = team_rows("relevance", n_users=2, per_user=2)
    path = write_rows(tmp_path / "rel.jsonl", rows)
    other = write_rows(tmp_path / "other.jsonl", [{"item_id": "x", "rater": "ann-9", "label": "no"}])
    db = tmp_path / "team.duckdb"
    import_labels([path, other], stage="relevance", dataset="team", db=db)
    dropped, changed = rows[1], rows[2]
    kept = [r for r in rows if r is not dropped]
    kept[1] = changed | {"label": "yes" if changed["label"] == "no" else "no"}
    write_rows(path, kept)
    summary = import_labels(path, stage="relevance", dataset="team", db=db)
    assert summary.written["labels"].removed == 1 and summary.written["labels"].updated == 1
    after = load_labels(db)
    assert len(after) == len(kept) + 1  # the other file's label stays
    assert not ((after["item_id"] == dropped["item_id"]) & (after["rater"] == dropped["rater"])).any()
    again = import_labels(path, stage="relevance", dataset="team", db=db)
    assert not again.written.changed


@pytest.mark.parametrize(("name", "content", "expected"), [
    ("missing.csv", "item_id,label\na,yes\n", "missing.csv: field 'rater': missing column"),
    ("empty_label.csv", "item_id,rater,label\na,r1,yes\nb,r1,\n", "empty_label.csv:3: field 'label': missing"),
    ("scale.csv", "item_id,rater,label\na,r1,yes\nb,r1,maybe\n", "scale.csv:3: field 'label': 'maybe' is outside"),
    ("dup.csv", 'item_id,rater,label,prompt\na,r1,yes,"two\nlines"\na,r1,no,\n',
     "dup.csv:4: field 'rater': rater 'r1' labels item 'a' twice (first at "),
    ("context.jsonl", '{"item_id":"a","rater":"r1","label":"yes","prompt":"p1"}\n\n'
                      '{"item_id":"a","rater":"r2","label":"no","prompt":"p2"}\n',
     "context.jsonl:3: field 'prompt': item 'a' has another prompt at "),
    ("user.jsonl", '{"item_id":"a","rater":"r1","label":"yes","user_id":"u1"}\n'
                   '{"item_id":"a","rater":"r2","label":"no","user_id":"u2"}\n',
     "user.jsonl:2: field 'user_id': item 'a' has another user_id"),
    ("kind.jsonl", '{"item_id":"a","rater":"r1","label":"yes","rater_kind":"robot"}\n',
     "kind.jsonl:1: field 'rater_kind': unknown rater kind 'robot'"),
    ("typo.jsonl", '{"item_id":"a","rater":"r1","label":"yes","raters":"x"}\n',
     "typo.jsonl:1: field 'raters': unknown"),
    ("json.jsonl", '{"item_id":"a","rater":"r1","label":"yes"}\n{"item_id":"b",\n', "json.jsonl:2: malformed JSON"),
    ("nested.jsonl", '{"item_id":"a","rater":"r1","label":["yes"]}\n', "nested.jsonl:1: field 'label': expected a str"),
    ("array.jsonl", '[1, 2]\n', "array.jsonl:1: expected a JSON object"),
    ("width.csv", "item_id,rater,label\na,r1,yes\nb,r1\n", "width.csv:3: 2 fields where the header has 3"),
    ("nothing.jsonl", "", "nothing.jsonl: the file holds no label rows"),
    ("labels.txt", "item_id,rater,label\n", "labels.txt: unknown file type '.txt'"),
    ("context_stage.jsonl", '{"item_id":"a","rater":"r1","label":"yes","response_a":"x"}\n',
     "context_stage.jsonl:1: field 'response_a': unknown column"),
])
def test_malformed_file_is_one_line_and_writes_nothing(tmp_path: Path, name: str, content: str,
                                                       expected: str) -> None:
    db = tmp_path / "team.duckdb"
    import_labels(write_rows(tmp_path / "good.jsonl", team_rows("relevance", n_users=2, per_user=1)),
                  stage="relevance", dataset="team", db=db)
    before = load_labels(db)
    bad = tmp_path / name
    bad.write_text(content, encoding="utf-8")
    result = CliRunner().invoke(cli, ["import", "labels", str(bad), "--stage", "relevance", "--dataset", "team",
                                      "--db", str(db)])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.output
    assert lines[0].startswith(f"{tmp_path}/{expected}") or f"{tmp_path}/{expected}" in lines[0]
    pd.testing.assert_frame_equal(load_labels(db), before)


def test_ordinal_scale_and_fixed_categories(tmp_path: Path) -> None:
    path = tmp_path / "scores.csv"
    path.write_text("item_id,rater,label\na,r1,4\na,r2,5.0\nb,r1,3\nb,r2,7\n", encoding="utf-8")
    db = tmp_path / "team.duckdb"
    result = run("import", "labels", str(path), "--stage", "response", "--dataset", "scores", "--scale", "ordinal",
                 "--categories", "1,2,3,4,5", "--db", str(db))
    assert result.exit_code == 2 and "scores.csv:5: field 'label': '7' is outside the ordinal scale" in result.output
    path.write_text("item_id,rater,label\na,r1,4\na,r2,5.0\nb,r1,3\n", encoding="utf-8")
    result = run("import", "labels", str(path), "--stage", "response", "--dataset", "scores", "--scale", "ordinal",
                 "--categories", "1,2,3,4,5", "--db", str(db))
    assert result.exit_code == 0, result.output
    assert sorted(load_labels(db)["label"]) == ["3", "4", "5"]  # 5.0 is category 5


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_the_first_problem_in_file_order_is_named_in_a_large_file(tmp_path: Path, fmt: str) -> None:
    """Clean files are read without row numbers (fast, in any order); a problem is still named by its line.

    Two bad rows deep in a file read by several threads: the one earlier in the file is named, at its true
    line (blank JSONL lines and multi-line CSV fields move lines away from row numbers).
    """
    n, first_bad, later_bad = 60_000, 31_337, 47_000
    rows = [{"item_id": f"i{i}", "rater": "r1", "label": "yes" if i % 3 else "no",
             "prompt": f"two\nlines {i}" if i % 1000 == 0 else f"p{i}"} for i in range(n)]
    rows[first_bad]["rater_kind"] = "robot"
    rows[later_bad]["rater_kind"] = "alien"
    path = tmp_path / f"big.{fmt}"
    if fmt == "jsonl":
        text = "".join(json.dumps(r) + ("\n\n" if i % 500 == 0 else "\n") for i, r in enumerate(rows))
        path.write_text(text, encoding="utf-8")
    else:
        pd.DataFrame(rows).to_csv(path, index=False)
    text = path.read_text(encoding="utf-8")
    expected_line = next(no for no, line in enumerate(text.splitlines(), start=1) if "robot" in line)
    result = run("import", "labels", str(path), "--stage", "relevance", "--dataset", "big",
                 "--db", str(tmp_path / "big.duckdb"))
    assert result.exit_code == 2
    assert result.output.strip() == (f"{path}:{expected_line}: field 'rater_kind': unknown rater kind 'robot' "
                                     f"(one of {', '.join(FILE_RATER_KINDS)})")
    assert not (tmp_path / "big.duckdb").exists()


def test_two_items_asking_the_same_question_are_both_judged_and_cached_once(tmp_path: Path) -> None:
    """Identical inputs share one answer key (PRISM lists some comparisons twice): a batch holding both writes
    both labels and one cache row, instead of failing on the cache's key."""
    rows = [{"item_id": item, "rater": "h1", "label": "yes", "prompt": "Plan my week", "attribute": "works nights",
             "profile": "works nights"} for item in ("first", "second")]
    db = str(tmp_path / "team.duckdb")
    import_labels(pd.DataFrame(rows), stage="relevance", dataset="twice", db=db)
    with ScriptedOpenAIServer(lambda body: json.dumps({"reason": "r", "answer": "YES"})) as server:
        result = run("judge", "relevance", "--model", "openai/scripted", "--api-base", server.base_url,
                     "--dataset", "twice", "--no-progress", "--db", db)
        assert result.exit_code == 0, result.output
    judged = load_labels(db, dataset="twice", rater_kind="llm")
    assert sorted(judged["item_id"]) == ["first", "second"] and set(judged["label"]) == {"yes"}
    con = duckdb.connect(db, read_only=True)
    assert con.execute("SELECT count(*) FROM judge_cache").fetchall() == [(1,)]
    con.close()


def test_ids_and_names_are_compared_without_surrounding_spaces(tmp_path: Path) -> None:
    """' a ' and 'a' are one item, 'r1 ' and 'r1' one rater; an id of spaces alone is missing. Tabs are kept."""
    db = tmp_path / "team.duckdb"
    frame = pd.DataFrame({"item_id": [" a ", "a", "b", "\tb"], "rater": ["r1", "r2 ", "  r1", "r1"],
                          "rater_kind": ["human", " llm", "human ", "human"], "label": ["yes", "no", "no", "yes"]})
    import_labels(frame, stage="relevance", dataset="team", db=db)
    stored = load_labels(db, dataset="team").sort_values(["item_id", "rater"])
    assert list(zip(stored["item_id"], stored["rater"], stored["rater_kind"], strict=True)) == [
        ("\tb", "r1", "human"), ("a", "r1", "human"), ("a", "r2", "llm"), ("b", "r1", "human")]
    twice = pd.DataFrame({"item_id": [" a", "a "], "rater": ["r1", " r1 "], "label": ["yes", "no"]})
    with pytest.raises(DataError, match="rater 'r1' labels item 'a' twice"):
        import_labels(twice, stage="relevance", dataset="team2", db=db)
    blank = pd.DataFrame({"item_id": ["a", "   "], "rater": ["r1", "r1"], "label": ["yes", "no"]})
    with pytest.raises(DataError, match="item_id.*missing or empty"):
        import_labels(blank, stage="relevance", dataset="team3", db=db)


@pytest.mark.parametrize("n_raters", [3, 64, 65, 200])
def test_a_label_given_twice_is_found_with_few_or_many_raters(tmp_path: Path, n_raters: int) -> None:
    """Up to 64 (rater, condition) keys are checked as bits of a mask, more as lists: both find the duplicate."""
    rows = [{"item_id": f"i{k % 7}", "rater": f"r{k}", "label": "yes", "condition": "" if k % 2 else "shown-llm"}
            for k in range(n_raters)]
    db = tmp_path / "team.duckdb"
    assert import_labels(pd.DataFrame(rows), stage="relevance", dataset="many", db=db).written["labels"].inserted \
        == n_raters
    twice = rows + [dict(rows[n_raters // 2], label="no")]
    with pytest.raises(DataError, match=rf"row {n_raters}\b.*rater 'r{n_raters // 2}' labels item "
                                        rf"'i{(n_raters // 2) % 7}'.* twice \(first at frame:row {n_raters // 2}\)"):
        import_labels(pd.DataFrame(twice), stage="relevance", dataset="many", db=db, source_name="frame")
