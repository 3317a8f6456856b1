"""Every importer, fed a corpus of malformed inputs through the CLI: one line, exit 2, nothing changed.

Each case starts from a tiny valid release (tests/support/release_builders.py, invented text), breaks one
thing, and runs ``personagap import ...`` against a database that already holds all six valid
releases. It must exit 2 with exactly one line on stderr that names the file (and the line and
field where that applies), print no traceback, and leave every table exactly as it was (row
counts and a checksum of every row).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pytest

from personagap.human_data import DataError
from tests.support.cli_checks import assert_one_line, run_import, snapshot
from tests.support.release_builders import ATTRS, IMPORTERS, encode, write_release

Mutation = Callable[[Path], None]


@pytest.fixture(scope="module")
def seeded_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A database holding all six valid releases (so "unchanged" is about real rows)."""
    root = tmp_path_factory.mktemp("seed")
    db = root / "seed.duckdb"
    for name, importer in IMPORTERS.items():
        release = write_release(root / name, importer.build())
        code, out, err, exc = run_import(importer.command, release, db)
        assert code == 0, (name, out, err, exc)
    return db


# --------------------------------------------------------------------------- mutations

def _lines(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True)


def set_line(rel: str, number: int, new: bytes) -> Mutation:
    def go(root: Path) -> None:
        lines = _lines(root / rel)
        lines[number - 1] = new + b"\n"
        (root / rel).write_bytes(b"".join(lines))
    return go


def edit_line(rel: str, number: int, fn: Callable[[bytes], bytes]) -> Mutation:
    def go(root: Path) -> None:
        lines = _lines(root / rel)
        lines[number - 1] = fn(lines[number - 1])
        (root / rel).write_bytes(b"".join(lines))
    return go


def edit_row(rel: str, number: int, fn: Callable[[dict], None]) -> Mutation:
    """Change row ``number`` (1-based) of a JSONL file, or element ``number - 1`` of a JSON list."""
    def go(root: Path) -> None:
        path = root / rel
        if rel.endswith(".json"):
            rows = json.loads(path.read_bytes())
            fn(rows[number - 1])
            path.write_bytes(encode(rel, rows))
            return
        lines = _lines(path)
        row = json.loads(lines[number - 1])
        fn(row)
        lines[number - 1] = json.dumps(row).encode() + b"\n"
        path.write_bytes(b"".join(lines))
    return go


def set_bytes(rel: str, data: bytes) -> Mutation:
    def go(root: Path) -> None:
        (root / rel).write_bytes(data)
    return go


def as_directory(rel: str) -> Mutation:
    def go(root: Path) -> None:
        (root / rel).unlink()
        (root / rel).mkdir()
    return go


def symlink_loop(rel: str) -> Mutation:
    def go(root: Path) -> None:
        (root / rel).unlink()
        os.symlink((root / rel).name, root / rel)  # points at itself
    return go


def dangling_link(rel: str) -> Mutation:
    def go(root: Path) -> None:
        (root / rel).unlink()
        os.symlink("no-such-target.jsonl", root / rel)
    return go


def fifo(rel: str) -> Mutation:
    def go(root: Path) -> None:
        (root / rel).unlink()
        os.mkfifo(root / rel)
    return go


def non_utf8(rel: str, number: int = 1) -> Mutation:
    # Inside the first string value of the line: invalid UTF-8 bytes.
    return edit_line(rel, number, lambda b: b.replace(b'": "', b'": "\xff\xfe', 1))


def lone_surrogate(rel: str, number: int = 1) -> Mutation:
    return edit_line(rel, number, lambda b: b.replace(b'": "', b'": "\\ud800', 1))


def deep_nesting(rel: str, number: int = 1) -> Mutation:
    return set_line(rel, number, b"[" * 100_000)


