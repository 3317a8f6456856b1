"""Issue 32 item 8: ``import prism-judge`` reads the published Personalized-Judge ``outputs/`` folder as it is.

That folder names files with a run date after the model (``..._gpt-4o_jun5.jsonl``), a model with an underscore
(``meta-llama_Meta-Llama-3-70B-Instruct``), the least-important-feature protocol (``..._least_imp_feature_...``),
and holds the paper's other tasks (``ap_*``, ``ec_*``, ``opinionqa_*``) beside the PRISM files. The folder here is
built in a temporary directory from the first rows of the real release files in ../shared/data, under those names
(nothing of the release is committed).
"""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

from personagap.cli import cli
from personagap.human_data import DataError
from personagap.human_data.prism import SKIPPED, parse_file_name
from tests.support.cli_checks import assert_one_line, snapshot

ROWS = 25
#: Name in the published outputs/ folder -> the release file in ../shared/data/prism_judge whose rows it gets.
PRISM_FILES = {
    "prism_all_features_key_features_gpt-4o.jsonl": "prism_all_features_key_features_gpt-4o.jsonl",
    "prism_all_features_key_features_gpt-4o_jun5.jsonl": "prism_all_features_key_features_gpt-4o.jsonl",
    "prism_all_features_least_imp_feature_command-r-plus.jsonl": "prism_all_features_command-r-plus.jsonl",
    "prism_all_features_with_tie_all_features_meta-llama_Meta-Llama-3-70B-Instruct_jun5.jsonl":
        "prism_all_features_with_tie_all_features_gpt-4o.jsonl",
}
OTHER_TASKS = ("ap_all_features_all_features_gpt-4o_jun5.jsonl", "ec_all_features_gpt-4o.jsonl",
               "opinionqa_all_features_least_imp_feature_gpt-4o_jun_11.jsonl")
EXPECTED = {  # (rater, condition) of each PRISM file, as the names say
    "prism_all_features_key_features_gpt-4o.jsonl": ("gpt-4o", "key-features"),
    "prism_all_features_key_features_gpt-4o_jun5.jsonl": ("gpt-4o_jun5", "key-features"),
    "prism_all_features_least_imp_feature_command-r-plus.jsonl": ("command-r-plus", "least-important-feature"),
    "prism_all_features_with_tie_all_features_meta-llama_Meta-Llama-3-70B-Instruct_jun5.jsonl":
        ("meta-llama_Meta-Llama-3-70B-Instruct_jun5", "all-features+with-tie"),
}


@pytest.fixture
def outputs(shared_data: Path, tmp_path: Path) -> Path:
    folder = tmp_path / "outputs"
    folder.mkdir()
    for name, real in PRISM_FILES.items():
        lines = (shared_data / "prism_judge" / real).read_text(encoding="utf-8").splitlines(keepends=True)
        (folder / name).write_text("".join(lines[:ROWS]), encoding="utf-8")
    for name in OTHER_TASKS:  # another task's rows: nothing a PRISM reader could parse
        (folder / name).write_text(json.dumps({"task": name.split("_")[0], "answer": "1"}) + "\n", encoding="utf-8")
    return folder


def test_the_published_outputs_folder_imports_every_prism_file_and_skips_other_tasks(outputs: Path,
                                                                                      tmp_path: Path) -> None:
    db = tmp_path / "prism.duckdb"
    result = CliRunner().invoke(cli, ["import", "prism-judge", str(outputs), "--db", str(db)])
    assert result.exit_code == 0, result.output
    for name in PRISM_FILES:
        assert f"  {outputs / name}: {ROWS} rows" in result.output
    for name in OTHER_TASKS:
        assert f"  {outputs / name}: skipped: {SKIPPED}\n" in result.output
    assert "personagap import labels" in SKIPPED  # the line says how such data gets in
    with duckdb.connect(str(db), read_only=True) as con:
        got = dict(con.execute("SELECT rater || ' | ' || condition, count(*) FROM labels WHERE rater_kind = 'llm' "
                               "GROUP BY ALL").fetchall())
    assert got == {f"{r} | {c}": ROWS for r, c in EXPECTED.values()}

    before = snapshot(db)  # importing the folder again changes nothing
    again = CliRunner().invoke(cli, ["import", "prism-judge", str(outputs), "--db", str(db)])
    assert again.exit_code == 0 and "inserted" not in again.output.split("database:")[1]
    assert snapshot(db) == before


def test_a_prism_file_of_an_unknown_protocol_is_still_refused(outputs: Path, tmp_path: Path) -> None:
    (outputs / "prism_other_thing_gpt-4o.jsonl").write_text("{}\n", encoding="utf-8")
    db = tmp_path / "prism.duckdb"
    seeded = CliRunner().invoke(cli, ["import", "prism-judge", str(outputs / next(iter(PRISM_FILES))),
                                      "--db", str(db)])
    assert seeded.exit_code == 0, seeded.output
    before = snapshot(db)
    result = CliRunner().invoke(cli, ["import", "prism-judge", str(outputs), "--db", str(db)])
    assert_one_line(result.exit_code, result.stdout, result.stderr, result.exception,
                    f"{outputs / 'prism_other_thing_gpt-4o.jsonl'}: unknown protocol in 'prism_other_thing_gpt-4o'")
    assert snapshot(db) == before


@pytest.mark.parametrize(("name", "model", "date", "condition"), [
    ("prism_all_features_key_features_gpt-4o_jun5.jsonl", "gpt-4o", "jun5", "key-features"),
    ("prism_all_features_least_imp_feature_gpt-4o.jsonl", "gpt-4o", "", "least-important-feature"),
    ("prism_all_features_with_tie_all_features_meta-llama_Meta-Llama-3-70B-Instruct_jun5.jsonl",
     "meta-llama_Meta-Llama-3-70B-Instruct", "jun5", "all-features+with-tie"),
    ("prism_no_persona_all_features_command-r-plus_jun5.jsonl", "command-r-plus", "jun5", "no-profile"),
    ("prism_1_to_100_all_features_gpt-4o_jun_11.jsonl", "gpt-4o", "jun_11", "all-features+certainty-1-100"),
    ("prism_no_confidence_all_features_command-r-plus_jun5.jsonl", "command-r-plus", "jun5",
     "all-features+no-confidence"),
    ("prism_no_persona_command-r-plus_new.jsonl", "command-r-plus", "", "no-profile"),
])
def test_file_names_of_the_published_folder(name: str, model: str, date: str, condition: str) -> None:
    protocol = parse_file_name(name)
    assert (protocol.model, protocol.date, protocol.condition) == (model, date, condition)
    assert protocol.rater == (f"{model}_{date}" if date else model)


def test_a_name_without_a_judge_input_is_refused() -> None:
    with pytest.raises(DataError, match="unknown protocol in 'prism_gpt-4o_jun5'; expected the name to say "
                                        "no_persona, all_features, key_features, least_imp_feature, with_desc"):
        parse_file_name("prism_gpt-4o_jun5.jsonl")


def test_another_tasks_file_given_alone_is_refused_saying_how_to_import_it(outputs: Path, tmp_path: Path) -> None:
    other = outputs / OTHER_TASKS[1]
    result = CliRunner().invoke(cli, ["import", "prism-judge", str(other), "--db", str(tmp_path / "x.duckdb")])
    line = assert_one_line(result.exit_code, result.stdout, result.stderr, result.exception, f"{other}: ")
    assert line == (f"{other}: a PRISM judge file name must start with 'prism_' (another task's outputs go in through "
                    "the label format: 'personagap import labels', docs/formats.md)")
    assert not (tmp_path / "x.duckdb").exists()
