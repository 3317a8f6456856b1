"""docs/formats.md's linked pipeline, imported as documented: the linking keys and confidences round-trip.

Expected values are read from the document's own example files (parsed here with the csv/json modules), never
typed in.
"""

from __future__ import annotations

import csv
import io
import json
import re
import shlex
from pathlib import Path
from typing import Any

import duckdb
import pytest
from click.testing import CliRunner

from personagap.cli import cli
from personagap.linking import INPUT_CONDITIONS
from tests.support.paths import REPO

DOC = REPO / "docs" / "formats.md"
BLOCK = re.compile(r"^```(\w+)([^\n]*)\n(.*?)^```", re.MULTILINE | re.DOTALL)
STAGE_OF = {"pipe_extraction.jsonl": "extraction", "pipe_relevance.jsonl": "relevance",
            "pipe_answers.csv": "response"}


def _linked_files() -> dict[str, str]:
    text = DOC.read_text(encoding="utf-8")
    return {m.group(2).strip().removeprefix("linked="): m.group(3) for m in BLOCK.finditer(text)
            if m.group(2).strip().startswith("linked=")}


def _commands() -> list[str]:
    text = DOC.read_text(encoding="utf-8")
    return [line for m in BLOCK.finditer(text) if m.group(1) == "bash" and m.group(2).strip() == "linked"
            for line in m.group(3).splitlines() if line.strip()]


def _rows(name: str, body: str) -> list[dict[str, Any]]:
    if name.endswith(".csv"):
        return [{k: v for k, v in r.items() if v != ""} for r in csv.DictReader(io.StringIO(body))]
    return [json.loads(line) for line in body.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, list[dict[str, Any]]]]:
    """The documented files, imported with the documented commands; (database, rows per file)."""
    folder = tmp_path_factory.mktemp("linked")
    files = _linked_files()
    assert set(files) == set(STAGE_OF)
    for name, body in files.items():
        (folder / name).write_text(body, encoding="utf-8")
    commands = _commands()
    assert len(commands) == len(files)
    for command in commands:
        args = shlex.split(command)
        assert args[0] == "personagap"
        db_at = args.index("--db") + 1
        args[db_at] = str(folder / args[db_at])
        args[3] = str(folder / args[3])
        result = CliRunner().invoke(cli, args[1:])
        assert result.exit_code == 0, (command, result.output)
    return folder / "pipe.duckdb", {n: _rows(n, b) for n, b in files.items()}


def _items(db: Path) -> dict[tuple[str, str], dict[str, Any]]:
    """(stage, source item id) -> item row with its decoded payload."""
    with duckdb.connect(str(db), read_only=True) as con:
        rows = con.execute("SELECT stage, user_id, prompt_index, attribute, payload FROM items").fetchall()
    out = {}
    for stage, user, prompt_index, attribute, payload in rows:
        p = json.loads(payload)
        out[(stage, p["source_id"])] = {"user_id": user, "prompt_index": prompt_index, "attribute": attribute,
                                        "payload": p}
    return out


def _first(rows: list[dict[str, Any]], key: str) -> dict[str, Any]:
    """Per item id, the first value of ``key`` given on any of its rows (the item's context)."""
    out: dict[str, Any] = {}
    for r in rows:
        if key in r:
            out.setdefault(r["item_id"], r[key])
    return out


def test_attribute_ids_and_systems_round_trip(imported: tuple[Path, dict[str, list[dict[str, Any]]]]) -> None:
    db, rows = imported
    items = _items(db)
    for name in ("pipe_extraction.jsonl", "pipe_relevance.jsonl"):
        stage = STAGE_OF[name]
        ids = _first(rows[name], "attribute_id")
        assert ids and all(items[(stage, i)]["payload"]["attribute_id"] == a for i, a in ids.items())
    systems = _first(rows["pipe_extraction.jsonl"], "system")
    # The extractor a stage-1 verdict is filed under is the file's system.
    assert all(items[("extraction", i)]["payload"]["system"] == s == items[("extraction", i)]["payload"]["extractor"]
               for i, s in systems.items())


def test_selector_labels_are_system_labels(imported: tuple[Path, dict[str, list[dict[str, Any]]]]) -> None:
    db, rows = imported
    expected = {(r["item_id"], r["label"]) for r in rows["pipe_relevance.jsonl"] if r.get("rater_kind") == "system"}
    with duckdb.connect(str(db), read_only=True) as con:
        got = {(json.loads(p)["source_id"], label) for p, label in con.execute(
            "SELECT i.payload, l.label FROM labels l JOIN items i USING (item_id) WHERE l.rater_kind = 'system'"
        ).fetchall()}
    assert expected and got == expected