def truncated(rel: str, number: int = 1) -> Mutation:
    return edit_line(rel, number, lambda b: b[: len(b) // 2] + b"\n")


def setter(path: tuple[str | int, ...], value: object) -> Callable[[dict], None]:
    def go(row: dict) -> None:
        target: object = row
        for key in path[:-1]:
            target = target[key]  # type: ignore[index]
        target[path[-1]] = value  # type: ignore[index]
    return go


# --------------------------------------------------------------------------- the corpus

@dataclass(frozen=True)
class Case:
    importer: str
    name: str
    mutate: Mutation
    expected: tuple[str, ...]
    """Texts the error line must hold: the file (and line, field) and what is wrong."""


HUGE = "x" * 1_000_000
T5, T6, LLM = "stage2/task5_items.jsonl", "stage2/task6_items.jsonl", "stage2/llm_relevance/mini-llm.jsonl"
CLF, PLLM = "pilot/task3_relevance_clf.jsonl", "pilot/llm_relevance/mini-llm.jsonl"
A1, T1 = "pilot/annotations/annotator_01_task3.jsonl", "pilot/annotations/annotator_01_task1.jsonl"
PR = "prism_all_features_mini.jsonl"
U = "pc_usr_data.json"
PP, PD = "persona/personas.jsonl", "data/general/easy.jsonl"
L = "movie_dataset_train.json"
X = "ours.jsonl"

CASES = [
    # ---- recenter (stage 2 and pilot files)
    Case("recenter", "non_utf8", non_utf8(T5, 2), ("task5_items.jsonl:2:", "UTF-8")),
    Case("recenter", "lone_surrogate", lone_surrogate(T5, 1), ("task5_items.jsonl:1:", "surrogate")),
    Case("recenter", "deep_nesting", deep_nesting(T6, 2), ("task6_items.jsonl:2:", "nested too deeply")),
    Case("recenter", "truncated_line", truncated(LLM, 3), ("mini-llm.jsonl:3:", "malformed JSON")),
    Case("recenter", "empty_task5", set_bytes(T5, b""), ("task5_items.jsonl:", "no rows")),
    Case("recenter", "blank_task6", set_bytes(T6, b"\n  \r\n\t\n"), ("task6_items.jsonl:", "no rows")),
    Case("recenter", "empty_llm_file", set_bytes(LLM, b""), ("mini-llm.jsonl:", "no rows")),
    Case("recenter", "llm_file_is_directory", as_directory(LLM), ("mini-llm.jsonl:", "directory")),
    Case("recenter", "llm_file_symlink_loop", symlink_loop(LLM), ("mini-llm.jsonl:", "symlink loop")),
    Case("recenter", "annotation_dangling_link", dangling_link(A1), ("annotator_01_task3.jsonl:", "cannot read")),
    Case("recenter", "task6_fifo", fifo(T6), ("task6_items.jsonl:", "not a regular file")),
    Case("recenter", "task5_is_directory", as_directory(T5), ("task5_items.jsonl:", "directory")),
    Case("recenter", "prompt_index_2_63", edit_row(T5, 1, setter(("prompt_index",), 2**63)),
         ("task5_items.jsonl:1:", "field 'prompt_index'", "out of range")),
    Case("recenter", "prompt_index_beyond_int32", edit_row(T5, 1, setter(("prompt_index",), 2**40)),
         ("task5_items.jsonl:1:", "field 'prompt_index'", "outside")),
    Case("recenter", "prompt_index_negative", edit_row(LLM, 1, setter(("prompt_index",), -1)),
         ("mini-llm.jsonl:1:", "field 'prompt_index'", "outside")),
    Case("recenter", "prompt_index_float", edit_row(T5, 2, setter(("prompt_index",), 1e300)),
         ("task5_items.jsonl:2:", "field 'prompt_index'", "expected int")),
    Case("recenter", "confidence_7_5", edit_row(T5, 1, setter(("profile_attributes", 0, "confidence"), 7.5)),
         ("task5_items.jsonl:1:", "field 'profile_attributes[0].confidence'", "outside [0, 1]")),
    Case("recenter", "pipeline_relevance_negative", edit_row(T5, 2, setter(("items", 0, "relevance"), -0.5)),
         ("task5_items.jsonl:2:", "field 'items[0].relevance'", "outside")),
    Case("recenter", "huge_prompt_id", edit_row(T6, 1, setter(("prompt_id",), HUGE)),
         ("task6_items.jsonl:1:", "field 'prompt_id'", "…")),
    Case("recenter", "clf_yes_rate_above_1", edit_row(CLF, 1, setter(("human_yes_rate",), 1.5)),
         ("task3_relevance_clf.jsonl:1:", "field 'human_yes_rate'", "outside")),
    Case("recenter", "clf_rate_not_a_share", edit_row(CLF, 1, setter(("human_yes_rate",), 0.3)),
         ("task3_relevance_clf.jsonl:1:", "field 'human_yes_rate'", "share")),
    Case("recenter", "clf_label_contradicts_rate", edit_row(CLF, 1, setter(("label",), 0)),
         ("task3_relevance_clf.jsonl:1:", "field 'label'", "contradicts")),
    Case("recenter", "clf_label_2", edit_row(CLF, 2, setter(("label",), 2)),
         ("task3_relevance_clf.jsonl:2:", "field 'label'")),
    Case("recenter", "pilot_sample_index_2_64", edit_row(PLLM, 1, setter(("sample_index",), 2**64)),
         ("mini-llm.jsonl:1:", "field 'sample_index'")),
    Case("recenter", "task1_index_beyond_int32", edit_row(T1, 1, setter(("index",), 2**31)),
         ("annotator_01_task1.jsonl:1:", "field 'index'")),
    Case("recenter", "huge_judgment_echo", edit_row(T1, 1, setter(("attr_judgments", 0, "judgment"), HUGE)),
         ("annotator_01_task1.jsonl:1:", "field 'attr_judgments[0].judgment'", "…")),
    Case("recenter", "newline_in_echoed_value",
         edit_row(T1, 1, setter(("attr_judgments", 1, "judgment"), "bad\nline two\rthree")),
         ("annotator_01_task1.jsonl:1:", "bad\\nline two")),
    Case("recenter", "annotation_relevant_not_bool",
         edit_row(A1, 1, setter(("relevance_judgments", 0, "relevant"), "yes")),
         ("annotator_01_task3.jsonl:1:", "field 'relevance_judgments[0].relevant'")),
    # ---- PRISM judge files
    Case("prism", "non_utf8", non_utf8(PR, 2), (f"{PR}:2:", "UTF-8")),
    Case("prism", "lone_surrogate", lone_surrogate(PR, 3), (f"{PR}:3:", "surrogate")),
    Case("prism", "deep_nesting", deep_nesting(PR, 1), (f"{PR}:1:", "nested too deeply")),
    Case("prism", "truncated_line", truncated(PR, 2), (f"{PR}:2:", "malformed JSON")),
    Case("prism", "array_line", set_line(PR, 2, b"[1, 2, 3]"), (f"{PR}:2:", "expected a JSON object")),
    Case("prism", "nan_literal", set_line(PR, 1, b'{"answer": NaN}'), (f"{PR}:1:", "malformed JSON")),
    Case("prism", "empty_file", set_bytes(PR, b""), (PR, "no rows")),
    Case("prism", "file_is_directory", as_directory(PR), (PR, "directory")),
    Case("prism", "symlink_loop", symlink_loop(PR), (PR, "symlink loop")),
    Case("prism", "fifo", fifo(PR), (PR, "not a regular file")),
    Case("prism", "huge_ground_truth", edit_row(PR, 1, setter(("ground_truth",), HUGE)),
         (f"{PR}:1:", "field 'ground_truth'", "…")),
    Case("prism", "acc_not_bool", edit_row(PR, 2, setter(("acc",), "true")), (f"{PR}:2:", "field 'acc'")),
    Case("prism", "certainty_number", edit_row(PR, 1, setter(("certainty",), 2**70)),
         (f"{PR}:1:", "field 'certainty'")),
    Case("prism", "missing_question", edit_row(PR, 3, lambda r: r.pop("question")), (f"{PR}:3:", "field 'question'")),
    # ---- USR ratings (one JSON document)
    Case("usr", "non_utf8", set_bytes(U, b'[{"context": "\xff"}]'), (U, "UTF-8")),
    Case("usr", "lone_surrogate", set_bytes(U, b'[{"context": "\\ud800"}]'), (U, "surrogate")),
    Case("usr", "deep_nesting", set_bytes(U, b"[" * 100_000), (U, "nested too deeply")),
    Case("usr", "empty_file", set_bytes(U, b""), (U, "malformed JSON")),
    Case("usr", "empty_list", set_bytes(U, b"[]"), (U, "non-empty JSON list")),
    Case("usr", "truncated", lambda root: (root / U).write_bytes((root / U).read_bytes()[:200]), (U, "malformed JSON")),
    Case("usr", "rating_2_63", edit_row(U, 1, setter(("responses", 0, "Overall", 1), 2**63)),
         (U, "[0]", "field 'responses[0].Overall[1]'")),
    Case("usr", "huge_rating_echo", edit_row(U, 2, setter(("responses", 1, "Natural", 0), HUGE)),
         (U, "[1]", "field 'responses[1].Natural[0]'", "…")),
    Case("usr", "file_is_directory", as_directory(U), (U,)),
    Case("usr", "duplicate_annotators", edit_row(U, 1, setter(("annotators",), ["r", "r"])),
         (U, "[0]", "field 'annotators'")),
    # ---- PersonaFeedback
    Case("personafeedback", "non_utf8", non_utf8(PD, 1), ("easy.jsonl:1:", "UTF-8")),
    Case("personafeedback", "lone_surrogate_persona", lone_surrogate(PP, 1), ("personas.jsonl:1:", "surrogate")),
    Case("personafeedback", "deep_nesting", deep_nesting(PD, 2), ("easy.jsonl:2:", "nested too deeply")),
    Case("personafeedback", "empty_persona_file", set_bytes(PP, b""), ("personas.jsonl", "no rows")),
    Case("personafeedback", "empty_data_file", set_bytes(PD, b""), ("easy.jsonl", "no rows")),
    Case("personafeedback", "persona_file_is_directory", as_directory(PP), ("personas.jsonl", "directory")),
    Case("personafeedback", "data_symlink_loop", symlink_loop(PD), ("easy.jsonl", "symlink loop")),
    Case("personafeedback", "user_id_2_63", edit_row(PD, 1, setter(("user_id",), 2**63)),
         ("easy.jsonl:1:", "field 'user_id'", "out of range")),
    Case("personafeedback", "huge_unknown_user", edit_row(PD, 1, setter(("user_id",), HUGE)),
         ("easy.jsonl:1:", "field 'user_id'", "…")),
    Case("personafeedback", "chosen_equals_reject", edit_row(PD, 2, setter(("reject",), "Try a jazz standard.")),
         ("easy.jsonl:2:", "field 'reject'")),
    # ---- LAPS (one JSON document per file)
    Case("laps", "non_utf8", set_bytes(L, b'[{"worker_id": "\xff"}]'), (L, "UTF-8")),
    Case("laps", "lone_surrogate", set_bytes(L, b'[{"worker_id": "w", "topic": "\\udfff"}]'), (L, "surrogate")),
    Case("laps", "deep_nesting", set_bytes(L, b"[" * 100_000), (L, "nested too deeply")),
    Case("laps", "empty_list", set_bytes(L, b"[]"), (L, "no workers")),
    Case("laps", "empty_file", set_bytes(L, b""), (L, "malformed JSON")),
    Case("laps", "file_is_directory", as_directory(L), (L, "directory")),
    Case("laps", "turn_number_2_63", edit_row(L, 1, setter(("sessions", 0, "dialogue", 0, "turn_number"), 2**63)),
         (L, "[0].sessions[0].dialogue[0].turn_number", "out of range")),
    Case("laps", "turn_number_beyond_int32",
         edit_row(L, 2, setter(("sessions", 0, "dialogue", 1, "turn_number"), 2**33)),
         (L, "[1].sessions[0].dialogue[1].turn_number", "outside")),
    Case("laps", "huge_topic_echo", edit_row(L, 1, setter(("topic",), HUGE)), (L, "[0].topic", "…")),
    Case("laps", "preference_value_number", edit_row(L, 2, setter(("sessions", 0, "preferences", "genre", 0), 7)),
         (L, "[1].sessions[0].preferences.genre[0]")),
    # ---- extraction JSONL
    Case("extraction", "non_utf8", non_utf8(X, 2), (f"{X}:2:", "UTF-8")),
    Case("extraction", "lone_surrogate", lone_surrogate(X, 1), (f"{X}:1:", "surrogate")),
    Case("extraction", "deep_nesting", deep_nesting(X, 2), (f"{X}:2:", "nested too deeply")),
    Case("extraction", "empty_file", set_bytes(X, b""), (X, "no rows")),
    Case("extraction", "confidence_7_5", edit_row(X, 1, setter(("attributes", 0, "confidence"), 7.5)),
         (f"{X}:1:", "field 'attributes[0].confidence'", "outside [0, 1]")),
    Case("extraction", "confidence_2_63", edit_row(X, 2, setter(("attributes", 0, "confidence"), 2**63)),
         (f"{X}:2:", "field 'attributes[0].confidence'")),
    Case("extraction", "huge_turn_id", edit_row(X, 1, setter(("attributes", 0, "turn_ids"), [HUGE])),
         (f"{X}:1:", "field 'attributes[0].turn_ids[0]'", "…")),
    Case("extraction", "file_is_directory", as_directory(X), (X, "directory")),
    Case("extraction", "symlink_loop", symlink_loop(X), (X, "symlink loop")),
    Case("extraction", "huge_label_echo",
         edit_row(X, 2, setter(("attributes", 0, "verdicts", 0, "label"), HUGE)),
         (f"{X}:2:", "field 'attributes[0].verdicts[0].label'", "…")),
]


def test_the_corpus_is_large_and_covers_every_importer() -> None:
    assert len(CASES) >= 60
    assert {c.importer for c in CASES} == set(IMPORTERS)
    assert len({(c.importer, c.name) for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.importer}-{c.name}")
def test_malformed_input_is_one_line_and_changes_nothing(case: Case, seeded_db: Path, tmp_path: Path) -> None:
    importer = IMPORTERS[case.importer]
    release = write_release(tmp_path / "release", importer.build())
    case.mutate(release)
    db = tmp_path / "db.duckdb"
    shutil.copy(seeded_db, db)
    before = snapshot(db)
    assert_one_line(*run_import(importer.command, release, db), *case.expected)
    assert snapshot(db) == before


# --------------------------------------------------------------------------- what must work

def _bom_crlf(path: Path) -> None:
    data = path.read_bytes()
    if path.suffix == ".jsonl":
        data = data.replace(b"\n", b"\r\n")
    path.write_bytes(b"\xef\xbb\xbf" + data)


@pytest.mark.parametrize("name", sorted(IMPORTERS))
def test_bom_and_crlf_read_like_plain_utf8(name: str, tmp_path: Path) -> None:
    importer = IMPORTERS[name]
    plain = write_release(tmp_path / "plain", importer.build())
    odd = write_release(tmp_path / "odd", importer.build())
    for path in odd.rglob("*.json*"):
        _bom_crlf(path)
    counts = []
    for release in (plain, odd):
        db = tmp_path / f"{release.name}.duckdb"
        code, out, err, exc = run_import(importer.command, release, db)
        assert code == 0, (out, err, exc)
        counts.append({t: n for t, (n, _) in snapshot(db).items() if t != "runs"})
    assert counts[0] == counts[1]
    assert counts[0]["items"] > 0


def test_pilot_tie_and_converted_rows_on_the_fixture(tmp_path: Path) -> None:
    """The tiny pilot: a 1-1 tie gets no majority, converted task-3 rows are anchored."""
    release = write_release(tmp_path / "r", IMPORTERS["recenter"].build())
    db = tmp_path / "db.duckdb"
    code, out, _, _ = run_import("recenter", release, db)
    assert code == 0
    assert "1 human majorities are ties" in out
    con = duckdb.connect(str(db), read_only=True)
    rows = con.execute("SELECT rater, condition, count(*) FROM labels l JOIN items i USING (item_id) "
                       "WHERE i.dataset = 'recenter-pilot' AND i.stage = 'relevance' AND rater_kind LIKE 'human%' "
                       "GROUP BY ALL ORDER BY ALL").fetchall()
    con.close()
    assert ("annotator_01", "", len(ATTRS)) in rows
    assert ("annotator_02", "shown-llm-converted", len(ATTRS)) in rows
    # Two annotators voted per pair (n_annotators = 2) but only one of them blind: the majority is anchored.
    assert ("human_majority", "anchored-majority", 2) in rows
    assert not any(r[0] == "human_majority" and r[1] == "" for r in rows)


@pytest.mark.parametrize("name", sorted(IMPORTERS))
@pytest.mark.parametrize("kind", ["missing", "symlink_loop"])
def test_top_level_path_that_is_not_there(name: str, kind: str, tmp_path: Path) -> None:
    """The library entry points (the CLI's click check aside) name a missing or looping release path."""
    from tests.support.release_builders import LOADERS

    target = tmp_path / "release"
    if kind == "symlink_loop":
        os.symlink(target.name, target)
    with pytest.raises(DataError) as info:
        LOADERS[name](target)
    assert str(info.value).startswith(f"{target}: ")
