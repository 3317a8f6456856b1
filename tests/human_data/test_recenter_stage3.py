"""Re-Centering's stage-3 answers under input conditions, the pipeline's own stage-2 selection, attribute ids.

Every expected figure is recomputed here from the release files with code independent of the importer.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import duckdb
import pytest

from personagap.api import import_recenter
from personagap.datasets import dataset_records
from personagap.human_data import DataError, load_recenter
from personagap.human_data.recenter import PIPELINE_RATER, STAGE2, STAGE3
from personagap.linking import attribute_id
from tests.support.release_builders import recenter as tiny_recenter
from tests.support.release_builders import write_release

MODES = {"attributes": "pipeline", "gt_attributes": "oracle"}
FILE = re.compile(r"^eval_results_task5_(attributes|gt_attributes|no_context)_(.+)\.jsonl$")


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _answers(root: Path) -> dict[tuple[str, str], dict[str, dict[str, Any]]]:
    """(model tag, mode) -> prompt_id -> row, straight from the file names and rows."""
    out: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
    for path in sorted((root / "stage3_responses").glob("*.jsonl")):
        match = FILE.match(path.name)
        assert match, path
        out[(match[2], match[1])] = {r["prompt_id"]: r for r in _jsonl(path)}
    return out


@pytest.fixture(scope="module")
def loaded(shared_data: Path) -> Any:
    return load_recenter(shared_data / "recenter")


def _stage3_items(loaded: Any) -> list[Any]:
    return [i for i in loaded.batch.items.values() if i.dataset == STAGE3]


def test_pairs_per_model_and_condition_match_the_files(shared_data: Path, loaded: Any) -> None:
    answers = _answers(shared_data / "recenter")
    expected = Counter()
    for (model, mode), rows in answers.items():
        if mode in MODES:
            generic = answers.get((model, "no_context"), {})
            expected[(model, MODES[mode])] = len(set(rows) & set(generic))
    got = Counter((i.payload["system"], i.payload["input_condition"]) for i in _stage3_items(loaded))
    assert got == expected
    # Every file's rows were read and counted.
    for (model, mode), rows in answers.items():
        path = shared_data / "recenter" / "stage3_responses" / f"eval_results_task5_{mode}_{model}.jsonl"
        assert loaded.files[str(path)] == len(rows)


def test_each_pair_holds_the_personalised_and_the_same_models_generic_answer(shared_data: Path, loaded: Any) -> None:
    root = shared_data / "recenter"
    answers = _answers(root)
    task6 = {}
    for r in _jsonl(root / "stage2/task6_items.jsonl"):
        task6[r["prompt_id"]] = [a["attribute"] for a in r["attributes"] if a["is_relevant"]]
    sides = Counter()
    for item in _stage3_items(loaded):
        p = item.payload
        mode = {v: k for k, v in MODES.items()}[p["input_condition"]]
        row = answers[(p["system"], mode)][p["prompt_id"]]
        generic = answers[(p["system"], "no_context")][p["prompt_id"]]
        personalised, other = ("answer_a", "answer_b") if p["personalized"] == "A" else ("answer_b", "answer_a")
        assert p[personalised] == row["response"] and p[other] == generic["response"]
        assert p["kind"] == "pairwise" and p["question"] == row["prompt_text"] and p["model"] == row["model"]
        assert p["prompt_id"] == f"{item.user_id}_{item.prompt_index}" == row["prompt_id"]
        if mode == "attributes":
            used = [c["attribute"] for c in row["items"]]
        else:
            used = task6.get(row["prompt_id"])
        assert p["attributes_used"] == (None if used is None else [attribute_id(item.user_id, t) for t in used])
        sides[p["personalized"]] += 1
    # The position coin is not stuck on one side (each side gets at least a third of the pairs).
    assert min(sides["A"], sides["B"]) > sum(sides.values()) / 3


def test_attribute_ids_link_the_answers_to_the_stage2_items(loaded: Any) -> None:
    relevance = {(i.user_id, i.prompt_index, i.payload["attribute_id"]): i for i in loaded.batch.items.values()
                 if i.dataset == STAGE2 and i.stage == "relevance"}
    assert all(attribute_id(u, i.attribute) == a for (u, _, a), i in relevance.items())
    for item in _stage3_items(loaded):
        for aid in item.payload["attributes_used"] or []:
            assert (item.user_id, item.prompt_index, aid) in relevance


def test_pipeline_selection_is_task5_membership(shared_data: Path, loaded: Any) -> None:
    expected = {}
    for r in _jsonl(shared_data / "recenter/stage2/task5_items.jsonl"):
        chosen = {c["attribute"] for c in r["items"]}
        assert chosen <= {a["attribute"] for a in r["profile_attributes"]}
        for a in r["profile_attributes"]:
            expected[(r["user_id"], r["prompt_index"], a["attribute"])] = "yes" if a["attribute"] in chosen else "no"
    got = {}
    for lab in loaded.batch.label_columns.rows():
        if lab.rater == PIPELINE_RATER:
            item = loaded.batch.items[lab.item_id]
            assert lab.rater_kind == "system" and lab.condition == "" and item.dataset == STAGE2
            got[(item.user_id, item.prompt_index, item.attribute)] = lab.label
    assert got == expected


def test_stage3_dataset_is_stored_with_no_human_verdict(recenter_db: Path) -> None:
    with duckdb.connect(str(recenter_db), read_only=True) as con:
        n_items, n_labels = con.execute(
            "SELECT count(DISTINCT i.item_id), count(l.item_id) FROM items i LEFT JOIN labels l USING (item_id) "
            "WHERE i.dataset = ?", [STAGE3]).fetchall()[0]
        records = dataset_records(con)
    assert n_items > 0 and n_labels == 0
    record = records[("response", STAGE3)]
    assert record.stage == "response" and record.item_kind == "pairwise" and record.scale.kind == "pairwise"


def _tiny(tmp_path: Path) -> Path:
    """A tiny valid release (invented text) with stage-3 answers of one model in all three modes."""
    files = tiny_recenter()
    task5 = files["stage2/task5_items.jsonl"]
    for mode in ("attributes", "gt_attributes", "no_context"):
        files[f"stage3_responses/eval_results_task5_{mode}_mini.jsonl"] = [
            {"user_id": r["user_id"], "prompt_id": f"{r['user_id']}_{r['prompt_index']}",
             "prompt_text": r["prompt_text"], "profile_attributes": r["profile_attributes"], "items": r["items"],
             "mode": mode, "model": "mini-model", "response": f"{mode} answer {i}"} for i, r in enumerate(task5)]
    return write_release(tmp_path / "tiny", files)


def test_tiny_release_pairs_and_reimport_is_idempotent(tmp_path: Path) -> None:
    root = _tiny(tmp_path)
    result = load_recenter(root)
    n_prompts = len(_jsonl(root / "stage2/task5_items.jsonl"))
    assert sum(i.dataset == STAGE3 for i in result.batch.items.values()) == 2 * n_prompts
    db = tmp_path / "db.duckdb"
    import_recenter(root, db)
    again = import_recenter(root, db)
    assert again.written["items"].inserted == again.written["items"].updated == again.written["items"].removed == 0
    # Deleting the generic answers removes every pair (each pair is owned by both of its files).
    (root / "stage3_responses/eval_results_task5_no_context_mini.jsonl").unlink()
    import_recenter(root, db)
    with duckdb.connect(str(db), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM items WHERE dataset = ?", [STAGE3]).fetchall()[0][0] == 0


def _rewrite(path: Path, line: int, change: Any) -> None:
    rows = _jsonl(path)
    change(rows[line - 1])
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


@pytest.mark.parametrize(("case", "expected"), [
    ("mode", "eval_results_task5_attributes_mini.jsonl:2: field 'mode': 'no_context' but the file name says"),
    ("prompt", "eval_results_task5_attributes_mini.jsonl:2: field 'prompt_id': no task5 profile for user u1 "
               "prompt 9"),
    ("attribute", "eval_results_task5_attributes_mini.jsonl:2: field 'items[0].attribute': not in user u1's "
                  "profile"),
    ("response", "eval_results_task5_attributes_mini.jsonl:2: field 'response': expected str"),
    ("selection", "task5_items.jsonl:2: field 'items[0].attribute': not in user u1's profile"),
    ("name", "eval_results_mini.jsonl: stage-3 answer files are named"),
    ("no_stage2", "stage3_responses: stage3_responses/ needs stage2/task5_items.jsonl"),
])
def test_bad_stage3_input_is_one_located_line(tmp_path: Path, case: str, expected: str) -> None:
    root = _tiny(tmp_path)
    answers = root / "stage3_responses/eval_results_task5_attributes_mini.jsonl"
    if case == "mode":
        _rewrite(answers, 2, lambda r: r.update(mode="no_context"))
    elif case == "prompt":
        _rewrite(answers, 2, lambda r: r.update(prompt_id="u1_9"))
    elif case == "attribute":
        _rewrite(answers, 2, lambda r: r["items"][0].update(attribute="The user was never described so."))
    elif case == "response":
        _rewrite(answers, 2, lambda r: r.update(response=3))
    elif case == "selection":
        _rewrite(root / "stage2/task5_items.jsonl", 2,
                 lambda r: r["items"][0].update(attribute="The user was never described so."))
    elif case == "name":
        answers.rename(answers.with_name("eval_results_mini.jsonl"))
    else:
        for sub in ("stage2", "pilot"):
            for path in sorted((root / sub).rglob("*"), reverse=True):
                path.unlink() if path.is_file() else path.rmdir()
            (root / sub).rmdir()
    with pytest.raises(DataError) as info:
        load_recenter(root)
    message = str(info.value)
    assert expected in message and "\n" not in message


def test_an_llm_judge_runs_on_the_condition_pairs(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from personagap.cli import cli
    from tests.support.openai_server import ScriptedOpenAIServer

    root = _tiny(tmp_path)
    db = str(tmp_path / "db.duckdb")
    import_recenter(root, db)
    with duckdb.connect(db, read_only=True) as con:
        pairs = {json.loads(p)["answer_a"] + "|" + json.loads(p)["answer_b"] for (p,) in con.execute(
            "SELECT payload FROM items WHERE dataset = ?", [STAGE3]).fetchall()}
    seen: list[str] = []

    def answer(body: dict[str, Any]) -> str:
        seen.append(json.dumps(body["messages"]))
        return json.dumps({"reason": "r", "verdict": "B"})

    with ScriptedOpenAIServer(answer) as server:
        result = CliRunner().invoke(cli, ["judge", "response", "--judge", "pairwise", "--model", "openai/scripted",
                                          "--api-base", server.base_url, "--dataset", STAGE3, "--no-progress",
                                          "--db", db])
        assert result.exit_code == 0, result.output
    # Each pair reached the model with both of its answers.
    for pair in pairs:
        a, b = pair.split("|")
        assert any(a in text and b in text for text in seen)
    with duckdb.connect(db, read_only=True) as con:
        judged = con.execute("SELECT count(DISTINCT l.item_id) FROM labels l JOIN items i USING (item_id) "
                             "WHERE i.dataset = ? AND l.rater_kind = 'llm' AND l.label IS NOT NULL",
                             [STAGE3]).fetchall()[0][0]
    assert judged == len(pairs)