def test_answers_link_to_their_attributes_and_prompts(imported: tuple[Path, dict[str, list[dict[str, Any]]]]) -> None:
    db, rows = imported
    items = _items(db)
    answers = rows["pipe_answers.csv"]
    used, conditions = _first(answers, "attributes_used"), _first(answers, "input_condition")
    systems, sides = _first(answers, "system"), _first(answers, "personalized")
    stage2 = {(v["user_id"], v["prompt_index"], v["payload"]["attribute_id"]) for (stage, _), v in items.items()
              if stage == "relevance"}
    assert set(conditions.values()) <= set(INPUT_CONDITIONS) and len(set(conditions.values())) == 2
    for iid, cell in used.items():
        item = items[("response", iid)]
        p = item["payload"]
        assert p["attributes_used"] == cell.split(";")
        assert p["input_condition"] == conditions[iid] and p["system"] == systems[iid]
        assert p["personalized"] == sides[iid]
        assert p["prompt_id"] == f"{item['user_id']}_{item['prompt_index']}"
        # Each attribute the answer used is a stage-2 item of the same user and prompt.
        assert all((item["user_id"], item["prompt_index"], a) in stage2 for a in p["attributes_used"])


def test_judge_confidence_is_stored_as_a_float_with_its_scale(
        imported: tuple[Path, dict[str, list[dict[str, Any]]]]) -> None:
    db, rows = imported
    expected = {(r["item_id"], r["rater"]): (float(r["confidence"]), r["confidence_scale"])
                for r in rows["pipe_answers.csv"] if "confidence" in r}
    with duckdb.connect(str(db), read_only=True) as con:
        got = {}
        for payload, rater, meta in con.execute(
                "SELECT i.payload, l.rater, l.meta FROM labels l JOIN items i USING (item_id) "
                "WHERE i.stage = 'response'").fetchall():
            m = json.loads(meta) if meta else None
            if m is not None:
                assert isinstance(m["confidence"], float)
                got[(json.loads(payload)["source_id"], rater)] = (m["confidence"], m["confidence_scale"])
    assert expected and got == expected


def test_a_file_without_links_keeps_its_payload(tmp_path: Path) -> None:
    path = tmp_path / "plain.jsonl"
    path.write_text(json.dumps({"item_id": "i1", "rater": "a", "label": "yes", "prompt": "p", "attribute": "x"}) + "\n")
    db = tmp_path / "plain.duckdb"
    result = CliRunner().invoke(cli, ["import", "labels", str(path), "--stage", "relevance", "--dataset", "d",
                                      "--db", str(db)])
    assert result.exit_code == 0, result.output
    with duckdb.connect(str(db), read_only=True) as con:
        (payload,), (meta,) = con.execute("SELECT payload FROM items").fetchall()[0], \
            con.execute("SELECT meta FROM labels").fetchall()[0]
    assert set(json.loads(payload)) == {"kind", "source_id", "profile"} and meta is None


BAD = [
    ("response", "csv", {"input_condition": "gold"},
     "field 'input_condition': unknown input condition 'gold' (one of pipeline, oracle, none)"),
    ("response", "jsonl", {"attributes_used": [1, 2]}, "field 'attributes_used': expected a list of attribute ids"),
    ("response", "jsonl", {"attributes_used": {"a": 1}}, "field 'attributes_used': expected a list of attribute ids"),
    ("response", "csv", {"personalized": "C"}, "field 'personalized': expected A or B"),
    ("response", "csv", {"confidence": "high"}, "field 'confidence': 'high' is not a number"),
    ("relevance", "jsonl", {"confidence": "nan"}, "field 'confidence': 'nan' is not a number"),
    ("relevance", "jsonl", {"attribute_id": ["a", "b"]}, "field 'attribute_id': expected a string or a number"),
    ("relevance", "jsonl", {"input_condition": "pipeline"}, "field 'input_condition': unknown column"),
]


@pytest.mark.parametrize(("stage", "fmt", "change", "message"), BAD)
def test_bad_linked_input_is_one_line_naming_file_line_and_field(tmp_path: Path, stage: str, fmt: str,
                                                                  change: dict[str, Any], message: str) -> None:
    base: dict[str, Any] = {"rater": "ann-1", "label": "B" if stage == "response" else "yes", "user_id": "u1",
                            "prompt": "p"}
    if stage == "response":
        base |= {"response_a": "a", "response_b": "b"}
    rows = [base | {"item_id": f"i{i}"} for i in range(3)]
    rows[1] = rows[1] | change
    path = tmp_path / f"bad.{fmt}"
    if fmt == "csv":
        columns = list(dict.fromkeys(k for r in rows for k in r))
        with path.open("w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, columns)
            writer.writeheader()
            writer.writerows(rows)
    else:
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    db = tmp_path / "bad.duckdb"
    result = CliRunner().invoke(cli, ["import", "labels", str(path), "--stage", stage, "--dataset", "d",
                                      "--db", str(db)])
    assert result.exit_code == 2, result.output
    line = result.output.strip()
    bad_line = 3 if fmt == "csv" else 2  # the second row; a CSV file's first line is its header
    assert "\n" not in line and line.startswith(f"{path}:{bad_line}: ") and message in line, line
    assert not db.exists()
